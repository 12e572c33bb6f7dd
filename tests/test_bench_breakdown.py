"""bench/target_breakdown.py: the split of overall-score accuracy by target names."""

import numpy as np
import pandas as pd
import pytest

from bench.target_breakdown import breakdown


def long_table():
    rows = []
    truth = {"far/a": 0.6, "far/b": 0.5, "near/c": 0.10, "near/d": 0.12, "near/e": 0.14}
    for seed in (0, 1):
        for model, y in truth.items():
            for task, queries in (("t1", 3), ("t2", 1)):
                for method, pred in (("mean", 0.1), ("pkps", y - 0.01 * (1 + seed))):
                    rows.append(
                        {
                            "seed": seed,
                            "budget": 4,
                            "mode": "responses-only",
                            "method": method,
                            "model": model,
                            "task": task,
                            "y_true": y,
                            "y_pred": pred,
                            "task_queries": queries,
                        }
                    )
    return pd.DataFrame(rows)


def test_breakdown_splits_targets_and_divides_by_the_mean_baseline():
    table = breakdown(long_table(), "^far/").set_index(["targets", "method"])
    near = table.loc[("not matching '^far/'", "pkps")]
    assert near["overall MAE"] == pytest.approx(0.015)  # 0.01 and 0.02 over the two seeds
    floor = np.mean([0.0, 0.02, 0.04])
    assert table.loc[("not matching '^far/'", "mean"), "overall MAE"] == pytest.approx(floor)
    assert near["× mean"] == pytest.approx(0.015 / floor)
    assert near["Spearman"] == pytest.approx(1.0)
    assert near["targets per seed"] == 3
    far = table.loc[("matching '^far/'", "mean")]
    assert far["overall MAE"] == pytest.approx(0.45)
    assert np.isnan(far["Spearman"])  # two targets: no rank correlation
    assert table.loc[("all targets", "pkps"), "targets per seed"] == 5


def test_per_seed_ratio_is_the_mean_of_each_seeds_ratio_not_the_ratio_of_means():
    long = long_table()
    moved = (long["seed"] == 1) & (long["method"] == "mean")
    long.loc[moved, "y_pred"] = 0.12  # the baseline's seed-1 error on near/* falls to 0.04/3
    table = breakdown(long, "^far/").set_index(["targets", "method"])
    near = table.loc[("not matching '^far/'", "pkps")]
    # seed 0: 0.01 / 0.02 = 0.5; seed 1: 0.02 / (0.04 / 3) = 1.5
    assert near["× mean per seed"] == pytest.approx(1.0)
    assert near["± SEM"] == pytest.approx(0.5)  # std(ddof=1) of (0.5, 1.5) / sqrt(2)
    # the ratio of the means over seeds differs: 0.015 / ((0.02 + 0.04 / 3) / 2)
    assert near["× mean"] == pytest.approx(0.015 / ((0.02 + 0.04 / 3) / 2))
    assert table.loc[("not matching '^far/'", "mean"), "× mean per seed"] == pytest.approx(1.0)


def test_per_seed_ratio_without_a_mean_baseline_is_missing():
    long = long_table()
    table = breakdown(long[long["method"] != "mean"], "^far/")
    assert table["× mean per seed"].isna().all()
