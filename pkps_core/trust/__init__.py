"""How far to trust each prediction: conformal intervals, extrapolation warnings, what next.

``cells`` (score range, sampling error) → ``intervals`` (cross-conformal over families) →
``extrapolation`` (warnings; warned cells' intervals widened) → ``columns`` (the output's
trust columns); ``next_cells`` reads the predictions (what to evaluate next, coverage).
The design in full: ``docs/explanation/trust.md``.
"""

from pkps_core.trust.cells import score_range, task_query_counts
from pkps_core.trust.columns import trust_columns
from pkps_core.trust.extrapolation import (
    REGION_ALPHA,
    SAMPLE_Z,
    WIDEN_MIN_RESPONSES,
    conformal_outlier_threshold,
    extrapolation_warnings,
    own_sample_interval,
    pooled_score_position,
    reason_words,
    region_budget,
    region_distances,
    widen_warned,
)
from pkps_core.trust.intervals import (
    DEFAULT_LEVEL,
    MAX_FOLDS,
    Intervals,
    conformal_quantile,
    difficulty,
    family_folds,
    normalised_residuals,
    prediction_intervals,
)
from pkps_core.trust.next_cells import NEXT_COLUMNS, coverage_table, next_cells

__all__ = [
    "DEFAULT_LEVEL",
    "MAX_FOLDS",
    "NEXT_COLUMNS",
    "REGION_ALPHA",
    "SAMPLE_Z",
    "WIDEN_MIN_RESPONSES",
    "Intervals",
    "conformal_outlier_threshold",
    "conformal_quantile",
    "coverage_table",
    "difficulty",
    "extrapolation_warnings",
    "family_folds",
    "next_cells",
    "normalised_residuals",
    "own_sample_interval",
    "pooled_score_position",
    "prediction_intervals",
    "reason_words",
    "region_budget",
    "region_distances",
    "score_range",
    "task_query_counts",
    "trust_columns",
    "widen_warned",
]
