"""How far to trust each prediction: conformal intervals, extrapolation warnings, what next.

Three tools on top of :mod:`pkps_core.predict`:

* :func:`prediction_intervals` — a per-cell interval ``prediction ± q · σ(cell)`` for any
  method in :data:`~pkps_core.predict.METHODS`, by split-conformal calibration on
  held-out residuals of the reference models. ``q`` is the conformal quantile
  (:func:`conformal_quantile`) of the normalised residuals ``|ŷ − reference| / σ`` and
  ``σ`` a local difficulty (:func:`difficulty`). Intervals are clipped to the score range
  (:func:`score_range`).
* :func:`extrapolation_warnings` — a flag and a plain reason per cell when the model's
  own scores (pooled over its tasks, or the cell's) lie beyond the references' range by
  more than their sampling error (the second paper's failure mode: new models better than
  every reference), or when the model lies outside the references' region of the
  perspective space, judged against references subsampled to the same budget. A warned
  cell's interval is stretched to hold its own sampling interval (:func:`widen_warned`):
  the references that calibrated it say nothing about such a cell.
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

from pkps_core import kernels
from pkps_core.predict import METHODS, PredictionContext

DEFAULT_LEVEL = 0.9
MAX_FOLDS = 10
# Level of the region check's conformal outlier test (see region_distances).
REGION_ALPHA = 0.05
# One-sided 95 % normal quantile: how many standard errors a sample score must lie beyond
# the references' range before it counts as beyond it.
SAMPLE_Z = 1.645
SIGMA_FLOOR = 1e-3
# Warned cells with at least this many responses get intervals that also hold their own
# sampling interval (widen_warned).
WIDEN_MIN_RESPONSES = 4
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


def _sampling_error(context: PredictionContext) -> np.ndarray:
    """Per cell, the standard error of its sample score: ``s_t / sqrt(n)`` (NaN where the
    cell has no responses or the task no item SD)."""
    n = context.n_responses.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, _task_item_sd(context)[None, :] / np.sqrt(n), np.nan)


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


def _warning_allowed(context: PredictionContext) -> np.ndarray:
    """``allowed[i, j]``: j's references may inform i's cells under the context's holdout."""
    if context.holdout == "family":
        return _family_allowed(context)
    allowed = ~np.eye(len(context.models), dtype=bool)
    if context.targets is not None:
        allowed &= ~np.asarray(context.targets, dtype=bool)[None, :]
    return allowed


def _nearest_reference(
    distances: np.ndarray, references: np.ndarray, allowed: np.ndarray
) -> np.ndarray:
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    return np.where(usable, distances[:, :, None], np.inf).min(axis=1)


def conformal_outlier_threshold(values: np.ndarray, alpha: float = REGION_ALPHA) -> float:
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


def region_budget(context: PredictionContext) -> np.ndarray:
    """Responses per task of a typical warned cell: the median over the target models'
    observed cells (every model's when there are no targets); 0 where none is observed."""
    n = context.n_responses
    rows = np.ones(len(context.models), dtype=bool)
    if context.targets is not None and np.asarray(context.targets, dtype=bool).any():
        rows = np.asarray(context.targets, dtype=bool)
    budget = np.zeros(len(context.tasks), dtype=int)
    for t in range(len(context.tasks)):
        observed = n[rows, t][n[rows, t] > 0]
        if len(observed):
            budget[t] = int(np.floor(np.median(observed) + 0.5))
    return budget


def _u_distances(space) -> np.ndarray:
    """D at the space's chosen bandwidth from U-statistic affinities (self pairs dropped)."""
    sums = getattr(space, "kernel_sums_", None)
    grid = np.asarray(getattr(space, "bandwidth_grid_", []), dtype=float)
    if not sums or not len(grid):
        return space.distance_matrix_
    best = int(np.argmin(np.abs(grid - space.query_bandwidth_)))
    affinity, _ = kernels.affinity_from_sums(sums[best], "exclude")
    return kernels.distance_from_affinity(affinity)[0]


def _budget_copies(context: PredictionContext, budget: np.ndarray, references: np.ndarray):
    """Every reference model subsampled to ``budget`` responses per task (seeded).

    Returns the copies' records (model renamed, family kept) and the copy name of each
    model (None for non-references), or ``(None, None)`` when no reference has more
    responses than the budget on any task (the references already are at the budget).
    """
    is_reference = np.isfinite(references).any(axis=1)
    if not is_reference.any() or not (context.n_responses[is_reference] > budget[None, :]).any():
        return None, None
    frame = context.prepared.frame
    names = set(context.models)
    copy_of = {}
    for model in context.models[is_reference]:
        name = f"{model} [budget copy]"
        while name in names:
            name += "'"
        copy_of[model] = name
    seed = context.space_params.get("random_state", 0)
    rows = frame[frame["model"].isin(copy_of)]
    rows = rows.sample(frac=1.0, random_state=0 if seed is None else int(seed))
    rank = rows.groupby(["model", "task"], sort=False).cumcount().to_numpy()
    cap = pd.Series(budget, index=context.tasks).reindex(rows["task"]).to_numpy()
    copies = rows[rank < cap].assign(model=lambda f: f["model"].map(copy_of))
    return copies, [copy_of.get(model) for model in context.models]


def region_distances(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Nearest-reference distance of every cell, and each task's region threshold.

    Distances are PKPS distances D (Eq. 1–2 at the fitted bandwidth) from U-statistic
    affinities (the self pairs j = l dropped from A_ii), to the references the cell's
    holdout allows that have a reference on the task. The calibration set of task t: for
    every reference model with a reference on t, a copy of it subsampled at random to
    :func:`region_budget` responses per task, and the copy's distance to the nearest
    reference of another family (not a target). Targets and copies are embedded together
    in one space at the fitted bandwidth, so the calibration distances carry the same
    estimation noise as a thinly observed target's. The threshold is the order statistic
    of a conformal outlier test at :data:`REGION_ALPHA`: a distance above it has p-value
    ``(1 + #{calibration ≥ d}) / (n + 1) ≤ REGION_ALPHA``; ``inf`` (never) with fewer than
    ``1 / REGION_ALPHA − 1`` calibration copies.
    """
    store = context.__dict__.setdefault("_trust_memo", {})
    if "region" in store:
        return store["region"]
    references = context.training_references
    space = context.pkps
    budget = region_budget(context)
    copies, copy_names = _budget_copies(context, budget, references)
    if copies is None:
        distances = _u_distances(space)
        originals = np.arange(len(context.models))
        copy_index = originals
    else:
        from pkps_core.space import PerspectiveSpace, prepare_cache

        augmented = pd.concat([context.prepared.frame, copies], ignore_index=True)
        params = {**context.space_params, "query_kernel": "rbf"}
        params["query_bandwidth"] = space.query_bandwidth_
        params["self_pairs"] = "exclude"  # the approximation error is checked on these D
        if space.response_kernel == "rbf":
            params["response_bandwidth"] = space.response_bandwidth_
        fit = PerspectiveSpace(**params).fit(
            None, prepared=prepare_cache(augmented, validated=True)
        )
        position = {model: k for k, model in enumerate(fit.models_)}
        originals = np.array([position[model] for model in context.models])
        copy_index = np.array([position.get(name, -1) if name else -1 for name in copy_names])
        distances = _u_distances(fit)
    nearest = _nearest_reference(
        distances[np.ix_(originals, originals)], references, _warning_allowed(context)
    )
    calibration = np.full(references.shape, np.nan)
    has_copy = copy_index >= 0
    own = _nearest_reference(
        distances[np.ix_(copy_index[has_copy], originals)],
        references,
        _family_allowed(context)[has_copy],
    )
    calibration[has_copy] = np.where(
        np.isfinite(references[has_copy]) & np.isfinite(own), own, np.nan
    )
    threshold = np.array(
        [conformal_outlier_threshold(calibration[:, t]) for t in range(len(context.tasks))]
    )
    store["region"] = (nearest, threshold)
    return store["region"]


def pooled_score_position(
    context: PredictionContext, allowed: np.ndarray | None = None
) -> pd.DataFrame:
    """Each model's sample score pooled over its observed tasks, against the references.

    Per model i with scored tasks T_i: ``pooled`` = mean over T_i of its sample scores
    (tasks weigh equally, as in the full score), ``se`` = sqrt(Σ_t s_t² / n_it) / |T_i|
    its sampling error (s_t: the task's pooled within-cell item SD), and ``ref_min``,
    ``ref_max`` = the range over the allowed references with a reference on every task of
    T_i of their mean reference over T_i; ``n_refs`` counts them.
    """
    if allowed is None:
        allowed = _warning_allowed(context)
    sample, n = context.sample, np.maximum(context.n_responses, 1)
    references = context.training_references
    sd = np.nan_to_num(_task_item_sd(context))
    rows = []
    for i in range(len(context.models)):
        tasks = np.isfinite(sample[i])
        row = {"n_tasks": int(tasks.sum()), "n_responses": int(context.n_responses[i, tasks].sum())}
        row.update(pooled=np.nan, se=np.nan, ref_min=np.nan, ref_max=np.nan, n_refs=0)
        if tasks.any():
            row["pooled"] = float(sample[i, tasks].mean())
            row["se"] = float(np.sqrt(np.sum(sd[tasks] ** 2 / n[i, tasks])) / tasks.sum())
            usable = allowed[i] & np.isfinite(references[:, tasks]).all(axis=1)
            if usable.any():
                scores = references[np.ix_(usable, tasks)].mean(axis=1)
                row.update(ref_min=scores.min(), ref_max=scores.max(), n_refs=int(usable.sum()))
        rows.append(row)
    return pd.DataFrame(rows, index=context.models)


def extrapolation_warnings(
    context: PredictionContext, method: str, prediction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flag cells whose prediction extrapolates beyond the references.

    Every predicted cell of every method but ``sample`` (which uses no references) is
    flagged when at least one of three checks fires. "References" are the models whose
    references the cell's holdout allows (under family holdout: other families; never a
    target).

    1. **The model's pooled score lies beyond the references' range** (model level: all
       of the model's predicted cells, observed or not). With T_i the tasks where model i
       has scored responses, its pooled score is the mean over T_i of its sample scores,
       with standard error ``sqrt(Σ_t s_t² / n_it) / |T_i|`` (s_t: the task's pooled
       within-cell item SD); each reference with a reference on every task of T_i scores
       the mean of its references over T_i (:func:`pooled_score_position`). The check
       fires when the pooled score exceeds the highest reference's by more than
       :data:`SAMPLE_Z` (1.645) standard errors, or falls below the lowest by as much (at
       least two references needed). This is the second paper's failure mode — a new
       model better than every reference: nothing vouches for it, and KNN-type
       predictions are pulled back into the references' range. Pooling over tasks shrinks
       the noise by sqrt(|T_i|), so a thinly observed model can be placed where a single
       cell cannot.
    2. **The cell's own score lies beyond the task's range** (per cell): its sample score
       lies above the highest reference on the task by more than ``1.645 · s_t /
       sqrt(n)`` (its sampling error), or below the lowest by as much (at least two
       references on the task).
    3. **The model lies outside the references' region of the perspective space**
       (:func:`region_distances`): its PKPS distance D (from U-statistic affinities: the
       self pairs dropped) to the nearest reference with a reference on the task is an
       outlier at level :data:`REGION_ALPHA` (5 %) in a conformal test against the same
       distance for each reference re-observed at the targets' budget (a copy subsampled
       to :func:`region_budget` responses per task, embedded together with everyone at the
       fitted bandwidth, distance to the nearest reference of another family). Matching
       the budget matters: a model observed on a small core set sits farther from
       everyone than a fully observed reference — Eq. 1 adds a self-pair term ~1/m to
       A_ii, and fewer responses estimate the kernel mean with more noise — so a threshold
       from the fully observed references flags thin but ordinary models (on AlpacaEval,
       about half of the random-split targets).

    Why not "the prediction sits at the edge of the references' range": measured under
    the second paper's splits (``bench/trust_table.py``) it says more about the method
    than about the model. A KNN average rarely reaches the edge even for a model far
    beyond it, while methods that read the cell's own scores reach it by sampling noise:
    on AlpacaEval, where many win rates are near 0, it fired on a third or more of the
    random-split cells of ``ensemble`` and ``aipw``, with below-median errors on average.
    The edge criterion is applied to the model's own scores instead (checks 1 and 2),
    with an allowance for their noise.

    Returns
    -------
    flags : ndarray of bool (n_models, n_tasks)
    reasons : ndarray of str (n_models, n_tasks), "" where not flagged; the checks that
        fired, separated by "; ".

    Notes
    -----
    The region check is calibrated at one budget per task (the targets' median); a target
    observed far more thinly than the other targets is compared with references at the
    typical target budget, so it is flagged more easily. With fewer than 19 calibration
    references on a task the region check cannot fire (a 5 % conformal test needs them).
    The pooled score of check 1 weighs tasks equally and compares the model's scores with
    the references' on the same tasks; it is blind to a model that is beyond the range on
    some tasks and inside it on others (check 2 sees those cells when their noise allows).
    """
    shape = (len(context.models), len(context.tasks))
    flags = np.zeros(shape, dtype=bool)
    reasons = np.full(shape, "", dtype=object)
    if method == "sample":
        return flags, reasons
    allowed = _warning_allowed(context)
    nearest, threshold = region_distances(context)
    position = pooled_score_position(context, allowed)
    stack = _allowed_reference_stack(context.training_references, allowed)
    finite = np.isfinite(stack)
    n_refs = finite.sum(axis=1)
    with np.errstate(all="ignore"):
        ref_min = np.where(finite, stack, np.inf).min(axis=1)
        ref_max = np.where(finite, stack, -np.inf).max(axis=1)
    sample = context.sample
    noise = SAMPLE_Z * np.nan_to_num(_sampling_error(context))
    model_reason = [""] * shape[0]
    for i, row in enumerate(position.itertuples()):
        if row.n_refs < 2 or not np.isfinite(row.pooled):
            continue
        margin = SAMPLE_Z * row.se
        where = f"over {row.n_tasks} tasks ({row.n_responses} responses)"
        if row.pooled - margin > row.ref_max:
            model_reason[i] = (
                f"model's pooled sample score {row.pooled:.3g} {where} above every "
                f"reference's (max {row.ref_max:.3g}) by more than {SAMPLE_Z} SE ({row.se:.2g})"
            )
        elif row.pooled + margin < row.ref_min:
            model_reason[i] = (
                f"model's pooled sample score {row.pooled:.3g} {where} below every "
                f"reference's (min {row.ref_min:.3g}) by more than {SAMPLE_Z} SE ({row.se:.2g})"
            )
    for i, t in zip(*np.nonzero(np.isfinite(prediction)), strict=True):
        why = [model_reason[i]] if model_reason[i] else []
        if n_refs[i, t] >= 2 and np.isfinite(sample[i, t]):
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
        if nearest[i, t] > threshold[t]:
            why.append(
                f"outside the references' region (nearest reference at {nearest[i, t]:.3g} "
                f"> {threshold[t]:.3g}, conformal p ≤ {REGION_ALPHA:g} against references "
                "at the same budget)"
            )
        if why:
            flags[i, t] = True
            reasons[i, t] = "; ".join(why)
    return flags, reasons


def own_sample_interval(
    context: PredictionContext, level: float = DEFAULT_LEVEL
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the normal-approximation interval of its full-task score from its own
    responses alone: ``sample ± z · s_t / sqrt(n)`` (``z`` the two-sided normal quantile of
    ``level``, ``s_t`` the task's pooled within-cell item SD), clipped to the score range.
    NaN where the cell has no scored responses. It reads no reference, so it does not
    depend on where the references lie (the finite-population correction is left out,
    which only widens it)."""
    from scipy.stats import norm

    half = float(norm.ppf(0.5 + level / 2.0)) * _sampling_error(context)
    low, high = score_range(context)
    with np.errstate(invalid="ignore"):
        return (
            np.clip(context.sample - half, low, high),
            np.clip(context.sample + half, low, high),
        )


def widen_warned(
    context: PredictionContext,
    lower: np.ndarray,
    upper: np.ndarray,
    flags: np.ndarray,
    level: float = DEFAULT_LEVEL,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Warned cells' intervals stretched to also hold the cell's own sampling interval.

    A conformal interval is calibrated on references; for a cell warned as extrapolating
    (:func:`extrapolation_warnings`) the references say nothing about the cell, and the
    prediction is typically pulled back into their range, so its interval covers the
    truth far less often than ``level`` (measured: ``bench/trust_table.py``). Where the
    warned cell has at least :data:`WIDEN_MIN_RESPONSES` scored responses, its interval
    becomes the smallest one containing both the calibrated interval and
    :func:`own_sample_interval`. Thinner warned cells (with one response the sampling
    interval spans most of the score range: widening by it over-covered, 0.95–0.96 at one
    query per cell), cells without responses (completion) and cells without a calibrated
    interval are left as they are; their warning is the signal.

    Returns
    -------
    lower, upper : ndarray (n_models, n_tasks)
    widened : ndarray of bool — where the interval changed.
    """
    own_low, own_high = own_sample_interval(context, level)
    usable = flags & np.isfinite(lower) & np.isfinite(upper) & np.isfinite(own_low)
    usable &= context.n_responses >= WIDEN_MIN_RESPONSES
    new_lower = np.where(usable, np.fmin(lower, own_low), lower)
    new_upper = np.where(usable, np.fmax(upper, own_high), upper)
    widened = usable & ((new_lower < lower) | (new_upper > upper))
    return new_lower, new_upper, widened


def trust_columns(
    context: PredictionContext,
    method: str,
    prediction: np.ndarray,
    level: float = DEFAULT_LEVEL,
    *,
    n_folds: int = MAX_FOLDS,
) -> dict[str, np.ndarray]:
    """``lower``, ``upper``, ``extrapolation``, ``extrapolation_reason`` as grids.

    Warned cells' intervals are widened by :func:`widen_warned`, and their reason says so.
    """
    intervals = prediction_intervals(context, method, prediction, level, n_folds=n_folds)
    flags, reasons = extrapolation_warnings(context, method, prediction)
    lower, upper, widened = widen_warned(context, intervals.lower, intervals.upper, flags, level)
    reasons = reasons.copy()
    for i, t in zip(*np.nonzero(widened), strict=True):
        reasons[i, t] += (
            f"; interval widened to hold the cell's own {level:.0%} sampling interval "
            f"({context.n_responses[i, t]} responses)"
        )
    return {
        "lower": lower,
        "upper": upper,
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
