"""Extrapolation warnings: when a prediction reaches beyond what the references vouch for.

A cell is warned when the model's own scores (pooled over its tasks, or the cell's) lie
beyond the references' range by more than their sampling error — the second paper's
failure mode, new models better than every reference — or when the model lies outside
the references' region of the perspective space, judged against references re-observed at
the targets' budget. A warned cell's interval is stretched to hold its own sampling
interval (:func:`widen_warned`).

References
----------
"How Benchmark Prediction from Fewer Data Misses the Mark" (extrapolation regime).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import ndtri  # the normal quantile; scipy.stats takes 0.5 s to import

from pkps_core.methods import PredictionContext
from pkps_core.space.kernels import affinity_from_sums, distance_from_affinity
from pkps_core.space.prepare import prepare_cache
from pkps_core.trust.cells import (
    allowed_reference_stack,
    sampling_error,
    score_range,
    task_item_sd,
)
from pkps_core.trust.intervals import DEFAULT_LEVEL, OUTLIER_ALPHA, conformal_outlier_threshold
from pkps_core.trust.responses import length_reason, response_length_outliers

# Level of the region check's conformal outlier test (see region_distances).
REGION_ALPHA = OUTLIER_ALPHA
# One-sided 95 % normal quantile: how many standard errors a sample score must lie beyond
# the references' range before it counts as beyond it.
SAMPLE_Z = 1.645
# Warned cells with at least this many responses get intervals that also hold their own
# sampling interval (widen_warned).
WIDEN_MIN_RESPONSES = 4


def _nearest_reference(
    distances: np.ndarray, references: np.ndarray, allowed: np.ndarray
) -> np.ndarray:
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    return np.where(usable, distances[:, :, None], np.inf).min(axis=1)


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
    affinity, _ = affinity_from_sums(sums[best], "exclude")
    return distance_from_affinity(affinity)[0]


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
    return context.cached("region", lambda: _region_distances(context))


def region_distances_among(
    context: PredictionContext, copy_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`region_distances` with each reference's budget copy already among the
    context's models: ``copy_of[i]`` is the row of model i's copy (−1: none), a model
    subsampled at random to the region budget as :func:`_budget_copies` draws one — e.g.
    a predictor profile's first shadow of each reference, observed at the profile's
    budget. The distances are the space's own U-statistic D; no model is added."""
    return context.cached("region", lambda: _region_distances(context, copy_of=copy_of))


def _region_distances(context: PredictionContext, copy_of=None) -> tuple[np.ndarray, np.ndarray]:
    references = context.training_references
    if context.space_unavailable("pkps") is not None:  # score-only: no region check
        return np.full(references.shape, np.nan), np.full(len(context.tasks), np.inf)
    space = context.pkps
    copies = None
    if copy_of is None:
        copies, copy_names = _budget_copies(context, region_budget(context), references)
    if copies is None:  # the copies are among the models (or the models are at the budget)
        distances = _u_distances(space)
        originals = np.arange(len(context.models))
        copy_index = originals if copy_of is None else np.asarray(copy_of)
    else:
        from pkps_core.space import PerspectiveSpace  # here: scikit-learn takes ~1 s to import

        augmented = pd.concat([context.prepared.frame, copies], ignore_index=True)
        params = {**context.space_params, "query_kernel": "rbf"}
        params["query_bandwidth"] = space.query_bandwidth_
        params["self_pairs"] = "exclude"  # the approximation error is checked on these D
        if space.response_kernel == "rbf":
            params["response_bandwidth"] = space.response_bandwidth_
        fit = PerspectiveSpace(**params).fit(prepare_cache(augmented, validated=True))
        models, distances = fit.models_, _u_distances(fit)
        position = {model: k for k, model in enumerate(models)}
        originals = np.array([position[model] for model in context.models])
        copy_index = np.array([position.get(name, -1) if name else -1 for name in copy_names])
    nearest = _nearest_reference(
        distances[np.ix_(originals, originals)], references, context.allowed()
    )
    calibration = np.full(references.shape, np.nan)
    has_copy = copy_index >= 0
    own = _nearest_reference(
        distances[np.ix_(copy_index[has_copy], originals)],
        references,
        context.allowed("family")[has_copy],
    )
    calibration[has_copy] = np.where(
        np.isfinite(references[has_copy]) & np.isfinite(own), own, np.nan
    )
    threshold = np.array(
        [conformal_outlier_threshold(calibration[:, t]) for t in range(len(context.tasks))]
    )
    return nearest, threshold


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
        allowed = context.allowed()
    sample, n = context.sample, np.maximum(context.n_responses, 1)
    references = context.training_references
    sd = np.nan_to_num(task_item_sd(context))
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
    flagged when at least one of four checks fires. "References" are the models whose
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

    4. **The model answers unlike every reference** (model level, new models only):
       its mean log response length lies beyond the allowed references' range by more
       than the shadows' do at the targets' budget, a conformal outlier at 5 %
       (:func:`pkps_core.trust.responses.response_length_outliers`). The only check that
       can fire on a model observed by its responses alone when the space does not set
       it apart: on AlpacaEval it is what finds the FuseChat models.

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
    allowed = context.allowed()
    nearest, threshold = region_distances(context)
    position = pooled_score_position(context, allowed)
    stack = allowed_reference_stack(context.training_references, allowed)
    finite = np.isfinite(stack)
    n_refs = finite.sum(axis=1)
    with np.errstate(all="ignore"):
        ref_min = np.where(finite, stack, np.inf).min(axis=1)
        ref_max = np.where(finite, stack, -np.inf).max(axis=1)
    sample = context.sample
    noise = SAMPLE_Z * np.nan_to_num(sampling_error(context))
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
    lengths, features, _ = response_length_outliers(context)
    for i in np.flatnonzero(lengths):  # check 4
        said = length_reason(context, i, features)
        model_reason[i] = f"{model_reason[i]}; {said}" if model_reason[i] else said
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
    context: PredictionContext, level: float = DEFAULT_LEVEL, *, bounded: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the normal-approximation interval of its full-task score from its own
    responses alone: ``sample ± z · s_t / sqrt(n)`` (``z`` the two-sided normal quantile of
    ``level``, ``s_t`` the task's pooled within-cell item SD), clipped to the score range.
    NaN where the cell has no scored responses. It reads no reference, so it does not
    depend on where the references lie (the finite-population correction is left out,
    which only widens it).

    With ``bounded``, the item SD is at least the Bhatia–Davis bound at the cell's sample
    score, ``sqrt((high − x̄)(x̄ − low))`` (the largest SD scores in [low, high] with that
    mean can have): the pooled ``s_t`` is dominated by the many models near the range's
    edge and understates the spread of a model in its middle — the warned cells whose
    interval this is meant to hold."""
    low, high = score_range(context)
    error = sampling_error(context)
    if bounded:
        with np.errstate(invalid="ignore"):
            spread = np.sqrt(np.clip((high - context.sample) * (context.sample - low), 0, None))
            n = np.maximum(context.n_responses, 1)
            error = np.fmax(error, spread / np.sqrt(n))
    half = float(ndtri(0.5 + level / 2.0)) * error
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
    *,
    min_responses: int = WIDEN_MIN_RESPONSES,
    bounded: bool = False,
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
    interval are left as they are; their warning is the signal. That is the rule of the
    papers' protocols; with new models (:mod:`pkps_core.trust.columns`) the cells widen
    from ``min_responses=1`` with the ``bounded`` SD of :func:`own_sample_interval`.

    Returns
    -------
    lower, upper : ndarray (n_models, n_tasks)
    widened : ndarray of bool — where the interval changed.
    """
    own_low, own_high = own_sample_interval(context, level, bounded=bounded)
    usable = flags & np.isfinite(lower) & np.isfinite(upper) & np.isfinite(own_low)
    usable &= context.n_responses >= min_responses
    new_lower = np.where(usable, np.fmin(lower, own_low), lower)
    new_upper = np.where(usable, np.fmax(upper, own_high), upper)
    widened = usable & ((new_lower < lower) | (new_upper > upper))
    return new_lower, new_upper, widened


# The checks' reasons (extrapolation_warnings) in words: (marks of the reason's text,
# the sentence part "it …", the short label tables show).
REASON_WORDS = (
    (
        ("pooled sample score", "above every"),
        "scores above every reference's over all its tasks",
        "above every reference (model)",
    ),
    (
        ("pooled sample score", "below every"),
        "scores below every reference's over all its tasks",
        "below every reference (model)",
    ),
    (
        ("own sample score", "above every reference"),
        "scores above every reference on this task",
        "above every reference (task)",
    ),
    (
        ("own sample score", "below every reference"),
        "scores below every reference on this task",
        "below every reference (task)",
    ),
    (
        ("outside the references' region",),
        "lies outside the references' region of the perspective space",
        "outside the region",
    ),
    (
        ("responses longer than every reference's",),
        "answers at greater length than every reference",
        "longer responses than every reference",
    ),
    (
        ("responses shorter than every reference's",),
        "answers more briefly than every reference",
        "shorter responses than every reference",
    ),
    (
        ("interval is the score range",),
        "has the score range as its interval: nothing observed like it bounds it",
        "interval: the score range",
    ),
    (
        ("interval widened",),
        "has its interval widened to hold its own sampling interval",
        "interval widened",
    ),
)


def reason_words(reason: str, *, short: bool = False) -> list[str]:
    """The checks named in an ``extrapolation_reason`` (:func:`extrapolation_warnings`),
    each as a sentence part ("scores above every reference on this task") or, with
    ``short``, as a table's label ("above every reference (task)"); the reason itself when
    no check's words are found in it (empty for an empty reason)."""
    reason = str(reason or "")
    said = [
        label if short else part
        for marks, part, label in REASON_WORDS
        if all(mark in reason for mark in marks)
    ]
    return said or ([reason] if reason else [])
