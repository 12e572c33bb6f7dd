"""PKPS and DKPS predictions: KNN on the perspective-space coordinates.

Observed cells are the distance-weighted KNN of the allowed references on the task. Cells
with no responses (completion) regress residuals after logit → per-task standardisation →
two-way bias, the LRMC whitening: the PKPS appendix ("Regressor") says *all* embedding
methods regress the whitened residual on completion, so PKPS and DKPS stay comparable.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from pkps_core.methods.context import PredictionContext
from pkps_core.methods.lrmc import two_way_bias, unwhiten
from pkps_core.space.knn import weighted_knn


def residual_knn(
    residual: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    cells: list[tuple[int, int, int]],
    distances: np.ndarray,
    allowed: np.ndarray,
    k: int,
) -> np.ndarray:
    """Invert ``bias + KNN(residual)`` at each (problem, model, task) cell (one KNN call
    for every cell: each row reads its own problem's and task's residuals)."""
    if not len(cells):
        return np.full(0, np.nan)
    p, i, t = np.asarray(cells, dtype=int).T
    values = residual[p, :, t]  # (cells, models)
    r_hat = weighted_knn(distances[i], values, allowed[i], k)
    return unwhiten(bias[p, i, t] + r_hat, mean[p, 0, t], scale[p, 0, t])


def whitened_knn_completion(context: PredictionContext, space: str) -> np.ndarray:
    """PKPS (or DKPS) completion of the cells with no responses.

    PKPS appendix "Regressor": the regression targets are residuals after logit →
    per-task standardisation → two-way (model + task) bias (:func:`two_way_bias`, the
    LRMC whitening); the residual of cell (i, t) is the distance-weighted KNN of the
    allowed models' residuals on task t in the perspective space, and the prediction is
    the bias plus that residual, mapped back to scores. Model i's bias comes from its own
    observed sample scores; the other rows are the allowed models' references.

    Returns
    -------
    ndarray (n_models, n_tasks): predictions on cells without responses, NaN elsewhere
    (and where no allowed model has a reference on the task).
    """

    def compute() -> np.ndarray:
        out = np.full((len(context.models), len(context.tasks)), np.nan)
        missing = context.n_responses == 0
        needed = np.zeros(len(context.models), dtype=bool)
        needed[context.prediction_rows()] = True
        rows = np.flatnonzero(missing.any(axis=1) & needed)
        if len(rows) == 0:
            return out
        allowed = context.allowed()
        stack = np.stack([context.training_matrix(i, allowed) for i in rows])
        residual, bias, mean, scale = two_way_bias(stack)
        cells = [(p, i, t) for p, i in enumerate(rows) for t in np.flatnonzero(missing[i])]
        embedding = context.coordinates(context.space(space))
        distances = cdist(embedding, embedding)
        values = residual_knn(
            residual, bias, mean, scale, cells, distances, allowed, context.n_neighbors
        )
        for (_, i, t), value in zip(cells, values, strict=True):
            out[i, t] = value
        return out

    return context.cached(("completion", space), compute)


def space_predictions(context: PredictionContext, space: str) -> tuple[np.ndarray, np.ndarray]:
    """KNN in the ``space`` ("pkps" or "dkps") on observed cells, the whitened-residual KNN
    (:func:`whitened_knn_completion`) on cells with no responses; NaN with the reason on
    every cell where the space cannot be fitted (:meth:`PredictionContext.space_unavailable`)."""
    reason = context.space_unavailable(space)
    if reason is not None:
        shape = (len(context.models), len(context.tasks))
        return np.full(shape, np.nan), np.full(shape, reason, dtype=object)
    prediction = context.knn(context.space(space))
    missing = context.n_responses == 0
    if missing.any():
        prediction = np.where(missing, whitened_knn_completion(context, space), prediction)
    notes = np.where(np.isnan(prediction), "no reference model for this task", "")
    return prediction, notes.astype(object)
