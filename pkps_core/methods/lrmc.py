"""Low-rank matrix completion (LRMC) as in BenchPress, and the whitening it shares.

Logit → per-task z-score → ``mu + a_i + b_j + u_i · v_j`` fitted by alternating ridge
(:func:`lrmc_complete`); with rank 0 the same pipeline is the two-way bias that the PKPS
completion regresses residuals against (:func:`two_way_bias`). Batched over many small
problems, so cross-fitting every model costs one vectorised fit.

References
----------
Zeng and Papailiopoulos (2026), BenchPress; PKPS appendix "Baselines" and "Regressor".
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.special import expit

from pkps_core.methods.context import PredictionContext

LOGIT_EPS = 1e-3
LRMC_RANK = 2
LRMC_LAMBDA = 0.1
LRMC_ITERATIONS = 40
LRMC_INITS = 10
CROSS_FIT_FOLDS = 5
_BATCH_ELEMENTS = 2_000_000


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

    ``np.linalg.solve`` pays a per-matrix overhead that dominates for millions of tiny
    systems; looping over the (tiny) dimension instead keeps every step one array op.
    :func:`_solve_planes` uses it for ranks other than 0 and 2 (which it solves in closed
    form).

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


def _solve_planes(gram: dict[tuple[int, int], np.ndarray], rhs: np.ndarray) -> np.ndarray:
    """Solve ``gram x = rhs`` for every (problem, row, initialisation).

    Parameters
    ----------
    gram : dict (j, l) → ndarray (p, n, i), j ≤ l (the upper entries)
        The entries of the symmetric positive definite matrices, one plane each.
    rhs : ndarray (k, p, n, i)

    Returns
    -------
    ndarray (k, p, n, i)
    """
    k = rhs.shape[0]
    if k == 1:  # rank 0: the biases alone
        return rhs / gram[(0, 0)]
    if k == 3:  # rank 2, the default: the adjugate in closed form, in place where it can
        a, b, c = gram[(0, 0)], gram[(0, 1)], gram[(0, 2)]
        d, e, f = gram[(1, 1)], gram[(1, 2)], gram[(2, 2)]
        cofactors = {}  # each is u·v − w·z of the named entry's minor
        for name, (u, v, w, z) in {
            "aa": (d, f, e, e),
            "ab": (c, e, b, f),
            "ac": (b, e, c, d),
            "bb": (a, f, c, c),
            "bc": (b, c, a, e),
            "cc": (a, d, b, b),
        }.items():
            cofactor = u * v
            cofactor -= w * z
            cofactors[name] = cofactor
        det = a * cofactors["aa"]  # the ridge's lam > 0 keeps it from 0
        det += b * cofactors["ab"]
        det += c * cofactors["ac"]
        x = np.empty_like(rhs)
        rows_of_adjugate = (("aa", "ab", "ac"), ("ab", "bb", "bc"), ("ac", "bc", "cc"))
        for out, names in zip(x, rows_of_adjugate, strict=True):
            np.multiply(cofactors[names[0]], rhs[0], out=out)
            out += cofactors[names[1]] * rhs[1]
            out += cofactors[names[2]] * rhs[2]
            out /= det
        return x
    full = np.empty((*gram[(0, 0)].shape, k, k))
    for (i, j), plane in gram.items():
        full[..., i, j] = full[..., j, i] = plane
    return np.moveaxis(_solve_spd(full, np.moveaxis(rhs, 0, -1)), -1, 0)


@functools.cache
def _upper_pairs(k: int) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, int], ...]]:
    """``np.triu_indices(k)`` and its pairs, made once per ``k`` (read-only arrays).

    ``_shared_ridge`` runs tens of thousands of times on a leaderboard's calibration with
    the same few ``k``; the indices cost more than the small planes' products.
    """
    upper_i, upper_j = np.triu_indices(k)
    upper_i.setflags(write=False)
    upper_j.setflags(write=False)
    return upper_i, upper_j, tuple(zip(upper_i.tolist(), upper_j.tolist(), strict=True))


def _shared_ridge(
    weight: np.ndarray, target: np.ndarray, other: np.ndarray, mu: np.ndarray, lam: float
) -> np.ndarray:
    """One side's ridge regressions with the other side held, every initialisation at once.

    For each problem p, row n and initialisation i, solves ``[bias_n, factors_n]`` over the
    columns t of ``(target − mu − bias_t) ≈ [1, factors_t] · [bias_n, factors_n]`` weighted
    by ``weight``. The observed mask is the same for every initialisation, so each sum
    over t is one matrix product per problem and coefficient with the initialisations side
    by side, and the residual is never formed: its product with the design
    ``d = [1, factors_t]`` is ``target·d − mu (w·d) − w·(bias_t d)``, and ``w·d`` is the
    Gram matrix's first row. The coefficients run along the first axis, so every step is
    an operation on whole contiguous planes.

    Parameters
    ----------
    weight, target : ndarray (p, n, t)
        The observed mask (0/1) and the observed values (0 where not observed).
    other : ndarray (k, p, t, i)
        The other side's ``[bias, factors]`` per column and initialisation.
    mu : ndarray (p, i)

    Returns
    -------
    ndarray (k, p, n, i): ``[bias_n, factors_n]``.
    """
    k = other.shape[0]
    upper_i, upper_j, pairs = _upper_pairs(k)  # the first k: the row of 1
    m = len(upper_i)
    design = other.copy()
    design[0] = 1.0
    right = np.empty((m + k, *other.shape[1:]))
    np.multiply(design[upper_i], design[upper_j], out=right[:m])
    np.multiply(other[0], design, out=right[m:])
    left = np.matmul(weight, right)  # (m + k, p, n, i)
    rhs = np.matmul(target, design)
    rhs -= left[m:]
    rhs -= mu[:, None, :] * left[:k]
    gram = {pair: left[index] for index, pair in enumerate(pairs)}
    for j in range(k):
        gram[(j, j)] = gram[(j, j)] + lam
    return _solve_planes(gram, rhs)


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

    A row with no observed cell has no say in the fit: its ridge has no data, so its bias
    and factors are exactly 0 after every row sweep, and it weighs 0 in the column sweeps
    and in ``mu``; its fitted cells are ``mu + b_j``. Such rows are therefore left out of
    the sweeps (a completion problem hides every model its holdout forbids, two thirds of
    the rows of a calibration with shadows) and given ``mu + b_j`` afterwards: the same fit,
    at the cost of the rows that have data.

    Parameters
    ----------
    z, observed : ndarray (n_problems, n_models, n_tasks)

    Returns
    -------
    ndarray (n_problems, n_models, n_tasks): the averaged fit, every cell.
    """
    n_problems, n_rows, n_cols = z.shape
    n_init = n_init if rank > 0 else 1
    # the rows' initial factors are never read (the first sweep solves the rows); they are
    # drawn so that the columns' draw, and so the fit, does not depend on the rows kept
    rng.standard_normal((n_problems, n_init, n_rows, rank))
    col_factors = 0.1 * rng.standard_normal((n_problems, n_init, n_cols, rank))
    seen = observed.any(axis=2)
    kept = max(int(seen.sum(axis=1).max(initial=0)), 1)
    if kept == n_rows:
        fit, _ = _sweeps(z, observed, col_factors, lam, n_iter)
        return fit
    rows = np.argsort(~seen, axis=1, kind="stable")[:, :kept, None]  # rows with data first
    fit_kept, base = _sweeps(
        np.take_along_axis(z, rows, axis=1),
        np.take_along_axis(observed, rows, axis=1),
        col_factors,
        lam,
        n_iter,
    )
    fit = np.repeat(base[:, None, :], n_rows, axis=1)
    np.put_along_axis(fit, rows, fit_kept, axis=1)
    return fit


def _sweeps(
    z: np.ndarray, observed: np.ndarray, col_factors: np.ndarray, lam: float, n_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    """The sweeps of :func:`_alternating_ridge` from the columns' initial factors
    ``(n_problems, n_init, n_cols, rank)``: the fit averaged over the initialisations, and
    ``mu + b_j`` so averaged (the fit of a row without data), ``(n_problems, n_cols)``.

    Each sweep solves the rows, then the columns (:func:`_shared_ridge`), then sets ``mu``
    to the mean observed residual ``Σ w (z − a_i − b_j − u_i · v_j) / Σ w``, summed as
    ``Σ w z − Σ_i a_i (Σ_j w_ij) − Σ_j b_j (Σ_i w_ij) − Σ_i u_i · (Σ_j w_ij v_j)``: no
    array of every (initialisation, row, column) is formed until the averaged fit."""
    n_problems, n_rows, n_cols = z.shape
    n_init, rank = col_factors.shape[1], col_factors.shape[-1]
    weight = observed.astype(float)
    weight_t = np.ascontiguousarray(np.swapaxes(weight, 1, 2))
    target = np.where(observed, z, 0.0)
    target_t = np.ascontiguousarray(np.swapaxes(target, 1, 2))
    total = np.maximum(observed.sum(axis=(1, 2)), 1)[:, None]
    target_sum = target.sum(axis=(1, 2))[:, None]
    row_count, col_count = weight.sum(axis=2), weight.sum(axis=1)
    mu = np.broadcast_to(target_sum / total, (n_problems, n_init)).copy()
    # [bias, factors] per coefficient, then problem, row / column and initialisation:
    # (rank + 1, n_problems, n, n_init)
    rows = np.zeros((rank + 1, n_problems, n_rows, n_init))
    cols = np.zeros((rank + 1, n_problems, n_cols, n_init))
    cols[1:] = np.transpose(col_factors, (3, 0, 2, 1))
    for _ in range(n_iter):
        rows = _shared_ridge(weight, target, cols, mu, lam)
        cols = _shared_ridge(weight_t, target_t, rows, mu, lam)
        weighted = np.matmul(weight, cols[1:])  # (rank, n_problems, n_rows, n_init)
        explained = (
            np.einsum("pni,pn->pi", rows[0], row_count)
            + np.einsum("pti,pt->pi", cols[0], col_count)
            + (weighted * rows[1:]).sum(axis=(0, 2))
        )
        mu = (target_sum - explained) / total
    interaction = np.einsum("rpni,rpti->pnt", rows[1:], cols[1:]) / n_init
    fit = (
        mu.mean(axis=1)[:, None, None]
        + rows[0].mean(axis=2)[:, :, None]
        + cols[0].mean(axis=2)[:, None, :]
        + interaction
    )
    return fit, (mu[:, None, :] + cols[0]).mean(axis=2)


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
        prediction, notes = context.empty_grid()
        allowed = context.allowed()
        rng = np.random.default_rng(context.seed)
        problems, fills = [], []
        for i in range(len(context.models)):
            base = context.training_matrix(i, allowed)
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
                np.stack(problems), n_init=n_init, random_state=context.seed
            )
            for p, (i, cells) in enumerate(fills):
                prediction[i, cells] = completed[p, i, cells]
        no_reference = ~np.isfinite(context.training_references).any(axis=0)
        prediction[:, no_reference] = np.nan
        notes[:, no_reference] = "lrmc: no reference model for this task"
        return prediction, notes

    return context.cached(("lrmc", n_init), compute)


def lrmc_missing_predictions(
    context: PredictionContext, n_init: int = LRMC_INITS
) -> tuple[np.ndarray, np.ndarray]:
    """LRMC on the cells without responses only (NaN elsewhere): one fit per model that
    has such a cell, on the matrix :func:`lrmc_predictions` fits for its unscored cells.
    The stacked ensemble uses LRMC only there, so it skips the cross-fits of observed
    cells (most of LRMC's cost when every reference has shadows)."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        prediction, notes = context.empty_grid()
        missing = context.n_responses == 0
        needed = np.zeros(len(context.models), dtype=bool)
        needed[context.prediction_rows()] = True
        rows = np.flatnonzero(missing.any(axis=1) & needed)
        if len(rows):
            allowed = context.allowed()
            problems = np.stack([context.training_matrix(i, allowed) for i in rows])
            completed = lrmc_complete_batch(problems, n_init=n_init, random_state=context.seed)
            for p, i in enumerate(rows):
                prediction[i, missing[i]] = completed[p, i, missing[i]]
        no_reference = ~np.isfinite(context.training_references).any(axis=0)
        prediction[:, no_reference] = np.nan
        notes[:, no_reference] = "lrmc: no reference model for this task"
        return prediction, notes

    return context.cached(("lrmc-missing", n_init), compute)
