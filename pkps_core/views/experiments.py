"""The Experiments page's tables beyond the per-cell summary (plain pandas, no streamlit)."""

from __future__ import annotations

import pandas as pd

from pkps_core.protocols import ProtocolResult, format_intervals, format_summary


def new_model_tables(result: ProtocolResult) -> dict[str, tuple[str, pd.DataFrame]]:
    """The new-model report as ``{title: (caption, levers × methods table)}``, in page order.

    Empty for the other protocols (their results have no ``overall`` table).
    """
    if not len(result.overall):
        return {}
    levers = result.levers
    return {
        "Overall score of each target: MAE": (
            "Each target's overall score is the query-weighted mean of its task scores "
            "(weights: the task's queries in the full cache); MAE over the targets, mean ± "
            "SEM over seeds.",
            format_summary(result.overall, levers),
        ),
        "Overall score of each target: Spearman rank correlation": (
            "Rank correlation of the targets' predicted and true overall scores (needs three "
            "targets; a constant prediction such as `mean` has none), mean ± SEM over seeds.",
            format_summary(result.overall, levers, value="spearman", error="spearman_sem"),
        ),
        "Intervals on the target cells": (
            "Coverage (share of cells with an interval whose true score lies inside) / mean "
            "width; in brackets the share of cells with an interval when below 100%.",
            format_intervals(result.intervals, levers),
        ),
    }
