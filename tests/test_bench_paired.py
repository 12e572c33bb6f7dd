"""bench/new_model_table.py --paired: one method against another on the same seeds."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from bench.new_model_table import paired_comparison


def _long() -> pd.DataFrame:
    rows = []
    truth = {"a": 0.1, "b": 0.2, "c": 0.3}
    for seed, (model, value), task in itertools.product((0, 1), truth.items(), ("t1", "t2")):
        for method, guess in (("refit", value + 0.01), ("placed", 0.4 - value)):
            rows.append(
                {
                    "seed": seed,
                    "mode": "scored",
                    "budget": 2,
                    "method": method,
                    "model": model,
                    "task": task,
                    "y_true": value,
                    "y_pred": guess,
                    "abs_err": abs(guess - value),
                    "lower": guess - 0.05,
                    "upper": guess + 0.05,
                    "task_queries": 10 if task == "t1" else 30,
                    "mae_weight": 1 / 12,  # 2 seeds × 3 models × 2 tasks, per method
                }
            )
    return pd.DataFrame(rows)


def test_the_paired_table_compares_the_second_method_with_the_first():
    table = paired_comparison(_long(), "refit", "placed")
    row = table.iloc[0]
    assert (row["mode"], row["m"], row["seeds"]) == ("scored", 2, 2)
    # refit: every cell off by 0.01; placed: |0.4 - 2v| = 0.2, 0, 0.2 -> mean 0.4/3
    mae = row["cell MAE refit / placed"]
    assert mae.startswith("0.0100 / 0.1333") and "+1233.3 %" in mae
    # refit ranks the models right (1), placed backwards (-1): -2 on both seeds
    assert row["Spearman refit / placed"] == "1.000 / -1.000"
    assert row["placed − refit, seed by seed"] == "-2.000 ± 0.000"
    # refit's intervals cover every truth; placed's only model b's (guess = truth)
    assert row["coverage refit / placed"] == "1.00 / 0.33"


def test_a_method_without_rows_is_named():
    with pytest.raises(ValueError, match="no rows of nope"):
        paired_comparison(_long(), "refit", "nope")


def test_the_cell_mae_of_a_subset_of_the_seeds_is_its_own_mean():
    """mae_weight sums to 1 over the whole run: on one seed of two the table still gives
    that seed's mean cell error, not half of it."""
    long = _long()
    one_seed = paired_comparison(long[long["seed"] == 0], "refit", "placed").iloc[0]
    assert one_seed["seeds"] == 1
    assert one_seed["cell MAE refit / placed"].startswith("0.0100 / 0.1333")


def test_the_noise_floor_table_sets_each_method_against_its_other_draw():
    from bench.predictor_noise_floor import PLACED, REDRAWN, REFIT, drawn, draws_table, spread_table

    long = _long()
    names = {"refit": REFIT, "placed": PLACED}
    first = long.assign(method=long["method"].map(names))
    # the moved draw: the refit path ranks backwards on seed 1 only, the placed one as before
    again = first.assign(method=first["method"] + REDRAWN)
    flip = (again["method"] == REFIT + REDRAWN) & (again["seed"] == 1)
    again.loc[flip, "y_pred"] = 0.4 - again.loc[flip, "y_true"]
    again.loc[flip, "abs_err"] = (again.loc[flip, "y_pred"] - again.loc[flip, "y_true"]).abs()
    again.loc[flip, "lower"] = again.loc[flip, "y_pred"] - 0.05
    again.loc[flip, "upper"] = again.loc[flip, "y_pred"] + 0.05
    row = spread_table(pd.concat([first, again], ignore_index=True)).iloc[0]
    assert (row["mode"], row["m"]) == ("scored", 2)
    # placed − refit: −2 on both seeds of the first draw; 0 (seed 1) and −2 in the second
    assert row["placed − refit, the 2 draws averaged"] == "-1.500 ± 0.500"
    assert row["refit′ − refit"] == "-1.000 ± 1.000"  # 0 on seed 0, −2 on seed 1
    assert row["placed′ − placed"] == "+0.000 ± 0.000"
    # a third draw like the first: seed 0 averages −2, seed 1 (−2 + 0 − 2) / 3
    third = first.assign(method=first["method"].map(lambda method: drawn(method, 2)))
    assert drawn(REFIT, 1) == REFIT + REDRAWN and drawn(REFIT, 0) == REFIT
    three = spread_table(pd.concat([first, again, third], ignore_index=True)).iloc[0]
    assert three["placed − refit, the 3 draws averaged"] == "-1.667 ± 0.333"
    assert three["refit′ − refit"] == row["refit′ − refit"]  # still the first two draws
    side = draws_table(pd.concat([first, again, third], ignore_index=True)).iloc[0]
    assert [side[f"draw {d}"] for d in (1, 2, 3)] == ["-2.000", "-1.000", "-2.000"]
    # refit's cell MAE: 0.01 in draws 1 and 3; in draw 2 seed 1's cells are off by 0.2, 0,
    # 0.2 (0.86 / 12); placed's 0.4 / 3 in each
    refit_mae = (0.01 + 0.86 / 12 + 0.01) / 3
    assert side["cell MAE placed / refit"] == f"{(0.4 / 3) / refit_mae - 1:+.1%}"
    assert side["coverage refit"] == "0.67–1.00"  # draw 2 covers 8 of 12 cells
    assert side["coverage placed"] == "0.33–0.33"
