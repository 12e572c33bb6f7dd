"""Baselines against planted truth, the second paper's findings, and the holdout rules."""

import numpy as np
import pytest
from scipy.special import expit

from pkps_core.itemsim import make_2pl, make_item_cache
from pkps_core.methods.ensemble import ALPHA_GRID, best_alpha
from pkps_core.methods.irt import largest_full_block, rasch_fit
from pkps_core.methods.lrmc import lrmc_complete, lrmc_predictions
from pkps_core.methods.sampling import aipw_estimate, aipw_predict
from pkps_core.predict import METHODS, build_context, predict
from pkps_core.protocols import estimation_gap_study
from pkps_core.synthetic import make_synthetic

ALL_METHODS = ["sample", "irt", "lrmc", "rs-learn", "aipw", "dkps", "pkps", "ensemble"]
SPACE = {"response_kernel": "rbf"}


def test_lrmc_recovers_planted_rank2_plus_bias():
    rng = np.random.default_rng(0)
    n_models, n_tasks = 60, 20
    logits = (
        0.3
        + rng.normal(0, 1, n_models)[:, None]
        + rng.normal(0, 1, n_tasks)[None, :]
        + 0.7 * rng.normal(0, 1, (n_models, 2)) @ rng.normal(0, 1, (2, n_tasks))
    )
    truth = expit(logits)
    hidden = rng.random(truth.shape) < 0.3
    completed = lrmc_complete(np.where(hidden, np.nan, truth))
    column_mean = np.broadcast_to(np.nanmean(np.where(hidden, np.nan, truth), axis=0), truth.shape)
    lrmc_error = np.abs(completed - truth)[hidden].mean()
    mean_error = np.abs(column_mean - truth)[hidden].mean()
    assert lrmc_error < 0.04
    assert lrmc_error < 0.25 * mean_error


def test_irt_recovers_planted_difficulties():
    rng = np.random.default_rng(1)
    abilities = rng.normal(0, 1.5, 200)
    difficulties = rng.normal(0, 1, 100)
    responses = rng.random((200, 100)) < expit(abilities[:, None] - difficulties[None, :])
    estimated, _ = rasch_fit(responses.astype(float))
    assert np.corrcoef(estimated, difficulties)[0, 1] > 0.95


def test_largest_full_block_finds_the_paired_block():
    answered = np.zeros((12, 30), dtype=bool)
    answered[:8, 5:20] = True  # a paired 8 × 15 block
    answered[8:, :3] = True  # stragglers on other items
    rows, cols = largest_full_block(answered)
    np.testing.assert_array_equal(rows, np.arange(8))
    np.testing.assert_array_equal(cols, np.arange(5, 20))


def test_aipw_with_a_constant_predictor_is_the_sample_mean():
    rng = np.random.default_rng(2)
    observed = (rng.random(50) < 0.4).astype(float)
    for constant in (0.5, 0.1, 1 / 3):
        estimate = aipw_estimate(observed, np.full(50, constant), np.full(450, constant))
        assert estimate == observed.mean()
    # A ridge on uninformative (constant) features predicts a constant, too.
    sources = np.ones((10, 500))
    core = rng.choice(500, 50, replace=False)
    assert aipw_predict(sources, observed, core) == observed.mean()


def test_aipw_is_unbiased_and_beats_the_sample_mean_with_an_informative_predictor():
    bank = make_2pl(n_models=80, n_items=500, random_state=3)
    target = int(np.argsort(bank.scores.mean(axis=1))[40])  # a mid-ranked model
    sources = np.delete(bank.scores, target, axis=0)
    truth = bank.scores[target].mean()
    aipw_errors, sample_errors = [], []
    for seed in range(200):
        core = np.random.default_rng(seed).choice(500, size=50, replace=False)
        aipw_errors.append(aipw_predict(sources, bank.scores[target, core], core) - truth)
        sample_errors.append(bank.scores[target, core].mean() - truth)
    aipw_errors = np.asarray(aipw_errors)
    standard_error = aipw_errors.std(ddof=1) / np.sqrt(len(aipw_errors))
    assert abs(aipw_errors.mean()) < 2 * standard_error
    assert aipw_errors.var() < np.var(sample_errors)


def test_second_paper_findings_on_2pl():
    bank = make_2pl(n_models=80, n_items=500, random_state=0)
    gaps = estimation_gap_study(bank.scores, seeds=range(20), n_core=50)
    mean = gaps.groupby(["split", "method"])["gap"].mean()
    assert mean["interpolation", "rs-learn"] < mean["interpolation", "random-sampling"]
    assert mean["extrapolation", "rs-learn"] > mean["extrapolation", "random-sampling"]
    assert mean["extrapolation", "aipw"] <= mean["extrapolation", "random-sampling"]


def test_best_alpha_prefers_the_accurate_component():
    rng = np.random.default_rng(4)
    truth = rng.random(400)
    accurate = truth + rng.normal(0, 0.01, 400)
    noisy = truth + rng.normal(0, 0.3, 400)
    assert best_alpha(accurate, noisy, truth) >= 0.9
    assert best_alpha(noisy, accurate, truth) <= 0.1
    assert best_alpha(accurate, noisy, truth) in ALPHA_GRID


@pytest.fixture(scope="module")
def item_cache():
    return make_item_cache(random_state=0)


@pytest.fixture(scope="module")
def item_predictions(item_cache):
    context = build_context(item_cache.records, holdout="family", space_params=SPACE)
    frame = predict(context, ALL_METHODS)
    return frame.merge(item_cache.truth[["model", "task", "true_score"]], on=["model", "task"])


def test_all_methods_run_end_to_end(item_predictions):
    frame = item_predictions
    assert set(frame["method"]) == set(ALL_METHODS)
    unexplained = frame["prediction"].isna() & (frame["note"] == "")
    assert not unexplained.any()
    applied = frame.dropna(subset=["prediction"]).groupby("method").size()
    assert set(applied.index) == set(ALL_METHODS)  # every method applies somewhere here
    missing = frame[frame["n_responses"] == 0]
    assert len(missing) and missing.set_index("method").loc["ensemble", "prediction"].notna().all()
    error = (frame["prediction"] - frame["true_score"]).abs()
    observed_mae = error[frame["n_responses"] > 0].groupby(frame["method"]).mean()
    assert observed_mae["ensemble"] <= min(observed_mae["sample"], observed_mae["pkps"]) + 0.005
    for method in ("irt", "aipw", "rs-learn", "lrmc", "pkps", "sample"):
        assert observed_mae[method] < 0.2


def test_irt_says_not_applicable_on_non_binary_scores(item_cache):
    records = item_cache.records.copy()
    records["score"] = 0.25 + 0.5 * records["score"]
    context = build_context(records, holdout="family")
    result = METHODS["irt"](context)
    scored = context.n_responses > 0
    assert np.isnan(result.prediction).all()
    assert set(result.notes[scored]) == {"irt: not applicable — task scores are not binary"}


def test_lrmc_cross_fit_never_sees_the_cells_own_value(item_cache):
    records = item_cache.records
    model, task = records[["model", "task"]].iloc[0]
    cell = (records["model"] == model) & (records["task"] == task)
    flipped = records.copy()
    flipped.loc[cell, "score"] = 1.0 - flipped.loc[cell, "score"]
    before = build_context(records, holdout="family")
    after = build_context(flipped, holdout="family")
    i, t = list(before.models).index(model), list(before.tasks).index(task)
    assert before.sample[i, t] != after.sample[i, t]
    first, second = lrmc_predictions(before)[0], lrmc_predictions(after)[0]
    assert first[i, t] == pytest.approx(second[i, t], abs=1e-12)
    assert not np.allclose(first[i], second[i])  # the other cells of the row do see it


def test_perturbing_a_familys_references_leaves_its_predictions_unchanged(
    item_cache, item_predictions
):
    records = item_cache.records
    truth = item_cache.truth
    family = truth.loc[~truth["observed"], "family"].iloc[0]  # a family with missing cells
    rng = np.random.default_rng(5)
    cells = records.loc[records["family"] == family, ["model", "task"]].drop_duplicates()
    cells = cells.assign(offset=rng.uniform(-0.3, 0.3, len(cells)))
    perturbed = records.merge(cells, on=["model", "task"], how="left")
    perturbed["reference_score"] = (
        perturbed["reference_score"] + perturbed["offset"].fillna(0.0)
    ).clip(0, 1)
    perturbed = perturbed.drop(columns="offset")
    context = build_context(perturbed, holdout="family", space_params=SPACE)
    changed = predict(context, ALL_METHODS)
    merged = item_predictions.merge(
        changed, on=["model", "task", "method"], suffixes=("", "_perturbed")
    )
    own = merged["model"].str.startswith(family + "/")
    for method in ALL_METHODS:
        rows = merged[own & (merged["method"] == method)]
        np.testing.assert_allclose(
            rows["prediction"], rows["prediction_perturbed"], rtol=0, atol=1e-12, err_msg=method
        )
    # The perturbation is visible to the other families, so the check has teeth.
    others = merged[~own & merged["method"].isin(["pkps", "lrmc", "rs-learn", "ensemble"])]
    moved = (
        (others["prediction"] - others["prediction_perturbed"])
        .abs()
        .groupby(others["method"])
        .max()
    )
    assert (moved > 1e-6).all()


def test_mean_baseline_is_the_allowed_references_task_mean():
    from pkps_core.predict import build_context, predict
    from pkps_core.synthetic import make_synthetic

    records = make_synthetic(n_models=12, n_tasks=3, budget=4, random_state=3).records
    context = build_context(records, holdout="family", targets=None)
    out = predict(context, ["mean"]).set_index(["model", "task"])["prediction"]
    refs = context.training_references
    allowed = context.allowed()
    for i, model in enumerate(context.models):
        for t, task in enumerate(context.tasks):
            expected = np.nanmean(refs[allowed[i], t])
            assert out[(model, task)] == pytest.approx(expected, abs=1e-12)
    # a target's references never enter anyone's mean
    target = context.models[0]
    with_target = predict(build_context(records, holdout="family", targets=[target]), ["mean"])
    moved = with_target.set_index(["model", "task"])["prediction"]
    other = context.models[-1]
    expected = np.nanmean(refs[allowed[-1] & (context.models != target), 0])
    assert moved[(other, context.tasks[0])] == pytest.approx(expected, abs=1e-12)


def test_lrmc_on_missing_cells_only_fits_them_and_agrees_with_the_full_run(item_cache):
    """The stacked ensemble's LRMC member (cells without responses) fits one matrix per model
    with such cells; it predicts those cells as the full cross-fitted LRMC does, up to the
    random starts of a non-convex fit, and nothing else."""
    from pkps_core.methods.lrmc import lrmc_missing_predictions

    context = build_context(item_cache.records, holdout="family")
    missing = context.n_responses == 0
    assert missing.any() and (~missing).any()
    only, _ = lrmc_missing_predictions(context)
    full, _ = lrmc_predictions(context)
    assert np.isnan(only[~missing]).all()
    both = missing & np.isfinite(full)
    assert both.sum() >= 10 and np.isfinite(only[both]).all()
    truth = item_cache.truth.set_index(["model", "task"])["true_score"]
    true = np.array([[truth.get((m, t), np.nan) for t in context.tasks] for m in context.models])
    judged = both & np.isfinite(true)
    mae_only = np.abs(only[judged] - true[judged]).mean()
    mae_full = np.abs(full[judged] - true[judged]).mean()
    assert mae_only <= mae_full + 0.01, (mae_only, mae_full)
    assert np.abs(only[both] - full[both]).mean() < 0.05


@pytest.mark.parametrize("shape", [(30, 1), (30, 4), (35, 32), (8, 20), (5, 5), (40, 2)])
def test_the_closed_form_ridges_are_sklearns(shape):
    from sklearn.linear_model import Ridge, RidgeCV

    from pkps_core.methods.sampling import RS_LEARN_ALPHAS, ridge_fit, ridge_loo_fit

    rng = np.random.default_rng(sum(shape))
    for trial in range(20):
        features = rng.random(shape)
        if trial % 4 == 0:
            features[:, 0] = 0.5  # a column every source scored alike
        if trial % 5 == 0:
            features = (features > 0.5).astype(float)  # binary item scores
        target = features @ rng.normal(size=shape[1]) + rng.normal(0, 0.1, shape[0])
        coef, intercept = ridge_loo_fit(features, target, RS_LEARN_ALPHAS)
        reference = RidgeCV(alphas=RS_LEARN_ALPHAS).fit(features, target)
        query = rng.random((3, shape[1]))
        np.testing.assert_allclose(
            query @ coef + intercept, reference.predict(query), rtol=1e-9, atol=1e-9
        )
        coef, intercept = ridge_fit(features, target, 10.0)
        reference = Ridge(alpha=10.0).fit(features, target)
        np.testing.assert_allclose(
            query @ coef + intercept, reference.predict(query), rtol=1e-9, atol=1e-9
        )


@pytest.mark.parametrize("shape", [(30, 1), (30, 4), (35, 32), (8, 20), (5, 5)])
def test_the_batched_ridges_are_the_one_problem_ridges(shape):
    from pkps_core.methods.sampling import (
        RS_LEARN_ALPHAS,
        ridge_fit,
        ridge_fit_batch,
        ridge_loo_fit,
        ridge_loo_fit_batch,
    )

    rng = np.random.default_rng(sum(shape) + 1)
    features = rng.random((12, *shape))
    features[::4, :, 0] = 0.5  # a column every source scored alike (a zero singular value)
    features[1::5] = (features[1::5] > 0.5).astype(float)  # binary item scores
    target = np.einsum("gnp,p->gn", features, rng.normal(size=shape[1]))
    target += rng.normal(0, 0.1, target.shape)
    for batch, single, extra in (
        (ridge_loo_fit_batch, ridge_loo_fit, RS_LEARN_ALPHAS),
        (ridge_fit_batch, ridge_fit, 10.0),
    ):
        coef, intercept = batch(features, target, extra)
        for g in range(len(features)):
            one_coef, one_intercept = single(features[g], target[g], extra)
            np.testing.assert_allclose(coef[g], one_coef, rtol=1e-10, atol=1e-12)
            assert intercept[g] == pytest.approx(one_intercept, rel=1e-10, abs=1e-12)


def _cell_by_cell(context, method: str) -> np.ndarray:
    """rs-learn / aipw as they read before the batches: one fit per cell."""
    from pkps_core.methods.sampling import MIN_REFERENCES, rs_learn_predict

    prediction, _ = context.empty_grid()
    allowed, references = context.allowed(), context.training_references
    for t, table in enumerate(context.item_tables()):
        answered = np.isfinite(table)
        for i in context.prediction_rows():
            core = np.flatnonzero(answered[i])
            if method == "rs-learn":
                ok = allowed[i] & np.isfinite(references[:, t]) & answered[:, core].all(axis=1)
            else:
                ok = allowed[i] & answered.all(axis=1)
            sources = np.flatnonzero(ok)
            if len(core) == 0 or len(sources) < MIN_REFERENCES:
                continue
            if method == "rs-learn":
                prediction[i, t] = rs_learn_predict(
                    table[np.ix_(sources, core)], references[sources, t], table[i, core]
                )[0]
            else:
                prediction[i, t] = aipw_predict(table[sources], table[i, core], core)
    return prediction


@pytest.mark.parametrize("budget", [1, 3, 16])
@pytest.mark.parametrize("batch_bytes", [64 << 20, 2000])  # one batch a shape; many
def test_rs_learn_and_aipw_in_batches_are_the_cell_by_cell_fits(budget, batch_bytes, monkeypatch):
    from pkps_core import protocols
    from pkps_core.methods import sampling

    monkeypatch.setattr(sampling, "BATCH_BYTES", batch_bytes)
    dense = protocols.prepare_records(
        make_synthetic(n_models=24, n_tasks=4, budget=16, rho=1.0, random_state=3).records
    )
    masked, targets = protocols.mask_new_model(dense, budget, seed=1)
    thin_targets = build_context(masked, holdout="family", targets=list(targets))
    # and the papers' protocol: every model at the same budget, every cell predicted
    same_budget = build_context(
        make_synthetic(n_models=24, n_tasks=4, budget=budget, rho=1.0, random_state=4).records,
        holdout="family",
    )
    for context in (thin_targets, same_budget):
        _assert_batches_match(context)


def _assert_batches_match(context) -> None:
    from pkps_core.methods.sampling import aipw_predictions, rs_learn_predictions

    for method, compute in (("rs-learn", rs_learn_predictions), ("aipw", aipw_predictions)):
        batched, notes = compute(context)
        expected = _cell_by_cell(context, method)
        rows = context.prediction_rows()
        assert np.isfinite(batched[rows]).any()
        np.testing.assert_array_equal(np.isnan(batched), np.isnan(expected))
        np.testing.assert_allclose(batched, expected, rtol=1e-10, atol=1e-12)
        assert (notes[np.isnan(batched)] != "").all()


def _literal_sweeps(z, observed, col_factors, lam, n_iter):
    """The alternating ridge as written: per problem and initialisation, each row's ridge
    over its observed columns, then each column's over its observed rows, then mu the
    mean observed residual; the fits and ``mu + b`` averaged over the initialisations."""
    n_problems, n_rows, n_cols = z.shape
    n_init, rank = col_factors.shape[1], col_factors.shape[-1]
    fits, bases = np.zeros(z.shape), np.zeros((n_problems, n_cols))
    penalty = lam * np.eye(rank + 1)
    for p in range(n_problems):
        w = observed[p].astype(float)
        y = np.where(observed[p], z[p], 0.0)
        for i in range(n_init):
            v, b = col_factors[p, i].copy(), np.zeros(n_cols)
            u, a = np.zeros((n_rows, rank)), np.zeros(n_rows)
            mu = y.sum() / max(w.sum(), 1)
            for _ in range(n_iter):
                d = np.column_stack([np.ones(n_cols), v])
                for row in range(n_rows):
                    weights = np.diag(w[row])
                    solved = np.linalg.solve(
                        d.T @ weights @ d + penalty, d.T @ weights @ (y[row] - mu - b)
                    )
                    a[row], u[row] = solved[0], solved[1:]
                e = np.column_stack([np.ones(n_rows), u])
                for col in range(n_cols):
                    weights = np.diag(w[:, col])
                    solved = np.linalg.solve(
                        e.T @ weights @ e + penalty, e.T @ weights @ (y[:, col] - mu - a)
                    )
                    b[col], v[col] = solved[0], solved[1:]
                mu = (w * (y - a[:, None] - b[None, :] - u @ v.T)).sum() / max(w.sum(), 1)
            fits[p] += (mu + a[:, None] + b[None, :] + u @ v.T) / n_init
            bases[p] += (mu + b) / n_init
    return fits, bases


@pytest.mark.parametrize("rank", [0, 1, 2, 3])
def test_lrmc_sweeps_are_the_alternating_ridge_as_written(rank):
    # the batched sweeps never form the residuals (their products with the design are
    # summed from the observed values and the Gram rows); the fit is the literal one's
    from pkps_core.methods import lrmc

    rng = np.random.default_rng(rank)
    n_problems, n_rows, n_cols, n_init = 3, 9, 5, 2
    z = rng.standard_normal((n_problems, n_rows, n_cols))
    observed = rng.random(z.shape) < 0.6
    observed[0, 0] = False  # a row without data
    col_factors = 0.1 * rng.standard_normal((n_problems, n_init, n_cols, rank))
    fit, base = lrmc._sweeps(z, observed, col_factors, 0.1, 6)
    expected_fit, expected_base = _literal_sweeps(z, observed, col_factors, 0.1, 6)
    np.testing.assert_allclose(fit, expected_fit, rtol=0, atol=1e-10)
    np.testing.assert_allclose(base, expected_base, rtol=0, atol=1e-10)


def test_lrmc_rows_without_data_are_left_out_of_the_sweeps_with_the_same_fit():
    # a completion problem hides every model its holdout forbids: those rows have no data,
    # so they are not swept; the fit of every cell is the fit over all rows
    from pkps_core.methods import lrmc

    rng = np.random.default_rng(4)
    n_problems, n_rows, n_cols, rank, n_init = 6, 40, 7, 2, 3
    z = rng.standard_normal((n_problems, n_rows, n_cols))
    observed = rng.random(z.shape) < 0.7
    observed[rng.random((n_problems, n_rows)) < 0.6] = False  # rows without data
    observed[0] = True  # one problem with every row: the kept block is its full height
    draw = np.random.default_rng(9)
    draw.standard_normal((n_problems, n_init, n_rows, rank))  # the rows' (unread) draw
    col_factors = 0.1 * draw.standard_normal((n_problems, n_init, n_cols, rank))
    swept_all, _ = lrmc._sweeps(z, observed, col_factors, 0.1, 25)
    fit = lrmc._alternating_ridge(z, observed, rank, 0.1, 25, n_init, np.random.default_rng(9))
    np.testing.assert_allclose(fit, swept_all, atol=1e-12)
    # a row without data is fitted as mu + b_j: every such row of a problem alike
    empty = ~observed.any(axis=2)
    for p in range(1, n_problems):
        rows = fit[p][empty[p]]
        assert len(rows) > 1
        np.testing.assert_allclose(rows, np.broadcast_to(rows[0], rows.shape), atol=1e-12)
