"""New models placed into a fitted perspective space: their kernel sums, D and coordinates.

Only the pairs of responses that involve a new model are summed
(:func:`~pkps_core.space.increments.increment_sums`, cost O(responses · p) per new model);
its distances follow from Eq. (1) with the references' stored sums, and its coordinates
from Gower's out-of-sample rule into the stored MDS (Eq. 2), which does not move anyone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from pkps_core.methods import PredictionContext
from pkps_core.predictor.direct_pairs import direct_pair_sums
from pkps_core.predictor.shadow_sums import shadow_pair_sums
from pkps_core.space import kernels
from pkps_core.space.increments import increment_sums
from pkps_core.space.out_of_sample import place_by_allowed, place_out_of_sample


@dataclass
class PlacedSpace:
    """The part of a fitted :class:`~pkps_core.space.PerspectiveSpace` the methods read:
    models, distances and MDS coordinates (new models placed out of sample)."""

    models_: np.ndarray
    families_: np.ndarray
    distance_matrix_: np.ndarray
    embedding_: np.ndarray
    eigenvalues_: np.ndarray
    query_bandwidth_: float
    response_kernel: str = "linear"
    response_bandwidth_: float = 1.0
    # the models whose MDS the coordinates are (the others placed out of sample into it);
    # None: every model's (the joint MDS, Eq. 2)
    inside_: np.ndarray | None = None


def placed_coordinates(context: PredictionContext, space) -> tuple:
    """The coordinates the KNN of ``context`` reads in the fitted ``space``, the
    eigenvalues of their MDS and the models inside it (None: all): the joint MDS, or with
    ``neighbours="out-of-sample"`` the references' MDS with every shadow placed out of
    sample (:meth:`PredictionContext.coordinates`), which new models then extend."""
    inside = context.mds_inside()
    if inside is None:
        return space.embedding_, space.eigenvalues_, None
    embedding, eigenvalues = context.out_of_sample_fit(space)  # as the members read it
    return embedding, eigenvalues, inside


def nearest_allowed(distances: np.ndarray, references: np.ndarray, allowed: np.ndarray):
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    return np.where(usable, distances[:, :, None], np.inf).min(axis=1)


def placement_features(prepared) -> np.ndarray:
    """The response features every space of a placement reads (unit rows of embeddings),
    made once per placement."""
    features = prepared.response_vectors
    if prepared.representation == "embedding":
        features = kernels.normalize_rows(features)
    return features


def new_model_pairs(prepared, spaces: dict, is_new: np.ndarray, features: np.ndarray) -> dict:
    """The new models' pair sums with every fitted model in each space whose response
    kernel factors through the queries (linear, cosine), in one pass over the queries:
    ``{space name: (numerator, denominator)}``, each (n_models, n_new); ``features``
    from :func:`placement_features`."""
    names = [name for name, space in spaces.items() if space.response_kernel != "rbf"]
    if not names:
        return {}
    queries = prepared.query_vectors
    bandwidths = [
        float(spaces[name].query_bandwidth_) if queries is not None else 0.0 for name in names
    ]
    layout = prepared.layout
    # a few new responses: straight from their products with the fitted ones (no per-query
    # fill of every reference); many: the pass that factors through the queries
    pairs = direct_pair_sums(layout, features, queries, bandwidths, is_new, ~is_new)
    if pairs is None:
        pairs = shadow_pair_sums(layout, features, queries, bandwidths, is_new, rows=~is_new)
    return dict(zip(names, pairs, strict=True))


def place(
    fitted: PlacedSpace,
    sums: kernels.KernelSums,
    prepared,
    index: np.ndarray,
    is_new: np.ndarray,
    base: PredictionContext,
    features: np.ndarray,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    self_sums: tuple[np.ndarray, np.ndarray] | None = None,
    allowed: np.ndarray | None = None,
) -> PlacedSpace:
    """``fitted`` with the new models' rows: their kernel sums against everyone (Eq. 1,
    only the pairs with their responses; ``pairs`` from :func:`new_model_pairs` where
    computed), D from the stored sums, MDS out of sample. ``features``: from
    :func:`placement_features`; ``self_sums``: :func:`~pkps_core.space.kernels.self_sums`
    of them with the space's response kernel, where made already; ``allowed`` (n_models,
    n_models), where the shadows were placed by the references they allow: the new models
    are placed the same way (:func:`~pkps_core.space.out_of_sample.place_by_allowed`)."""
    n = len(prepared.models)
    kernel = fitted.response_kernel
    queries = prepared.query_vectors
    bandwidth = float(fitted.query_bandwidth_) if queries is not None else 0.0
    if pairs is not None:
        numerator, denominator = np.zeros((n, n)), np.zeros((n, n))
        new = np.flatnonzero(is_new)
        for matrix, with_new in zip((numerator, denominator), pairs, strict=True):
            matrix[:, new] = with_new
            matrix[new, :] = with_new.T
    else:
        numerator, denominator = increment_sums(
            prepared.layout,
            features,
            queries,
            bandwidth,
            is_new[prepared.layout.model_idx],
            response_kernel=kernel,
            response_bandwidth=fitted.response_bandwidth_,
        )
    numerator[np.ix_(index, index)] += sums.numerator
    denominator[np.ix_(index, index)] += sums.denominator
    if self_sums is None:
        self_sums = kernels.self_sums(prepared.layout, features, kernel)
    self_numerator, self_denominator = self_sums
    joint = kernels.KernelSums(numerator, denominator, self_numerator, self_denominator)
    affinity, _ = kernels.affinity_from_sums(joint, base.space_params.get("self_pairs", "exclude"))
    distance, _ = kernels.distance_from_affinity(affinity)
    distance[np.ix_(index, index)] = fitted.distance_matrix_
    # new models extend the fitted MDS: the inside models' (the references' alone where
    # the shadows were placed out of sample too), so they are placed as the shadows were
    inside = (
        np.ones(len(index), dtype=bool) if fitted.inside_ is None else np.asarray(fitted.inside_)
    )
    within = fitted.distance_matrix_[np.ix_(inside, inside)] ** 2
    embedding = np.zeros((n, fitted.embedding_.shape[1]))
    embedding[index] = fitted.embedding_
    to_inside = distance[np.ix_(is_new, index[inside])] ** 2
    if fitted.inside_ is not None and allowed is not None:
        rows = np.asarray(allowed, dtype=bool)[np.ix_(is_new, index[inside])]
        embedding[is_new] = place_by_allowed(to_inside, within, fitted.embedding_[inside], rows)
    else:
        embedding[is_new] = place_out_of_sample(
            to_inside, within, fitted.embedding_[inside], fitted.eigenvalues_
        )
    return dataclasses.replace(
        fitted,
        models_=prepared.models,
        families_=prepared.families,
        distance_matrix_=distance,
        embedding_=embedding,
    )
