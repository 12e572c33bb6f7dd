"""The trust columns of the prediction output: intervals, widened where warned, and warnings."""

from __future__ import annotations

import numpy as np

from pkps_core.methods import PredictionContext
from pkps_core.trust.cells import score_range
from pkps_core.trust.extrapolation import extrapolation_warnings, widen_warned
from pkps_core.trust.intervals import DEFAULT_LEVEL, MAX_FOLDS, prediction_intervals

# With new models (shadows), how warned cells' intervals are made:
#   "mondrian": cells no check warned are calibrated on the shadow cells no check warned,
#       warned cells on every shadow cell; a warned cell without a scored response gets
#       the score range (nothing observed like it vouches for less);
#   "pooled": every cell calibrated on every shadow cell (the behaviour before).
WARNED_INTERVALS = "mondrian"
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
    warned_intervals: str = WARNED_INTERVALS,
) -> dict[str, np.ndarray]:
    """``lower``, ``upper``, ``extrapolation``, ``extrapolation_reason`` as grids.

    Warned cells' intervals are widened by :func:`widen_warned`, and their reason says so.
    With shadows (new models) and ``warned_intervals="mondrian"``, the intervals are
    calibrated per warning status (see :data:`WARNED_INTERVALS`): a conformal guarantee
    holds within a group exchangeable with its calibration cells, and a warned target
    is by definition unlike the shadows that were not warned.
    """
    if warned_intervals not in ("mondrian", "pooled"):
        raise ValueError(
            f"warned_intervals must be 'mondrian' or 'pooled', got {warned_intervals!r}"
        )
    flags, reasons = extrapolation_warnings(context, method, prediction)
    intervals = prediction_intervals(context, method, prediction, level, n_folds=n_folds)
    lower, upper = intervals.lower, intervals.upper
    mondrian = warned_intervals == "mondrian" and context.has_shadows and flags.any()
    if mondrian:
        clean = prediction_intervals(
            context, method, prediction, level, n_folds=n_folds, calibrate=~flags
        )
        lower = np.where(flags, lower, clean.lower)
        upper = np.where(flags, upper, clean.upper)
    lower, upper, widened = widen_warned(context, lower, upper, flags, level)
    reasons = reasons.copy()
    for i, t in zip(*np.nonzero(widened), strict=True):
        reasons[i, t] += (
            f"; interval widened to hold the cell's own {level:.0%} sampling interval "
            f"({context.n_responses[i, t]} responses)"
        )
    if mondrian:
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
