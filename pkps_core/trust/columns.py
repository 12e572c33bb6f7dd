"""The trust columns of the prediction output: intervals, widened where warned, and warnings."""

from __future__ import annotations

import numpy as np

from pkps_core.methods import PredictionContext
from pkps_core.trust.cells import score_range
from pkps_core.trust.extrapolation import (
    WIDEN_MIN_RESPONSES,
    extrapolation_warnings,
    widen_warned,
)
from pkps_core.trust.intervals import DEFAULT_LEVEL, MAX_FOLDS, prediction_intervals

# How warned cells' intervals are made in runs with new models (shadows; without them
# always "widen"). Every cell is first calibrated on the shadows (conformal), then:
#   "widen": a warned cell with at least WIDEN_MIN_RESPONSES scored responses also holds
#       its own sampling interval (pooled item SD) — the rule of the papers' protocols;
#   "bounded": a warned cell with any scored response also holds its own sampling
#       interval, its SD at least the Bhatia–Davis bound at its sample score; a warned
#       cell without one gets the score range (nothing observed like it vouches for less);
#   "mondrian": "bounded", and the cells no check warned are calibrated only on the
#       shadow cells no check warned.
# Measured on AlpacaEval (docs/results/new-model.md): "bounded" is the only one whose
# coverage is within 0.85–0.95 for every method at every m in both modes.
WARNED_INTERVALS = "bounded"
WARNED_CHOICES = ("widen", "bounded", "mondrian")
RANGE_REASON = (
    "; interval is the score range: no scored response of its own bounds it and no "
    "reference observed like it vouches for a narrower one"
)


def trust_columns(
    context: PredictionContext,
    method: str,
    prediction: np.ndarray,
    level: float = DEFAULT_LEVEL,
    *,
    n_folds: int = MAX_FOLDS,
    warned_intervals: str | None = None,
) -> dict[str, np.ndarray]:
    """``lower``, ``upper``, ``extrapolation``, ``extrapolation_reason`` as grids.

    Warned cells' intervals are widened (:func:`widen_warned`) as
    ``warned_intervals`` (default :data:`WARNED_INTERVALS`) says, and their reason says
    so: a conformal guarantee holds for cells exchangeable with the calibration cells,
    and a warned cell is by definition unlike the references and their shadows.
    """
    warned_intervals = warned_intervals or WARNED_INTERVALS
    if warned_intervals not in WARNED_CHOICES:
        raise ValueError(
            f"warned_intervals must be one of {', '.join(WARNED_CHOICES)}, got {warned_intervals!r}"
        )
    flags, reasons = extrapolation_warnings(context, method, prediction)
    intervals = prediction_intervals(context, method, prediction, level, n_folds=n_folds)
    lower, upper = intervals.lower, intervals.upper
    rule = warned_intervals if context.has_shadows and flags.any() else "widen"
    if rule == "mondrian":
        clean = prediction_intervals(
            context, method, prediction, level, n_folds=n_folds, calibrate=~flags
        )
        lower = np.where(flags, lower, clean.lower)
        upper = np.where(flags, upper, clean.upper)
    bounded = rule != "widen"
    lower, upper, widened = widen_warned(
        context,
        lower,
        upper,
        flags,
        level,
        min_responses=1 if bounded else WIDEN_MIN_RESPONSES,
        bounded=bounded,
    )
    reasons = reasons.copy()
    for i, t in zip(*np.nonzero(widened), strict=True):
        reasons[i, t] += (
            f"; interval widened to hold the cell's own {level:.0%} sampling interval "
            f"({context.n_responses[i, t]} responses)"
        )
    if bounded:
        unbounded = flags & np.isfinite(prediction) & ~np.isfinite(context.sample)
        low, high = score_range(context)
        lower = np.where(unbounded, low, lower)
        upper = np.where(unbounded, high, upper)
        reasons[unbounded] += RANGE_REASON
    return {
        "lower": lower,
        "upper": upper,
        "extrapolation": flags,
        "extrapolation_reason": reasons,
    }
