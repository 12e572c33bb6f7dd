"""The new-model protocol: its mask, the targets' isolation, the truth, the reports, CLI, app."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from pkps_core import protocols as P
from pkps_core import views
from pkps_core.cli import main
from pkps_core.predict import build_context, predict
from pkps_core.store import Store
from pkps_core.synthetic import make_synthetic
from pkps_core.views.columns import undocumented
from pkps_core.views.widths import column_widths

FAST = {"response_kernel": "rbf", "query_bandwidth": "median"}
PAGE = str(Path(__file__).resolve().parents[1] / "perspective_app" / "app_pages" / "experiments.py")


@pytest.fixture(scope="module")
def dense():
    """24 models in 8 families; every model answers the same 16 queries of each of 4 tasks."""
    cache = make_synthetic(n_models=24, n_tasks=4, budget=16, rho=1.0, random_state=3)
    return P.prepare_records(cache.records)


def _split(frame, targets):
    is_target = frame["model"].isin(targets)
    return frame[~is_target].reset_index(drop=True), frame[is_target].reset_index(drop=True)


# ---------------------------------------------------------------------------- masking


@pytest.mark.parametrize("budget", [4, 20])
def test_mask_keeps_references_whole_and_thins_whole_target_families(dense, budget):
    masked, targets = P.mask_new_model(dense, budget, seed=1)
    families = dense.loc[dense["model"].isin(targets), "family"].unique()
    assert len(families) == 2  # round(0.25 * 8)
    assert set(targets) == set(dense.loc[dense["family"].isin(families), "model"])
    assert list(masked.columns) == list(dense.columns)

    references, kept = _split(masked, targets)
    expected_references, full_targets = _split(dense, targets)
    pd.testing.assert_frame_equal(references, expected_references)

    sizes = kept.groupby(["model", "task"]).size()
    full_sizes = full_targets.groupby(["model", "task"]).size()
    assert (sizes == np.minimum(budget, full_sizes)).all() and len(sizes) == len(full_sizes)
    # kept rows are the targets' own rows with their scores; no full-task score survives
    on = ["model", "task", "query_id"]
    merged = kept.merge(full_targets, on=on, suffixes=("", "_full"), validate="one_to_one")
    assert len(merged) == len(kept)
    np.testing.assert_array_equal(merged["score"], merged["score_full"])
    assert kept["reference_score"].isna().all()


def test_responses_only_targets_keep_texts_and_embeddings_but_no_scores(dense):
    scored, targets = P.mask_new_model(dense, 3, seed=2)
    unscored, same_targets = P.mask_new_model(dense, 3, mode="responses-only", seed=2)
    np.testing.assert_array_equal(targets, same_targets)
    kept = _split(unscored, targets)[1]
    assert kept["score"].isna().all() and kept["reference_score"].isna().all()
    assert kept["response_embedding"].map(len).gt(0).all()
    # the same responses as in scored mode: only the scores are gone
    pd.testing.assert_frame_equal(
        kept.drop(columns=["score"]), _split(scored, targets)[1].drop(columns=["score"])
    )
    pd.testing.assert_frame_equal(_split(unscored, targets)[0], _split(dense, targets)[0])


def test_mask_is_seeded(dense):
    first, targets = P.mask_new_model(dense, 2, seed=5)
    again, targets_again = P.mask_new_model(dense, 2, seed=5)
    pd.testing.assert_frame_equal(first, again)
    np.testing.assert_array_equal(targets, targets_again)
    draws = [P.mask_new_model(dense, 2, seed=seed) for seed in range(6, 10)]
    assert any(set(other) != set(targets) for _, other in draws)
    differ = [
        not _split(masked, targets)[1]["query_id"].equals(_split(first, targets)[1]["query_id"])
        for masked, _ in (P.mask_new_model(dense, 2, seed=s, targets=targets) for s in (6, 7))
    ]
    assert all(differ)


def test_mask_arguments_and_too_few_reference_families(dense):
    chosen = ["fam0/model-00", "fam0/model-01"]
    masked, targets = P.mask_new_model(dense, 2, targets=chosen, seed=0)
    assert list(targets) == chosen
    assert _split(masked, targets)[1].groupby(["model", "task"]).size().eq(2).all()
    with pytest.raises(ValueError, match="at least two families"):
        P.mask_new_model(dense, 2, target_share=0.9)  # round(7.2) = 7 of 8 families
    three = dense[dense["family"].isin(["fam0", "fam1", "fam2"])]
    with pytest.raises(ValueError, match="at least two families"):
        P.mask_new_model(three, 2, target_share=0.5)
    with pytest.raises(ValueError, match="at least two families"):
        P.mask_new_model(three, 2, targets=three["model"][three["family"] != "fam0"].unique())
    for bad in ({"mode": "judged"}, {"target_share": 0.0}, {"targets": ["nobody"]}):
        with pytest.raises(ValueError):
            P.mask_new_model(dense, 2, **bad)
    with pytest.raises(ValueError, match="budget"):
        P.mask_new_model(dense, 0)


# ------------------------------------------------------------- targets never inform


def _reference_predictions(masked, targets, methods, space_params):
    context = build_context(
        masked, holdout="family", targets=list(targets), space_params=space_params
    )
    frame = predict(context, methods)
    return frame[~frame["model"].isin(targets)].reset_index(drop=True)


def _flip_target_scores(masked, targets):
    flipped = masked.copy()
    rows = flipped["model"].isin(targets)
    flipped.loc[rows, "score"] = 1.0 - flipped.loc[rows, "score"]
    return flipped


def test_targets_never_inform_the_references(dense):
    masked, targets = P.mask_new_model(dense, 4, seed=0)
    methods = list(P.DEFAULT_METHODS["new-model"])
    before = _reference_predictions(masked, targets, methods, FAST)
    after = _reference_predictions(_flip_target_scores(masked, targets), targets, methods, FAST)
    np.testing.assert_allclose(after["prediction"], before["prediction"], equal_nan=True)
    assert before["prediction"].notna().any()


def test_targets_never_inform_the_references_under_cv_bandwidth(dense):
    masked, targets = P.mask_new_model(dense, 4, seed=0)
    before = _reference_predictions(masked, targets, ["pkps"], {})
    after = _reference_predictions(_flip_target_scores(masked, targets), targets, ["pkps"], {})
    np.testing.assert_allclose(after["prediction"], before["prediction"], equal_nan=True)


# ------------------------------------------------------------------------ the sweep


@pytest.fixture(scope="module")
def result(dense):
    methods = ("mean", "sample", "pkps", "ensemble")
    return P.new_model_protocol(
        dense, budgets=(1, 4), seeds=[0, 1], methods=methods, space_params=FAST
    )


def test_sweep_scores_only_the_target_cells_against_their_full_scores(dense, result):
    long = result.long
    assert result.levers == ("budget", "mode")
    assert {"lower", "upper", "n_responses", "task_queries", "n_targets"} <= set(long.columns)
    truth = P.full_scores(dense)
    np.testing.assert_allclose(long["y_true"], P.cell_values(truth, long))
    assert (long["task_queries"] == 16).all()
    for (seed, budget, _mode), part in long.groupby(["seed", "budget", "mode"]):
        targets = P.mask_new_model(dense, budget, seed=seed)[1]
        assert set(part["model"]) == set(targets) and (part["n_targets"] == len(targets)).all()
        assert part.groupby(["method", "model", "task"]).size().eq(1).all()
        assert len(part) == 4 * len(targets) * dense["task"].nunique()
        assert (part["n_responses"] == min(budget, 16)).all()
    unscored = long[long["mode"] == "responses-only"]
    assert unscored.loc[unscored["method"] == "sample", "y_pred"].isna().all()
    assert unscored.loc[unscored["method"] == "pkps", "y_pred"].notna().all()
    pkps = long[long["method"] == "pkps"]
    assert (pkps["lower"] <= pkps["y_pred"]).all() and (pkps["y_pred"] <= pkps["upper"]).all()


def test_sweep_reports_tests_overall_scores_and_intervals(result):
    tests = result.tests
    assert set(tests.loc[tests["mode"] == "scored", "comparator"]) == {"sample"}
    assert set(tests.loc[tests["mode"] == "responses-only", "comparator"]) == {"mean"}
    assert set(tests.loc[tests["mode"] == "responses-only", "method"]) == {"pkps", "ensemble"}
    overall = result.overall
    assert len(overall) == 2 * 2 * 4 and (overall["n_seeds"] == 2).all()
    pkps = overall[overall["method"] == "pkps"]
    assert pkps["mae"].notna().all() and pkps["spearman"].between(-1, 1).all()
    constant = overall[overall["method"] == "mean"]  # one prediction for every target
    assert constant["spearman"].isna().all() and constant["mae"].notna().all()
    assert overall.loc[overall["method"] == "sample", "coverage"].tolist() == [0, 1, 0, 1]
    intervals = result.intervals
    assert len(intervals) == len(overall)
    assert intervals.loc[intervals["method"] == "pkps", "with_interval"].eq(1).all()
    assert intervals["coverage"].dropna().between(0, 1).all()


def test_a_draw_offset_redraws_the_fits_and_keeps_the_masks(dense, result):
    """``draw_offset`` moves the fits' random draws (the ensemble's calibration shadows)
    and nothing else: the same targets, cells and truths, other predictions."""
    methods = ("mean", "sample", "pkps", "ensemble")
    again = P.new_model_protocol(
        dense, budgets=(1, 4), seeds=[0, 1], methods=methods, space_params=FAST, draw_offset=7
    )
    keys = ["seed", "budget", "mode", "method", "model", "task"]
    before = result.long.sort_values(keys).reset_index(drop=True)
    after = again.long.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(before[[*keys, "y_true"]], after[[*keys, "y_true"]])
    mean = before["method"] == "mean"  # no random draw: the same predictions
    np.testing.assert_allclose(before.loc[mean, "y_pred"], after.loc[mean, "y_pred"])
    ensemble = (before["method"] == "ensemble").to_numpy()
    moved = np.abs(before.loc[ensemble, "y_pred"] - after.loc[ensemble, "y_pred"].to_numpy())
    assert (moved > 1e-9).mean() > 0.5, moved.describe()


def test_interval_option_and_the_other_protocols_tables(dense):
    quick = {"seeds": [0], "methods": ("mean",), "space_params": FAST}
    plain = P.new_model_protocol(dense, budgets=(2,), modes=("scored",), intervals=None, **quick)
    assert plain.long[["lower", "upper"]].isna().all().all()
    assert plain.intervals["with_interval"].eq(0).all()
    efficiency = P.query_efficiency_protocol(dense, budgets=(2,), **quick)
    assert list(efficiency.long.columns[-8:]) == [*P.LONG_COLUMNS, "mae_weight"]
    assert efficiency.overall.empty and efficiency.intervals.empty
    with pytest.raises(ValueError, match="intervals"):
        P.new_model_protocol(dense, budgets=(2,), intervals="wide", **quick)
    routed = P.run_protocol(
        dense, "new-model", modes=("responses-only",), target_share=0.4, **quick
    )
    assert sorted(routed.long["budget"].unique()) == [1, 2, 4, 8, 16]
    assert (routed.long["n_targets"] == 9).all()  # round(0.4 * 8) = 3 families of 3


# --------------------------------------------------------------- reporting arithmetic


def _long(rows):
    columns = ["seed", "budget", "mode", "method", "model", "task", "y_true", "y_pred"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["abs_err"] = (frame["y_pred"] - frame["y_true"]).abs()
    return frame


def test_overall_score_is_the_query_weighted_mean_over_tasks():
    long = _long(
        [
            (0, 1, "scored", "pkps", "a", "small", 0.2, 0.4),
            (0, 1, "scored", "pkps", "a", "large", 0.6, 0.5),
            (0, 1, "scored", "pkps", "b", "small", 1.0, 0.0),
            (0, 1, "scored", "pkps", "b", "large", 0.0, np.nan),
        ]
    )
    weights = pd.Series({"small": 10, "large": 30})
    overall = P.overall_scores(long, ("budget", "mode"), weights).set_index("model")
    assert overall.loc["a", "y_true"] == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    assert overall.loc["a", "y_pred"] == pytest.approx((0.4 * 10 + 0.5 * 30) / 40)
    assert overall.loc["a", "abs_err"] == pytest.approx(0.025)
    assert overall.loc["b", "y_true"] == pytest.approx(0.25) and np.isnan(
        overall.loc["b", "y_pred"]
    )
    # the weights may travel in the long table
    from_column = P.overall_scores(
        long.assign(task_queries=long["task"].map(weights)), ("budget", "mode")
    )
    pd.testing.assert_frame_equal(from_column, overall.reset_index()[from_column.columns])


def test_overall_table_mae_and_spearman_over_targets_then_seeds():
    truth = {"a": 0.1, "b": 0.5, "c": 0.9, "d": 0.3}
    rows = []
    for seed, predicted in enumerate(
        [{"a": 0.2, "b": 0.4, "c": 0.8, "d": 0.3}, {"a": 0.1, "b": 0.3, "c": 0.9, "d": 0.6}]
    ):
        rows += [(seed, 1, "scored", "pkps", m, "t", truth[m], predicted[m]) for m in truth]
    long = _long(rows).assign(task_queries=7)
    table = P.overall_table(P.overall_scores(long, ("budget", "mode")), ("budget", "mode"))
    row = table.iloc[0]
    maes = [np.mean([0.1, 0.1, 0.1, 0.0]), np.mean([0.0, 0.2, 0.0, 0.3])]
    rhos = [1.0, 0.8]  # seed 1 ranks a < b < d < c against a < d < b < c
    assert row["mae"] == pytest.approx(np.mean(maes))
    assert row["sem"] == pytest.approx(np.std(maes, ddof=1) / np.sqrt(2))
    assert row["spearman"] == pytest.approx(np.mean(rhos))
    assert row["spearman_sem"] == pytest.approx(np.std(rhos, ddof=1) / np.sqrt(2))
    assert row["n_seeds"] == 2 and row["n_targets"] == 4 and row["coverage"] == 1
    two = P.overall_scores(long[long["model"].isin(["a", "b"])], ("budget", "mode"))
    assert np.isnan(P.overall_table(two, ("budget", "mode"))["spearman"].iloc[0])  # < 3 targets


def test_interval_table_coverage_width_and_share():
    long = _long(
        [
            (0, 1, "scored", "pkps", "a", "t", 0.5, 0.5),
            (0, 1, "scored", "pkps", "b", "t", 0.9, 0.5),
            (0, 1, "scored", "pkps", "c", "t", 0.3, 0.5),
            (0, 1, "scored", "pkps", "d", "t", 0.5, np.nan),
        ]
    )
    long["lower"] = [0.4, 0.4, 0.3, np.nan]
    long["upper"] = [0.6, 0.8, 0.7, np.nan]
    table = P.interval_table(long, ("budget", "mode"))
    row = table.iloc[0]
    assert row["coverage"] == pytest.approx(2 / 3)  # a inside, b above, c on the boundary
    assert row["mean_width"] == pytest.approx((0.2 + 0.4 + 0.4) / 3)
    assert row["with_interval"] == pytest.approx(0.75) and row["n_cells"] == 4
    text = P.format_intervals(table, ("budget", "mode"))
    assert text.loc[(1, "scored"), "pkps"] == "0.67 / 0.33 (75%)"
    assert P.interval_table(long.drop(columns=["lower", "upper"]), ("budget", "mode")).empty


def test_page_tables_have_a_row_per_method_and_fit_the_page():
    """Nine methods across made the page's tables wider than its content column (940 px in
    Chromium at 1400 × 900, the sidebar open): a row per method and a column per budget
    keeps every cell and fits."""
    rng = np.random.default_rng(0)
    levers = ("budget", "mode")
    rows = [
        {"budget": b, "mode": mode, "method": method, "mae": rng.random() / 5, "sem": 0.01}
        for b in (1, 2, 4, 8, 16)
        for mode in ("scored", "responses-only")
        for method in P.DEFAULT_METHODS["new-model"]
    ]
    summary = pd.DataFrame(rows)
    summary.loc[0, "mae"] = np.nan  # a method with no value at a setting: "—"
    table = P.format_summary(summary, levers, views.PAGE_DIGITS)
    turned = views.methods_as_rows(table)
    assert list(turned.index.names) == ["mode", "method"]
    assert list(turned.columns) == ["m = 1", "m = 2", "m = 4", "m = 8", "m = 16"]
    assert len(turned) == 2 * len(P.DEFAULT_METHODS["new-model"])
    for (budget, mode), row in table.iterrows():
        for method, text in row.items():
            assert turned.loc[(mode, method), f"m = {budget}"] == text
    assert (turned == "—").to_numpy().sum() == 1
    assert undocumented([*turned.columns, *turned.index.names]) == []
    page = 940
    assert sum(column_widths(table).values()) > page
    assert sum(column_widths(turned).values()) <= page
    intervals = P.format_intervals(
        summary.assign(coverage=0.9, mean_width=0.3, with_interval=0.5), levers
    )
    assert sum(column_widths(views.methods_as_rows(intervals)).values()) <= page
    assert views.methods_as_rows(table.droplevel("budget")).equals(table.droplevel("budget"))


# ------------------------------------------------------------------------ CLI and app


def test_cli_evaluate_new_model_prints_the_three_tables(tmp_path, capsys):
    cache, out = tmp_path / "s.csv", tmp_path / "long.csv"
    synth = ["synth", "--out", str(cache), "--models", "12", "--tasks", "3", "--budget", "6"]
    assert main([*synth, "--rho", "1", "--seed", "2"]) == 0
    argv = ["evaluate", "--input", str(cache), "--protocol", "new-model", "--budget", "2"]
    argv += ["--mode", "scored,responses-only", "--seeds", "1", "--methods", "mean,sample,pkps"]
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "MAE (mean ± SEM over 1 seeds" in printed
    assert "Overall score of each target" in printed and "Spearman" in printed
    assert "Intervals on the target cells" in printed and " / " in printed
    assert "responses-only" in printed and "comparator" in printed
    long = pd.read_csv(out)
    assert {"budget", "mode", "n_targets", "lower", "upper", "task_queries"} <= set(long.columns)
    assert set(long["budget"]) == {2} and (long["n_targets"] == 3).all()
    assert main([*argv, "--mode", "judged", "--out", str(out)]) == 2
    assert "modes must be among scored, responses-only" in capsys.readouterr().err
    assert main([*argv, "--target-share", "1.5", "--out", str(out)]) == 2


def test_experiments_page_runs_new_model(tmp_path, monkeypatch):
    records = make_synthetic(n_models=15, n_tasks=3, budget=4, rho=1.0, random_state=5).records
    with Store(tmp_path / "nm.duckdb") as store:
        store.ingest(records)
    monkeypatch.setenv("PKPS_STORE", str(tmp_path / "nm.duckdb"))
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.run()
    at.selectbox[0].set_value("new-model")
    at.run()
    assert not at.exception
    at.multiselect(key="exp_new-model_budget").set_value([1, 2])
    at.multiselect(key="exp_new-model_methods").set_value(["mean", "sample", "pkps"])
    at.slider(key="exp_new-model_target_share").set_value(0.2)
    at.number_input(key="exp_seeds").set_value(1)
    at.button[0].click()
    at.run()
    assert not at.exception
    titles = [header.value for header in at.subheader]
    assert "Overall score of each target: MAE" in titles
    assert "Intervals on the target cells" in titles
    # the MAE, overall, Spearman and interval tables: a row per mode and method, a column
    # per budget (the blank-cell notes between them keep method as a column)
    by_method = [d.value for d in at.dataframe if "method" in d.value.index.names]
    assert len(by_method) == 4
    for table in by_method:
        assert list(table.index.names) == ["mode", "method"]
        assert list(table.columns) == ["m = 1", "m = 2"]
        assert sorted(table.index) == sorted(
            (mode, method)
            for mode in ("responses-only", "scored")
            for method in ("mean", "sample", "pkps")
        )
    assert by_method[0].loc[("scored", "pkps"), "m = 2"].count(" ± ") == 1
