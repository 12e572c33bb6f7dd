"""The ensemble: the PKPS appendix "Ensemble", and a stacked one for runs with targets.

Without targets (the papers' protocols): scored cells ``α·sample + (1 − α)·PKPS``; cells
with no responses ``α·LRMC + (1 − α)·PKPS completion``; α from a 21-point grid, validated
per held-out group so that a group's own scores never choose its weight.

With targets, the weights are validated where the targets are, on the shadows
(:mod:`pkps_core.methods.stacking`).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from pkps_core.methods.context import PredictionContext
from pkps_core.methods.lrmc import (
    CROSS_FIT_FOLDS,
    lrmc_complete_batch,
    lrmc_missing_predictions,
    two_way_bias,
)
from pkps_core.methods.space_methods import residual_knn, whitened_knn_completion
from pkps_core.methods.stacking import stacked_predictions
from pkps_core.space.knn import weighted_knn

ALPHA_GRID = np.linspace(0.0, 1.0, 21)


def best_alpha(first: np.ndarray, second: np.ndarray, truth: np.ndarray) -> float:
    """The weight on the 21-point grid minimising ``mean |α·first + (1 − α)·second − truth|``.

    Ties go to the smallest α. NaN when there is nothing to validate on.
    """
    first, second, truth = (np.asarray(v, dtype=float) for v in (first, second, truth))
    keep = np.isfinite(first) & np.isfinite(second) & np.isfinite(truth)
    if not keep.any():
        return np.nan
    blend = ALPHA_GRID[:, None] * first[keep] + (1 - ALPHA_GRID[:, None]) * second[keep]
    errors = np.abs(blend - truth[keep]).mean(axis=1)
    return float(ALPHA_GRID[int(np.argmin(errors))])


def _observed_alphas(context: PredictionContext, distances: np.ndarray) -> dict[int, float]:
    """α of sample vs PKPS per holdout group, by leave-one-group-out validation.

    For held-out group F, every other group's scored cells are predicted by PKPS KNN
    from references outside both that group and F, and α minimises the MAE of the blend
    against those cells' references. F's scores enter nowhere.
    """
    groups = context.groups
    allowed = context.allowed()
    references = context.training_references
    alphas = {}
    for group in np.unique(groups):
        outside = groups != group
        rows = np.flatnonzero(outside)
        knn = np.full((len(rows), len(context.tasks)), np.nan)
        mask = allowed[rows] & outside[None, :]
        for t in range(len(context.tasks)):
            knn[:, t] = weighted_knn(distances[rows], references[:, t], mask, context.n_neighbors)
        alphas[group] = best_alpha(context.sample[rows], knn, references[rows])
    return alphas


def _missing_alphas(
    context: PredictionContext, distances: np.ndarray, groups_needed: np.ndarray
) -> dict[int, float]:
    """α of LRMC vs PKPS completion per holdout group, by 5-fold held-out cross-validation.

    For held-out group F, F's rows are removed; the other models' reference cells are
    split into 5 folds, each fold is hidden and predicted by LRMC and by the whitened
    KNN (neighbours outside the cell's own holdout group and outside F), and α minimises
    the MAE of the blend against the hidden references. F's scores enter nowhere.
    Within a fold the hidden cell's own other cells and (under family holdout) its
    siblings' cells stay visible to LRMC, which the real prediction does not allow, so
    the validation slightly favours LRMC.
    """
    groups = context.groups
    allowed = context.allowed()
    rng = np.random.default_rng(context.seed)
    problems, hidden_cells, owners = [], [], []
    for group in groups_needed:
        base = context.training_references.copy()
        base[groups == group] = np.nan
        cells = np.argwhere(np.isfinite(base))
        if len(cells) < CROSS_FIT_FOLDS:
            continue
        folds = rng.permutation(len(cells)) % CROSS_FIT_FOLDS
        for fold in range(CROSS_FIT_FOLDS):
            hidden = cells[folds == fold]
            matrix = base.copy()
            matrix[hidden[:, 0], hidden[:, 1]] = np.nan
            problems.append(matrix)
            hidden_cells.append(hidden)
            owners.append(group)
    alphas: dict[int, float] = {}
    if not problems:
        return alphas
    stack = np.stack(problems)
    lrmc = lrmc_complete_batch(stack, random_state=context.seed)
    residual, bias, mean, scale = two_way_bias(stack)
    collected: dict[int, list] = {}
    for p, (hidden, group) in enumerate(zip(hidden_cells, owners, strict=True)):
        cells = [(p, int(i), int(t)) for i, t in hidden]
        mask = allowed & (groups != group)[None, :]
        knn = residual_knn(residual, bias, mean, scale, cells, distances, mask, context.n_neighbors)
        truth = context.training_references[hidden[:, 0], hidden[:, 1]]
        entry = collected.setdefault(group, [[], [], []])
        entry[0].append(lrmc[p, hidden[:, 0], hidden[:, 1]])
        entry[1].append(knn)
        entry[2].append(truth)
    for group, (first, second, truth) in collected.items():
        alphas[group] = best_alpha(
            np.concatenate(first), np.concatenate(second), np.concatenate(truth)
        )
    return alphas


def ensemble_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """The ensemble: :func:`stacked_predictions` when the run has shadows (targets), else
    the PKPS appendix "Ensemble".

    Scored cells: ``α·sample + (1 − α)·PKPS`` with α per held-out group (family under
    family holdout, model under model holdout) from :data:`ALPHA_GRID` by leave-one-group-
    out validation (:func:`_observed_alphas`). Cells with no responses:
    ``α·LRMC + (1 − α)·PKPS completion`` with α by held-out cross-validation
    (:func:`_missing_alphas`). Cells with responses but no scores: PKPS alone.
    """
    if context.has_shadows:
        return stacked_predictions(context)
    prediction, notes = context.empty_grid()
    name = "pkps" if context.space_unavailable("pkps") is None else "dkps"  # score-only
    space = context.space(name)
    distances = cdist(space.embedding_, space.embedding_)
    pkps_knn = context.knn(space)
    completion = whitened_knn_completion(context, name)
    groups = context.groups
    scored = np.isfinite(context.sample)
    missing = context.n_responses == 0

    alphas = _observed_alphas(context, distances)
    for group, alpha in alphas.items():
        rows = groups == group
        if np.isnan(alpha):
            alpha = 0.5
            notes[rows] = "ensemble: nothing to validate α on; α = 0.5"
        cells = rows[:, None] & scored
        blend = alpha * context.sample + (1 - alpha) * pkps_knn
        prediction[cells] = np.where(np.isnan(pkps_knn), context.sample, blend)[cells]

    unscored = ~scored & ~missing
    prediction[unscored] = pkps_knn[unscored]
    notes[unscored] = "ensemble: no scored responses in this cell; PKPS alone"

    if missing.any():
        # LRMC serves the cells without responses only: one fit per model with such cells,
        # not the cross-fits of its observed cells (most of LRMC's cost)
        lrmc, _ = lrmc_missing_predictions(context)
        needed = np.unique(groups[missing.any(axis=1)])
        missing_alphas = _missing_alphas(context, distances, needed)
        for group in needed:
            alpha = missing_alphas.get(group, np.nan)
            cells = (groups == group)[:, None] & missing
            if np.isnan(alpha):
                alpha = 0.5
                notes[cells] = "ensemble: nothing to validate α on; α = 0.5"
            blend = alpha * lrmc + (1 - alpha) * completion
            blend = np.where(
                np.isnan(lrmc), completion, np.where(np.isnan(completion), lrmc, blend)
            )
            prediction[cells] = blend[cells]
    notes[np.isnan(prediction) & (notes == "")] = "ensemble: no reference model for this task"
    return prediction, notes
