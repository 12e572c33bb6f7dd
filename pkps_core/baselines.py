"""Baselines and ensembles: IRT, LRMC, Random-Sampling-Learn, AIPW, PKPS completion, ensemble.

Each method is a plain array function (testable against the math in isolation) plus an
adapter ``fn(context) -> MethodResult`` on the models × tasks grid of
:mod:`pkps_core.predict`; the adapters are collected in :data:`BASELINE_METHODS`.

Information rules, shared by every adapter. A cell (i, t) may use

* the target model's own observed responses and their scores (its input, like the sample
  score), and
* *references* — other models' full-task scores and item-level scores — only from models
  that the holdout allows: not the model itself (``holdout="model"``) or not its whole
  family (``holdout="family"``), and never a model marked as a target.

So under family holdout no quantity that predicts a family's cells reads that family's
``reference_score`` (``tests/test_baselines.py`` perturbs them to check it), nor its
siblings' item scores.

Where a method cannot apply, the cell is NaN and its note says why in plain words, e.g.
"irt: not applicable — task scores are not binary".

PKPS completion (cells with no responses) lives here as :func:`whitened_knn_completion`
and is what the ``pkps`` and ``dkps`` methods of :mod:`pkps_core.predict` use on missing
cells: the PKPS appendix ("Regressor") says *all* embedding methods regress the whitened
residual on completion, so the two stay comparable. Observed cells keep plain KNN on the
references.

References
----------
PKPS: Helm et al., "Benchmark Prediction with Sparse and Unpaired Cached Responses",
appendix paragraphs "Regressor", "Baselines", "Ensemble".
Second paper: "How Benchmark Prediction from Fewer Data Misses the Mark" — the method list
(Random-Sampling-Learn) and AIPW, Eqs. (2)–(3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.spatial.distance import cdist
from scipy.special import expit, log_expit
from sklearn.linear_model import Ridge, RidgeCV
from threadpoolctl import threadpool_limits

from pkps_core.knn import weighted_knn

if TYPE_CHECKING:
    from pkps_core.predict import MethodResult, PredictionContext

LOGIT_EPS = 1e-3
LRMC_RANK = 2
LRMC_LAMBDA = 0.1
LRMC_ITERATIONS = 40
LRMC_INITS = 10
CROSS_FIT_FOLDS = 5
ALPHA_GRID = np.linspace(0.0, 1.0, 21)
RS_LEARN_ALPHAS = (0.1, 1.0, 10.0)
AIPW_ALPHA = 10.0
MIN_REFERENCES = 5
MIN_BLOCK = 5
ABILITY_BOUND = 4.0
RASCH_RIDGE = 1e-2
_BATCH_ELEMENTS = 2_000_000


# ----------------------------------------------------------------------------- whitening


def logit(scores: np.ndarray, eps: float = LOGIT_EPS) -> np.ndarray:
    """``log(p / (1 − p))`` of scores clipped to ``[eps, 1 − eps]``."""
    clipped = np.clip(np.asarray(scores, dtype=float), eps, 1.0 - eps)
    return np.log(clipped) - np.log1p(-clipped)


def whiten(
    scores: np.ndarray, observed: np.ndarray, eps: float = LOGIT_EPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logit, then per-task standardisation over the observed cells.

    Parameters
    ----------
    scores : ndarray (..., n_models, n_tasks)
    observed : ndarray of bool, same shape
    eps : float
        Logit clip.

    Returns
    -------
    z : ndarray, same shape (0 where not observed)
    mean, scale : ndarray (..., 1, n_tasks)
        Per-task mean and standard deviation of the observed logits (scale 1 where a task
        has fewer than two observed cells or no spread).
    """
    logits = np.where(observed, logit(np.where(observed, scores, 0.5), eps), 0.0)
    count = observed.sum(axis=-2, keepdims=True)
    safe = np.maximum(count, 1)
    mean = logits.sum(axis=-2, keepdims=True) / safe
    var = (np.where(observed, logits - mean, 0.0) ** 2).sum(axis=-2, keepdims=True) / safe
    scale = np.sqrt(var)
    scale = np.where((count >= 2) & (scale > 1e-8), scale, 1.0)
    z = np.where(observed, (logits - mean) / scale, 0.0)
    return z, mean, scale


def unwhiten(z: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Invert :func:`whiten`: back to the score scale through the logistic function."""
    return expit(z * scale + mean)


def _solve_spd(gram: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve many small SPD systems ``gram x = rhs`` by a vectorised Cholesky factorisation.

    ``np.linalg.solve`` pays a per-matrix overhead that dominates for millions of 3 × 3
    systems; looping over the (tiny) dimension instead keeps every step one array op.

    Parameters
    ----------
    gram : ndarray (..., k, k), symmetric positive definite
    rhs : ndarray (..., k)
    """
    k = gram.shape[-1]
    lower = np.zeros_like(gram)
    for j in range(k):
        diagonal = gram[..., j, j] - (lower[..., j, :j] ** 2).sum(axis=-1)
        lower[..., j, j] = np.sqrt(diagonal)
        for i in range(j + 1, k):
            off = gram[..., i, j] - (lower[..., i, :j] * lower[..., j, :j]).sum(axis=-1)
            lower[..., i, j] = off / lower[..., j, j]
    y = np.zeros_like(rhs)
    for i in range(k):
        y[..., i] = (rhs[..., i] - (lower[..., i, :i] * y[..., :i]).sum(axis=-1)) / lower[..., i, i]
    x = np.zeros_like(rhs)
    for i in reversed(range(k)):
        tail = (lower[..., i + 1 :, i] * x[..., i + 1 :]).sum(axis=-1)
        x[..., i] = (y[..., i] - tail) / lower[..., i, i]
    return x


def _ridge_sweep(
    weight: np.ndarray, response: np.ndarray, design: np.ndarray, lam: float
) -> np.ndarray:
    """Row-wise weighted ridge: for each row n, solve over the columns t of ``response``.

    weight, response : (..., n, t); design : (..., t, k). Returns (..., n, k).
    """
    k = design.shape[-1]
    outer = (design[..., :, None] * design[..., None, :]).reshape(*design.shape[:-1], k * k)
    gram = np.matmul(weight, outer).reshape(*response.shape[:-1], k, k)
    gram = gram + lam * np.eye(k)
    rhs = np.matmul(response, design)
    return _solve_spd(gram, rhs)


def _alternating_ridge(
    z: np.ndarray,
    observed: np.ndarray,
    rank: int,
    lam: float,
    n_iter: int,
    n_init: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Fit ``z_ij ≈ mu + a_i + b_j + u_i · v_j`` by alternating ridge, batched over problems.

    Rows ``[a_i, u_i]`` and columns ``[b_j, v_j]`` are solved in turn as ridge regressions
    with penalty ``lam`` on every coefficient (biases included); ``mu`` is re-estimated as
    the mean observed residual after each sweep. ``n_init`` random initialisations of the
    factors (N(0, 0.1²); biases start at 0) run side by side and their fitted matrices
    are averaged.

    Parameters
    ----------
    z, observed : ndarray (n_problems, n_models, n_tasks)

    Returns
    -------
    ndarray (n_problems, n_models, n_tasks): the averaged fit, every cell.
    """
    n_problems, n_rows, n_cols = z.shape
    n_init = n_init if rank > 0 else 1
    weight = observed[:, None].astype(float)
    weight_t = np.swapaxes(weight, -1, -2)
    target = np.where(observed, z, 0.0)[:, None]
    total = np.maximum(observed.sum(axis=(1, 2)), 1)[:, None]
    row_factors = 0.1 * rng.standard_normal((n_problems, n_init, n_rows, rank))
    col_factors = 0.1 * rng.standard_normal((n_problems, n_init, n_cols, rank))
    row_bias = np.zeros((n_problems, n_init, n_rows))
    col_bias = np.zeros((n_problems, n_init, n_cols))
    mu = np.broadcast_to(target.sum(axis=(2, 3)) / total, (n_problems, n_init)).copy()
    ones_cols = np.ones((n_problems, n_init, n_cols, 1))
    ones_rows = np.ones((n_problems, n_init, n_rows, 1))

    def interaction() -> np.ndarray:
        return np.matmul(row_factors, np.swapaxes(col_factors, -1, -2))

    for _ in range(n_iter):
        design = np.concatenate([ones_cols, col_factors], -1)
        response = weight * (target - mu[..., None, None] - col_bias[..., None, :])
        solution = _ridge_sweep(weight, response, design, lam)
        row_bias, row_factors = solution[..., 0], solution[..., 1:]

        design = np.concatenate([ones_rows, row_factors], -1)
        response = weight * (target - mu[..., None, None] - row_bias[..., :, None])
        solution = _ridge_sweep(weight_t, np.swapaxes(response, -1, -2), design, lam)
        col_bias, col_factors = solution[..., 0], solution[..., 1:]

        fit = row_bias[..., :, None] + col_bias[..., None, :] + interaction()
        mu = (weight * (target - fit)).sum(axis=(2, 3)) / total
    fit = mu[..., None, None] + row_bias[..., :, None] + col_bias[..., None, :] + interaction()
    return fit.mean(axis=1)


def _batched(
    z: np.ndarray, observed: np.ndarray, rank: int, lam: float, n_iter: int, n_init: int, rng
) -> np.ndarray:
    """:func:`_alternating_ridge` in chunks of problems, so memory stays bounded."""
    n_problems, n_rows, n_cols = z.shape
    per_problem = max(1, (n_init if rank > 0 else 1) * n_rows * n_cols * (rank + 1) ** 2)
    chunk = max(1, _BATCH_ELEMENTS // per_problem)
    parts = [
        _alternating_ridge(
            z[s : s + chunk], observed[s : s + chunk], rank, lam, n_iter, n_init, rng
        )
        for s in range(0, n_problems, chunk)
    ]
    return np.concatenate(parts) if parts else np.empty_like(z)


def lrmc_complete_batch(
    scores: np.ndarray,
    *,
    rank: int = LRMC_RANK,
    lam: float = LRMC_LAMBDA,
    n_iter: int = LRMC_ITERATIONS,
    n_init: int = LRMC_INITS,
    eps: float = LOGIT_EPS,
    random_state: int | None = 0,
) -> np.ndarray:
    """:func:`lrmc_complete` for a stack of matrices (NaN = unobserved), one fit each."""
    scores = np.asarray(scores, dtype=float)
    observed = np.isfinite(scores)
    z, mean, scale = whiten(scores, observed, eps)
    rng = np.random.default_rng(random_state)
    fitted = _batched(z, observed, rank, lam, n_iter, n_init, rng)
    return unwhiten(fitted, mean, scale)


def lrmc_complete(
    scores: np.ndarray,
    *,
    rank: int = LRMC_RANK,
    lam: float = LRMC_LAMBDA,
    n_iter: int = LRMC_ITERATIONS,
    n_init: int = LRMC_INITS,
    eps: float = LOGIT_EPS,
    random_state: int | None = 0,
) -> np.ndarray:
    """Low-rank completion of a models × tasks score matrix as in BenchPress.

    Logit (scores clipped to ``[eps, 1 − eps]``), per-task z-score over the observed cells,
    then ``z_ij ≈ mu + a_i + b_j + u_i · v_j`` with rank-``rank`` factors, fitted by
    alternating ridge (penalty ``lam`` on factors and biases, ``mu`` re-estimated) for
    ``n_iter`` sweeps, averaged over ``n_init`` random initialisations in z-space, and
    mapped back (un-standardise, logistic).

    Parameters
    ----------
    scores : ndarray (n_models, n_tasks)
        Scores in [0, 1]; NaN marks unobserved cells.
    rank, lam, n_iter, n_init : int, float, int, int
        2, 0.1, 40 and 10 as in the PKPS appendix "Baselines" (which used 5 inits).
    eps : float
        Logit clip.
    random_state : int, optional
        Seed of the initialisations.

    Returns
    -------
    ndarray (n_models, n_tasks)
        The fitted matrix at every cell (observed cells are fitted, not copied; use
        cross-fitting, as :func:`lrmc_predictions` does, for honest predictions there).

    References
    ----------
    Zeng and Papailiopoulos (2026), BenchPress; PKPS appendix "Baselines".
    """
    stacked = lrmc_complete_batch(
        np.asarray(scores, dtype=float)[None],
        rank=rank,
        lam=lam,
        n_iter=n_iter,
        n_init=n_init,
        eps=eps,
        random_state=random_state,
    )
    return stacked[0]


def two_way_bias(
    scores: np.ndarray, *, lam: float = LRMC_LAMBDA, n_iter: int = LRMC_ITERATIONS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The whitening of the completion regressors: logit → per-task z → ``mu + a_i + b_j``.

    The same pipeline as :func:`lrmc_complete` with rank 0 (PKPS appendix "Regressor":
    the KNN and LRMC completions differ only in how they model the residual).

    Parameters
    ----------
    scores : ndarray (n_problems, n_models, n_tasks), NaN = unobserved

    Returns
    -------
    residual : ndarray, same shape: ``z − bias`` on observed cells, NaN elsewhere
    bias : ndarray, same shape: ``mu + a_i + b_j`` at every cell (z-space)
    mean, scale : ndarray (n_problems, 1, n_tasks), to invert with :func:`unwhiten`
    """
    scores = np.asarray(scores, dtype=float)
    observed = np.isfinite(scores)
    z, mean, scale = whiten(scores, observed)
    bias = _batched(z, observed, 0, lam, n_iter, 1, np.random.default_rng(0))
    residual = np.where(observed, z - bias, np.nan)
    return residual, bias, mean, scale


# ----------------------------------------------------------------------------- IRT (Rasch)


def rasch_fit(
    responses: np.ndarray, *, ridge: float = RASCH_RIDGE
) -> tuple[np.ndarray, np.ndarray]:
    """Item difficulties of a 1PL (Rasch) model by maximum likelihood with L-BFGS.

    ``P(s_ij = 1) = sigmoid(theta_i − b_j)``; abilities and difficulties are estimated
    jointly (joint maximum likelihood) on a fully observed block. A small ridge
    ``ridge/2 (‖theta‖² + ‖b‖²)`` fixes the location (the likelihood only sees
    ``theta − b``) and keeps all-correct / all-wrong rows and items finite.

    Parameters
    ----------
    responses : ndarray (n_models, n_items) of 0/1, no missing entries

    Returns
    -------
    difficulties : ndarray (n_items,)
    abilities : ndarray (n_models,)

    References
    ----------
    Rasch (1960); Liu and Nocedal (1989); PKPS appendix "Baselines".
    """
    y = np.asarray(responses, dtype=float)
    n_models, n_items = y.shape

    def objective(params: np.ndarray) -> tuple[float, np.ndarray]:
        theta, b = params[:n_models], params[n_models:]
        eta = theta[:, None] - b[None, :]
        nll = -(y * log_expit(eta) + (1 - y) * log_expit(-eta)).sum()
        g = expit(eta) - y
        grad = np.concatenate([g.sum(axis=1) + ridge * theta, -g.sum(axis=0) + ridge * b])
        return nll + 0.5 * ridge * float(params @ params), grad

    start = np.concatenate([np.zeros(n_models), -logit(y.mean(axis=0), 0.01)])
    # A single BLAS thread: L-BFGS-B's tiny dense updates slow down by ~50x when BLAS
    # threads contend with the rest of the process.
    with threadpool_limits(limits=1, user_api="blas"):
        result = minimize(objective, start, jac=True, method="L-BFGS-B")
    return result.x[n_models:], result.x[:n_models]


def rasch_ability(
    responses: np.ndarray, difficulties: np.ndarray, bound: float = ABILITY_BOUND
) -> float:
    """A model's ability by bounded scalar maximum likelihood, in ``[−bound, bound]``."""
    y = np.asarray(responses, dtype=float)
    b = np.asarray(difficulties, dtype=float)

    def nll(theta: float) -> float:
        eta = theta - b
        return -float((y * log_expit(eta) + (1 - y) * log_expit(-eta)).sum())

    result = minimize_scalar(nll, bounds=(-bound, bound), method="bounded")
    return float(np.clip(result.x, -bound, bound))


def largest_full_block(
    answered: np.ndarray, min_rows: int = MIN_BLOCK, min_cols: int = MIN_BLOCK
) -> tuple[np.ndarray, np.ndarray]:
    """A large fully observed (model × item) block, greedily.

    Items are ordered by how many models answered them; for every prefix of that order
    the models that answered the whole prefix form a full block, and the prefix of largest
    area (models × items) with at least ``min_rows`` models is returned. Exact for paired
    designs; a heuristic otherwise (the maximum biclique is NP-hard).

    Returns
    -------
    rows, cols : ndarray of int (empty when no block reaches ``min_rows × min_cols``)
    """
    answered = np.asarray(answered, dtype=bool)
    empty = np.array([], dtype=int)
    if answered.size == 0:
        return empty, empty
    order = np.argsort(-answered.sum(axis=0), kind="stable")
    complete = np.logical_and.accumulate(answered[:, order], axis=1)
    counts = complete.sum(axis=0)
    area = np.where(counts >= min_rows, counts * np.arange(1, len(order) + 1), 0)
    best = int(np.argmax(area))
    if area[best] == 0 or best + 1 < min_cols:
        return empty, empty
    return np.flatnonzero(complete[:, best]), np.sort(order[: best + 1])


# ----------------------------------------------------------------------------- RS-Learn, AIPW


def rs_learn_predict(
    core_sources: np.ndarray,
    full_sources: np.ndarray,
    core_targets: np.ndarray,
    alphas: tuple[float, ...] = RS_LEARN_ALPHAS,
) -> np.ndarray:
    """Random-Sampling-Learn: ridge from core-set item scores to the full-task mean.

    ``RidgeCV(alphas)`` (efficient leave-one-out choice of the penalty) is fit on the
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
    model = RidgeCV(alphas=alphas).fit(np.asarray(core_sources), np.asarray(full_sources))
    return model.predict(np.atleast_2d(core_targets))


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
    target's score ``s(f, z)``; it is ``Ridge(alpha)`` fit on the core items C and used on
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
    g = Ridge(alpha=alpha).fit(features[core], np.asarray(target_core_scores, dtype=float))
    predicted_rest = g.predict(features[rest]) if len(rest) else np.empty(0)
    return aipw_estimate(target_core_scores, g.predict(features[core]), predicted_rest)


# ----------------------------------------------------------------------------- ensemble


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


# ----------------------------------------------------------------------------- adapters


def _memo(context: PredictionContext, key, compute: Callable):
    """Cache a result on the context, so methods that share a component compute it once."""
    store = context.__dict__.setdefault("_baselines_memo", {})
    if key not in store:
        store[key] = compute()
    return store[key]


def _seed(context: PredictionContext) -> int:
    seed = context.space_params.get("random_state", 0)
    return 0 if seed is None else int(seed)


def _groups(context: PredictionContext) -> np.ndarray:
    """Holdout unit per model: its family (holdout="family") or itself (holdout="model")."""
    if context.holdout == "family":
        return np.unique(context.families, return_inverse=True)[1]
    return np.arange(len(context.models))


def _allowed(context: PredictionContext) -> np.ndarray:
    """``allowed[i, j]``: model j's references and item scores may inform model i."""
    groups = _groups(context)
    allowed = groups[:, None] != groups[None, :]
    if context.targets is not None:
        allowed &= ~np.asarray(context.targets, dtype=bool)[None, :]
    return allowed


def _item_tables(context: PredictionContext) -> list[np.ndarray]:
    """Per task (in ``context.tasks`` order) the models × items matrix of scores (NaN = none)."""

    def build() -> list[np.ndarray]:
        frame = context.records
        scores = (
            frame["score"].to_numpy(dtype=float)
            if "score" in frame.columns
            else np.full(len(frame), np.nan)
        )
        model_pos = np.searchsorted(context.models, frame["model"].to_numpy(dtype=str))
        task_pos = np.searchsorted(context.tasks, frame["task"].to_numpy(dtype=str))
        query_ids = frame["query_id"].to_numpy(dtype=str)
        tables = []
        for t in range(len(context.tasks)):
            rows = np.flatnonzero(task_pos == t)
            items, item_pos = np.unique(query_ids[rows], return_inverse=True)
            table = np.full((len(context.models), len(items)), np.nan)
            table[model_pos[rows], item_pos] = scores[rows]
            tables.append(table)
        return tables

    return _memo(context, "item_tables", build)


def _result(prediction: np.ndarray, notes: np.ndarray) -> MethodResult:
    from pkps_core.predict import MethodResult

    return MethodResult(prediction, notes)


def _empty(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    shape = (len(context.models), len(context.tasks))
    return np.full(shape, np.nan), np.full(shape, "", dtype=object)


def _training_matrix(context: PredictionContext, i: int, allowed: np.ndarray) -> np.ndarray:
    """The matrix a model's completion may see: allowed models' references, its own samples."""
    matrix = np.where(allowed[i][:, None], context.training_references, np.nan)
    matrix[i] = context.sample[i]
    return matrix


def irt_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """1PL (Rasch) IRT prediction of every cell of binary tasks.

    Per task and holdout group: difficulties by :func:`rasch_fit` on
    :func:`largest_full_block` of the allowed models' item scores (at least 5 × 5), the
    model's ability by :func:`rasch_ability` on its own answered block items, and the
    prediction ``mean_j sigmoid(theta − b_j)`` over the block's items.
    """
    prediction, notes = _empty(context)
    allowed = _allowed(context)
    groups = _groups(context)
    fits: dict = {}
    for t, table in enumerate(_item_tables(context)):
        answered = np.isfinite(table)
        values = table[answered]
        has_scores = answered.any(axis=1)
        notes[:, t] = np.where(has_scores, "", "irt: no scored responses in this cell")
        if not np.isin(values, (0.0, 1.0)).all():
            notes[has_scores, t] = "irt: not applicable — task scores are not binary"
            continue
        for group in np.unique(groups[has_scores]):
            members = np.flatnonzero((groups == group) & has_scores)
            pool = allowed[members[0]]
            rows, cols = largest_full_block(answered & pool[:, None])
            if len(rows) == 0:
                notes[members, t] = (
                    f"irt: not applicable — no fully observed block of ≥{MIN_BLOCK} other "
                    f"models × ≥{MIN_BLOCK} items in this task"
                )
                continue
            key = (t, rows.tobytes(), cols.tobytes())
            if key not in fits:
                fits[key] = rasch_fit(table[np.ix_(rows, cols)])[0]
            difficulties = fits[key]
            for i in members:
                mine = answered[i, cols]
                if not mine.any():
                    notes[i, t] = "irt: this model answered none of the calibrated items"
                    continue
                theta = rasch_ability(table[i, cols[mine]], difficulties[mine])
                prediction[i, t] = float(expit(theta - difficulties).mean())
    return prediction, notes


def lrmc_predictions(
    context: PredictionContext, n_init: int = LRMC_INITS
) -> tuple[np.ndarray, np.ndarray]:
    """LRMC on every cell, cross-fitted on observed cells.

    For each model, the matrix holds the holdout-allowed models' references and the
    model's own sample scores; its observed cells are split into up to 5 folds and each
    fold is predicted by a fit that hides it (a cell never sees its own value); its cells
    without scores are predicted by a fit on all of them.
    """

    def compute() -> tuple[np.ndarray, np.ndarray]:
        prediction, notes = _empty(context)
        allowed = _allowed(context)
        rng = np.random.default_rng(_seed(context))
        problems, fills = [], []
        for i in range(len(context.models)):
            base = _training_matrix(context, i, allowed)
            own = np.flatnonzero(np.isfinite(context.sample[i]))
            n_folds = min(CROSS_FIT_FOLDS, len(own))
            folds = rng.permutation(len(own)) % max(n_folds, 1)
            for fold in range(n_folds):
                hidden = own[folds == fold]
                matrix = base.copy()
                matrix[i, hidden] = np.nan
                problems.append(matrix)
                fills.append((i, hidden))
            rest = np.flatnonzero(~np.isfinite(context.sample[i]))
            if len(rest):
                problems.append(base)
                fills.append((i, rest))
            if len(own) <= 1:
                notes[i] = "lrmc: this model has no other scored cell; task bias only"
        if problems:
            completed = lrmc_complete_batch(
                np.stack(problems), n_init=n_init, random_state=_seed(context)
            )
            for p, (i, cells) in enumerate(fills):
                prediction[i, cells] = completed[p, i, cells]
        no_reference = ~np.isfinite(context.training_references).any(axis=0)
        prediction[:, no_reference] = np.nan
        notes[:, no_reference] = "lrmc: no reference model for this task"
        return prediction, notes

    return _memo(context, ("lrmc", n_init), compute)


def _residual_knn(
    residual: np.ndarray,
    bias: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    cells: list[tuple[int, int, int]],
    distances: np.ndarray,
    allowed: np.ndarray,
    k: int,
) -> np.ndarray:
    """Invert ``bias + KNN(residual)`` at each (problem, model, task) cell."""
    out = np.full(len(cells), np.nan)
    for c, (p, i, t) in enumerate(cells):
        values = residual[p, :, t]
        r_hat = weighted_knn(distances[i : i + 1], values, allowed[i : i + 1], k)[0]
        if np.isfinite(r_hat):
            out[c] = unwhiten(bias[p, i, t] + r_hat, mean[p, 0, t], scale[p, 0, t])
    return out


def whitened_knn_completion(context: PredictionContext, embedding: np.ndarray) -> np.ndarray:
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
        rows = np.flatnonzero(missing.any(axis=1))
        if len(rows) == 0:
            return out
        allowed = _allowed(context)
        stack = np.stack([_training_matrix(context, i, allowed) for i in rows])
        residual, bias, mean, scale = two_way_bias(stack)
        cells = [(p, i, t) for p, i in enumerate(rows) for t in np.flatnonzero(missing[i])]
        distances = cdist(embedding, embedding)
        values = _residual_knn(
            residual, bias, mean, scale, cells, distances, allowed, context.n_neighbors
        )
        for (_, i, t), value in zip(cells, values, strict=True):
            out[i, t] = value
        return out

    return _memo(context, ("completion", id(embedding)), compute)


def rs_learn_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Random-Sampling-Learn per cell, with the cell's observed items as its core set.

    The references are the allowed models with a training reference on the task that
    answered every one of the cell's items; with fewer than 5 of them the cell is "not
    applicable" (RidgeCV's leave-one-out choice of the penalty and the fit itself mean
    little on fewer).
    """
    prediction, notes = _empty(context)
    allowed = _allowed(context)
    references = context.training_references
    for t, table in enumerate(_item_tables(context)):
        answered = np.isfinite(table)
        for i in range(len(context.models)):
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
            prediction[i, t] = rs_learn_predict(
                table[np.ix_(sources, core)], references[sources, t], table[i, core]
            )[0]
    return prediction, notes


def aipw_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """AIPW per cell: the cell's observed items are C, the task's items are D.

    The sources are the allowed models that answered every item of the task (the item
    scores of the predictor's features must exist on C and on D − C); with fewer than 5
    the cell is "not applicable".
    """
    prediction, notes = _empty(context)
    allowed = _allowed(context)
    for t, table in enumerate(_item_tables(context)):
        answered = np.isfinite(table)
        complete = answered.all(axis=1)
        for i in range(len(context.models)):
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
            prediction[i, t] = aipw_predict(table[sources], table[i, core], core)
    return prediction, notes


def _observed_alphas(context: PredictionContext, distances: np.ndarray) -> dict[int, float]:
    """α of sample vs PKPS per holdout group, by leave-one-group-out validation.

    For held-out group F, every other group's scored cells are predicted by PKPS KNN
    from references outside both that group and F, and α minimises the MAE of the blend
    against those cells' references. F's scores enter nowhere.
    """
    groups = _groups(context)
    allowed = _allowed(context)
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
    groups = _groups(context)
    allowed = _allowed(context)
    rng = np.random.default_rng(_seed(context))
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
    lrmc = lrmc_complete_batch(stack, random_state=_seed(context))
    residual, bias, mean, scale = two_way_bias(stack)
    collected: dict[int, list] = {}
    for p, (hidden, group) in enumerate(zip(hidden_cells, owners, strict=True)):
        cells = [(p, int(i), int(t)) for i, t in hidden]
        mask = allowed & (groups != group)[None, :]
        knn = _residual_knn(
            residual, bias, mean, scale, cells, distances, mask, context.n_neighbors
        )
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
    """The PKPS appendix "Ensemble".

    Scored cells: ``α·sample + (1 − α)·PKPS`` with α per held-out group (family under
    family holdout, model under model holdout) from :data:`ALPHA_GRID` by leave-one-group-
    out validation (:func:`_observed_alphas`). Cells with no responses:
    ``α·LRMC + (1 − α)·PKPS completion`` with α by held-out cross-validation
    (:func:`_missing_alphas`). Cells with responses but no scores: PKPS alone.
    """
    prediction, notes = _empty(context)
    space = context.pkps
    distances = cdist(space.embedding_, space.embedding_)
    pkps_knn = context.knn(space)
    completion = whitened_knn_completion(context, space.embedding_)
    groups = _groups(context)
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
        lrmc, _ = lrmc_predictions(context)
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


def _adapter(
    name: str, compute: Callable[[PredictionContext], tuple[np.ndarray, np.ndarray]]
) -> Callable[[PredictionContext], MethodResult]:
    def run(context: PredictionContext) -> MethodResult:
        prediction, notes = compute(context)
        return _result(prediction.copy(), notes.copy())

    run.__name__ = name.replace("-", "_")
    run.__doc__ = compute.__doc__
    return run


BASELINE_METHODS: dict[str, Callable[[PredictionContext], MethodResult]] = {
    "irt": _adapter("irt", irt_predictions),
    "lrmc": _adapter("lrmc", lrmc_predictions),
    "rs-learn": _adapter("rs-learn", rs_learn_predictions),
    "aipw": _adapter("aipw", aipw_predictions),
    "ensemble": _adapter("ensemble", ensemble_predictions),
}
