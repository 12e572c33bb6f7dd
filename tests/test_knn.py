"""The vectorised KNN equals scikit-learn's KNeighborsRegressor(weights='distance')."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.neighbors import KNeighborsRegressor

from pkps_core.knn import knn_grid_predictions, weighted_knn


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 15), k=st.integers(1, 8))
def test_weighted_knn_matches_sklearn(seed, n, k):
    rng = np.random.default_rng(seed)
    coords = rng.standard_normal((n, 3))
    coords[rng.integers(n)] = coords[0]  # an exact duplicate exercises zero distances
    values = rng.random(n)
    query = 0
    allowed = np.ones(n, dtype=bool)
    allowed[query] = False
    distances = np.linalg.norm(coords[query] - coords, axis=1)
    got = weighted_knn(distances[None, :], values, allowed[None, :], k)[0]
    refs = np.flatnonzero(allowed)
    if refs.size == 0:
        assert np.isnan(got)
        return
    model = KNeighborsRegressor(n_neighbors=min(k, refs.size), weights="distance")
    model.fit(coords[refs], values[refs])
    np.testing.assert_allclose(got, model.predict(coords[[query]])[0], rtol=1e-12)


def test_family_holdout_never_uses_siblings():
    coords = np.array([[0.0], [0.01], [5.0], [6.0]])
    models = np.array(["a/1", "a/2", "b/1", "c/1"])
    families = np.array(["a", "a", "b", "c"])
    refs = np.array([[0.1], [0.9], [0.5], [0.7]])
    by_model = knn_grid_predictions(
        coords, models, families, np.array(["t"]), refs, holdout="model", k=1
    )
    by_family = knn_grid_predictions(
        coords, models, families, np.array(["t"]), refs, holdout="family", k=1
    )
    assert by_model[0, 0] == 0.9  # nearest other model is its sibling
    assert by_family[0, 0] == 0.5  # sibling excluded: nearest other family


def test_targets_never_serve_as_references():
    coords = np.array([[0.0], [1.0], [10.0]])
    models = np.array(["x", "y", "z"])
    refs = np.array([[0.2], [0.4], [0.9]])
    pred = knn_grid_predictions(
        coords, models, models, np.array(["t"]), refs, k=1, targets=np.array([False, True, False])
    )
    assert pred[0, 0] == 0.9  # y is a target: x falls back to z
    assert pred[1, 0] == 0.2  # the target itself is predicted from the others
