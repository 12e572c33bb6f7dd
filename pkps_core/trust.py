"""How far to trust each prediction: conformal intervals, extrapolation warnings, what next.

Three tools on top of :mod:`pkps_core.predict`:

* :func:`prediction_intervals` — a per-cell interval ``prediction ± q · σ(cell)`` for any
  method in :data:`~pkps_core.predict.METHODS`, by split-conformal calibration on
  held-out residuals of the reference models. ``q`` is the conformal quantile
  (:func:`conformal_quantile`) of the normalised residuals ``|ŷ − reference| / σ`` and
  ``σ`` a local difficulty (:func:`difficulty`). Intervals are clipped to the score range
  (:func:`score_range`).
* :func:`extrapolation_warnings` — a flag and a plain reason per cell when the model lies
  outside the references' region of the perspective space, when the prediction sits at the
  edge of the references' score range for the task, or when the model's own sample score
  lies beyond that range (the second paper's failure mode: new models better than every
  reference).
* :func:`next_cells` — for one model, its missing or thinly observed cells ranked by the
  width of their intervals: where an extra query is worth the most.

Calibration without leakage
---------------------------
Families are split into at most ``n_folds`` folds (one family per fold when there are few
families). For fold k the method is re-run on a copy of the context under family holdout
with fold k's models marked as targets, so no reference of fold k informs anything; the
residuals of the other folds' reference cells in that run calibrate fold k's intervals.
So a cell's own residual never calibrates its own interval, and neither does any residual
computed from its family's references: under family holdout, changing a family's
references changes neither its predictions nor its intervals (``tests/test_trust.py``
checks it). This is cross-conformal calibration over families; with one family per fold
it is leave-one-family-out. The perspective spaces are fitted once (they do not read
references) and shared by the fold runs; everything that reads references is recomputed.

Which residuals calibrate: cells with a trusted ``reference_score``. When the input has no
``reference_score`` column, a cell's reference is its own sample score; then only methods
that never read the cell's own scores (``dkps``, ``pkps``, ``lrmc``, cross-fitted) are
calibrated against it, and the others (``sample``, ``ensemble``, ``irt``, ``rs-learn``,
``aipw``, whose residual against their own input would be ~0) get no interval (NaN). For
the same reason those methods are never calibrated on fully observed cells (a response to
every query the input holds for the task), whose sample score is their full score: when
every reference cell is complete (the second paper's splits) they get no interval.

Difficulty per method (the normalisation σ; any constant factor cancels in ``q · σ``):

* ``sample``: ``s_t / sqrt(n)``, the per-task pooled within-cell standard deviation of the
  item scores over the square root of the cell's number of scored responses — the
  sampling error of a mean.
* ``pkps``, ``dkps``: ``spread_t · (1 + d_K / d_med) / 2``, the spread of the allowed
  references' scores on the task times the mean distance to the K nearest allowed
  references in the method's own space relative to the median pairwise distance — KNN
  errors grow with the spread of what it averages and with how far the neighbours are.
* every other method: ``spread_t``.

Cells with no responses (completion) are calibrated with the observed cells' residuals
(reference cells always have responses); completion is usually less accurate, so read
those intervals as optimistic.

References
----------
Vovk, Gammerman and Shafer (2005), *Algorithmic Learning in a Random World* (split and
cross-conformal prediction); Lei et al. (2018), "Distribution-free predictive inference
for regression" (locally weighted conformal). "How Benchmark Prediction from Fewer Data
Misses the Mark" (extrapolation regime).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist

from pkps_core.predict import METHODS, PredictionContext

DEFAULT_LEVEL = 0.9
MAX_FOLDS = 10
REGION_PERCENTILE = 95.0
EDGE_FRACTION = 0.05
SAMPLE_Z = 1.645
SIGMA_FLOOR = 1e-3
# Methods whose prediction of a cell reads the cell's own scores: their residual against a
# reference that *is* the sample score says nothing.
OWN_SCORE_METHODS = frozenset({"sample", "ensemble", "irt", "rs-learn", "aipw"})
SPACE_OF_METHOD = {"pkps": "pkps", "dkps": "dkps"}
NEXT_COLUMNS = (
    "rank",
    "model",
    "task",
    "method",
    "n_responses",
    "task_queries",
    "prediction",
    "lower",
    "upper",
    "width",
    "extrapolation",
    "extrapolation_reason",
)


# ----------------------------------------------------------------------- arithmetic


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


def score_range(context: PredictionContext) -> tuple[float, float]:
    """Where scores can lie: [0, 1] when every observed score and reference is in [0, 1],
    else the observed minimum and maximum."""
    values = [context.sample, context.reference_score]
    if "score" in context.records.columns:
        values.append(context.records["score"].to_numpy(dtype=float))
    flat = np.concatenate([np.ravel(v) for v in values])
    flat = flat[np.isfinite(flat)]
    if not len(flat):
        return 0.0, 1.0
    low, high = float(flat.min()), float(flat.max())
    if low >= 0.0 and high <= 1.0:
        return 0.0, 1.0
    return low, high


# ----------------------------------------------------------------------- difficulty


def _family_allowed(context: PredictionContext, hidden: np.ndarray | None = None) -> np.ndarray:
    """``allowed[i, j]``: j is in another family, not a target and not ``hidden``."""
    families = context.families
    allowed = families[:, None] != families[None, :]
    if context.targets is not None:
        allowed &= ~np.asarray(context.targets, dtype=bool)[None, :]
    if hidden is not None:
        allowed &= ~hidden[None, :]
    return allowed


def _task_item_sd(context: PredictionContext) -> np.ndarray:
    """Per task, the pooled within-cell standard deviation of the item scores."""

    def compute() -> np.ndarray:
        frame = context.records
        sd = np.full(len(context.tasks), np.nan)
        if "score" not in frame.columns:
            return sd
        scored = frame.dropna(subset=["score"])
        centred = scored["score"] - scored.groupby(["model", "task"])["score"].transform("mean")
        by_task = (centred**2).groupby(scored["task"]).mean() ** 0.5
        return by_task.reindex(context.tasks).to_numpy(dtype=float)

    store = context.__dict__.setdefault("_trust_memo", {})
    if "item_sd" not in store:
        store["item_sd"] = compute()
    return store["item_sd"]


def _allowed_reference_stack(references: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """(n_models, n_models, n_tasks): reference of j on t if j may inform i, else NaN."""
    return np.where(allowed[:, :, None], references[None, :, :], np.nan)


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
        sd = _task_item_sd(context)[None, :]
        return np.maximum(sd / np.sqrt(n), floor)
    with np.errstate(all="ignore"):
        spread = np.nanstd(_allowed_reference_stack(references, allowed), axis=1)
    sigma = np.maximum(spread, floor)
    if method in SPACE_OF_METHOD:
        space = getattr(context, SPACE_OF_METHOD[method])
        distances = cdist(space.embedding_, space.embedding_)
        off = distances[~np.eye(len(distances), dtype=bool)]
        median = float(np.median(off)) if len(off) else 1.0
        near = _knn_distance(distances, references, allowed, context.n_neighbors)
        sigma = sigma * (1.0 + near / max(median, 1e-12)) / 2.0
    return np.maximum(sigma, floor)


# ----------------------------------------------------------------------- calibration


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


def _fold_context(context: PredictionContext, hidden: np.ndarray) -> PredictionContext:
    """A family-holdout copy of ``context`` where the ``hidden`` models are targets.

    The fitted spaces and the item tables (which read no references) are shared.
    """
    targets = hidden.copy()
    if context.targets is not None:
        targets |= np.asarray(context.targets, dtype=bool)
    fold = dataclasses.replace(context, holdout="family", targets=targets)
    for name in ("pkps", "dkps"):
        if name in context.__dict__:
            fold.__dict__[name] = context.__dict__[name]
    memo = context.__dict__.get("_baselines_memo", {})
    if "item_tables" in memo:
        fold.__dict__["_baselines_memo"] = {"item_tables": memo["item_tables"]}
    fold.__dict__["_trust_memo"] = {"item_sd": _task_item_sd(context)}
    return fold


def _calibration_truth(context: PredictionContext, method: str) -> np.ndarray | None:
    """The values residuals are taken against (NaN: cell does not calibrate), or None
    when the method cannot be calibrated at all.

    For methods that read the cell's own scores, a fully observed cell (a response to
    every query of the task in the input) cannot calibrate: its sample score *is* its
    full-task score, so its residual says nothing about a thinly observed cell.
    """
    if "reference_score" in context.records.columns:
        truth = context.reference_score
    elif method in OWN_SCORE_METHODS:
        return None
    else:
        truth = context.training_references
    if method in OWN_SCORE_METHODS:
        pool = task_query_counts(context.records).reindex(context.tasks).to_numpy()
        complete = context.n_responses >= pool[None, :]
        truth = np.where(complete, np.nan, truth)
    return truth


def task_query_counts(records: pd.DataFrame) -> pd.Series:
    """Number of distinct queries per task in the records (the task's known pool)."""
    return records.groupby("task")["query_id"].nunique().rename("task_queries")


def _fold_runs(
    context: PredictionContext, n_folds: int
) -> list[tuple[np.ndarray, PredictionContext]]:
    store = context.__dict__.setdefault("_trust_memo", {})
    key = ("folds", n_folds)
    if key not in store:
        folds = family_folds(context, n_folds)
        store[key] = [(folds == k, _fold_context(context, folds == k)) for k in np.unique(folds)]
    return store[key]


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
        allowed = _family_allowed(fold)
        sigma = difficulty(fold, method, fold.training_references, allowed)
        calibrating = ~fold.targets[:, None] & np.isfinite(truth) & np.isfinite(prediction)
        scores = np.abs(prediction - truth)[calibrating] / sigma[calibrating]
        out.append((in_fold, scores))
    return out


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
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"interval level must be in (0, 1), got {level}")
    n_models = len(context.models)
    quantile = np.full(n_models, np.nan)
    n_calibration = np.zeros(n_models, dtype=int)
    for in_fold, scores in normalised_residuals(context, method, n_folds):
        quantile[in_fold] = conformal_quantile(scores, level) if len(scores) else np.nan
        n_calibration[in_fold] = len(scores)
    sigma = difficulty(context, method, context.training_references, _family_allowed(context))
    low, high = score_range(context)
    half = quantile[:, None] * sigma
    with np.errstate(invalid="ignore"):
        lower = np.clip(prediction - half, low, high)
        upper = np.clip(prediction + half, low, high)
    undefined = ~np.isfinite(prediction) | np.isnan(half)
    lower[undefined] = np.nan
    upper[undefined] = np.nan
    return Intervals(lower, upper, quantile, sigma, n_calibration)


# ----------------------------------------------------------------------- extrapolation


def _nearest_reference(
    distances: np.ndarray, references: np.ndarray, allowed: np.ndarray
) -> np.ndarray:
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    return np.where(usable, distances[:, :, None], np.inf).min(axis=1)


def region_distances(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-reference distance of every cell, and each task's region threshold.

    Distances are in the PKPS coordinates, to the references the cell's holdout allows.
    The threshold of task t is the :data:`REGION_PERCENTILE` percentile of the
    references' own leave-one-family-out nearest-reference distances on t.
    """
    store = context.__dict__.setdefault("_trust_memo", {})
    if "region" not in store:
        embedding = context.pkps.embedding_
        distances = cdist(embedding, embedding)
        references = context.training_references
        if context.holdout == "family":
            allowed = _family_allowed(context)
        else:
            allowed = ~np.eye(len(context.models), dtype=bool)
            if context.targets is not None:
                allowed &= ~np.asarray(context.targets, dtype=bool)[None, :]
        nearest = _nearest_reference(distances, references, allowed)
        own = _nearest_reference(distances, references, _family_allowed(context))
        own = np.where(np.isfinite(references) & np.isfinite(own), own, np.nan)
        with np.errstate(all="ignore"):
            threshold = np.array(
                [
                    np.nanpercentile(own[:, t], REGION_PERCENTILE)
                    if np.isfinite(own[:, t]).any()
                    else np.nan
                    for t in range(len(context.tasks))
                ]
            )
        store["region"] = (nearest, threshold)
    return store["region"]


def extrapolation_warnings(
    context: PredictionContext, method: str, prediction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flag cells whose prediction extrapolates beyond the references.

    A cell (of any method but ``sample``, which uses no references) is flagged when

    * its model's nearest allowed reference on the task (PKPS coordinates) is farther than
      the task's :func:`region_distances` threshold ("outside the references' region");
    * fewer than :data:`EDGE_FRACTION` of the allowed references on the task (and at
      least one: with fewer than 20 references, none) score as high as its prediction,
      or as low ("at the edge of the range");
    * its own sample score lies beyond the references' range by more than
      ``1.645 · s_t / sqrt(n)`` (its sampling error) — the model looks better (or worse)
      than every reference.

    Returns
    -------
    flags : ndarray of bool (n_models, n_tasks)
    reasons : ndarray of str (n_models, n_tasks), "" where not flagged

    Notes
    -----
    The region threshold comes from the references as they are observed. A model observed
    with far fewer responses than the references sits farther from everyone in the space
    (see the self-pairs note in DESIGN.md), so thinly observed targets among fully observed
    references are flagged more often than their errors justify
    (``bench/trust_table.py`` measures it).
    """
    shape = (len(context.models), len(context.tasks))
    flags = np.zeros(shape, dtype=bool)
    reasons = np.full(shape, "", dtype=object)
    if method == "sample":
        return flags, reasons
    nearest, threshold = region_distances(context)
    allowed = _family_allowed(context) if context.holdout == "family" else None
    if allowed is None:
        allowed = ~np.eye(shape[0], dtype=bool)
        if context.targets is not None:
            allowed &= ~np.asarray(context.targets, dtype=bool)[None, :]
    stack = _allowed_reference_stack(context.training_references, allowed)
    finite = np.isfinite(stack)
    n_refs = finite.sum(axis=1)
    with np.errstate(all="ignore"):
        ref_min = np.where(finite, stack, np.inf).min(axis=1)
        ref_max = np.where(finite, stack, -np.inf).max(axis=1)
        at_least = (finite & (stack >= prediction[:, None, :])).sum(axis=1)
        at_most = (finite & (stack <= prediction[:, None, :])).sum(axis=1)
    has_range = n_refs >= 2
    # "At the edge": fewer than 5 % of the references (at least one) are as extreme.
    edge_count = np.maximum(1, np.ceil(EDGE_FRACTION * n_refs))
    sd = _task_item_sd(context)[None, :]
    sample = context.sample
    n = np.maximum(context.n_responses, 1)
    noise = SAMPLE_Z * np.nan_to_num(sd) / np.sqrt(n)
    predicted = np.isfinite(prediction)
    for i, t in zip(*np.nonzero(predicted), strict=True):
        why = []
        if np.isfinite(threshold[t]) and nearest[i, t] > threshold[t]:
            why.append(
                f"outside the references' region (nearest reference at {nearest[i, t]:.3g} "
                f"> {REGION_PERCENTILE:.0f}th percentile {threshold[t]:.3g})"
            )
        if has_range[i, t] and ref_max[i, t] > ref_min[i, t]:
            if at_least[i, t] < edge_count[i, t]:
                why.append(
                    f"prediction at the top of the references' range ({at_least[i, t]} of "
                    f"{n_refs[i, t]} references as high, max {ref_max[i, t]:.3g})"
                )
            elif at_most[i, t] < edge_count[i, t]:
                why.append(
                    f"prediction at the bottom of the references' range ({at_most[i, t]} of "
                    f"{n_refs[i, t]} references as low, min {ref_min[i, t]:.3g})"
                )
        if has_range[i, t] and np.isfinite(sample[i, t]):
            if sample[i, t] - noise[i, t] > ref_max[i, t]:
                why.append(
                    f"own sample score {sample[i, t]:.3g} ({context.n_responses[i, t]} "
                    f"responses) above every reference (max {ref_max[i, t]:.3g})"
                )
            elif sample[i, t] + noise[i, t] < ref_min[i, t]:
                why.append(
                    f"own sample score {sample[i, t]:.3g} ({context.n_responses[i, t]} "
                    f"responses) below every reference (min {ref_min[i, t]:.3g})"
                )
        if why:
            flags[i, t] = True
            reasons[i, t] = "; ".join(why)
    return flags, reasons


def trust_columns(
    context: PredictionContext,
    method: str,
    prediction: np.ndarray,
    level: float = DEFAULT_LEVEL,
    *,
    n_folds: int = MAX_FOLDS,
) -> dict[str, np.ndarray]:
    """``lower``, ``upper``, ``extrapolation``, ``extrapolation_reason`` as grids."""
    intervals = prediction_intervals(context, method, prediction, level, n_folds=n_folds)
    flags, reasons = extrapolation_warnings(context, method, prediction)
    return {
        "lower": intervals.lower,
        "upper": intervals.upper,
        "extrapolation": flags,
        "extrapolation_reason": reasons,
    }


# ----------------------------------------------------------------------- what next


def next_cells(
    predictions: pd.DataFrame,
    target: str,
    *,
    method: str | None = None,
    top: int | None = 10,
    task_queries: pd.Series | None = None,
) -> pd.DataFrame:
    """Which of ``target``'s cells to evaluate next: widest intervals first.

    Candidates are the model's cells with fewer responses than the task has queries
    (missing cells included): cells where more queries exist to be asked. They are
    ranked by interval width (widest first; missing before observed, then fewer responses,
    on ties); cells without an interval come last.

    Parameters
    ----------
    predictions : DataFrame
        :func:`pkps_core.predict.predict` output with intervals.
    target : str
    method : str, optional
        Whose intervals rank the cells; default ``ensemble`` if present, else ``pkps``,
        else the first method.
    top : int or None, default=10
    task_queries : Series, optional
        Queries per task (:func:`task_query_counts` of the records); default: the task's
        most-observed cell's number of responses.

    Returns
    -------
    DataFrame with :data:`NEXT_COLUMNS`.
    """
    if target not in set(predictions["model"]):
        raise ValueError(f"unknown model {target!r}; choose one of the predicted models")
    methods = list(dict.fromkeys(predictions["method"]))
    if method is None:
        method = next((m for m in ("ensemble", "pkps") if m in methods), methods[0])
    if method not in methods:
        raise ValueError(f"method {method!r} is not in the predictions ({', '.join(methods)})")
    frame = predictions[predictions["method"] == method]
    if task_queries is None:
        task_queries = frame.groupby("task")["n_responses"].max()
    task_queries = task_queries.rename("task_queries")
    frame = frame[frame["model"] == target].join(task_queries, on="task")
    frame = frame[frame["n_responses"] < frame["task_queries"]].copy()
    frame["width"] = frame["upper"] - frame["lower"]
    frame["missing"] = frame["n_responses"] == 0
    frame = frame.sort_values(
        ["width", "missing", "n_responses", "task"],
        ascending=[False, False, True, True],
        na_position="last",
        kind="stable",
    )
    if top is not None:
        frame = frame.head(top)
    frame["rank"] = np.arange(1, len(frame) + 1)
    return frame.reset_index(drop=True)[list(NEXT_COLUMNS)]


def coverage_table(
    frame: pd.DataFrame, truth: str = "true_score", by: Sequence[str] = ("method",)
) -> pd.DataFrame:
    """Empirical coverage and mean width of intervals against ``truth``, per ``by``."""
    rows = frame.dropna(subset=["lower", "upper", truth])
    inside = (rows["lower"] <= rows[truth]) & (rows[truth] <= rows["upper"])
    grouped = rows.assign(inside=inside, width=rows["upper"] - rows["lower"]).groupby(list(by))
    return pd.DataFrame(
        {
            "coverage": grouped["inside"].mean(),
            "mean_width": grouped["width"].mean(),
            "cells": grouped.size(),
        }
    )
