"""Conformal prediction intervals for any method, calibrated across families.

``prediction ± q · σ(cell)``: ``q`` is the split-conformal quantile of the normalised
residuals ``|ŷ − reference| / σ`` of reference cells in runs that hide the cell's own
family fold (cross-conformal over families), and ``σ`` a local difficulty per method. When
the run has targets, the calibration cells are instead the shadows' (references observed
like the targets, :mod:`pkps_core.methods.shadows`), so the residuals are at the targets'
budget; ``unit="families"`` makes the quantile count families, not cells
(:func:`grouped_conformal_quantile`: a new model arrives as a whole family whose cells share
their errors), which on AlpacaEval fixes the under-coverage at m = 2 but doubles the widths
and over-covers elsewhere (docs/results/new-model.md), so cells stay the default.
Why and how, in full: ``docs/explanation/trust.md``.

References
----------
Vovk, Gammerman and Shafer (2005), *Algorithmic Learning in a Random World*; Lei et al.
(2018), "Distribution-free predictive inference for regression".
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.spatial.distance import cdist

from pkps_core.methods import METHODS, PredictionContext
from pkps_core.trust.cells import (
    allowed_reference_stack,
    score_range,
    task_item_sd,
    task_query_counts,
)

DEFAULT_LEVEL = 0.9
MAX_FOLDS = 10
SIGMA_FLOOR = 1e-3
# Level of the conformal outlier tests of the extrapolation checks (region, response length).
OUTLIER_ALPHA = 0.05


def conformal_quantile(scores: np.ndarray, level: float = DEFAULT_LEVEL) -> float:
    """The split-conformal quantile: the ``ceil(level · (n + 1))``-th smallest score.

    That is the ``level · (1 + 1/n)`` empirical quantile of the ``n`` finite calibration
    scores; ``inf`` when ``n`` is too small for the level (fewer than ``level / (1 −
    level)`` scores), NaN when there are none.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    values = np.sort(np.asarray(scores, dtype=float).ravel())
    values = values[np.isfinite(values)]
    n = len(values)
    if n == 0:
        return float("nan")
    rank = math.ceil(level * (n + 1) - 1e-9)
    return float(values[rank - 1]) if rank <= n else float("inf")


def conformal_outlier_threshold(values: np.ndarray, alpha: float = OUTLIER_ALPHA) -> float:
    """The smallest threshold whose exceedance is a conformal outlier at level ``alpha``.

    A new value d has conformal p-value ``(1 + #{values ≥ d}) / (n + 1)`` against the
    ``n`` finite calibration ``values``; ``p ≤ alpha`` exactly when d exceeds the
    ``(c + 1)``-th largest value, ``c = floor(alpha · (n + 1) − 1)``. Under
    exchangeability of d with the values, ``P(d > threshold) ≤ alpha``. ``inf`` (never
    exceeded) when ``c < 0``: fewer than ``1 / alpha − 1`` values.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    finite = np.asarray(values, dtype=float).ravel()
    finite = np.sort(finite[np.isfinite(finite)])[::-1]
    c = math.floor(alpha * (len(finite) + 1) - 1 + 1e-9)
    return float(finite[c]) if c >= 0 else float("inf")


def grouped_conformal_quantile(
    scores: np.ndarray, groups: np.ndarray, level: float = DEFAULT_LEVEL
) -> float:
    """The conformal quantile when exchangeability holds between groups, not cells.

    A new model comes as a whole family whose cells share its errors, so the unit of
    exchangeability is the family: every group's scores get total weight 1 (each of its
    ``n_g`` scores ``1 / n_g``, the pooled within-group CDFs of Dunn, Wasserman and Ramdas
    2022), and the finite-sample correction counts groups: the smallest score whose
    weighted CDF reaches ``level · (G + 1)`` over ``G`` groups. With too few groups for
    a finite family-level quantile (``G < level / (1 − level)``, 9 at 90 %) it falls
    back to the cell-level :func:`conformal_quantile` of all the scores (exchangeable
    cells: a weaker guarantee, but an interval narrower than the score range on a small
    cache). NaN without scores. With one score per group this is
    :func:`conformal_quantile`.

    References
    ----------
    Dunn, Wasserman and Ramdas (2022), "Distribution-free prediction sets for two-layer
    hierarchical models", JASA 118(544).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    scores = np.asarray(scores, dtype=float).ravel()
    groups = np.asarray(groups).ravel()
    finite = np.isfinite(scores)
    scores, groups = scores[finite], groups[finite]
    if not len(scores):
        return float("nan")
    _, index, counts = np.unique(groups, return_inverse=True, return_counts=True)
    order = np.argsort(scores, kind="stable")
    cumulative = np.cumsum(1.0 / counts[index[order]])
    needed = level * (len(counts) + 1) - 1e-9
    if needed > cumulative[-1]:
        return conformal_quantile(scores, level)
    return float(scores[order][np.searchsorted(cumulative, needed)])


def _knn_distance(
    distances: np.ndarray, references: np.ndarray, allowed: np.ndarray, k: int
) -> np.ndarray:
    """Mean distance from each model to its ``k`` nearest allowed references, per task."""
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    masked = np.where(usable, distances[:, :, None], np.inf)
    k_eff = max(1, min(k, masked.shape[1]))
    nearest = np.sort(masked, axis=1)[:, :k_eff, :]
    finite = np.isfinite(nearest)
    with np.errstate(invalid="ignore"):
        mean = np.where(finite, nearest, 0.0).sum(axis=1) / finite.sum(axis=1)
    return np.where(finite.any(axis=1), mean, np.nan)


def difficulty(
    context: PredictionContext,
    method: str,
    references: np.ndarray,
    allowed: np.ndarray,
) -> np.ndarray:
    """The local difficulty σ of every cell for ``method`` (see the module docstring).

    Parameters
    ----------
    references : ndarray (n_models, n_tasks)
        The references visible to the run (NaN: hidden or absent).
    allowed : ndarray of bool (n_models, n_models)
        Which models' references may inform each model's cells.

    Returns
    -------
    ndarray (n_models, n_tasks), positive (NaN where undefined).
    """
    low, high = score_range(context)
    floor = SIGMA_FLOOR * max(high - low, 1e-12)
    if method == "sample":
        n = np.maximum(context.n_responses, 1)
        sd = task_item_sd(context)[None, :]
        return np.maximum(sd / np.sqrt(n), floor)
    with np.errstate(all="ignore"):
        spread = np.nanstd(allowed_reference_stack(references, allowed), axis=1)
    sigma = np.maximum(spread, floor)
    space_name = METHODS[method].space
    if space_name is not None and context.space_unavailable(space_name) is None:
        space = context.space(space_name)
        coordinates = context.coordinates(space)
        distances = cdist(coordinates, coordinates)
        off = distances[~np.eye(len(distances), dtype=bool)]
        median = float(np.median(off)) if len(off) else 1.0
        near = _knn_distance(distances, references, allowed, context.n_neighbors)
        sigma = sigma * (1.0 + near / max(median, 1e-12)) / 2.0
    return np.maximum(sigma, floor)


def family_folds(context: PredictionContext, n_folds: int = MAX_FOLDS) -> np.ndarray:
    """Fold of each model: one family per fold, or families dealt into ``n_folds`` folds
    at random (seeded by ``space_params["random_state"]``) when there are more."""
    families, family_index = np.unique(context.families, return_inverse=True)
    if len(families) <= n_folds:
        return family_index
    seed = context.space_params.get("random_state", 0)
    rng = np.random.default_rng(0 if seed is None else int(seed))
    fold_of_family = rng.permutation(len(families)) % n_folds
    return fold_of_family[family_index]


def _calibration_truth(context: PredictionContext, method: str) -> np.ndarray | None:
    """The values residuals are taken against (NaN: cell does not calibrate), or None
    when the method cannot be calibrated at all.

    For methods that read the cell's own scores, a fully observed cell (a response to
    every query of the task in the input) cannot calibrate: its sample score *is* its
    full-task score, so its residual says nothing about a thinly observed cell.
    """
    if "reference_score" in context.records.columns:
        truth = context.reference_score
    elif METHODS[method].reads_own_scores:
        return None
    else:
        truth = context.training_references
    if METHODS[method].reads_own_scores:
        pool = task_query_counts(context.records).reindex(context.tasks).to_numpy()
        complete = context.n_responses >= pool[None, :]
        truth = np.where(complete, np.nan, truth)
    return truth


def _fold_runs(
    context: PredictionContext, n_folds: int
) -> list[tuple[np.ndarray, PredictionContext]]:
    def compute() -> list[tuple[np.ndarray, PredictionContext]]:
        folds = family_folds(context, n_folds)
        return [(folds == k, context.fold(folds == k)) for k in np.unique(folds)]

    return context.cached(("folds", n_folds), compute)


def normalised_residuals(
    context: PredictionContext, method: str, n_folds: int = MAX_FOLDS
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per fold: (mask of the fold's models, calibration scores ``|ŷ − ref| / σ``).

    The scores of fold k come from the run that hides fold k's references, on reference
    cells outside fold k (never a target's cell).
    """
    truth = _calibration_truth(context, method)
    out = []
    for in_fold, fold in _fold_runs(context, n_folds):
        if truth is None:
            out.append((in_fold, np.empty(0)))
            continue
        prediction = METHODS[method](fold).prediction
        allowed = fold.allowed("family")
        sigma = difficulty(fold, method, fold.training_references, allowed)
        calibrating = ~fold.targets[:, None] & np.isfinite(truth) & np.isfinite(prediction)
        scores = np.abs(prediction - truth)[calibrating] / sigma[calibrating]
        out.append((in_fold, scores))
    return out


def shadow_residuals(
    context: PredictionContext,
    prediction: np.ndarray,
    sigma: np.ndarray,
    calibrate: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Calibration scores ``|ŷ − truth| / σ`` on the shadows' cells (see
    :mod:`pkps_core.methods.shadows`): the references observed like the targets, predicted
    from the other families' references and judged against their own full references;
    and each score's family (the unit of :func:`grouped_conformal_quantile`).
    ``calibrate`` (cells × tasks, bool) keeps only those shadow cells."""
    truth = context.calibration_truth
    usable = context.shadows[:, None] & np.isfinite(truth) & np.isfinite(prediction) & (sigma > 0)
    if calibrate is not None:
        usable &= calibrate
    families = np.broadcast_to(context.families[:, None], usable.shape)
    return np.abs(prediction - truth)[usable] / sigma[usable], families[usable]


@dataclasses.dataclass
class Intervals:
    """Per-cell intervals of one method.

    Attributes
    ----------
    lower, upper : ndarray (n_models, n_tasks)
        NaN where the prediction is NaN or the method could not be calibrated.
    quantile : ndarray (n_models,)
        The conformal quantile that calibrated each model's cells.
    sigma : ndarray (n_models, n_tasks)
        The cells' difficulty.
    n_calibration : ndarray of int (n_models,)
        How many residuals calibrated each model's cells.
    """

    lower: np.ndarray
    upper: np.ndarray
    quantile: np.ndarray
    sigma: np.ndarray
    n_calibration: np.ndarray


def prediction_intervals(
    context: PredictionContext,
    method: str,
    prediction: np.ndarray,
    level: float = DEFAULT_LEVEL,
    *,
    n_folds: int = MAX_FOLDS,
    unit: str = "cells",
    calibrate: np.ndarray | None = None,
) -> Intervals:
    """Split-conformal intervals of ``method``'s ``prediction`` at coverage ``level``.

    Parameters
    ----------
    context : PredictionContext
        The context ``prediction`` was made in (any holdout; calibration always holds out
        families, which is conservative under model holdout).
    method : str
        Name in :data:`~pkps_core.predict.METHODS`.
    prediction : ndarray (n_models, n_tasks)
    level : float, default=0.9
    n_folds : int, default=10
        At most this many family folds (see the module docstring).
    unit : {"cells", "families"}, default="cells"
        What the shadows' conformal quantile treats as exchangeable: cells
        (:func:`conformal_quantile`) or families (:func:`grouped_conformal_quantile`).
    calibrate : ndarray of bool (n_models, n_tasks), optional
        With shadows, only these shadow cells calibrate (a Mondrian group: e.g. the
        cells no extrapolation check warned, :func:`pkps_core.trust.trust_columns`).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    if unit not in ("cells", "families"):
        raise ValueError(f"unit must be 'cells' or 'families', got {unit!r}")
    n_models = len(context.models)
    quantile = np.full(n_models, np.nan)
    n_calibration = np.zeros(n_models, dtype=int)
    sigma = difficulty(context, method, context.training_references, context.allowed("family"))
    if context.has_shadows:
        scores, families = shadow_residuals(context, prediction, sigma, calibrate)
        if unit == "families":
            quantile[:] = grouped_conformal_quantile(scores, families, level)
        else:
            quantile[:] = conformal_quantile(scores, level) if len(scores) else np.nan
        n_calibration[:] = len(scores)
    else:
        for in_fold, scores in normalised_residuals(context, method, n_folds):
            quantile[in_fold] = conformal_quantile(scores, level) if len(scores) else np.nan
            n_calibration[in_fold] = len(scores)
    low, high = score_range(context)
    half = quantile[:, None] * sigma
    with np.errstate(invalid="ignore"):
        lower = np.clip(prediction - half, low, high)
        upper = np.clip(prediction + half, low, high)
    undefined = ~np.isfinite(prediction) | np.isnan(half)
    lower[undefined] = np.nan
    upper[undefined] = np.nan
    return Intervals(lower, upper, quantile, sigma, n_calibration)
