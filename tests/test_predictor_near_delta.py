"""The pass's narrowest bandwidths: the delta kernel's sums plus a few pairs of queries."""

from __future__ import annotations

import numpy as np
import pytest

from pkps_core.predictor import ReferencePredictor, near_delta
from pkps_core.predictor.core import Profile
from pkps_core.predictor.shadow_sums import budget_levels, nested_shadow_pair_sums
from pkps_core.space import kernels
from pkps_core.synthetic import make_synthetic


@pytest.fixture(scope="module")
def nested():
    records = make_synthetic(
        n_models=16, n_tasks=3, budget=12, rho=1.0, random_state=5, family_size=2
    ).records
    budgets = (1, 2, 4)
    predictor = ReferencePredictor(budgets=budgets, modes=("scored",)).fit(records, lazy=True)
    contexts = [predictor._profile_context(Profile(b, True)) for b in budgets]
    largest = contexts[-1]
    level = budget_levels([c.prepared for c in contexts], largest.shadows)
    assert level is not None
    features = kernels.normalize_rows(largest.prepared.response_vectors)
    queries = largest.prepared.query_vectors.copy()
    median = float(np.median(np.sqrt(kernels.squared_distances(queries))))
    tiny = 0.01 * median
    # near-duplicate queries: 1 of 0 at one tiny bandwidth, 5 a copy of 4 (kernel 1)
    direction = np.random.default_rng(0).normal(size=queries.shape[1])
    queries[1] = queries[0] + tiny * direction / np.linalg.norm(direction)
    queries[5] = queries[4]
    return largest, level, features, queries, [0.0, tiny, 0.5 * median, median], len(budgets)


def _sums(nested, monkeypatch, pairs_per_query):
    largest, level, features, queries, grid, n_levels = nested
    monkeypatch.setattr(near_delta, "NEAR_DELTA_PAIRS", pairs_per_query)
    calls = []
    counted = near_delta.near_delta_sums
    monkeypatch.setattr(
        "pkps_core.predictor.shadow_sums.near_delta_sums",
        lambda *a: calls.append(1) or counted(*a),
    )
    sums = nested_shadow_pair_sums(
        largest.prepared.layout,
        features,
        queries,
        grid,
        largest.shadows,
        level=level,
        n_levels=n_levels,
    )
    return sums, len(calls)


def test_a_near_delta_bandwidth_sums_what_the_dense_product_sums(nested, monkeypatch):
    _, _, _, queries, grid, _ = nested
    kernel = kernels.rbf_from_squared(kernels.squared_distances(queries), grid[1])
    pairs, weights = near_delta.near_delta_pairs(kernel)
    off = pairs[:, 0] != pairs[:, 1]
    assert {(0, 1), (1, 0), (4, 5), (5, 4)} <= {tuple(p) for p in pairs[off]}
    assert weights[off].max() == pytest.approx(1.0) and weights[off].min() > 0.5
    assert (
        near_delta.near_delta_pairs(
            kernels.rbf_from_squared(kernels.squared_distances(queries), grid[3])
        )
        is None
    )  # a wide kernel is dense
    fast, used = _sums(nested, monkeypatch, near_delta.NEAR_DELTA_PAIRS)
    dense, unused = _sums(nested, monkeypatch, -1)  # every bandwidth through the products
    assert (used, unused) == (1, 0)
    for level_fast, level_dense in zip(fast, dense, strict=True):
        for (num, den), (num0, den0) in zip(level_fast, level_dense, strict=True):
            np.testing.assert_allclose(num, num0, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(den, den0, rtol=1e-10, atol=1e-12)
        # the pairs matter: the tiny bandwidth's sums are not the delta's
        assert np.abs(level_fast[1][1] - level_fast[0][1]).max() > 0.5
