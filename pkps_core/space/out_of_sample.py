"""Out-of-sample classical MDS: embed the references, place the other models by their D rows.

Joint MDS (Eq. 2) embeds every model at once, so thin new models (and the shadows that
mirror them) pull the configuration of the references they are compared with. Here only
the ``inside`` models (the references) are embedded; each other model is placed from its
distances to them alone, by the least-squares out-of-sample rule for classical MDS: its
row of the doubly centred inner products with the references, ``b = -1/2 (a - mean(a) -
r + g)`` (``a``: its squared distances to the references, ``r``: the references' row means
of squared distances, ``g``: their grand mean), is regressed on the references'
coordinates, ``y = Λ^{-1} X^T b``. A reference placed that way lands on its own
coordinates, so the rule extends the references' embedding without moving it.

References
----------
Trosset and Priebe (2008), "The out-of-sample problem for classical multidimensional
scaling", Computational Statistics & Data Analysis 52(10); Gower (1968), "Adding a point
to vector diagrams in multivariate analysis", Biometrika 55(3).
"""

from __future__ import annotations

import numpy as np

from pkps_core.space.mds import classical_mds


def out_of_sample_embedding(
    distance: np.ndarray, inside: np.ndarray, n_components: int
) -> np.ndarray:
    """Classical MDS of the ``inside`` models, every other model placed out of sample.

    Parameters
    ----------
    distance : ndarray (n_models, n_models)
        D (symmetric, zero diagonal).
    inside : ndarray of bool (n_models,)
        The models whose configuration is fitted (at least two).
    n_components : int

    Returns
    -------
    ndarray (n_models, n_components)
        Coordinates; the inside rows are their classical MDS, the others their projection
        (0 on components whose eigenvalue is not positive).
    """
    return out_of_sample_fit(distance, inside, n_components)[0]


def out_of_sample_fit(
    distance: np.ndarray,
    inside: np.ndarray,
    n_components: int,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`out_of_sample_embedding` and the eigenvalues of the inside models' MDS (what
    :func:`place_out_of_sample` needs to place more models later). With ``allowed``
    (n_models, n_models; ``allowed[i, j]``: model j may inform model i) each outside model
    is placed by the inside models it allows alone (:func:`place_by_allowed`)."""
    inside = np.asarray(inside, dtype=bool)
    if inside.sum() < 2:
        raise ValueError("out-of-sample MDS needs at least two models inside the fit")
    squared = np.asarray(distance, dtype=float) ** 2
    squared = 0.5 * (squared + squared.T)
    within = squared[np.ix_(inside, inside)]
    coordinates, eigenvalues = classical_mds(np.sqrt(within), n_components)
    if allowed is None:
        embedding = place_out_of_sample(squared[:, inside], within, coordinates, eigenvalues)
    else:
        outside = np.flatnonzero(~inside)
        rows = np.asarray(allowed, dtype=bool)[np.ix_(outside, inside)]
        embedding = np.zeros((len(squared), coordinates.shape[1]))
        embedding[outside] = place_by_allowed(
            squared[np.ix_(outside, inside)], within, coordinates, rows
        )
    embedding[inside] = coordinates
    return embedding, eigenvalues


def place_out_of_sample(
    to_inside: np.ndarray,
    within: np.ndarray,
    coordinates: np.ndarray,
    eigenvalues: np.ndarray,
) -> np.ndarray:
    """Place models by their squared distances to a fitted classical MDS (Gower's rule).

    Parameters
    ----------
    to_inside : ndarray (n_new, n_inside)
        Squared distances of the models to place to the inside models.
    within : ndarray (n_inside, n_inside)
        Squared distances among the inside models (the fit's D²).
    coordinates, eigenvalues : ndarray (n_inside, d), (d,)
        The inside models' classical MDS.

    Returns
    -------
    ndarray (n_new, d): ``Λ⁻¹ Xᵀ b`` per model (0 on components whose eigenvalue is not
    positive); an inside model's own row lands on its coordinates.
    """
    to_inside = np.atleast_2d(np.asarray(to_inside, dtype=float))
    inner = -0.5 * (
        to_inside
        - to_inside.mean(axis=1, keepdims=True)
        - within.mean(axis=1)[None, :]
        + within.mean()
    )
    positive = eigenvalues > 1e-12 * max(float(eigenvalues.max(initial=0.0)), 1e-300)
    embedding = np.zeros((len(to_inside), coordinates.shape[1]))
    embedding[:, positive] = inner @ coordinates[:, positive] / eigenvalues[positive]
    return embedding


def place_by_allowed(
    to_inside: np.ndarray,
    within: np.ndarray,
    coordinates: np.ndarray,
    allowed: np.ndarray,
) -> np.ndarray:
    """Place models from their distances to the inside models each may be informed by.

    Gower's rule is the least-squares fit, over the inside models ``i``, of
    ``x_i · y + c = -1/2 (a_i - r_i + g)`` (``a``: the model's squared distances to the
    inside models, ``r_i``: inside model ``i``'s mean squared distance to the others,
    ``g``: their grand mean, ``c`` a free constant that absorbs ``|y|²``): with every
    inside model in the fit the classical MDS's coordinates are centred with
    ``XᵀX = Λ``, and the fit is ``y = Λ^{-1} Xᵀ b`` exactly. Here the fit runs over the
    ``allowed`` inside models alone, so a model is placed only by the models its holdout
    lets inform it (a shadow is not drawn to its own original and family, which hold
    its very responses; a new model's family is not in the references either).

    Parameters
    ----------
    to_inside : ndarray (n_new, n_inside)
        Squared distances of the models to place to the inside models.
    within : ndarray (n_inside, n_inside)
        Squared distances among the inside models.
    coordinates : ndarray (n_inside, d)
        The inside models' classical MDS (0 on components without a positive eigenvalue).
    allowed : ndarray of bool (n_new, n_inside)

    Returns
    -------
    ndarray (n_new, d); the minimum-norm fit where the allowed models do not determine
    every component (0 on components every allowed model has 0 on).
    """
    to_inside = np.atleast_2d(np.asarray(to_inside, dtype=float))
    allowed = np.atleast_2d(np.asarray(allowed, dtype=bool))
    target = -0.5 * (to_inside - within.mean(axis=1)[None, :] + within.mean())
    design = np.hstack([coordinates, np.ones((len(coordinates), 1))])
    embedding = np.zeros((len(to_inside), coordinates.shape[1]))
    patterns, group = np.unique(allowed, axis=0, return_inverse=True)
    for k, pattern in enumerate(patterns):
        rows = np.flatnonzero(group.ravel() == k)
        if not pattern.any():
            continue
        solution = np.linalg.lstsq(design[pattern], target[np.ix_(rows, pattern)].T, rcond=None)[0]
        embedding[rows] = solution[:-1].T
    return embedding
