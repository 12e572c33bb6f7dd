"""The trust columns of the prediction output: intervals, widened where warned, and warnings."""

from __future__ import annotations

import numpy as np

from pkps_core.methods import PredictionContext
from pkps_core.trust.extrapolation import extrapolation_warnings, widen_warned
from pkps_core.trust.intervals import DEFAULT_LEVEL, MAX_FOLDS, prediction_intervals


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
