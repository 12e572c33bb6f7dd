"""Trust tools: conformal intervals, extrapolation warnings, the next-cells ranking."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_in_process import run_in_process

from pkps_core.predict import build_context, predict
from pkps_core.synthetic import make_synthetic
from pkps_core.trust import NEXT_COLUMNS, conformal_quantile, next_cells, score_range

ROOT = Path(__file__).resolve().parents[1]
SPACE = {"query_bandwidth": "median", "random_state": 0}


def _with_truth(frame: pd.DataFrame, truth: pd.DataFrame) -> pd.DataFrame:
    return frame.merge(truth[["model", "task", "true_score"]], on=["model", "task"])


def _inside(frame: pd.DataFrame, column: str = "true_score") -> pd.Series:
    return (frame["lower"] <= frame[column]) & (frame[column] <= frame["upper"])


# ---------------------------------------------------------------- the quantile


def test_conformal_quantile_is_the_ceil_level_n_plus_one_order_statistic():
    scores = np.arange(1.0, 20.0)  # n = 19: ceil(0.9 * 20) = 18th smallest
    assert conformal_quantile(scores, 0.9) == 18.0
    assert conformal_quantile(np.arange(1.0, 10.0), 0.9) == 9.0  # ceil(9.0) = 9 of 9
    assert conformal_quantile(np.arange(1.0, 10.0), 0.5) == 5.0  # ceil(5.0) = 5
    shuffled = np.array([3.0, np.nan, 1.0, 2.0, np.inf, 4.0] + [5.0] * 5)
    assert conformal_quantile(shuffled, 0.8) == 5.0  # n = 9 finite: ceil(8.0) = 8th
    assert conformal_quantile(np.arange(5.0), 0.9) == np.inf  # ceil(5.4) = 6 > 5
    assert np.isnan(conformal_quantile(np.array([np.nan]), 0.9))
    with pytest.raises(ValueError):
        conformal_quantile(scores, 1.0)


# ---------------------------------------------------------------- intervals


@pytest.fixture(scope="module")
def synthetic_runs():
    """Family-holdout predictions with 90 % intervals on two seeded synthetic caches."""
    frames = []
    for seed in (0, 1):
        cache = make_synthetic(n_models=45, n_tasks=8, budget=4, random_state=seed)
        context = build_context(cache.records, holdout="family", space_params=SPACE)
        frame = predict(context, ["sample", "pkps"], intervals=0.9)
        frames.append(_with_truth(frame, cache.truth).assign(seed=seed))
    return pd.concat(frames, ignore_index=True)


def test_intervals_cover_about_ninety_percent_of_true_scores(synthetic_runs):
    for method, part in synthetic_runs.groupby("method"):
        assert part["lower"].notna().all(), method
        coverage = _inside(part).mean()
        # 720 cells per method: the binomial SE at 0.9 is 0.011; ±0.05 is honest slack.
        assert 0.85 <= coverage <= 0.95, (method, coverage)
        width = (part["upper"] - part["lower"]).mean()
        assert 0.05 < width < 0.8, (method, width)


def test_intervals_contain_the_prediction_and_are_clipped_to_the_score_range(synthetic_runs):
    frame = synthetic_runs
    assert ((frame["lower"] <= frame["prediction"]) & (frame["prediction"] <= frame["upper"])).all()
    assert frame["lower"].min() >= 0.0 and frame["upper"].max() <= 1.0
    # Some intervals reach the boundary: clipping is active, not vacuous.
    assert (frame["upper"] == 1.0).any() or (frame["lower"] == 0.0).any()


def test_scores_outside_unit_interval_clip_to_the_observed_range():
    cache = make_synthetic(n_models=24, n_tasks=4, budget=4, random_state=3)
    records = cache.records.assign(
        score=cache.records["score"] * 10 - 2,
        reference_score=cache.records["reference_score"] * 10 - 2,
    )
    context = build_context(records, holdout="family", space_params=SPACE)
    low, high = score_range(context)
    assert low == pytest.approx(min(records["score"].min(), records["reference_score"].min()))
    assert high == pytest.approx(max(records["score"].max(), records["reference_score"].max()))
    frame = predict(context, ["sample"], intervals=0.9)
    assert frame["lower"].notna().all()
    assert frame["lower"].min() >= low - 1e-12 and frame["upper"].max() <= high + 1e-12
    assert (frame["lower"] < 0).any(), "intervals are not on the [0, 1] scale any more"


def test_without_intervals_the_columns_exist_but_stay_empty():
    cache = make_synthetic(n_models=12, n_tasks=3, budget=2, random_state=4)
    frame = predict(cache.records, ["sample"], holdout="family")
    assert frame["lower"].isna().all() and frame["upper"].isna().all()
    assert not frame["extrapolation"].any()


def test_a_familys_references_never_move_its_own_intervals():
    cache = make_synthetic(n_models=30, n_tasks=5, budget=4, random_state=5)
    records = cache.records
    family = records["family"].iloc[0]
    perturbed = records.copy()
    rows = perturbed["family"] == family
    perturbed.loc[rows, "reference_score"] = 1.0 - perturbed.loc[rows, "reference_score"]
    before = predict(
        records, ["sample", "pkps"], holdout="family", space_params=SPACE, intervals=0.9
    )
    after = predict(
        perturbed, ["sample", "pkps"], holdout="family", space_params=SPACE, intervals=0.9
    )
    mine = before["model"].isin(records.loc[rows, "model"])
    for column in ("prediction", "lower", "upper"):
        np.testing.assert_allclose(before.loc[mine, column], after.loc[mine, column])
    # The perturbation does reach the other families' intervals, so the check has teeth.
    others = ~mine & (before["method"] == "pkps")
    assert not np.allclose(before.loc[others, "upper"], after.loc[others, "upper"])


def test_reference_equal_to_own_sample_gives_no_sample_interval():
    """No reference_score column: the sample score is its own reference, nothing calibrates."""
    cache = make_synthetic(n_models=24, n_tasks=4, budget=4, random_state=6)
    records = cache.records.drop(columns=["reference_score"])
    frame = predict(
        records, ["sample", "pkps"], holdout="family", space_params=SPACE, intervals=0.9
    )
    assert frame.loc[frame["method"] == "sample", "lower"].isna().all()
    assert frame.loc[frame["method"] == "pkps", "lower"].notna().all()


# ---------------------------------------------------------------- warnings


def test_warning_fires_for_an_out_of_region_target_and_not_an_in_region_one():
    cache = make_synthetic(n_models=30, n_tasks=4, budget=6, random_state=7)
    records = cache.records
    source = records["model"].iloc[0]
    twin = records[records["model"] == source].assign(model="twin/copy", family="twin")
    far = records[records["model"] == source].assign(model="far/away", family="far")
    far["response_embedding"] = [np.asarray(v) + 25.0 for v in far["response_embedding"]]
    planted = pd.concat([records, twin, far], ignore_index=True)
    frame = predict(
        planted,
        ["pkps"],
        holdout="family",
        targets=["twin/copy", "far/away"],
        space_params=SPACE,
        intervals=0.9,
    )
    region = frame["extrapolation_reason"].str.contains("outside the references' region")
    far_rows = frame["model"] == "far/away"
    twin_rows = frame["model"] == "twin/copy"
    assert region[far_rows].all() and frame.loc[far_rows, "extrapolation"].all()
    assert not region[twin_rows].any()
    # The flag and its reason agree everywhere.
    assert (frame["extrapolation"] == (frame["extrapolation_reason"] != "")).all()


def test_sample_predictions_are_never_flagged(synthetic_runs):
    sample = synthetic_runs[synthetic_runs["method"] == "sample"]
    assert not sample["extrapolation"].any()
    pkps = synthetic_runs[synthetic_runs["method"] == "pkps"]
    # Every model is observed at the same budget here and none lies beyond the others:
    # the 5 % conformal region test and the score checks rarely fire.
    assert pkps["extrapolation"].mean() < 0.2


# ---------------------------------------------------------------- what next


@pytest.fixture(scope="module")
def sparse_predictions():
    cache = make_synthetic(n_models=30, n_tasks=6, budget=3, p_task=0.6, random_state=8)
    frame = predict(cache.records, ["pkps"], holdout="model", space_params=SPACE, intervals=0.9)
    return cache.records, frame


def test_next_cells_ranks_missing_then_thin_cells_widest_first(sparse_predictions):
    records, frame = sparse_predictions
    target = frame.loc[frame["n_responses"] == 0, "model"].iloc[0]
    queries = records.groupby("task")["query_id"].nunique()
    ranking = next_cells(frame, target, top=None, task_queries=queries)
    assert list(ranking.columns) == list(NEXT_COLUMNS)
    assert (ranking["model"] == target).all()
    assert (ranking["n_responses"] < ranking["task_queries"]).all()
    assert ranking["n_responses"].is_monotonic_increasing  # missing cells first
    for _, same in ranking.groupby("n_responses"):
        widths = same["width"].to_numpy()
        assert np.all(np.diff(widths[np.isfinite(widths)]) <= 1e-12)
    assert list(ranking["rank"]) == list(range(1, len(ranking) + 1))
    assert (ranking["n_responses"] == 0).any()
    assert len(next_cells(frame, target, top=2, task_queries=queries)) == min(2, len(ranking))
    with pytest.raises(ValueError):
        next_cells(frame, "no/such-model")


# ---------------------------------------------------------------- the command line


def _run(*args):
    """The command, asked in this process (tests/cli_in_process.py: the same cli.main, its
    output and exit status; a process start is not what these tests check)."""
    return run_in_process(*args)


@pytest.mark.slow
def test_cli_predict_writes_intervals_and_next_prints_a_ranking(sparse_predictions, tmp_path):
    records, _ = sparse_predictions
    path = tmp_path / "cache.parquet"
    records.to_parquet(path, index=False)
    out = tmp_path / "p.csv"
    done = _run(
        "predict", "--input", str(path), "--out", str(out), "--methods", "sample,pkps",
        "--bandwidth", "median", "--interval", "0.8",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(out)
    assert {"lower", "upper", "extrapolation", "extrapolation_reason"} <= set(frame.columns)
    pkps = frame[frame["method"] == "pkps"]
    assert pkps["lower"].notna().all() and (pkps["lower"] <= pkps["upper"]).all()
    assert "80% conformal intervals" in done.stdout

    target = records["model"].iloc[0]
    done = _run(
        "next", "--input", str(path), "--target", target, "--top", "3", "--bandwidth", "median"
    )
    assert done.returncode == 0, done.stderr
    assert f"cells of {target} to evaluate next" in done.stdout
    lines = [line for line in done.stdout.splitlines()[2:] if line.strip()]
    assert 1 <= len(lines) <= 3
    assert lines[0].split()[0] == "1"

    done = _run("next", "--input", str(path), "--target", "nobody", "--bandwidth", "median")
    assert done.returncode == 2 and "unknown target model" in done.stderr


# ---------------------------------------------------------------- the app


def test_predictions_page_shows_error_bars_warnings_and_next_cells(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from perspective_app import shared
    from pkps_core.demo import ensure_demo_store

    monkeypatch.setenv(shared.STORE_ENV, str(ensure_demo_store(tmp_path / "demo.duckdb")))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.switch_page(shared.PREDICTIONS_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    assert "What to evaluate next" in [t.label for t in at.tabs]
    scatter = next(c for c in at.get("plotly_chart") if c.key == "pred_scatter")
    # one point per cell; the intervals are in the hover (and drawn for one chosen model)
    hovers = [t.get("hovertemplate", "") for t in json.loads(scatter.proto.spec)["data"]]
    assert any("customdata[2]" in h and "customdata[3]" in h for h in hovers), hovers
    ranking = at.dataframe[-1].value
    assert list(ranking.columns) == list(NEXT_COLUMNS)
    widths = ranking["width"].to_numpy(dtype=float)
    assert np.all(np.diff(widths[np.isfinite(widths)]) <= 1e-12)
    cells = next(d.value for d in at.dataframe if "extrapolation_reason" in d.value.columns)
    assert cells["extrapolation"].dtype == bool
