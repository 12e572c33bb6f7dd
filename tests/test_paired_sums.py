"""The paired pass of the RBF response kernel (paired_sums.py) gives the pairwise path's
sums, for every query kernel of a grid at once, with and without empty cells; on an unpaired
cache, the grid's one pairwise pass (pairwise.py) gives each kernel's own numbers exactly."""

import numpy as np
import pytest

from pkps_core.space import PerspectiveSpace
from pkps_core.space import paired_sums as ps
from pkps_core.space.kernels import ResponseLayout
from pkps_core.space.pairwise import pairwise_grid_sums, pairwise_sums
from pkps_core.space.sums import DEFAULT_BLOCK_BYTES


def _cache(missing: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    models, queries, p = 7, 30, 5
    model_idx = np.repeat(np.arange(models), queries)
    query_idx = np.tile(rng.permutation(queries), models)
    keep = np.ones(len(model_idx), dtype=bool)
    keep[rng.choice(len(keep), size=missing, replace=False)] = False
    layout = ResponseLayout.build(model_idx[keep], query_idx[keep], models, queries)
    features = rng.normal(size=(keep.sum(), p))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    u = rng.normal(size=(queries, 3))
    sqdist = ((u[:, None] - u[None]) ** 2).sum(-1)
    return layout, features, sqdist


@pytest.mark.parametrize("missing", [0, 9])
def test_every_kernel_of_the_grid_matches_the_pairwise_path(missing):
    layout, features, sqdist = _cache(missing)
    queries, cell = ps.response_grid(layout)
    kernels = [None, np.exp(-sqdist / 2), np.exp(-sqdist / 0.2)]
    blocks = [None if k is None else k[np.ix_(queries, queries)] for k in kernels]
    # a tiny block budget: one row at a time, so the chunking is exercised
    got = ps.paired_sums(7, len(queries), cell, features, blocks, "rbf", 0.9, 4000)
    for kernel, (numerator, denominator) in zip(kernels, got, strict=True):
        expected = pairwise_sums(layout, features, kernel, "rbf", 0.9, DEFAULT_BLOCK_BYTES)
        np.testing.assert_allclose(numerator, expected[0], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(denominator, expected[1], rtol=1e-12, atol=1e-12)
    delta_only = ps.paired_sums(7, len(queries), cell, features, [None], "rbf", 0.9, 4000)[0]
    expected = pairwise_sums(layout, features, None, "rbf", 0.9, DEFAULT_BLOCK_BYTES)
    np.testing.assert_allclose(delta_only[0], expected[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(delta_only[1], expected[1])


def test_a_sparse_cache_is_not_a_grid():
    layout, _, _ = _cache(0)
    sparse = ResponseLayout.build(np.arange(6), np.arange(6), 6, 6)  # nobody shares a query
    assert ps.response_grid(sparse) is None
    assert ps.response_grid(layout) is not None


def test_a_fit_on_a_paired_cache_takes_the_paired_pass_and_keeps_its_numbers(monkeypatch):
    from pkps_core.space.prepare import prepare_cache
    from pkps_core.synthetic import make_synthetic

    cache = make_synthetic(n_models=10, n_tasks=3, budget=8, rho=1.0, p_task=1.0, random_state=4)
    prepared = prepare_cache(cache.records)
    assert ps.response_grid(prepared.layout) is not None
    settings = dict(response_kernel="rbf", n_components=3)
    paired = PerspectiveSpace(**settings).fit(prepared)
    monkeypatch.setattr(ps, "MIN_GRID_DENSITY", 2.0)  # no cache is a grid: the pairwise path
    pairwise = PerspectiveSpace(**settings).fit(prepared)
    for a, b in zip(paired.kernel_sums_, pairwise.kernel_sums_, strict=True):
        np.testing.assert_allclose(a.numerator, b.numerator, rtol=1e-10)
    assert paired.query_bandwidth_ == pairwise.query_bandwidth_


def test_a_grid_in_one_pairwise_pass_gives_each_kernels_own_pass_exactly():
    layout, features, sqdist = _cache(40)  # 40 of the 210 cells empty: not a grid
    kernels = [None, np.exp(-sqdist / 2), np.exp(-sqdist / 0.2)]
    for budget in (4000, DEFAULT_BLOCK_BYTES):  # one row at a time, and all rows at once
        got = pairwise_grid_sums(layout, features, kernels, "rbf", 0.9, budget)
        assert len(got) == len(kernels)
        for kernel, (numerator, denominator) in zip(kernels, got, strict=True):
            expected = pairwise_sums(layout, features, kernel, "rbf", 0.9, budget)
            assert np.array_equal(numerator, expected[0])
            assert np.array_equal(denominator, expected[1])
    # the kernels differ, so a mix-up between them could not pass
    assert not np.allclose(got[1][0], got[2][0])


def test_kernels_given_as_bandwidths_are_made_per_block_with_the_same_numbers():
    # an RBF kernel given by its bandwidth is made block by block from the pairs' query
    # distances (unpaired caches, ps.unpaired_grid_sums): the same entries as the whole
    # kernel's, so the same sums, exactly
    from pkps_core.space.kernels import rbf_from_squared

    layout, features, sqdist = _cache(40)
    bandwidths = [1.0, 0.3]
    whole = [None, *(rbf_from_squared(sqdist, b) for b in bandwidths)]
    for budget in (4000, DEFAULT_BLOCK_BYTES):
        expected = pairwise_grid_sums(layout, features, whole, "rbf", 0.9, budget)
        got = pairwise_grid_sums(
            layout, features, [None, *bandwidths], "rbf", 0.9, budget, query_sqdist=sqdist
        )
        for (n, z), (n_expected, z_expected) in zip(got, expected, strict=True):
            assert np.array_equal(n, n_expected)
            assert np.array_equal(z, z_expected)
    assert not np.allclose(got[1][0], got[2][0])


def test_an_unpaired_fit_sums_its_grid_in_one_pass_with_the_same_numbers(monkeypatch):
    from pkps_core.space import pairwise
    from pkps_core.synthetic import make_synthetic

    cache = make_synthetic(n_models=12, n_tasks=3, budget=4, rho=0.0, random_state=2).records
    settings = dict(response_kernel="rbf", n_components=3)
    calls = []
    one_pass = pairwise.pairwise_grid_sums

    def spy(layout, features, kernels, *args, **kwargs):
        calls.append(len(kernels))
        return one_pass(layout, features, kernels, *args, **kwargs)

    monkeypatch.setattr(ps, "pairwise_grid_sums", spy)
    together = PerspectiveSpace(**settings).fit(cache)
    assert calls == [len(together.bandwidth_grid_)] and calls[0] > 2
    monkeypatch.setattr(ps, "PAIRED_KERNELS_MAX_BYTES", 0)  # one pass per bandwidth
    apart = PerspectiveSpace(**settings).fit(cache)
    assert calls == [len(together.bandwidth_grid_)]
    for a, b in zip(together.kernel_sums_, apart.kernel_sums_, strict=True):
        assert np.array_equal(a.numerator, b.numerator)
        assert np.array_equal(a.denominator, b.denominator)
    assert np.array_equal(together.distance_matrix_, apart.distance_matrix_)
