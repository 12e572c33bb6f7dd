"""The fitted reference predictor: the same answers as the refit path, without the refit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from thin_new_models import thin_new_models

from pkps_core.predict import build_context, predict
from pkps_core.predictor import PROFILE_BUDGETS, ReferencePredictor, core, profile_of
from pkps_core.records import RecordsError
from pkps_core.space import kernels
from pkps_core.synthetic import make_synthetic

NEW = ("m010", "m021")


@pytest.fixture(scope="module")
def cache():
    return thin_new_models(
        [10, 21], 4, 0, n_models=30, n_tasks=4, budget=24, rho=1.0, random_state=3, family_size=3
    )


@pytest.fixture(scope="module")
def fitted(cache):
    _, references, _, _ = cache
    return ReferencePredictor(budgets=(2, 4), modes=("scored", "responses-only")).fit(references)


def _refit(references, thin, model):
    records = pd.concat([references, thin[thin["model"] == model]], ignore_index=True)
    context = build_context(records, holdout="family", targets=[model])
    out = predict(context, ["ensemble"], intervals=0.9)
    return out[out["model"] == model].set_index("task")


def test_the_placed_prediction_matches_the_refit_paths(cache, fitted):
    _, references, thin, new_models = cache
    fast = fitted.predict(thin)
    for model in new_models:
        slow = _refit(references, thin, model)
        mine = fast[fast["model"] == model].set_index("task").loc[slow.index]
        # the joint MDS of the refit path moves the references a little when the target
        # joins; the placed model leaves them where the fit put them
        assert np.abs(mine["prediction"] - slow["prediction"]).max() < 0.05
        assert np.abs(mine["upper"] - mine["lower"] - (slow["upper"] - slow["lower"])).max() < 0.1
        assert (mine["lower"] <= mine["prediction"] + 1e-12).all()
        assert (mine["prediction"] <= mine["upper"] + 1e-12).all()


def test_a_batch_gives_each_model_what_it_gets_alone(cache, fitted):
    _, _, thin, new_models = cache
    batch = fitted.predict(thin).set_index(["model", "task"])
    for model in new_models:
        alone = fitted.predict(thin[thin["model"] == model]).set_index(["model", "task"])
        np.testing.assert_allclose(
            batch.loc[alone.index, "prediction"], alone["prediction"], atol=1e-12
        )
        np.testing.assert_allclose(batch.loc[alone.index, "upper"], alone["upper"], atol=1e-12)


def test_a_model_without_scores_is_calibrated_on_unscored_shadows(cache, fitted):
    _, _, thin, new_models = cache
    unscored = thin.assign(score=np.nan)
    out = fitted.predict(unscored)
    assert out["profile"].str.contains("responses-only").all()
    assert out["prediction"].notna().all()
    assert out["note"].str.contains("responses only").all()


def test_the_profile_is_the_grid_budget_at_or_below_the_median():
    tasks = np.array(["a", "b", "c"])
    assert profile_of(np.array([5, 7, 9]), True, tasks, PROFILE_BUDGETS).budget == 4
    assert profile_of(np.array([8, 8, 40]), False, tasks, PROFILE_BUDGETS).budget == 8
    partial = profile_of(np.array([3, 0, 3]), True, tasks, PROFILE_BUDGETS)
    assert partial.budget == 2 and partial.tasks == ("a", "c")


def test_a_model_on_some_tasks_gets_a_profile_of_its_own(cache, fitted):
    _, _, thin, new_models = cache
    some = thin[(thin["model"] == new_models[0]) & (thin["task"] != thin["task"].min())]
    out = fitted.predict(some)
    assert len(out) == thin["task"].nunique()  # every task predicted, the missing one too
    missing = out[out["n_responses"] == 0]
    assert len(missing) == 1 and missing["prediction"].notna().all()


def test_unknown_tasks_are_refused_by_name(cache, fitted):
    _, _, thin, new_models = cache
    odd = thin[thin["model"] == new_models[0]].assign(task="not-a-task")
    with pytest.raises(RecordsError, match="not-a-task"):
        fitted.predict(odd)


def test_a_reference_predicted_as_new_is_judged_against_its_full_score(cache):
    records, references, thin, new_models = cache
    predictor = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(records)
    model = new_models[0]
    out = predictor.predict(thin[thin["model"] == model])
    full = records[records["model"] == model].groupby("task")["reference_score"].first()
    np.testing.assert_allclose(out.set_index("task")["reference_score"], full.loc[out["task"]])
    assert (out["model"] == model).all()


def test_a_model_observed_beyond_its_profile_keeps_what_it_observed(cache, fitted, monkeypatch):
    # a new model that answered every query of a task has its full score: the grid's
    # largest profile (4 here) must not pull it towards its neighbours
    records, _, _, new_models = cache
    model = new_models[1]
    whole = records[records["model"] == model]
    full = whole.groupby("task")["score"].mean()
    out = fitted.predict(whole).set_index("task")
    np.testing.assert_allclose(out["prediction"], full.loc[out.index], atol=1e-12)
    np.testing.assert_allclose(out["upper"] - out["lower"], 0.0, atol=1e-12)
    assert not out["extrapolation"].any()
    assert out["note"].str.contains("queries observed: the sample score is the full score").all()

    # 12 of 24 queries against the m = 4 profile: the unobserved part is 12 queries, not
    # 20, so the profile's prediction and interval keep r = 12/20 of their distance to
    # the sample score
    half = whole.groupby("task").sample(12, random_state=1)
    placed = fitted.predict(half).set_index("task")
    assert placed["profile"].str.startswith("m=4|scored").all()
    assert placed["note"].str.contains("12 of 24 queries observed, the other 12 predicted").all()
    monkeypatch.setattr(
        core, "_with_observed_share", lambda c, rows, p, t, b: (p, t, np.full(len(rows) * 4, ""))
    )
    raw = fitted.predict(half).set_index("task").loc[placed.index]
    sample = half.groupby("task")["score"].mean().loc[placed.index]
    r = 12 / 20
    for column in ("prediction", "lower", "upper"):
        np.testing.assert_allclose(placed[column], r * raw[column] + (1 - r) * sample, atol=1e-12)

    # at the profile's own budget nothing changes
    at_budget = whole.groupby("task").sample(4, random_state=2)
    monkeypatch.undo()
    kept = fitted.predict(at_budget)
    monkeypatch.setattr(
        core, "_with_observed_share", lambda c, rows, p, t, b: (p, t, np.full(len(rows) * 4, ""))
    )
    np.testing.assert_allclose(kept["prediction"], fitted.predict(at_budget)["prediction"])


def test_appending_models_prepares_what_preparing_everything_gives(cache):
    from pkps_core.records import validate_records
    from pkps_core.space import prepare_cache
    from pkps_core.space.prepare import append_models

    _, references, thin, _ = cache
    base = prepare_cache(references)
    new = validate_records(thin)[list(base.frame.columns)]
    appended = append_models(base, new)
    whole = prepare_cache(pd.concat([base.frame, new], ignore_index=True), validated=True)
    np.testing.assert_array_equal(appended.models, whole.models)
    np.testing.assert_array_equal(appended.families, whole.families)
    np.testing.assert_array_equal(appended.layout.model_idx, whole.layout.model_idx)
    np.testing.assert_array_equal(appended.response_vectors, whole.response_vectors)
    np.testing.assert_array_equal(appended.scores, whole.scores)
    np.testing.assert_array_equal(appended.task_of_response, whole.task_of_response)
    # query indices may be numbered differently; the queries they point at are the same
    keys_a = appended.query_keys.to_numpy()[appended.layout.query_idx]
    keys_w = whole.query_keys.to_numpy()[whole.layout.query_idx]
    np.testing.assert_array_equal(keys_a, keys_w)
    np.testing.assert_array_equal(
        appended.query_vectors[appended.layout.query_idx],
        whole.query_vectors[whole.layout.query_idx],
    )
    pd.testing.assert_frame_equal(appended.cells, whole.cells)
    pd.testing.assert_frame_equal(
        appended.frame[["model", "task", "query_id"]], whole.frame[["model", "task", "query_id"]]
    )


def test_a_profiles_space_from_the_shared_reference_sums_is_a_fresh_fits(cache):
    from pkps_core.predictor.core import Profile

    _, references, _, _ = cache
    predictor = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    profile = Profile(4, True)
    for name in ("pkps", "dkps"):
        shared = predictor._shadow_space(name, predictor._profile_context(profile))
        fresh = predictor._profile_context(profile).space(name)  # fits everything again
        # Eq. (1)'s sums at every bandwidth of the grid, the shadows' pairs included
        for ours, theirs in zip(shared.kernel_sums_, fresh.kernel_sums_, strict=True):
            for part in ("numerator", "denominator", "self_numerator", "self_denominator"):
                np.testing.assert_allclose(
                    getattr(ours, part), getattr(theirs, part), rtol=1e-10, atol=1e-12
                )
        if name == "pkps":  # the shadows' KNN errors that choose the bandwidth
            np.testing.assert_allclose(shared.target_cv_errors_, fresh.target_cv_errors_)
        # D² at the fresh fit's bandwidth (D = sqrt of a difference: rounding at 1e-16
        # shows as 1e-8 in D), over the pairs with kernel mass. Two shadows that share no
        # query have none under a narrow RBF bandwidth: 0 in the shared pass, 1e-20-sized
        # rounding in a fresh fit, so their A is undefined in one and a ratio of rounding
        # errors in the other (and the count of undefined pairs, which can rule a
        # bandwidth out, may differ: then so may the bandwidth chosen)
        ours = shared.select_bandwidth(fresh.query_bandwidth_)
        k = int(np.flatnonzero(np.isclose(fresh.bandwidth_grid_, fresh.query_bandwidth_))[0])
        mass = np.minimum(shared.kernel_sums_[k].denominator, fresh.kernel_sums_[k].denominator)
        both = (mass > 1e-8) & (mass.diagonal()[:, None] > 1e-8) & (mass.diagonal() > 1e-8)
        np.testing.assert_allclose(
            (ours.distance_matrix_**2)[both], (fresh.distance_matrix_**2)[both], atol=1e-12
        )
        if np.array_equal(shared.undefined_pairs_grid_, fresh.undefined_pairs_grid_):
            assert shared.query_bandwidth_ == pytest.approx(fresh.query_bandwidth_)


def test_dkps_takes_the_delta_sums_pkps_computed_for_the_same_shadows(cache, monkeypatch):
    # DKPS's kernel is PKPS's bandwidth 0: in one profile context the shadows' pair sums
    # are computed once, and DKPS's space is still a fresh fit's
    from pkps_core.predictor import core
    from pkps_core.predictor.core import Profile

    _, references, _, _ = cache
    predictor = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    context = predictor._profile_context(Profile(4, True))
    calls = []
    counted = core.shadow_pair_sums
    monkeypatch.setattr(
        core, "shadow_pair_sums", lambda *a, **k: calls.append(1) or counted(*a, **k)
    )
    predictor._shadow_space("pkps", context)
    shared = predictor._shadow_space("dkps", context)
    assert len(calls) == 1
    fresh = predictor._profile_context(Profile(4, True)).space("dkps")
    np.testing.assert_allclose(shared.distance_matrix_**2, fresh.distance_matrix_**2, atol=1e-12)


def test_the_region_check_calibrates_on_each_references_first_shadow(cache):
    # a budget copy of each reference (a random subsample at the profile's budget) is its
    # first shadow: the threshold of task t is the conformal threshold of the first
    # shadows' PKPS distances (U-statistic D of the profile's space) to their nearest
    # reference of another family that has a reference on t
    from pkps_core.predictor.core import Profile
    from pkps_core.predictor.profiles import first_shadows
    from pkps_core.trust.extrapolation import _u_distances, region_distances_among
    from pkps_core.trust.intervals import conformal_outlier_threshold

    _, references, _, _ = cache
    predictor = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(references, lazy=True)
    context = predictor._profile_context(Profile(2, True))
    context.shared[("space", "pkps")] = predictor._shadow_space("pkps", context)
    first = first_shadows(context)
    is_reference = ~context.shadows
    assert (first[is_reference] >= 0).all() and (first[context.shadows] == -1).all()
    assert (np.asarray(context.origin)[first[is_reference]] == np.flatnonzero(is_reference)).all()
    assert (context.n_responses[first[is_reference]] == 2).all()  # at the profile's budget
    _, threshold = region_distances_among(context, first)
    distances = _u_distances(context.pkps)
    families = np.asarray(context.families)
    truth = context.training_references
    for t in range(len(context.tasks)):
        own = []
        for i in np.flatnonzero(is_reference):
            others = is_reference & (families != families[i]) & np.isfinite(truth[:, t])
            own.append(distances[first[i], others].min())
        assert threshold[t] == pytest.approx(conformal_outlier_threshold(np.asarray(own)))
    assert np.isfinite(threshold).all() and (threshold > 0).all()


def test_one_pass_over_nested_budgets_gives_each_budgets_own_sums(cache):
    # a profile's shadows at budget m are a prefix of its shadows at 2m (one shuffle per
    # repeat): the fit sums every budget in one pass, level by level, and each budget
    # gets the sums of its own shadows, every bandwidth (delta included), to rounding
    from pkps_core.predictor.core import Profile
    from pkps_core.predictor.shadow_sums import (
        budget_levels,
        nested_shadow_pair_sums,
        shadow_pair_sums,
    )

    _, references, _, _ = cache
    budgets = (1, 2, 4, 24, 32)  # the synthetic tasks have 24 queries: 24 and 32 are alike
    predictor = ReferencePredictor(budgets=budgets, modes=("scored",)).fit(references, lazy=True)
    contexts = [predictor._profile_context(Profile(b, True)) for b in budgets]
    largest = contexts[-1]
    level = budget_levels([c.prepared for c in contexts], largest.shadows)
    assert level is not None
    shadow_rows = largest.shadows[largest.prepared.layout.model_idx]
    assert np.bincount(level[shadow_rows], minlength=5)[-1] == 0  # nothing beyond 24
    base = predictor._base_space("pkps", largest)
    grid = np.asarray(base.bandwidth_grid_, dtype=float)
    assert (grid == 0).any() and (grid > 0).any()
    nested = nested_shadow_pair_sums(
        largest.prepared.layout,
        base._response_features(largest.prepared),
        largest.prepared.query_vectors,
        grid,
        largest.shadows,
        level=level,
        n_levels=len(budgets),
    )
    for context, by_bandwidth in zip(contexts, nested, strict=True):
        own = shadow_pair_sums(
            context.prepared.layout,
            base._response_features(context.prepared),
            context.prepared.query_vectors,
            grid,
            context.shadows,
        )
        for (num, den), (num0, den0) in zip(by_bandwidth, own, strict=True):
            np.testing.assert_allclose(num, num0, rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(den, den0, rtol=1e-10, atol=1e-10)
    # shadows that are not prefixes of each other are no levels (another draw's budget 2
    # against this draw's budget 4, whose shadows have 4 of 24 queries per task)
    other = ReferencePredictor(budgets=(2,), modes=("scored",), random_state=1)
    other.fit(references, lazy=True)
    moved = other._profile_context(Profile(2, True))
    four = contexts[2]
    assert budget_levels([contexts[1].prepared, four.prepared], four.shadows) is not None
    assert budget_levels([moved.prepared, four.prepared], four.shadows) is None


def test_the_fit_sums_every_budgets_shadows_once(cache, monkeypatch):
    # PKPS's shadow sums come from the one pass (no per-profile call), and the fitted
    # profiles are those of a fit that sums each budget on its own
    from pkps_core.predictor import core as predictor_core

    _, references, thin, _ = cache
    calls = []
    counted = predictor_core.shadow_pair_sums
    monkeypatch.setattr(
        predictor_core, "shadow_pair_sums", lambda *a, **k: calls.append(1) or counted(*a, **k)
    )
    settings = {"budgets": (2, 4), "modes": ("scored", "responses-only")}
    one_pass = ReferencePredictor(**settings).fit(references)
    assert calls == []  # DKPS takes PKPS's delta sums; PKPS the pass's
    monkeypatch.setattr(predictor_core.ReferencePredictor, "_nested_shadow_sums", lambda *a: {})
    each = ReferencePredictor(**settings).fit(references)
    assert len(calls) == 2  # one per budget
    for key, calibration in one_pass.profiles_.items():
        np.testing.assert_allclose(
            calibration.spaces["pkps"].distance_matrix_,
            each.profiles_[key].spaces["pkps"].distance_matrix_,
            atol=1e-9,
        )
    a, b = one_pass.predict(thin), each.predict(thin)
    np.testing.assert_allclose(a["prediction"], b["prediction"], atol=1e-9)
    np.testing.assert_allclose(a["upper"], b["upper"], atol=1e-9)


def test_a_responses_only_profile_starts_from_its_budgets_scored_context(cache):
    # the two modes of a budget draw the same shadows; only the shadows' scores differ,
    # so the responses-only context is the scored one without them, to the last cell
    from pkps_core.predictor.core import Profile
    from pkps_core.predictor.profiles import without_shadow_scores

    _, references, _, _ = cache
    predictor = ReferencePredictor(budgets=(4,)).fit(references, lazy=True)
    derived = without_shadow_scores(predictor._profile_context(Profile(4, True)))
    fresh = predictor._profile_context(Profile(4, False))
    pd.testing.assert_frame_equal(derived.records, fresh.records)
    pd.testing.assert_frame_equal(derived.prepared.frame, fresh.prepared.frame)
    pd.testing.assert_frame_equal(derived.prepared.cells, fresh.prepared.cells)
    np.testing.assert_array_equal(derived.prepared.scores, fresh.prepared.scores)
    assert np.isnan(derived.sample[derived.shadows]).all()
    assert np.isfinite(derived.sample[~derived.shadows]).all()
    # and a fit that derives it calibrates what a fit that draws it again does
    scored_first = ReferencePredictor(budgets=(4,)).fit(references)
    alone = ReferencePredictor(budgets=(4,), modes=("responses-only",)).fit(references)
    key = Profile(4, False).key
    for name, grid in alone.profiles_[key].grids.items():
        np.testing.assert_allclose(scored_first.profiles_[key].grids[name], grid, atol=1e-12)


@pytest.mark.parametrize("delta", [False, True])
def test_shadow_sums_are_the_same_through_dense_and_thin_rows(cache, monkeypatch, delta):
    # rows meet the shadows through a dense product per block or through their own
    # responses; which is a speed choice (DENSE_SHARE): every row dense, every row thin
    # (no dense row at all, as on the demo store) and the default give the same sums
    from pkps_core.predictor import shadow_sums
    from pkps_core.space import prepare_cache

    records, _, _, _ = cache
    prepared = prepare_cache(records)
    features = kernels.normalize_rows(prepared.response_vectors)
    rng = np.random.default_rng(0)
    shadows = rng.random(len(prepared.models)) < 0.3
    queries = None if delta else prepared.query_vectors
    bandwidths = [0.0] if delta else [0.0, 0.5, 2.0]

    def sums(share):
        monkeypatch.setattr(shadow_sums, "DENSE_SHARE", share)
        return shadow_sums.shadow_pair_sums(prepared.layout, features, queries, bandwidths, shadows)

    default = sums(shadow_sums.DENSE_SHARE)
    for share in (10**9, 0):  # every row dense; no row dense
        for (num, den), (num0, den0) in zip(sums(share), default, strict=True):
            np.testing.assert_allclose(num, num0, rtol=1e-10, atol=1e-9)
            np.testing.assert_allclose(den, den0, rtol=1e-10, atol=1e-9)


def test_four_shadows_where_every_cell_is_answered_and_two_where_some_are_missing(cache):
    records, references, _, _ = cache
    complete = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(references, lazy=True)
    assert complete.shadow_repeats_ == 4
    context = complete._profile_context(core.Profile(2, True))
    assert context.shadows.sum() == 4 * len(complete.references_)
    first = references["model"].min()
    gap = references[~((references["model"] == first) & (references["task"] == "task-00"))]
    sparse = ReferencePredictor(budgets=(2,), modes=("scored",)).fit(gap, lazy=True)
    assert sparse.shadow_repeats_ == 2
    assert sparse.settings()["shadow_repeats"] == "auto"
    fixed = ReferencePredictor(budgets=(2,), modes=("scored",), shadow_repeats=3)
    assert fixed.fit(gap, lazy=True).shadow_repeats_ == 3


def test_a_fit_on_two_threads_is_the_fit_on_one(cache, fitted, monkeypatch):
    # the budgets are calibrated on the fit's threads; each profile's calibration does
    # not depend on which thread or in which order, so the answers are the same
    from pkps_core.space.runtime import WorkerPool

    _, references, thin, _ = cache
    monkeypatch.setattr(core, "WorkerPool", lambda: WorkerPool(1))
    one = ReferencePredictor(budgets=(2, 4), modes=("scored", "responses-only"))
    one.fit(references)
    monkeypatch.setattr(core, "WorkerPool", lambda: WorkerPool(2))
    messages = []
    two = ReferencePredictor(budgets=(2, 4), modes=("scored", "responses-only"))
    two.fit(references, progress=lambda fraction, message: messages.append(fraction))
    assert list(two.profiles_) == list(one.profiles_)
    assert messages[-1] == 1.0 and messages == sorted(messages)
    for frame in (thin, thin.assign(score=np.nan)):
        a, b = one.predict(frame), two.predict(frame)
        np.testing.assert_allclose(b["prediction"], a["prediction"], atol=1e-12)
        np.testing.assert_allclose(b["upper"], a["upper"], atol=1e-12)


def test_a_profile_on_nystrom_reference_sums_keeps_them_and_adds_exact_shadow_pairs():
    # where the references' fit approximated a bandwidth (Nyström), a profile keeps those
    # sums for the references' pairs and computes every pair with a shadow exactly, rather
    # than fitting every pair again (unpaired: a paired cache takes the exact paired pass)
    from pkps_core.predictor.core import Profile
    from pkps_core.space import PerspectiveSpace

    references = make_synthetic(
        n_models=18, n_tasks=3, budget=16, rho=0.0, random_state=3, family_size=3
    ).records
    predictor = ReferencePredictor(
        budgets=(4,), modes=("scored",), space_params={"affinity_method": "nystrom"}
    ).fit(references, lazy=True)
    context = predictor._profile_context(Profile(4, True))
    base = predictor._base_space("pkps", context)
    approximated = [k for k, r in enumerate(base.affinity_reports_) if r.path == "nystrom"]
    assert approximated
    shared = predictor._shadow_space("pkps", context)
    params = {**context.space_params, "query_kernel": "rbf", "affinity_method": "exact"}
    exact = PerspectiveSpace(**params).fit(context.prepared)
    models = context.prepared.models
    shadows = context.shadows
    position = np.searchsorted(models, base.models_)
    for k in approximated:
        for part in ("numerator", "denominator"):
            mine = getattr(shared.kernel_sums_[k], part)
            truth = getattr(exact.kernel_sums_[k], part)
            kept = getattr(base.kernel_sums_[k], part)
            np.testing.assert_allclose(mine[np.ix_(position, position)], kept, atol=1e-12)
            np.testing.assert_allclose(mine[shadows], truth[shadows], rtol=1e-9, atol=1e-9)
            # the references' pairs are the approximation, not the exact sums
            block = np.ix_(position, position)
            assert np.abs(mine[block] - truth[block]).max() > 1e-9


def _on_some_tasks(thin, new_models):
    """The two new models' rows, the first on the first two tasks, the second on all but
    the first: each needs a profile of its own."""
    tasks = sorted(thin["task"].unique())
    return pd.concat(
        [
            thin[(thin["model"] == new_models[0]) & thin["task"].isin(tasks[:2])],
            thin[(thin["model"] == new_models[1]) & thin["task"].isin(tasks[1:])],
        ],
        ignore_index=True,
    )


def test_calibrating_the_off_grid_profiles_side_by_side_gives_the_same_predictions(cache):
    # models that answered only some tasks each need a profile of their own; calibrate()
    # makes them on two threads before the placements, predict() one by one on first use
    _, references, thin, new_models = cache
    partial = _on_some_tasks(thin, new_models)
    ahead = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    on_use = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    assert ahead.calibrate(partial, threads=2) == 2
    assert ahead.calibrate(partial) == 0  # held now
    assert len(ahead.profiles_) == 2 and not on_use.profiles_
    for model in new_models:
        one = partial[partial["model"] == model]
        pd.testing.assert_frame_equal(ahead.predict(one), on_use.predict(one))


def test_every_profile_reads_the_query_kernels_made_once(cache, monkeypatch):
    # a profile's shadows answer the references' queries: its query kernels are the
    # references', made once per space and kept; the predictions are those made afresh
    _, references, thin, new_models = cache
    partial = _on_some_tasks(thin, new_models)
    made = []

    def counted(queries, grid):
        made.append(len(grid))
        return kernel_matrices(queries, grid)

    kernel_matrices = kernels.query_kernel_matrices
    monkeypatch.setattr(kernels, "query_kernel_matrices", counted)
    kept = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    assert kept.calibrate(partial, threads=1) == 2
    assert len(made) == 1  # PKPS's grid, for both profiles (DKPS has no query kernel)
    monkeypatch.setattr(core, "QUERY_KERNELS_KEPT_BYTES", 0)
    fresh = ReferencePredictor(budgets=(4,), modes=("scored",)).fit(references, lazy=True)
    assert fresh.calibrate(partial, threads=1) == 2
    assert len(made) == 3  # one per profile when not kept
    for model in new_models:
        one = partial[partial["model"] == model]
        pd.testing.assert_frame_equal(kept.predict(one), fresh.predict(one), check_exact=True)
    assert "_query_kernels_kept" not in kept.__dict__  # kept through the call only
