"""The perspective-space estimator: fitted attributes, CV, MDS, input handling."""

import inspect

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from pkps_core.space import PerspectiveSpace, classical_mds, zhu_ghodsi_elbows
from pkps_core.space.affinity import AffinityEngine
from pkps_core.space.estimator import PARAMETERS, median_positive_distance
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


def test_every_parameter_has_a_check():
    assert list(inspect.signature(PerspectiveSpace).parameters) == list(PARAMETERS)


BAD_VALUES = {
    "query_kernel": ["gauss", None],
    "response_kernel": ["poly", 1],
    "query_bandwidth": [-0.1, "auto", np.nan, True],
    "bandwidth_grid": [(), (0.1, 0.0), (0.1, -1), "0.1", (np.inf,)],
    "response_bandwidth": [0, -1.0, "cv", np.nan],
    "self_pairs": ["both", True],
    "n_components": [0, 2.5, True, "8"],
    "cv_neighbors": [0, -3, 1.5],
    "query_components": [0, "elbow", 2.0],
    "response_components": [0, "median", 3.5],
    "normalize_responses": [1, "yes", None],
    "score_weight": [-0.5, np.inf, "1"],
    "bandwidth_scale": [0, -2.0, np.inf, "median"],
    "affinity_method": ["fast", None],
    "affinity_tol": [0, -1e-3, np.nan],
    "block_bytes": [0, 1.5e6, None],
    "random_state": [-1, 1.5, "seed"],
    "engine": ["ray", None],
    "client": [8786, 1.5],
}


@pytest.mark.parametrize(
    ("name", "value"), [(name, v) for name, values in BAD_VALUES.items() for v in values]
)
def test_a_bad_parameter_is_named_before_any_data_is_read(name, value):
    # fit(None) would fail on the data: the parameter's error comes first
    with pytest.raises(ValueError, match=f"^{name} must be .*, got "):
        PerspectiveSpace(**{name: value}).fit(None)


def test_every_parameter_has_bad_values_tried_and_numpy_values_pass(cache):
    assert set(BAD_VALUES) == set(PARAMETERS)
    space = PerspectiveSpace(
        query_bandwidth=np.float64(0.5),
        n_components=np.int64(3),
        cv_neighbors=np.int32(4),
        bandwidth_grid=np.array([0.3, 1.0]),
        normalize_responses=np.bool_(True),
        random_state=np.int64(2),
    ).fit(cache.records)
    assert space.embedding_.shape == (24, 3)


def _fitted_state(space: PerspectiveSpace) -> dict:
    return {k: v for k, v in vars(space).items() if k.endswith("_") and not k.startswith("_")}


def test_a_fit_that_fails_leaves_the_earlier_fit_whole(cache, monkeypatch):
    space = PerspectiveSpace(query_bandwidth="median").fit(cache.records)
    before = _fitted_state(space)
    other = make_synthetic(n_models=10, n_tasks=2, budget=2, random_state=5).records

    def broken(*args, **kwargs):
        raise RuntimeError("the cluster went away")

    monkeypatch.setattr(AffinityEngine, "grid_sums", broken)
    with pytest.raises(RuntimeError, match="went away"):
        space.fit(other, cv_exclude=["model-0"])
    after = _fitted_state(space)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before), "no attribute of the failed fit stays"
    monkeypatch.undo()
    # a successful refit replaces every fitted attribute, one another step set included
    space.target_cv_errors_ = np.zeros(3)
    space.fit(other)
    assert not hasattr(space, "target_cv_errors_")
    assert len(space.models_) == 10


def test_an_update_that_fails_leaves_the_fit_whole(cache, monkeypatch):
    records = cache.records
    first_models = sorted(records["model"].unique())[:20]
    space = PerspectiveSpace(query_kernel="delta").fit(records[records["model"].isin(first_models)])
    before = _fitted_state(space)

    def broken(*args, **kwargs):
        raise MemoryError("no room for the new pairs")

    monkeypatch.setattr(AffinityEngine, "updated_sums", broken)
    with pytest.raises(MemoryError):
        space.update(records[~records["model"].isin(first_models)])
    after = _fitted_state(space)
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


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


class _LiveClient:
    """Stands in for a distributed.Client: it submits, and it cannot be deep-copied."""

    def submit(self, *args, **kwargs):
        raise AssertionError("not used here")

    def __deepcopy__(self, memo):
        raise TypeError("cannot pickle '_asyncio.Task' object")


def test_clone_shares_a_live_client_and_copies_the_rest():
    client = _LiveClient()
    grid = [0.3, 1.0]
    space = PerspectiveSpace(engine="dask", client=client, bandwidth_grid=grid, n_components=3)
    copied = clone(space)
    assert copied.client is client
    assert copied.get_params()["bandwidth_grid"] == grid
    assert copied.bandwidth_grid is not grid, "the other parameters are copied"
    assert {k: v for k, v in copied.get_params().items() if k != "client"} == {
        k: v for k, v in space.get_params().items() if k != "client"
    }


def _numpy_median_distance(vectors: np.ndarray) -> float:
    from scipy.spatial.distance import pdist

    distances = pdist(vectors)
    positive = distances[distances > 0]
    return float(np.median(positive)) if positive.size else 1.0


@pytest.mark.parametrize("rows", [2, 3, 4, 5, 40, 41, 300])
def test_median_positive_distance_is_numpys_median_exactly(rows):
    """The median bandwidth heuristic's value, bit for bit, with even and odd counts of
    positive distances, with zeros (duplicated rows) and with ties (rounded values)."""
    rng = np.random.default_rng(rows)
    plain = rng.standard_normal((rows, 7))
    duplicated = np.repeat(plain[: max(1, rows // 3)], 3, axis=0)[:rows]
    rounded = np.round(rng.standard_normal((rows, 3)), 1)
    for vectors in (plain, duplicated, rounded):
        assert median_positive_distance(vectors) == _numpy_median_distance(vectors)


def test_median_positive_distance_without_positive_distances_or_with_nan():
    assert median_positive_distance(np.zeros((6, 4))) == 1.0
    vectors = np.random.default_rng(0).standard_normal((20, 3))
    vectors[4, 1] = np.nan
    assert median_positive_distance(vectors) == _numpy_median_distance(vectors)
