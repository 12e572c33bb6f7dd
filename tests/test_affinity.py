"""Path choice, the Nyström approximation's measured error, and incremental updates."""

import numpy as np
import pytest

from pkps_core.records import RecordsError
from pkps_core.space import PerspectiveSpace, kernels
from pkps_core.space.affinity import AffinityEngine
from pkps_core.space.increments import increment_sums
from pkps_core.space.response_nystrom import nystrom_factor
from pkps_core.space.sums import kernel_sums, sample_exact_sums
from pkps_core.synthetic import make_synthetic


@pytest.fixture(scope="module")
def cache():
    return make_synthetic(n_models=18, n_tasks=4, budget=3, rho=0.34, random_state=4).records


def _split(records, seed=0):
    rng = np.random.default_rng(seed)
    models = sorted(records.model.unique())
    new_models = [models[3], models[-1]]  # a model inside the sorted order and the last one
    later = records.model.isin(new_models) | (rng.random(len(records)) < 0.15)
    return records[~later], records[later]


@pytest.mark.parametrize(
    "params",
    [
        {"query_kernel": "rbf", "response_kernel": "linear"},
        {"query_kernel": "rbf", "response_kernel": "cosine", "self_pairs": "exclude"},
        {"query_kernel": "rbf", "response_kernel": "rbf", "response_bandwidth": 1.5},
        {"query_kernel": "delta", "response_kernel": "linear"},
    ],
)
def test_update_equals_fresh_fit(cache, params):
    first, later = _split(cache)
    space = PerspectiveSpace(**params).fit(first)
    updated = space.update(later)
    fresh = PerspectiveSpace(bandwidth_scale=space.median_query_distance_, **params).fit(cache)
    assert list(updated.models_) == list(fresh.models_)
    np.testing.assert_allclose(updated.bandwidth_grid_, fresh.bandwidth_grid_)
    for a, b in zip(updated.kernel_sums_, fresh.kernel_sums_, strict=True):
        np.testing.assert_allclose(a.numerator, b.numerator, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(a.denominator, b.denominator, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(updated.distance_matrix_, fresh.distance_matrix_, atol=1e-9)
    assert updated.query_bandwidth_ == fresh.query_bandwidth_


def test_update_refuses_to_change_existing_rows(cache):
    first, _ = _split(cache)
    space = PerspectiveSpace(query_bandwidth="median").fit(first)
    with pytest.raises(RecordsError, match="update only adds responses"):
        space.update(first.iloc[:3])


def test_increment_of_nothing_is_zero(cache):
    space = PerspectiveSpace(query_bandwidth="median").fit(cache)
    layout = space.prepared_.layout
    num, den = increment_sums(
        layout, space.features_, space.query_vectors_, 1.0, np.zeros(layout.n_responses, dtype=bool)
    )
    assert not num.any() and not den.any()


def _many_query_cache():
    # a wide cache: 30 models, each with 120 private queries around 6 task centres
    rng = np.random.default_rng(7)
    n, per_model, tasks = 30, 120, 6
    centres = rng.standard_normal((tasks, 16)) * 3
    task_of = np.tile(np.repeat(np.arange(tasks), per_model // tasks), n)
    queries = centres[task_of] + rng.standard_normal((n * per_model, 16))
    model_idx = np.repeat(np.arange(n), per_model)
    layout = kernels.ResponseLayout.build(model_idx, np.arange(n * per_model), n, n * per_model)
    ability = rng.standard_normal((n, 8))
    features = kernels.normalize_rows(
        ability[model_idx] + 0.5 * rng.standard_normal((n * per_model, 8))
    )
    return layout, features, queries


def test_nystrom_error_is_measured_and_within_tolerance():
    layout, features, queries = _many_query_cache()
    sq = kernels.squared_distances(queries)
    median = float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))
    wide = 3 * median
    engine = AffinityEngine(layout, features, queries, affinity_path="nystrom", tol=1e-3)
    approx = engine.sums(wide)
    report = engine.reports[-1]
    assert report.path == "nystrom" and report.rank < layout.n_queries
    exact = AffinityEngine(layout, features, queries, affinity_path="exact").sums(wide)
    d_exact = kernels.distance_from_affinity(kernels.affinity_from_sums(exact)[0])[0]
    d_approx = kernels.distance_from_affinity(kernels.affinity_from_sums(approx)[0])[0]
    true_error = np.abs(d_approx - d_exact).max() / d_exact.max()
    assert report.error <= 1e-3
    assert true_error <= 5e-3  # the sample-based estimate tracks the full error
    # a narrow bandwidth is far from low rank: the engine falls back to the exact path
    engine.sums(0.05 * median)
    assert engine.reports[-1].path == "exact"


def test_sample_exact_sums_match_full_exact():
    layout, features, queries = _many_query_cache()
    full = AffinityEngine(layout, features, queries, affinity_path="exact").sums(2.0)
    models = np.array([1, 4, 9])
    part = sample_exact_sums(layout, features, queries, 2.0, models)
    np.testing.assert_allclose(part.numerator, full.numerator[np.ix_(models, models)], rtol=1e-9)
    np.testing.assert_allclose(
        part.denominator, full.denominator[np.ix_(models, models)], rtol=1e-9
    )


def _distance(sums, self_pairs="include"):
    return kernels.distance_from_affinity(kernels.affinity_from_sums(sums, self_pairs)[0])[0]


@pytest.mark.parametrize("self_pairs", ["include", "exclude"])
@pytest.mark.parametrize("threshold", [1e-2, 1e-4, 1e-8])
def test_truncation_bound_holds(threshold, self_pairs):
    # drop kernel entries below a (deliberately coarse) threshold: the true change of D
    # must stay within the bound the sparse path relies on
    layout, features, queries = _many_query_cache()
    sq = kernels.squared_distances(queries)
    sigma = 0.3 * float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))
    full = kernels.rbf_from_squared(sq, sigma)
    truncated = np.where(full >= threshold, full, 0.0)
    assert (truncated == 0).any() and (truncated > 0).any()
    exact = kernel_sums(layout, features, full)
    approx = kernel_sums(layout, features, truncated)
    bound = kernels.truncation_bound(layout, features, approx, threshold, self_pairs)
    d_exact, d_approx = _distance(exact, self_pairs), _distance(approx, self_pairs)
    true_error = np.abs(d_approx - d_exact).max() / d_approx.max()
    assert true_error > 0
    assert true_error <= bound


def _shared_query_cache():
    # 20 models answering 60 of 200 queries each (about a third shared with any other)
    rng = np.random.default_rng(3)
    n, per_model, n_q = 20, 60, 200
    chosen = np.sort(np.argsort(rng.random((n, n_q)), axis=1)[:, :per_model], axis=1)
    model_idx = np.repeat(np.arange(n), per_model)
    layout = kernels.ResponseLayout.build(model_idx, chosen.ravel(), n, n_q)
    queries = rng.standard_normal((n_q, 16))
    ability = rng.standard_normal((n, 8))
    features = ability[model_idx] + 0.5 * rng.standard_normal((n * per_model, 8))
    return layout, features, queries


def test_sparse_path_at_narrow_bandwidth():
    layout, features, queries = _shared_query_cache()
    sq = kernels.squared_distances(queries)
    median = float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))
    engine = AffinityEngine(layout, features, queries)
    narrow = 0.03 * median
    approx = engine.sums(narrow)
    report = engine.reports[-1]
    assert report.path == "sparse"
    assert report.error <= 1e-7
    exact = AffinityEngine(layout, features, queries, affinity_path="exact").sums(narrow)
    true_error = np.abs(_distance(approx) - _distance(exact)).max() / _distance(exact).max()
    assert true_error <= max(report.error, 1e-12)
    # a wide bandwidth keeps nearly every entry: no sparse path
    engine.sums(median)
    assert engine.reports[-1].path == "exact"


def test_sparse_path_refused_when_bound_too_loose():
    # models with no query in common: at a narrow bandwidth the kept kernel mass of a pair
    # is tiny, so dropping entries cannot be bounded and the exact path runs
    layout, features, queries = _many_query_cache()
    engine = AffinityEngine(layout, features, queries)
    sq = kernels.squared_distances(queries)
    median = float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))
    engine.sums(0.03 * median)
    assert engine.reports[-1].path == "exact"
    assert (kernels.rbf_from_squared(sq, 0.03 * median) >= 1e-16).mean() <= 0.02  # sparse


def test_rbf_kernel_has_no_subnormal_values():
    sq = np.array([[0.0, 1.0, 1400.0, 1430.0, 1500.0, 1e6]])
    values = kernels.rbf_from_squared(sq, 1.0)
    assert not np.any((values > 0) & (values < np.finfo(float).tiny))
    assert values[0, 0] == 1.0 and values[0, 1] == np.exp(-0.5)
    assert values[0, 2] == np.exp(-700.0)  # still a normal double: kept
    np.testing.assert_array_equal(values[0, 3:], 0.0)  # exp(-715) and below: subnormal


@pytest.mark.parametrize("self_pairs", ["include", "exclude"])
@pytest.mark.parametrize("rank", [8, 24, 64])
def test_nystrom_bound_holds(rank, self_pairs):
    # the certificate the Nyström path may use instead of a sampled check must cover the
    # true change of D, also for ranks far too low to pass the tolerance
    layout, features, queries = _many_query_cache()
    sq = kernels.squared_distances(queries)
    wide = 2.0 * float(np.sqrt(np.median(sq[np.triu_indices_from(sq, 1)])))
    engine = AffinityEngine(layout, features, queries)
    factor = nystrom_factor(queries, wide, rank)
    [(numerator, denominator)] = engine.backend.sums([], [factor])[1]
    kernels.restore_self_pairs(numerator, denominator, layout, features, factor)
    approx = kernels.KernelSums.symmetrised(numerator, denominator, *engine.self_sums())
    exact = kernel_sums(layout, features, kernels.rbf_from_squared(sq, wide))
    bound = kernels.nystrom_bound(layout, features, approx, factor, self_pairs)
    d_exact, d_approx = _distance(exact, self_pairs), _distance(approx, self_pairs)
    true_error = np.abs(d_approx - d_exact).max() / d_approx.max()
    assert true_error > 0
    assert true_error <= bound
