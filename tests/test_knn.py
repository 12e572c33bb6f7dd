"""The vectorised KNN equals scikit-learn's KNeighborsRegressor(weights='distance')."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.neighbors import KNeighborsRegressor

from pkps_core.methods import allowed_references
from pkps_core.space.knn import knn_grid_predictions, weighted_knn


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
    # ball_tree computes distances directly, as the test does (brute force uses the
    # |a|² + |b|² − 2ab expansion, which puts exact duplicates at ~1e-8 instead of 0)
    model = KNeighborsRegressor(
        n_neighbors=min(k, refs.size), weights="distance", algorithm="ball_tree"
    )
    model.fit(coords[refs], values[refs])
    np.testing.assert_allclose(got, model.predict(coords[[query]])[0], rtol=1e-12)


def test_family_holdout_never_uses_siblings():
    coords = np.array([[0.0], [0.01], [5.0], [6.0]])
    families = np.array(["a", "a", "b", "c"])
    refs = np.array([[0.1], [0.9], [0.5], [0.7]])
    by_model = knn_grid_predictions(coords, refs, allowed_references(families, "model"), k=1)
    by_family = knn_grid_predictions(coords, refs, allowed_references(families, "family"), k=1)
    assert by_model[0, 0] == 0.9  # nearest other model is its sibling
    assert by_family[0, 0] == 0.5  # sibling excluded: nearest other family


def test_targets_never_serve_as_references():
    coords = np.array([[0.0], [1.0], [10.0]])
    models = np.array(["x", "y", "z"])
    refs = np.array([[0.2], [0.4], [0.9]])
    allowed = allowed_references(models, "model", targets=np.array([False, True, False]))
    pred = knn_grid_predictions(coords, refs, allowed, k=1)
    assert pred[0, 0] == 0.9  # y is a target: x falls back to z
    assert pred[1, 0] == 0.2  # the target itself is predicted from the others
