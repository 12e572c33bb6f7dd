"""1PL (Rasch) item response theory: a baseline for binary tasks.

Difficulties by joint maximum likelihood on a fully observed block of the allowed models'
item scores, the model's ability by bounded maximum likelihood on its own answered items,
and the prediction ``mean_j sigmoid(theta − b_j)``.

References
----------
Rasch (1960); Liu and Nocedal (1989); PKPS appendix "Baselines".
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.special import expit, log_expit

from pkps_core.methods.context import PredictionContext
from pkps_core.methods.lrmc import logit
from pkps_core.space.runtime import single_threaded_blas

MIN_BLOCK = 5
ABILITY_BOUND = 4.0
RASCH_RIDGE = 1e-2


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
    with single_threaded_blas():
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


def irt_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """1PL (Rasch) IRT prediction of every cell of binary tasks.

    Per task and holdout group: difficulties by :func:`rasch_fit` on
    :func:`largest_full_block` of the allowed models' item scores (at least 5 × 5), the
    model's ability by :func:`rasch_ability` on its own answered block items, and the
    prediction ``mean_j sigmoid(theta − b_j)`` over the block's items.
    """
    prediction, notes = context.empty_grid()
    allowed = context.allowed()
    groups = context.groups
    fits: dict = {}
    for t, table in enumerate(context.item_tables()):
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
