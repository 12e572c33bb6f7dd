"""The perspective-space estimator: fitted attributes, CV, MDS, input handling."""

import numpy as np
import pandas as pd
import pytest

from pkps_core.space import PerspectiveSpace, classical_mds, zhu_ghodsi_elbows
from pkps_core.synthetic import make_synthetic


@pytest.fixture(scope="module")
def cache():
    return make_synthetic(n_models=24, n_tasks=4, budget=3, random_state=0)


def test_cv_fit_attributes(cache):
    space = PerspectiveSpace().fit(cache.records)
    n = 24
    assert space.distance_matrix_.shape == (n, n)
    assert np.allclose(space.distance_matrix_, space.distance_matrix_.T)
    assert np.all(np.diag(space.distance_matrix_) == 0)
    assert space.embedding_.shape == (n, 8)
    assert space.bandwidth_grid_[0] == 0.0 and len(space.bandwidth_grid_) == 6
    np.testing.assert_allclose(
        space.bandwidth_grid_[1:] / space.median_query_distance_, [0.03, 0.1, 0.3, 1, 3]
    )
    assert space.cv_errors_.shape == (6,)
    # rho = 0: DKPS has no shared query, so every pair is imputed at the delta limit, and
    # only the bandwidths that define every pair are candidates
    np.testing.assert_array_equal(space.undefined_pairs_grid_, [n * (n - 1) // 2, 0, 0, 0, 0, 0])
    chosen = int(np.flatnonzero(space.bandwidth_grid_ == space.query_bandwidth_)[0])
    assert space.cv_errors_[chosen] == np.nanmin(space.cv_errors_[1:])
    assert space.query_bandwidth_ > 0


def test_a_bandwidth_that_imputes_pairs_is_not_chosen_however_low_its_cv_error(cache, monkeypatch):
    """The delta limit's CV error on a cache where it imputes every pair is noise (on
    AlpacaEval at m = 1 it moved with the BLAS thread count and won in some seeds, taking
    PKPS's Table 1 error from 0.046 to 0.085 in one). Here it is made the lowest on purpose:
    the old rule (the grid's minimum) chose it; the eligible minimum is chosen instead."""
    from pkps_core.space import estimator

    errors = iter([0.01, 0.5, 0.4, 0.3, 0.2, 0.6])
    monkeypatch.setattr(estimator, "loo_knn_error", lambda *args, **kwargs: next(errors))
    space = PerspectiveSpace().fit(cache.records)
    np.testing.assert_allclose(space.cv_errors_, [0.01, 0.5, 0.4, 0.3, 0.2, 0.6])
    assert space.query_bandwidth_ == space.bandwidth_grid_[4]
    np.testing.assert_allclose(
        space.distance_matrix_,
        space.select_bandwidth(space.bandwidth_grid_[4]).distance_matrix_,
    )


def test_choose_bandwidth_rule():
    from pkps_core.space.knn import choose_bandwidth, eligible_bandwidths

    assert eligible_bandwidths([5, 0, 0]).tolist() == [False, True, True]
    assert eligible_bandwidths([3, 3]).tolist() == [True, True]  # none defines more
    assert choose_bandwidth([0.01, 0.05, 0.03], [10, 0, 0]) == 2
    assert choose_bandwidth([0.01, 0.05, 0.03], [0, 0, 0]) == 0
    assert choose_bandwidth([0.01, 0.02, 0.03], [10, 2, 2]) == 1  # fewest, not zero
    # no eligible bandwidth has a finite error: the finite ones compete
    assert choose_bandwidth([0.04, np.nan, 0.03], [1, 0, 1]) == 2
    assert choose_bandwidth([np.nan, np.nan], [0, 0]) == 0


def test_cv_choice_does_not_depend_on_blas_threads(cache):
    from threadpoolctl import threadpool_limits

    fits = []
    for threads in (1, 2):
        with threadpool_limits(threads):
            fits.append(PerspectiveSpace().fit(cache.records))
    assert fits[0].query_bandwidth_ == fits[1].query_bandwidth_
    np.testing.assert_allclose(fits[0].distance_matrix_, fits[1].distance_matrix_, atol=1e-10)


def test_delta_estimator_on_rho0_has_no_defined_pairs(cache):
    dkps = PerspectiveSpace(query_kernel="delta").fit(cache.records)
    assert dkps.n_undefined_pairs_ == 24 * 23 // 2
    assert dkps.query_bandwidth_ == 0.0


def test_fixed_bandwidth_and_median(cache):
    median = PerspectiveSpace(query_bandwidth="median").fit(cache.records)
    fixed = PerspectiveSpace(query_bandwidth=median.median_query_distance_).fit(cache.records)
    np.testing.assert_allclose(median.distance_matrix_, fixed.distance_matrix_)


def test_fit_is_deterministic(cache):
    a = PerspectiveSpace(query_bandwidth="median").fit(cache.records).embedding_
    b = PerspectiveSpace(query_bandwidth="median").fit(cache.records).embedding_
    np.testing.assert_array_equal(a, b)


def test_mds_recovers_euclidean_configuration():
    rng = np.random.default_rng(0)
    points = rng.standard_normal((10, 3))
    distance = np.linalg.norm(points[:, None] - points[None], axis=2)
    embedding, eigenvalues = classical_mds(distance, 8)
    recovered = np.linalg.norm(embedding[:, None] - embedding[None], axis=2)
    np.testing.assert_allclose(recovered, distance, atol=1e-8)
    assert np.all(eigenvalues[3:] < 1e-8)  # only three real dimensions
    assert np.all(np.isfinite(embedding))


def test_score_only_cache_uses_delta():
    rng = np.random.default_rng(1)
    rows = [
        (f"m{i}", "t", f"q{j}", float(rng.random() < 0.3 + 0.05 * i))
        for i in range(8)
        for j in range(20)
    ]
    frame = pd.DataFrame(rows, columns=["model", "task", "query_id", "score"])
    with pytest.raises(ValueError, match="RBF query kernel needs query text or query embeddings"):
        PerspectiveSpace().fit(frame)
    space = PerspectiveSpace(query_kernel="delta").fit(frame)
    assert space.representation_ == "score"
    # 1-d score representation, paired queries: D is the RMS difference of score vectors
    scores = frame.pivot(index="model", columns="query_id", values="score").to_numpy()
    expected = np.linalg.norm(scores[0] - scores[1]) / np.sqrt(20)
    assert space.distance_matrix_[0, 1] == pytest.approx(expected, abs=1e-12)


def test_bad_parameters_are_explained(cache):
    with pytest.raises(ValueError, match="query_kernel must be one of"):
        PerspectiveSpace(query_kernel="gauss").fit(cache.records)
    with pytest.raises(ValueError, match="query_bandwidth must be"):
        PerspectiveSpace(query_bandwidth=-1).fit(cache.records)


def test_zhu_ghodsi_finds_the_gaps():
    scree = np.array([10.0, 9.5, 9.0, 3.0, 2.8, 2.7, 0.2, 0.1, 0.1, 0.05])
    assert zhu_ghodsi_elbows(scree, n_elbows=2) == [3, 6]


def test_pca_options_reduce_dimensions(cache):
    space = PerspectiveSpace(
        query_components=5, response_components="elbow", query_bandwidth="median"
    ).fit(cache.records)
    assert np.all(np.isfinite(space.distance_matrix_))


def test_score_weight_changes_distances(cache):
    plain = PerspectiveSpace(query_bandwidth="median").fit(cache.records)
    weighted = PerspectiveSpace(query_bandwidth="median", score_weight=1.0).fit(cache.records)
    assert not np.allclose(plain.distance_matrix_, weighted.distance_matrix_)


def test_select_bandwidth_equals_a_fixed_bandwidth_fit(cache):
    cv = PerspectiveSpace().fit(cache.records)
    sigma = cv.bandwidth_grid_[4]  # 1 × median
    selected = cv.select_bandwidth(sigma)
    fixed = PerspectiveSpace(query_bandwidth=sigma).fit(cache.records)
    np.testing.assert_allclose(selected.distance_matrix_, fixed.distance_matrix_, atol=1e-12)
    np.testing.assert_allclose(selected.embedding_, fixed.embedding_, atol=1e-10)
    assert selected.query_bandwidth_ == sigma
    assert cv.query_bandwidth_ != sigma or cv is not selected  # the original is untouched
    with pytest.raises(ValueError, match="not in this fit's grid"):
        cv.select_bandwidth(sigma * 1.5)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"query_bandwidth": "median"},
        {"query_kernel": "delta"},
        {"bandwidth_scale": 2.0},
        {"query_bandwidth": 0.7},
    ],
)
def test_the_planned_grid_is_what_a_fit_tries(params):
    # PerspectiveSpace.planned_grid (the fitted predictor starts its shadow sums with it
    # before the references' fit ends) gives the features and bandwidths fit() uses
    from pkps_core.space import prepare_cache

    records = make_synthetic(n_models=10, n_tasks=3, budget=8, rho=0.5, random_state=2).records
    prepared = prepare_cache(records)
    space = PerspectiveSpace(**params)
    features, grid = space.planned_grid(prepared)
    assert not hasattr(space, "median_query_distance_")  # planning fits nothing
    fitted = PerspectiveSpace(**params).fit(prepared)
    np.testing.assert_array_equal(grid, fitted.bandwidth_grid_)
    np.testing.assert_array_equal(features, fitted.features_)
