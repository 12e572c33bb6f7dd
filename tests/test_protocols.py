"""The evaluation protocols: masking, reproducibility, reporting arithmetic, tests, CLI."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import wilcoxon

from pkps_core import protocols as P
from pkps_core.cli import main
from pkps_core.itemsim import make_item_cache
from pkps_core.synthetic import make_synthetic

FAST = {"response_kernel": "rbf", "query_bandwidth": "median"}


@pytest.fixture(scope="module")
def synthetic():
    return make_synthetic(n_models=18, n_tasks=4, budget=6, random_state=3).records


@pytest.fixture(scope="module")
def dense():
    """Every model answers every item of every task (binary scores, embeddings)."""
    cache = make_item_cache(n_families=8, family_size=3, n_tasks=3, n_items=40, sparse_fraction=0)
    return cache.records


# ---------------------------------------------------------------------------- masking


def test_query_efficiency_mask_budget_cohort_coverage_and_pairing(dense):
    full = P.full_scores(dense)
    masked = P.mask_query_efficiency(dense, budget=6, rho=0.5, cohort=12, p_task=0.5, seed=4)
    assert masked["model"].nunique() == 12
    sizes = masked.groupby(["model", "task"]).size()
    assert (sizes == 6).all()
    # coverage: about half the cohort's 36 cells, every model keeps a task, every task 2 models
    assert 10 <= len(sizes) <= 26
    assert masked.groupby("model")["task"].nunique().min() >= 1
    assert masked.groupby("task")["model"].nunique().min() >= 2
    # pairing: round(0.5 * 6) = 3 queries shared by every model of a task
    for _, task in masked.groupby("task"):
        common = set.intersection(*(set(g.query_id) for _, g in task.groupby("model")))
        assert len(common) >= 3
    # each kept cell carries its full-cache score; the embeddings travel with the rows
    reference = masked.groupby(["model", "task"])["reference_score"].first()
    np.testing.assert_allclose(reference, full.reindex(reference.index))
    assert masked["query_embedding"].map(len).eq(len(dense["query_embedding"][0])).all()


def test_query_efficiency_rho_zero_gives_incidental_overlap_only(dense):
    masked = P.mask_query_efficiency(dense, budget=2, rho=0.0, seed=1)
    pairs = []
    for _, task in masked.groupby("task"):
        sets = [set(g.query_id) for _, g in task.groupby("model")]
        pairs += [len(a & b) for i, a in enumerate(sets) for b in sets[i + 1 :]]
    assert np.mean(pairs) < 0.3  # expected overlap 2 * 2 / 40 = 0.1


def test_completion_mask_hides_cells_and_thins_queries(dense):
    masked, hidden = P.mask_completion(dense, p_task=0.5, p_query=0.25, cohort=15, seed=2)
    assert "reference_score" not in masked.columns
    cohort = set(masked["model"]) | set(hidden["model"])
    assert len(cohort) == 15
    observed = set(zip(masked["model"], masked["task"], strict=True))
    hidden_cells = set(zip(hidden["model"], hidden["task"], strict=True))
    assert not observed & hidden_cells
    assert len(observed) + len(hidden_cells) == 15 * 3
    kept = masked.groupby(["model", "task"]).size() / 40
    assert 0.15 < kept.mean() < 0.35 and kept.min() > 0


def test_split_masks(dense):
    full = P.full_scores(dense).groupby(level="model").mean()
    masked, targets = P.mask_split(dense, "extrapolation", core_set=7, seed=0)
    sources = np.setdiff1d(masked["model"].unique(), targets)
    assert len(sources) == 12 and len(targets) == 7  # bottom 50 %, top 30 % of 24
    assert full[targets].min() > full[sources].max()
    target_rows = masked[masked["model"].isin(targets)]
    assert target_rows["reference_score"].isna().all()
    assert (target_rows.groupby(["model", "task"]).size() == 7).all()
    for _, task in target_rows.groupby("task"):  # one core set per task, shared by targets
        assert task.groupby("model")["query_id"].apply(frozenset).nunique() == 1
    source_rows = masked[~masked["model"].isin(targets)]
    assert (source_rows.groupby(["model", "task"]).size() == 40).all()
    _, random_targets = P.mask_split(dense, "interpolation", seed=0)
    assert len(random_targets) == 6


# ----------------------------------------------------------------- protocols and leakage


def test_same_seed_same_long_table(synthetic):
    kwargs = {"budgets": (1, 3), "seeds": (0, 1), "methods": ("sample", "pkps", "ensemble")}
    first = P.query_efficiency_protocol(synthetic, space_params=FAST, **kwargs)
    again = P.query_efficiency_protocol(synthetic, space_params=FAST, **kwargs)
    pd.testing.assert_frame_equal(first.long, again.long)
    assert list(first.long.columns) == [
        "seed", "protocol", "budget", "rho", "cohort", "p_task", *P.LONG_COLUMNS, "mae_weight"
    ]  # fmt: skip
    assert len(first.long) == 2 * 2 * 3 * 18 * 4
    other = P.query_efficiency_protocol(synthetic, space_params=FAST, **{**kwargs, "seeds": (2,)})
    assert not np.allclose(
        first.long.query("seed == 0")["y_pred"], other.long["y_pred"], equal_nan=True
    )
    # running seeds one at a time and combining gives the same result
    per_seed = [
        P.query_efficiency_protocol(synthetic, space_params=FAST, **{**kwargs, "seeds": (s,)})
        for s in (0, 1)
    ]
    combined = P.combine_results("query-efficiency", [r.long for r in per_seed])
    pd.testing.assert_frame_equal(combined.long, first.long)
    pd.testing.assert_frame_equal(combined.summary, first.summary)


def test_progress_is_reported_per_step(synthetic):
    calls = []
    P.completion_protocol(
        synthetic,
        p_queries=(0.5, 1.0),
        seeds=(0, 1),
        methods=("pkps",),
        space_params=FAST,
        progress=lambda fraction, message: calls.append((fraction, message)),
    )
    assert [f for f, _ in calls] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(isinstance(m, str) and m for _, m in calls)


def test_completion_never_sees_masked_scores(dense):
    """Perturbing hidden cells and dropped queries changes the truth, never a prediction."""
    records = dense.drop(columns=["reference_score"])
    settings = {"p_task": 0.5, "p_query": 0.5, "cohort": 18, "seed": 3}
    masked, _ = P.mask_completion(records, **settings)
    seen = pd.MultiIndex.from_frame(masked[["model", "task", "query_id"]])
    unseen = ~pd.MultiIndex.from_frame(records[["model", "task", "query_id"]]).isin(seen)
    perturbed = records.copy()
    perturbed.loc[unseen, "score"] = 1.0 - perturbed.loc[unseen, "score"]
    run = {
        "p_tasks": (0.5,),
        "p_queries": (0.5,),
        "cohorts": (18,),
        "seeds": (3,),
        "methods": ("lrmc", "pkps", "ensemble"),
        "space_params": FAST,
    }
    before = P.completion_protocol(records, **run).long
    after = P.completion_protocol(perturbed, **run).long
    assert len(before) and not np.allclose(before["y_true"], after["y_true"])
    np.testing.assert_allclose(before["y_pred"], after["y_pred"])


def test_query_efficiency_never_lets_a_family_see_its_own_scores(dense):
    """A family's masked queries (hence its full-task references) do not move its predictions."""
    records = dense.drop(columns=["reference_score"])
    masked = P.mask_query_efficiency(records, budget=4, seed=5)
    seen = pd.MultiIndex.from_frame(masked[["model", "task", "query_id"]])
    family = records["family"].iloc[0]
    unseen = ~pd.MultiIndex.from_frame(records[["model", "task", "query_id"]]).isin(seen)
    unseen &= (records["family"] == family).to_numpy()
    perturbed = records.copy()
    perturbed.loc[unseen, "score"] = 1.0 - perturbed.loc[unseen, "score"]
    run = {"budgets": (4,), "seeds": (5,), "methods": ("irt", "pkps", "ensemble")}
    before = P.query_efficiency_protocol(records, space_params=FAST, **run).long
    after = P.query_efficiency_protocol(perturbed, space_params=FAST, **run).long
    own = before["model"].str.startswith(family + "/").to_numpy()
    assert own.any() and not np.allclose(before.loc[own, "y_true"], after.loc[own, "y_true"])
    np.testing.assert_allclose(before.loc[own, "y_pred"], after.loc[own, "y_pred"])


def test_extrapolation_rows_carry_similarity_and_normalised_gap(dense):
    result = P.split_protocol(
        dense, "extrapolation", core_sets=(10,), seeds=(0, 1), methods=("sample", "rs-learn")
    )
    long = result.long
    assert {"similarity", "normalised_gap"} <= set(long.columns)
    assert long["similarity"].notna().all()
    gap = long[long["abs_err"] > 0]  # normalised_gap = gap / sqrt(p (1 - p))
    p = gap["y_true"]
    np.testing.assert_allclose(gap["abs_err"] / gap["normalised_gap"], np.sqrt(p * (1 - p)))
    assert set(result.correlations["method"]) == {"sample", "rs-learn"}
    assert result.correlations["r"].between(-1, 1).all()


# ---------------------------------------------------------------- reporting arithmetic


def test_summary_is_mean_and_sem_over_seeds_of_task_means():
    # seed 0: task a errors (0.1, 0.3) -> 0.2, task b (0.6) -> 0.6; seed mean 0.4
    # seed 1: task a (0.2) -> 0.2, task b (0.0, 0.4) -> 0.2; seed mean 0.2
    rows = [
        (0, "a", "m1", 0.1), (0, "a", "m2", 0.3), (0, "b", "m1", 0.6), (0, "b", "m2", np.nan),
        (1, "a", "m1", 0.2), (1, "b", "m1", 0.0), (1, "b", "m2", 0.4),
    ]  # fmt: skip
    long = pd.DataFrame(rows, columns=["seed", "task", "model", "abs_err"])
    long = long.assign(budget=1, method="pkps")
    summary = P.summary_table(long, ["budget"])
    row = summary.iloc[0]
    assert row["mae"] == pytest.approx(0.3)
    assert row["sem"] == pytest.approx(np.std([0.4, 0.2], ddof=1) / np.sqrt(2))
    assert row["n_seeds"] == 2 and row["n_cells"] == 6
    assert row["coverage"] == pytest.approx(6 / 7)
    text = P.format_summary(summary, ["budget"])
    assert text.loc[1, "pkps"] == "0.3000 ± 0.1000"


def test_wilcoxon_detects_a_planted_difference():
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(3):
        for task in range(10):
            for model in range(6):
                base = rng.uniform(0.1, 0.3)
                better = base - 0.05 - 0.01 * task
                rows += [
                    (seed, 1, f"m{model}", f"t{task}", "sample", base),
                    (seed, 1, f"m{model}", f"t{task}", "ensemble", better),
                    (seed, 1, f"m{model}", f"t{task}", "noise", base + rng.normal(0, 0.01)),
                    (seed, 8, f"m{model}", f"t{task}", "sample", base),
                    (seed, 8, f"m{model}", f"t{task}", "ensemble", base + 1.0),
                ]
    long = pd.DataFrame(rows, columns=["seed", "budget", "model", "task", "method", "abs_err"])
    tests = P.wilcoxon_tests(long, ["budget"], comparator="sample", smallest="budget")
    assert set(tests["budget"]) == {1}  # only the smallest budget is tested
    planted = tests.set_index("method").loc["ensemble"]
    diffs = np.array([-0.05 - 0.01 * t for t in range(10)])
    expected = wilcoxon(diffs)
    assert planted["p_value"] == pytest.approx(expected.pvalue)
    assert planted["p_value"] < 0.01
    assert planted["tasks_better"] == 10 and planted["tasks_tested"] == 10
    assert planted["frac_cells_better"] == 1.0 and planted["n_cells"] == 180
    assert planted["mean_diff"] == pytest.approx(diffs.mean())
    assert tests.set_index("method").loc["noise", "p_value"] > 0.01


# ------------------------------------------------------------------- model similarity


def test_agreement_beyond_chance_on_hand_made_vectors():
    a = np.array([1, 1, 0, 0])
    b = np.array([1, 0, 0, 0])
    # c_obs = 3/4; p_a = 1/2, p_b = 1/4: c_exp = 1/8 + 3/8 = 1/2; kappa = (3/4 - 1/2) / (1/2)
    assert P.chance_agreement(0.5, 0.25) == pytest.approx(0.5)
    assert P.agreement_beyond_chance(a, b) == pytest.approx(0.5)
    assert P.agreement_beyond_chance(a, a) == pytest.approx(1.0)
    assert P.agreement_beyond_chance(a, 1 - a) == pytest.approx(-1.0)
    c = np.array([1, 0, 1, 0])  # independent of a: c_obs = 1/2 = c_exp
    assert P.agreement_beyond_chance(a, c) == pytest.approx(0.0)
    assert np.isnan(P.agreement_beyond_chance(np.ones(4), np.ones(4)))
    # similarity to several sources is the mean; a NaN item is skipped for that source
    sources = np.array([b, a, [1, np.nan, 1, 0]], dtype=float)
    # third source on items 0, 2, 3: a = (1, 0, 0), s = (1, 1, 0): c_obs = 2/3,
    # c_exp = 1/3 * 2/3 + 2/3 * 1/3 = 4/9, kappa = (2/9) / (5/9) = 0.4
    expected = np.mean([0.5, 1.0, 0.4])
    assert P.model_similarity(a, sources) == pytest.approx(expected)
    with pytest.raises(ValueError):
        P.agreement_beyond_chance(a, b[:3])


# ------------------------------------------------------------------------------- CLI


def test_cli_evaluate_writes_the_documented_columns(tmp_path, capsys, synthetic):
    cache = tmp_path / "cache.parquet"
    synthetic.to_parquet(cache)
    out = tmp_path / "results.csv"
    argv = ["evaluate", "--input", str(cache), "--protocol", "query-efficiency"]
    argv += ["--budgets", "1,2", "--seeds", "2", "--methods", "sample,pkps", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "MAE (mean ± SEM over 2 seeds" in printed and "Wilcoxon" in printed
    results = pd.read_csv(out)
    assert list(results.columns) == [
        "seed", "protocol", "budget", "rho", "cohort", "p_task",
        "method", "model", "task", "y_true", "y_pred", "abs_err", "note", "mae_weight",
    ]  # fmt: skip
    assert set(results["budget"]) == {1, 2} and set(results["method"]) == {"sample", "pkps"}
    np.testing.assert_allclose(results["abs_err"], (results["y_pred"] - results["y_true"]).abs())

    out = tmp_path / "completion.csv"
    argv = ["evaluate", "--input", str(cache), "--protocol", "completion", "--cohort", "9,full"]
    assert main([*argv, "--seeds", "1", "--methods", "lrmc,pkps", "--out", str(out)]) == 0
    completion = pd.read_csv(out)
    assert set(completion["cohort"]) == {9, 18}
    assert {"n_tasks", "p_task", "p_query"} <= set(completion.columns)


def test_cli_evaluate_errors_exit_2_with_one_line(tmp_path, capsys, synthetic):
    cache = tmp_path / "cache.parquet"
    synthetic.to_parquet(cache)
    argv = ["evaluate", "--input", str(cache), "--protocol", "completion"]
    assert main([*argv, "--methods", "nope", "--out", str(tmp_path / "r.csv")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: unknown method(s) nope") and "\n" not in error
    assert main([*argv, "--out", str(tmp_path / "r.txt")]) == 2
    assert "use .csv or .parquet" in capsys.readouterr().err
