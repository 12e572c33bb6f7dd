"""Methods that read the cell's own scored sample: the sample score, Random-Sampling-Learn
and AIPW; and the references' task mean, the floor they are all compared with.

References
----------
Second paper: "How Benchmark Prediction from Fewer Data Misses the Mark" — the method list
(Random-Sampling-Learn) and AIPW, Eqs. (2)–(3); Robins and Rotnitzky (1995).
"""

from __future__ import annotations

import numpy as np

from pkps_core.methods.context import PredictionContext

RS_LEARN_ALPHAS = (0.1, 1.0, 10.0)
AIPW_ALPHA = 10.0
MIN_REFERENCES = 5
BATCH_BYTES = 64 << 20  # the largest array of one batch of cell fits (rs-learn, AIPW)


def mean_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """The floor every method should beat: the mean reference score of the task over the
    models allowed to inform the cell (reads nothing of the cell itself)."""
    prediction, notes = context.empty_grid()
    allowed = context.allowed()
    references = context.training_references
    usable = allowed[:, :, None] & np.isfinite(references)[None, :, :]
    counts = usable.sum(axis=1)
    totals = np.where(usable, references[None, :, :], 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        prediction = np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)
    notes[counts == 0] = "mean: no reference model for this task"
    return prediction, notes


def sample_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """The sample score: the mean of the cell's observed scores."""
    notes = np.where(np.isnan(context.sample), "no scored responses in this cell", "")
    return context.sample.copy(), notes.astype(object)


def rs_learn_predict(
    core_sources: np.ndarray,
    full_sources: np.ndarray,
    core_targets: np.ndarray,
    alphas: tuple[float, ...] = RS_LEARN_ALPHAS,
) -> np.ndarray:
    """Random-Sampling-Learn: ridge from core-set item scores to the full-task mean.

    ``RidgeCV(alphas)`` (efficient leave-one-out choice of the penalty,
    :func:`ridge_loo_fit`) is fit on the
    source models — features their scores on the core set C, target their full mean
    s̄(f, D) — and applied to the targets' core-set scores.

    Parameters
    ----------
    core_sources : ndarray (n_sources, n)
    full_sources : ndarray (n_sources,)
    core_targets : ndarray (n_targets, n) or (n,)

    Returns
    -------
    ndarray (n_targets,)

    References
    ----------
    Second paper, method list, "Random-Sampling-Learn".
    """
    coef, intercept = ridge_loo_fit(np.asarray(core_sources), np.asarray(full_sources), alphas)
    return np.atleast_2d(np.asarray(core_targets, dtype=float)) @ coef + intercept


def ridge_loo_fit(
    features: np.ndarray, target: np.ndarray, alphas: tuple[float, ...]
) -> tuple[np.ndarray, float]:
    """Ridge with an unpenalised intercept, the penalty chosen by exact leave-one-out error.

    What ``sklearn.linear_model.RidgeCV(alphas)`` computes (its efficient LOO, squared
    error, the first of tied alphas), in closed form from one SVD of the centred features:
    with ``d_k = s_k² / (s_k² + α)`` the hat matrix is ``1/n + U diag(d) Uᵀ`` and the LOO
    residual ``(y_i − ŷ_i) / (1 − h_ii)``. Here because the per-cell fits run thousands of
    times per prediction and the estimator's input checks cost more than the algebra
    (a test holds it to RidgeCV to 1e-9).

    Returns
    -------
    coef : ndarray (n_features,)
    intercept : float
    """
    features = np.asarray(features, dtype=float)
    target = np.asarray(target, dtype=float)
    n = len(target)
    feature_mean, target_mean = features.mean(axis=0), float(target.mean())
    centred, offset = features - feature_mean, target - target_mean
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    projected = u.T @ offset
    squared = s**2
    best_alpha, best_error = None, None
    for alpha in alphas:
        shrink = squared / (squared + alpha)
        fitted = u @ (shrink * projected)
        leverage = 1.0 / n + (u**2) @ shrink
        error = float(np.mean(((offset - fitted) / (1.0 - leverage)) ** 2))
        if best_error is None or error < best_error:
            best_alpha, best_error = float(alpha), error
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(squared > 0, s / (squared + best_alpha), 0.0)
    coef = vt.T @ (weights * projected)
    return coef, target_mean - float(feature_mean @ coef)


def ridge_fit(features: np.ndarray, target: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """``sklearn.linear_model.Ridge(alpha)`` (intercept not penalised) in closed form, in
    the dual when there are fewer samples than features: ``w = Xcᵀ (Xc Xcᵀ + αI)⁻¹ yc``."""
    features = np.asarray(features, dtype=float)
    target = np.asarray(target, dtype=float)
    feature_mean, target_mean = features.mean(axis=0), float(target.mean())
    centred, offset = features - feature_mean, target - target_mean
    n, p = centred.shape
    if n < p:
        coef = centred.T @ np.linalg.solve(centred @ centred.T + alpha * np.eye(n), offset)
    else:
        coef = np.linalg.solve(centred.T @ centred + alpha * np.eye(p), centred.T @ offset)
    return coef, target_mean - float(feature_mean @ coef)


def ridge_loo_fit_batch(
    features: np.ndarray, target: np.ndarray, alphas: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ridge_loo_fit` of ``G`` problems of one shape at once (one batched SVD; the
    same algebra, each problem its own penalty): features (G, n, p), target (G, n) ->
    coef (G, p), intercept (G,). A test holds it to the one-problem function."""
    features = np.asarray(features, dtype=float)
    target = np.asarray(target, dtype=float)
    n = target.shape[1]
    feature_mean, target_mean = features.mean(axis=1), target.mean(axis=1)
    centred, offset = features - feature_mean[:, None, :], target - target_mean[:, None]
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    projected = np.einsum("gnk,gn->gk", u, offset)
    squared = s**2
    best_alpha, best_error = None, None
    for alpha in alphas:
        shrink = squared / (squared + alpha)
        fitted = np.einsum("gnk,gk->gn", u, shrink * projected)
        leverage = 1.0 / n + np.einsum("gnk,gk->gn", u**2, shrink)
        error = np.mean(((offset - fitted) / (1.0 - leverage)) ** 2, axis=1)
        if best_error is None:  # the first alpha, then only a strictly smaller error
            best_alpha, best_error = np.full(len(error), float(alpha)), error
            continue
        better = error < best_error
        best_alpha = np.where(better, float(alpha), best_alpha)
        best_error = np.where(better, error, best_error)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(squared > 0, s / (squared + best_alpha[:, None]), 0.0)
    coef = np.einsum("gkp,gk->gp", vt, weights * projected)
    return coef, target_mean - np.einsum("gp,gp->g", feature_mean, coef)


def ridge_fit_batch(
    features: np.ndarray, target: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ridge_fit` of ``G`` problems of one shape at once: features (G, n, p),
    target (G, n) -> coef (G, p), intercept (G,)."""
    features = np.asarray(features, dtype=float)
    target = np.asarray(target, dtype=float)
    feature_mean, target_mean = features.mean(axis=1), target.mean(axis=1)
    centred, offset = features - feature_mean[:, None, :], target - target_mean[:, None]
    n, p = centred.shape[1:]
    if n < p:
        gram = np.matmul(centred, centred.transpose(0, 2, 1)) + alpha * np.eye(n)
        dual = np.linalg.solve(gram, offset[..., None])[..., 0]
        coef = np.einsum("gnp,gn->gp", centred, dual)
    else:
        gram = np.matmul(centred.transpose(0, 2, 1), centred) + alpha * np.eye(p)
        moment = np.einsum("gnp,gn->gp", centred, offset)
        coef = np.linalg.solve(gram, moment[..., None])[..., 0]
    return coef, target_mean - np.einsum("gp,gp->g", feature_mean, coef)


def aipw_estimate(
    observed_scores: np.ndarray,
    predicted_observed: np.ndarray,
    predicted_unobserved: np.ndarray,
) -> float:
    """The AIPW estimate of the full-benchmark mean, second paper Eq. (3).

    ``h = s̄(f, C) + 1 / (1 + n / (N − n)) · (mean_{D−C} ŝ − mean_C ŝ)`` with ``n = |C|``
    and ``N = |D|``; note ``1 / (1 + n/(N − n)) = (N − n) / N``. This is the finite-
    population mean ``(n/N) s̄_C + ((N − n)/N) ŝ_U*`` whose unobserved part is the mean
    prediction debiased by the mean residual on C, ``ŝ_U* = mean_U ŝ + (s̄_C − mean_C ŝ)``.

    The issue's wording "mean prediction on the unobserved items + mean residual on the
    observed items / (1 + n/(N − n))" is *not* the same: it equals Eq. (3) minus
    ``(n/N)(s̄_C − mean_U ŝ)``, and with a constant predictor it gives
    ``(n/N) c + ((N − n)/N) s̄_C`` rather than the sample mean. Eq. (3) is implemented.

    A constant predictor gives exactly ``s̄(f, C)``: both prediction means are taken
    relative to the same pivot, so their difference is computed as exactly 0.

    Parameters
    ----------
    observed_scores : ndarray (n,)
        s(f, z) on the core set C.
    predicted_observed, predicted_unobserved : ndarray (n,), (N − n,)
        ŝ(f, z) on C and on D − C.

    Returns
    -------
    float
    """
    observed_scores = np.asarray(observed_scores, dtype=float)
    predicted_observed = np.asarray(predicted_observed, dtype=float)
    predicted_unobserved = np.asarray(predicted_unobserved, dtype=float)
    n, n_rest = len(observed_scores), len(predicted_unobserved)
    sample_mean = float(observed_scores.mean())
    if n_rest == 0:
        return sample_mean
    pivot = predicted_observed[0]
    shift = (predicted_unobserved - pivot).mean() - (predicted_observed - pivot).mean()
    return sample_mean + n_rest / (n + n_rest) * float(shift)


def aipw_predict(
    source_scores: np.ndarray,
    target_core_scores: np.ndarray,
    core: np.ndarray,
    alpha: float = AIPW_ALPHA,
) -> float:
    """AIPW for one target: per-target ridge (Eq. 2), then the debiased mean (Eq. 3).

    The predictor ``g`` maps an item's scores by the source models, ``s(F_s, z)``, to the
    target's score ``s(f, z)``; it is ``Ridge(alpha)`` (:func:`ridge_fit`) fit on the core
    items C and used on
    every item.

    Parameters
    ----------
    source_scores : ndarray (n_sources, N)
        Source models' scores on every item of the task (no missing entries).
    target_core_scores : ndarray (n,)
        The target's scores on the core items.
    core : ndarray of int (n,)
        Column indices of the core items in ``source_scores``.
    alpha : float, default=10

    Returns
    -------
    float

    References
    ----------
    Second paper, Eqs. (2)–(3); Robins and Rotnitzky (1995).
    """
    features = np.asarray(source_scores, dtype=float).T
    core = np.asarray(core, dtype=int)
    rest = np.setdiff1d(np.arange(features.shape[0]), core)
    coef, intercept = ridge_fit(features[core], np.asarray(target_core_scores, dtype=float), alpha)
    predicted_rest = features[rest] @ coef + intercept if len(rest) else np.empty(0)
    return aipw_estimate(target_core_scores, features[core] @ coef + intercept, predicted_rest)


def rs_learn_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Random-Sampling-Learn per cell, with the cell's observed items as its core set.

    The references are the allowed models with a training reference on the task that
    answered every one of the cell's items; with fewer than 5 of them the cell is "not
    applicable" (RidgeCV's leave-one-out choice of the penalty and the fit itself mean
    little on fewer).
    """
    prediction, notes = context.empty_grid()
    allowed = context.allowed()
    references = context.training_references
    for t, table in enumerate(context.item_tables()):
        answered = np.isfinite(table)
        problems: dict[tuple[int, int], list] = {}
        for i in context.prediction_rows():
            core = np.flatnonzero(answered[i])
            if len(core) == 0:
                notes[i, t] = "rs-learn: no scored responses in this cell"
                continue
            sources = np.flatnonzero(
                allowed[i] & np.isfinite(references[:, t]) & answered[:, core].all(axis=1)
            )
            if len(sources) < MIN_REFERENCES:
                notes[i, t] = (
                    f"rs-learn: not applicable — {len(sources)} reference models answered this "
                    f"cell's {len(core)} items (needs ≥{MIN_REFERENCES})"
                )
                continue
            problems.setdefault((len(sources), len(core)), []).append((i, sources, core))
        # rs_learn_predict of every cell, the cells of one shape in one batch
        for rows, sources, core in _stacked(problems, lambda n_sources, n: n_sources * n):
            coef, intercept = ridge_loo_fit_batch(
                table[sources[:, :, None], core[:, None, :]],
                references[sources, t],
                RS_LEARN_ALPHAS,
            )
            own = table[rows[:, None], core]
            prediction[rows, t] = np.einsum("gp,gp->g", own, coef) + intercept
    return prediction, notes


def _stacked(problems: dict, width) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per shape (n_sources, n_core), the problems' rows, sources and cores stacked, (G,),
    (G, n_sources), (G, n_core), in batches whose largest array (``width(n_sources,
    n_core)`` floats a problem) stays within :data:`BATCH_BYTES`: a large store's cells do
    not meet in one array. The problems are independent, so the batches change no result."""
    batches = []
    for (n_sources, n_core), group in problems.items():
        step = max(1, BATCH_BYTES // (8 * max(1, width(n_sources, n_core))))
        for start in range(0, len(group), step):
            part = group[start : start + step]
            batches.append(tuple(np.stack([problem[k] for problem in part]) for k in range(3)))
    return batches


def aipw_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """AIPW per cell: the cell's observed items are C, the task's items are D.

    The sources are the allowed models that answered every item of the task (the item
    scores of the predictor's features must exist on C and on D − C); with fewer than 5
    the cell is "not applicable".
    """
    prediction, notes = context.empty_grid()
    allowed = context.allowed()
    for t, table in enumerate(context.item_tables()):
        answered = np.isfinite(table)
        complete = answered.all(axis=1)
        problems: dict[tuple[int, int], list] = {}
        for i in context.prediction_rows():
            core = np.flatnonzero(answered[i])
            if len(core) == 0:
                notes[i, t] = "aipw: no scored responses in this cell"
                continue
            sources = np.flatnonzero(allowed[i] & complete)
            if len(sources) < MIN_REFERENCES:
                notes[i, t] = (
                    f"aipw: not applicable — {len(sources)} reference models answered all "
                    f"{table.shape[1]} items of the task (needs ≥{MIN_REFERENCES})"
                )
                continue
            problems.setdefault((len(sources), len(core)), []).append((i, sources, core))
        # aipw_predict of every cell, the cells of one shape in one batch
        width = table.shape[1]  # a problem's largest array: every item by its sources
        for rows, sources, core in _stacked(problems, lambda n_sources, _, w=width: w * n_sources):
            prediction[rows, t] = _aipw_batch(table, rows, sources, core)
    return prediction, notes


def _aipw_batch(table, rows, sources, core) -> np.ndarray:
    """:func:`aipw_predict` of cells of one shape: ``table`` (models, items) of one task,
    each cell's row, sources (G, n_sources) and core items (G, n), sorted."""
    items = table[sources].transpose(0, 2, 1)  # (G, items, sources): the ridge's features
    observed = table[rows[:, None], core]
    on_core = np.take_along_axis(items, core[:, :, None], axis=1)
    coef, intercept = ridge_fit_batch(on_core, observed, AIPW_ALPHA)
    predicted = np.einsum("gis,gs->gi", items, coef) + intercept[:, None]
    n, n_items = core.shape[1], table.shape[1]
    sample_mean = observed.mean(axis=1)
    if n == n_items:  # every item observed: the sample mean (aipw_estimate)
        return sample_mean
    rest = np.ones(predicted.shape, dtype=bool)
    np.put_along_axis(rest, core, False, axis=1)
    predicted_observed = np.take_along_axis(predicted, core, axis=1)
    predicted_rest = predicted[rest].reshape(len(rows), n_items - n)
    pivot = predicted_observed[:, :1]
    shift = (predicted_rest - pivot).mean(axis=1) - (predicted_observed - pivot).mean(axis=1)
    return sample_mean + (n_items - n) / n_items * shift
