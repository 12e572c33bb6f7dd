"""The ensemble of a run with targets: its members stacked with weights validated on the
shadows (:mod:`pkps_core.methods.shadows`), references observed at the targets' budget.

Every member that applies to a cell — the references' mean, the sample score, RS-Learn,
AIPW, DKPS, PKPS, PKPS with the answer-length covariate (``pkps-length``,
:mod:`pkps_core.methods.length`), and LRMC on cells without responses — gets a weight on a
0.1-step simplex grid minimising the MAE over the shadow cells those members apply to
(:func:`stacking_weights`). The grid's corners are the members themselves, so on the
shadows the blend is never worse than its best member; the weights move with the targets'
budget because the shadows do (at m = 1 the sample score gets little weight, at m = 16
most).

The shadows are the references, so they cannot show what happens to a target unlike every
reference (a new model better than all of them: the extrapolation regime). The target's own
scores can: where a model's pooled sample score and PKPS's pooled prediction differ by more
than ``CONFLICT_Z`` standard errors (its sampling error and PKPS's error on the shadows), the
embedding has nothing to say about it and its cells blend only the members that read its
own scores (:func:`conflicted_models`).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pandas as pd

from pkps_core.methods.context import PredictionContext
from pkps_core.methods.length import length_adjusted_predictions
from pkps_core.methods.lrmc import lrmc_missing_predictions, lrmc_predictions
from pkps_core.methods.sampling import (
    aipw_predictions,
    mean_predictions,
    rs_learn_predictions,
    sample_predictions,
)
from pkps_core.methods.space_methods import space_predictions

STACK_STEP = 10  # weights in steps of 1 / STACK_STEP
STACK_MIN_CELLS = 20  # fewer calibration cells: the best single member instead
STACK_BUFFER = 2**18  # doubles of the grid's errors worked at a time
STACK_FOLDS = 5  # family folds of the shadows' own (cross-fitted) ensemble predictions
CONFLICT_Z = 3.0  # own scores this many standard errors from PKPS: trust only the own scores
OWN_SCORE_MEMBERS = ("sample", "aipw")
STACK_MEMBERS = {
    "mean": mean_predictions,
    "sample": sample_predictions,
    "rs-learn": rs_learn_predictions,
    "aipw": aipw_predictions,
    "dkps": lambda context: space_predictions(context, "dkps"),
    "pkps": lambda context: space_predictions(context, "pkps"),
    "pkps-length": length_adjusted_predictions,
    "lrmc": lrmc_predictions,
}


@functools.lru_cache(maxsize=16)
def simplex_grid(k: int, steps: int = STACK_STEP) -> np.ndarray:
    """Every weight vector of length ``k`` with entries in {0, 1/steps, …, 1} summing to 1
    (stars and bars: ``C(steps + k − 1, k − 1)`` rows), heavier first members first.
    Kept per (k, steps) and read-only: the grid is the same for every call."""
    rows = []
    for bars in itertools.combinations(range(steps + k - 1), k - 1):
        edges = np.array([-1, *bars, steps + k - 1])
        rows.append(np.diff(edges) - 1)
    grid = np.asarray(rows, dtype=float).reshape(-1, k) / steps
    grid = grid[np.lexsort(-grid.T[::-1])]
    grid.setflags(write=False)
    return grid


def stacking_weights(members: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The simplex-grid weights minimising ``mean |w · members − truth|``.

    Parameters
    ----------
    members : ndarray (k, n)
        Each member's predictions on n calibration cells.
    truth : ndarray (n,)

    Returns
    -------
    ndarray (k,) summing to 1. With fewer than :data:`STACK_MIN_CELLS` cells, the best
    single member (weight 1); with none, equal weights.
    """
    k, n = members.shape
    if n == 0:
        return np.full(k, 1.0 / k)
    if n < STACK_MIN_CELLS:
        weights = np.zeros(k)
        weights[int(np.argmin(np.abs(members - truth[None, :]).mean(axis=1)))] = 1.0
        return weights
    grid = simplex_grid(k)
    # (grid points, cells) in parts of about 2 MB, each worked in place in one buffer: the
    # whole grid at once was 45 MB per call (8,008 points × 700 shadow cells), fresh
    # pages every call; each point's error is its own row's mean either way
    rows = max(1, STACK_BUFFER // n)
    buffer = np.empty(min(rows, len(grid)) * n)
    errors = np.empty(len(grid))
    for start in range(0, len(grid), rows):
        part = grid[start : start + rows]
        values = buffer[: len(part) * n].reshape(len(part), n)
        np.matmul(part, members, out=values)
        values -= truth[None, :]
        np.abs(values, out=values)
        errors[start : start + len(part)] = values.mean(axis=1)
    return grid[int(np.argmin(errors))].copy()


def member_predictions(context: PredictionContext) -> dict[str, np.ndarray]:
    """The members' grids (cached on the context under the methods' own keys); LRMC only
    on cells without responses, and only when a target has such a cell."""
    out = {}
    missing = context.n_responses == 0
    targets = (
        np.zeros(len(context.models), dtype=bool) if context.targets is None else context.targets
    )
    for name, compute in STACK_MEMBERS.items():
        if name == "lrmc":
            if (missing & targets[:, None]).any():
                out[name] = lrmc_missing_predictions(context)[0]
            continue
        out[name] = context.cached(("method", name), lambda c=compute: c(context))[0]
    return out


def conflicted_models(context: PredictionContext, members: dict[str, np.ndarray]) -> np.ndarray:
    """Models whose own scores contradict PKPS beyond noise.

    Per model, over its tasks with both a sample score and a PKPS prediction: the pooled
    difference ``d = mean_t (sample − pkps)``, against ``se = sqrt(Σ_t s_t²/n_t) / |T|``
    (the pooled sample score's sampling error) and ``e`` = the RMS of PKPS's pooled error on
    the shadows; conflicted where ``|d| > CONFLICT_Z · sqrt(se² + e²)``.
    """
    if "pkps" not in members or "sample" not in members:
        return np.zeros(len(context.models), dtype=bool)
    pkps, sample = members["pkps"], members["sample"]
    both = np.isfinite(pkps) & np.isfinite(sample)
    count = both.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.where(both, sample - pkps, 0.0).sum(axis=1) / count
        variance = np.where(both, context.sampling_error() ** 2, 0.0).sum(axis=1) / count**2
        truth = context.calibration_truth
        judged = np.isfinite(pkps) & np.isfinite(truth)
        pooled_error = np.where(judged, pkps - truth, 0.0).sum(axis=1) / judged.sum(axis=1)
    shadow_errors = pooled_error[context.shadows & (judged.sum(axis=1) > 0)]
    e2 = float(np.mean(shadow_errors**2)) if len(shadow_errors) else 0.0
    scale = np.sqrt(variance + e2)
    return (count > 0) & np.isfinite(scale) & (np.abs(diff) > CONFLICT_Z * scale)


def _member_stack(context: PredictionContext) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Member names, their grids stacked (every member but the own-score ones removed from
    conflicted models' cells) and each cell's pattern code (bit k: member k applies);
    computed once per context."""

    def compute():
        members = member_predictions(context)
        names = list(members)
        stack = np.stack([members[name] for name in names])
        conflicted = conflicted_models(context, members)
        for k, name in enumerate(names):
            if name not in OWN_SCORE_MEMBERS:
                stack[k, conflicted] = np.nan
        code = (np.isfinite(stack) * (2 ** np.arange(len(names)))[:, None, None]).sum(axis=0)
        return names, stack, code

    return context.cached("ensemble_members", compute)


def _shadow_folds(context: PredictionContext) -> np.ndarray:
    """Per cell, the family fold of its shadow (by the original's family), -1 for the
    real models' cells."""
    folds = np.full(len(context.models), -1)
    shadows = np.flatnonzero(context.shadows)
    if len(shadows):
        family = context.families[np.asarray(context.origin)[shadows]]
        names, index = np.unique(family, return_inverse=True)
        rng = np.random.default_rng([context.seed, 11])
        folds[shadows] = (rng.permutation(len(names)) % STACK_FOLDS)[index]
    return np.repeat(folds[:, None], len(context.tasks), axis=1)


def ensemble_weights(context: PredictionContext) -> pd.DataFrame:
    """The stacking weights of the run: one row per (set of members that apply, fold).

    ``fold`` is -1 for the weights applied to the real models (fitted on every shadow) and
    k for those applied to the shadows of family fold k (fitted on the other folds).
    Columns: ``members`` (tuple of names), ``fold``, ``n_calibration``, one column per
    member name with its weight (NaN where it does not apply).
    """
    return context.cached("ensemble_weights", lambda: _ensemble_weights(context))


def _ensemble_weights(context: PredictionContext) -> pd.DataFrame:
    names, stack, code = _member_stack(context)
    truth = context.calibration_truth
    calibrating = context.shadows[:, None] & np.isfinite(truth)
    folds = _shadow_folds(context)
    real = ~context.shadows[:, None]
    needed = np.zeros(len(context.models), dtype=bool)
    needed[context.prediction_rows()] = True  # weights only for the rows the run predicts
    rows = []
    for pattern in np.unique(code[code > 0]):
        used = [k for k in range(len(names)) if pattern & (1 << k)]
        cells = (code == pattern) & needed[:, None]
        for fold in [-1, *range(STACK_FOLDS)]:
            apply = cells & (real if fold < 0 else folds == fold)
            if not apply.any():
                continue
            covers = np.isfinite(stack[used]).all(axis=0)  # cells where these members apply
            fit = covers & calibrating & (folds != fold)
            weights = stacking_weights(stack[used][:, fit], truth[fit])
            row = {"members": tuple(names[k] for k in used), "fold": fold, "pattern": pattern}
            row["n_calibration"] = int(fit.sum())
            row.update({name: np.nan for name in names})
            row.update({names[k]: w for k, w in zip(used, weights, strict=True)})
            rows.append(row)
    return pd.DataFrame(rows)


def stacked_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Every cell as the weighted blend of the members that apply to it
    (:func:`ensemble_weights`); a shadow's cells with the weights of the other folds."""
    prediction, notes = context.empty_grid()
    names, stack, code = _member_stack(context)
    folds = _shadow_folds(context)
    real = ~context.shadows[:, None]
    for row in ensemble_weights(context).to_dict("records"):
        apply = (code == row["pattern"]) & (real if row["fold"] < 0 else folds == row["fold"])
        used = [names.index(name) for name in row["members"]]
        weights = np.array([row[name] for name in row["members"]])
        prediction[apply] = np.tensordot(weights, stack[used][:, apply], axes=1)
        if row["fold"] < 0 and row["n_calibration"] < STACK_MIN_CELLS:
            notes[apply] = (
                f"ensemble: {row['n_calibration']} shadow cells to validate weights on; "
                "best single member (or equal weights)"
            )
    notes[np.isnan(prediction) & (notes == "")] = "ensemble: no member applies"
    return prediction, notes


def precision_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """The closed-form alternative to the stacked ensemble: each scored cell's sample score
    and PKPS weighted by their precisions.

    ``w = e_t² / (e_t² + s_t² / n)`` on the sample score and ``1 − w`` on PKPS, where
    ``s_t / √n`` is the cell's sampling error (the task's item SD over its n responses) and
    ``e_t²`` PKPS's mean squared error on task t's shadow cells — references re-observed at
    the targets' budget, so both variances are the target's. A shadow's own cells use the
    ``e_t²`` of the other family folds. Models whose own scores contradict PKPS
    (:func:`conflicted_models`) keep their sample score; every other cell (no scores, or no
    PKPS) is the stacked ensemble's. Needs a run with targets.
    """
    stacked, notes = stacked_predictions(context)
    if not context.has_shadows:
        prediction, notes = context.empty_grid()
        notes[:] = "precision: needs targets (the shadows validate PKPS at their budget)"
        return prediction, notes
    members = member_predictions(context)
    pkps, sample = members.get("pkps"), members["sample"]
    if pkps is None:
        return stacked, notes
    truth = context.calibration_truth
    judged = context.shadows[:, None] & np.isfinite(pkps) & np.isfinite(truth)
    squared = np.where(judged, (pkps - truth) ** 2, 0.0)
    folds = _shadow_folds(context)
    e2 = np.full(pkps.shape, np.nan)
    for fold in [-1, *range(STACK_FOLDS)]:
        apply = folds == fold
        use = judged & (folds != fold)
        with np.errstate(invalid="ignore", divide="ignore"):
            per_task = squared.sum(axis=0, where=use) / use.sum(axis=0)
        per_task = np.where(np.isfinite(per_task), per_task, np.nanmean(per_task))
        e2 = np.where(apply, per_task[None, :], e2)
    se2 = context.sampling_error() ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(se2 > 0, e2 / (e2 + se2), 1.0)
    conflicted = conflicted_models(context, members)[:, None]
    weight = np.where(conflicted, 1.0, weight)
    both = np.isfinite(sample) & np.isfinite(pkps) & np.isfinite(weight)
    prediction = np.where(both, weight * sample + (1 - weight) * pkps, stacked)
    return prediction, np.where(both, "", notes)
