"""The RBF response kernel through Nyström features of the responses: its bound is
rigorous, its self pairs exact, and a fit reports what it did (response_nystrom.py)."""

import numpy as np
import pytest

from pkps_core.space import PerspectiveSpace, kernels
from pkps_core.space import response_nystrom as rn
from pkps_core.space.prepare import prepare_cache
from pkps_core.space.sums import FactorizedSums, kernel_sums
from pkps_core.synthetic import make_synthetic


@pytest.fixture(scope="module")
def prepared():
    cache = make_synthetic(n_models=24, n_tasks=6, budget=10, rho=0.3, random_state=3)
    return prepare_cache(cache.records)


def _arrays(prepared):
    features = kernels.normalize_rows(prepared.response_vectors)
    distances = kernels.squared_distances(features[::7])
    bandwidth = float(np.sqrt(np.median(distances[distances > 0])))
    return prepared.layout, features, prepared.query_vectors, bandwidth


def _distance(sums, self_pairs="include"):
    return kernels.distance_from_affinity(kernels.affinity_from_sums(sums, self_pairs)[0])[0]


@pytest.mark.parametrize("self_pairs", ["include", "exclude"])
def test_bound_covers_the_true_error_and_self_pairs_are_exact(prepared, self_pairs):
    layout, features, queries, response_bw = _arrays(prepared)
    query_kernel = kernels.query_kernel_matrix(kernels.squared_distances(queries), 1.0)
    exact = kernel_sums(layout, features, query_kernel, "rbf", response_bw, method="pairwise")
    for rank in (16, 64):
        factor, residual = rn.response_factor(features, response_bw, rank, random_state=1)
        assert residual.min() >= 0 and residual.max() <= 1 + 1e-12
        approx = rn.exact_self_pairs(
            kernels.KernelSums(
                *FactorizedSums(layout, factor)(query_kernel),
                *kernels.self_sums(layout, factor, "linear"),
            ),
            layout,
            residual,
        )
        # k_R(x, x) = 1 restored: the self sums are those of the exact kernel
        np.testing.assert_allclose(approx.self_numerator, exact.self_numerator, rtol=1e-12)
        true_error = np.abs(approx.numerator - exact.numerator)
        bound = rn.numerator_error(layout, residual)
        assert np.all(true_error <= bound + 1e-9)
        d_exact, d_approx = _distance(exact, self_pairs), _distance(approx, self_pairs)
        actual = np.abs(d_approx - d_exact).max() / d_exact.max()
        reported = kernels.distance_bound(approx, bound, np.zeros_like(bound), self_pairs)
        assert 0 < actual <= reported


def test_every_landmark_reproduces_the_exact_sums(prepared):
    layout, features, queries, response_bw = _arrays(prepared)
    query_kernel = kernels.query_kernel_matrix(kernels.squared_distances(queries), 0.5)
    exact = kernel_sums(layout, features, query_kernel, "rbf", response_bw, method="pairwise")
    factor, residual = rn.response_factor(features, response_bw, len(features))
    numerator, _ = FactorizedSums(layout, factor)(query_kernel)
    numerator = rn.exact_self_pairs(
        kernels.KernelSums(
            numerator, exact.denominator, exact.self_numerator, exact.self_denominator
        ),
        layout,
        residual,
    ).numerator
    np.testing.assert_allclose(0.5 * (numerator + numerator.T), exact.numerator, rtol=1e-6)


def test_fit_reports_the_response_path_and_stays_within_its_error(prepared, monkeypatch):
    monkeypatch.setattr(rn, "RESPONSE_NYSTROM_MIN", 1000)
    monkeypatch.setattr(rn, "RESPONSE_RANKS", (64, 128, 256))
    monkeypatch.setattr(rn, "worth_trying", lambda layout, p, rank: True)
    settings = dict(response_kernel="rbf", n_components=3, affinity_tol=1e-2)
    fast = PerspectiveSpace(**settings, affinity_method="nystrom").fit(prepared)
    exact = PerspectiveSpace(**settings, affinity_method="exact").fit(prepared)
    default = PerspectiveSpace(**settings).fit(prepared)  # "auto": exact (opt-in only)
    assert {r.path for r in default.affinity_reports_} == {"exact"}
    assert all(r.path == "exact" for r in exact.affinity_reports_)
    taken = [r for r in fast.affinity_reports_ if "response-nystrom" in r.path]
    assert taken  # the approximation served at least one bandwidth
    for report, a, b in zip(
        fast.affinity_reports_, fast.kernel_sums_, exact.kernel_sums_, strict=True
    ):
        d_fast, d_exact = _distance(a), _distance(b)
        actual = np.abs(d_fast - d_exact).max() / d_exact.max()
        if report.error_kind == "bound":
            assert actual <= report.error + 1e-12
        assert actual <= 3 * fast.affinity_tol  # measured on sampled models: same order
    assert fast.query_bandwidth_ == exact.query_bandwidth_


def test_small_caches_and_the_exact_method_sum_every_pair(prepared):
    space = PerspectiveSpace(response_kernel="rbf", n_components=3).fit(prepared)
    assert prepared.layout.n_responses < rn.RESPONSE_NYSTROM_MIN
    assert {r.path for r in space.affinity_reports_} <= {"exact"}


def test_the_approximation_is_tried_only_where_it_is_cheaper():
    def layout(models, queries, per_model):
        return kernels.ResponseLayout.build(
            np.repeat(np.arange(models), per_model),
            np.tile(np.arange(per_model) % queries, models),
            models,
            queries,
        )

    alpaca = layout(40, 805, 805)  # paired: few unique queries, many responses
    spread = layout(45, 2048, 512)  # unpaired: four times the queries per response
    assert rn.worth_trying(alpaca, 49, 512)
    assert not rn.worth_trying(alpaca, 49, 4096)
    assert not rn.worth_trying(spread, 49, 2048)
