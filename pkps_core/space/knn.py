"""Distance-weighted K-nearest-neighbour regression on model coordinates, vectorised.

Every cell of a models × tasks grid is predicted from a different reference set (the
other models, or the other families, that have a reference on the task), so fitting one
``KNeighborsRegressor`` per cell would cost thousands of fits per bandwidth. These
functions compute the same estimator — weights ``1/distance``, and when some neighbours
sit at distance 0 only those count, equally (scikit-learn's ``weights="distance"``) — for
all cells at once from one pairwise-distance matrix. A test checks them against
``sklearn.neighbors.KNeighborsRegressor``. The bandwidth criterion (:func:`loo_knn_error`)
and the rule for which bandwidths may be chosen (:func:`choose_bandwidth`) live here too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist


def weighted_knn(
    distances: np.ndarray, values: np.ndarray, allowed: np.ndarray, k: int
) -> np.ndarray:
    """Predict each row from its ``k`` nearest allowed columns.

    Parameters
    ----------
    distances : ndarray of shape (n_queries, n_references)
    values : ndarray of shape (n_references,) or (n_queries, n_references)
        Regression targets of the references (NaN entries are never used); one row per
        query when each query reads its own targets (many cells in one call).
    allowed : ndarray of bool, shape (n_queries, n_references)
        Which references each query may use.
    k : int

    Returns
    -------
    ndarray of shape (n_queries,)
        NaN where a row has no allowed reference.
    """
    values = np.asarray(values)
    allowed = allowed & (np.isfinite(values) if values.ndim == 2 else np.isfinite(values)[None, :])
    masked = np.where(allowed, distances, np.inf)
    n_rows, n_refs = masked.shape
    if n_refs == 0:
        return np.full(n_rows, np.nan)
    k_eff = int(min(k, n_refs))
    if k_eff < n_refs:
        nearest = np.argpartition(masked, k_eff - 1, axis=1)[:, :k_eff]
    else:
        nearest = np.broadcast_to(np.arange(n_refs), (n_rows, n_refs))
    near_d = np.take_along_axis(masked, nearest, axis=1)
    near_y = np.nan_to_num(
        np.take_along_axis(values, nearest, axis=1) if values.ndim == 2 else values[nearest]
    )
    usable = np.isfinite(near_d)
    zero = usable & (near_d == 0)
    any_zero = zero.any(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        inverse = np.where(usable & ~zero, 1.0 / np.where(near_d > 0, near_d, 1.0), 0.0)
    weights = np.where(any_zero, zero.astype(float), inverse)
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        prediction = (weights * near_y).sum(axis=1) / total
    prediction[total == 0] = np.nan
    return prediction


def cell_matrix(
    cells: pd.DataFrame, models: np.ndarray, tasks: np.ndarray, column: str
) -> np.ndarray:
    """One column of the per-cell table as a models × tasks grid (NaN where absent)."""
    matrix = np.full((len(models), len(tasks)), np.nan)
    model_pos = pd.Index(models).get_indexer(cells["model"])
    task_pos = pd.Index(tasks).get_indexer(cells["task"])
    keep = (model_pos >= 0) & (task_pos >= 0)
    matrix[model_pos[keep], task_pos[keep]] = cells[column].to_numpy(dtype=float)[keep]
    return matrix


def loo_knn_error(
    embedding: np.ndarray,
    cells: pd.DataFrame,
    models: np.ndarray,
    k: int = 8,
    *,
    exclude: np.ndarray | None = None,
) -> float:
    """Leave-one-model-out distance-weighted KNN MAE of the observed sample scores.

    Each observed cell's sample score is predicted from the ``k`` nearest *other* models
    that observed the task; the error is the mean absolute error over observed cells.
    This is the bandwidth criterion of the PKPS appendix ("Kernels"). Models marked in
    ``exclude`` (bool, n_models) take no part: their scores are never read.
    """
    tasks = np.unique(cells["task"].to_numpy(dtype=str))
    sample = cell_matrix(cells, models, tasks, "sample_score")
    if exclude is not None:
        sample[np.asarray(exclude, dtype=bool)] = np.nan
    distances = cdist(embedding, embedding)
    not_self = ~np.eye(len(models), dtype=bool)
    errors = []
    for t in range(len(tasks)):
        observed = np.isfinite(sample[:, t])
        if observed.sum() < 2:
            continue
        rows = np.flatnonzero(observed)
        predicted = weighted_knn(distances[rows], sample[:, t], not_self[rows], k)
        errors.append(np.abs(predicted - sample[rows, t]))
    if not errors:
        return np.nan
    flat = np.concatenate(errors)
    return float(np.nanmean(flat)) if np.isfinite(flat).any() else np.nan


def eligible_bandwidths(undefined_pairs) -> np.ndarray:
    """Which bandwidths of a grid may be chosen: those imputing the fewest model pairs.

    A pair with no kernel mass at a bandwidth (two models sharing no query under the delta
    limit, or an RBF so narrow that it underflows) gets the largest distance as a stand-in
    (:func:`pkps_core.space.kernels.distance_from_affinity`). Such a pair carries no
    information, and many of them make D nearly a simplex, whose MDS axes are set by
    rounding (they changed with the BLAS thread count). A cross-validation error measured
    on that geometry is noise, and the minimum over a grid favours lucky noise; so where
    another bandwidth defines more pairs, the imputing one is not a candidate. The PKPS
    paper's proof of Theorem 2 ("Contrast with paired DKPS") says the same of the delta
    limit: with no shared query its distance is undefined, and any completion of it
    predicts independently of the target.
    """
    counts = np.asarray(undefined_pairs, dtype=float)
    return counts == counts.min() if counts.size else np.zeros(0, dtype=bool)


def choose_bandwidth(errors, undefined_pairs) -> int:
    """Index of the smallest finite error among :func:`eligible_bandwidths` (0 if none)."""
    errors = np.asarray(errors, dtype=float)
    usable = eligible_bandwidths(undefined_pairs) & np.isfinite(errors)
    if not usable.any():
        usable = np.isfinite(errors)
    if not usable.any():
        return 0
    return int(np.flatnonzero(usable)[np.argmin(errors[usable])])


def knn_grid_predictions(
    embedding: np.ndarray | None,
    references: np.ndarray,
    allowed: np.ndarray,
    k: int = 5,
    *,
    distances: np.ndarray | None = None,
) -> np.ndarray:
    """KNN prediction of every (model, task) cell from the allowed models' references.

    Parameters
    ----------
    embedding : ndarray (n_models, d)
    references : ndarray (n_models, n_tasks)
        Reference score per cell (NaN: no reference).
    allowed : ndarray of bool (n_models, n_models)
        ``allowed[i, j]``: model j's reference may inform model i's cells (see
        :func:`pkps_core.methods.context.allowed_references`).
    k : int
    distances : ndarray (n_models, n_models), optional
        Neighbours by these distances (e.g. D itself) instead of the embedding's.

    Returns
    -------
    ndarray (n_models, n_tasks)
    """
    if distances is None:
        distances = cdist(embedding, embedding)
    out = np.full(references.shape, np.nan)
    for t in range(references.shape[1]):
        out[:, t] = weighted_knn(distances, references[:, t], allowed, k)
    return out
