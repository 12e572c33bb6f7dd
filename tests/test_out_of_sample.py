"""Out-of-sample classical MDS (Trosset & Priebe 2008) and its use as the KNN's placement."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from pkps_core.predict import build_context
from pkps_core.space.estimator import classical_mds
from pkps_core.space.out_of_sample import (
    out_of_sample_embedding,
    place_by_allowed,
    place_out_of_sample,
)
from pkps_core.synthetic import make_synthetic


def test_euclidean_points_are_placed_exactly():
    points = np.random.default_rng(0).standard_normal((30, 3))
    distance = cdist(points, points)
    inside = np.arange(30) < 20
    embedding = out_of_sample_embedding(distance, inside, 3)
    np.testing.assert_allclose(cdist(embedding, embedding), distance, atol=1e-9)


def test_inside_models_keep_their_own_mds_and_outside_ones_do_not_move_them():
    rng = np.random.default_rng(1)
    points = rng.standard_normal((25, 5))
    distance = cdist(points, points) + 0.05 * rng.random((25, 25))  # not Euclidean
    distance = 0.5 * (distance + distance.T)
    np.fill_diagonal(distance, 0.0)
    inside = np.arange(25) < 18
    embedding = out_of_sample_embedding(distance, inside, 3)
    alone, _ = classical_mds(distance[np.ix_(inside, inside)], 3)
    np.testing.assert_allclose(embedding[inside], alone)
    moved = distance.copy()
    moved[~inside] *= 3.0
    moved[:, ~inside] *= 3.0
    np.testing.assert_allclose(out_of_sample_embedding(moved, inside, 3)[inside], alone)


def test_too_few_inside_models_raise():
    with pytest.raises(ValueError, match="at least two"):
        out_of_sample_embedding(np.zeros((3, 3)), np.array([True, False, False]), 2)


def test_context_places_targets_out_of_sample_only_when_asked():
    cache = make_synthetic(n_models=12, n_tasks=2, budget=6, rho=1.0, random_state=2)
    targets = ["fam0/model-00", "fam0/model-01"]
    params = {"response_kernel": "rbf", "query_bandwidth": "median"}
    joint = build_context(cache.records, holdout="family", targets=targets, space_params=params)
    oos = build_context(
        cache.records,
        holdout="family",
        targets=targets,
        space_params=params,
        neighbours="out-of-sample",
    )
    space = oos.pkps
    np.testing.assert_array_equal(joint.coordinates(joint.pkps), joint.pkps.embedding_)
    placed = oos.coordinates(space)
    inside = ~oos.targets
    alone, _ = classical_mds(space.distance_matrix_[np.ix_(inside, inside)], placed.shape[1])
    np.testing.assert_allclose(placed[inside], alone)
    assert not np.allclose(placed, space.embedding_)
    without = build_context(cache.records, space_params=params, neighbours="out-of-sample")
    np.testing.assert_array_equal(without.coordinates(without.pkps), without.pkps.embedding_)
    with pytest.raises(ValueError, match="neighbours"):
        build_context(cache.records, neighbours="joint")


def test_placing_by_every_inside_model_is_gowers_rule():
    rng = np.random.default_rng(3)
    points = rng.standard_normal((30, 6))
    distance = cdist(points, points) + 0.1 * rng.random((30, 30))  # not Euclidean
    squared = (0.5 * (distance + distance.T)) ** 2
    inside = np.arange(30) < 22
    within = squared[np.ix_(inside, inside)]
    coordinates, eigenvalues = classical_mds(np.sqrt(within), 4)
    gower = place_out_of_sample(squared[~inside][:, inside], within, coordinates, eigenvalues)
    every = np.ones((8, 22), dtype=bool)
    by_allowed = place_by_allowed(squared[~inside][:, inside], within, coordinates, every)
    np.testing.assert_allclose(by_allowed, gower, atol=1e-10)


def test_a_model_is_placed_exactly_by_any_few_models_it_allows():
    rng = np.random.default_rng(4)
    points = rng.standard_normal((26, 3))
    squared = cdist(points, points) ** 2
    inside = np.arange(26) < 20
    within = squared[np.ix_(inside, inside)]
    coordinates, _ = classical_mds(np.sqrt(within), 3)
    allowed = rng.random((6, 20)) < 0.4  # a different handful of references per model
    allowed[:, :5] = True  # at least five: enough to fix a point in three dimensions
    placed = place_by_allowed(squared[~inside][:, inside], within, coordinates, allowed)
    # the distances to every inside model come out right, the disallowed ones included
    np.testing.assert_allclose(
        cdist(placed, coordinates), np.sqrt(squared[~inside][:, inside]), atol=1e-8
    )
    # and the disallowed models' distances do not move it
    moved = squared.copy()
    outside = np.flatnonzero(~inside)
    for row, model in enumerate(outside):
        moved[model, np.flatnonzero(~allowed[row])] *= 5.0
    again = place_by_allowed(moved[~inside][:, inside], within, coordinates, allowed)
    np.testing.assert_allclose(again, placed, atol=1e-8)
