"""Per-cell quantities every trust tool reads: score range, sampling error, task sizes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pkps_core.methods import PredictionContext


def score_range(context: PredictionContext) -> tuple[float, float]:
    """Where scores can lie: [0, 1] when every observed score and reference is in [0, 1],
    else the observed minimum and maximum."""
    values = [context.sample, context.reference_score]
    if "score" in context.records.columns:
        values.append(context.records["score"].to_numpy(dtype=float))
    flat = np.concatenate([np.ravel(v) for v in values])
    flat = flat[np.isfinite(flat)]
    if not len(flat):
        return 0.0, 1.0
    low, high = float(flat.min()), float(flat.max())
    if low >= 0.0 and high <= 1.0:
        return 0.0, 1.0
    return low, high


def task_item_sd(context: PredictionContext) -> np.ndarray:
    """Per task, the pooled within-cell standard deviation of the item scores
    (:meth:`PredictionContext.item_sd`)."""
    return context.item_sd()


def sampling_error(context: PredictionContext) -> np.ndarray:
    """Per cell, the standard error of its sample score (:meth:`PredictionContext.
    sampling_error`)."""
    return context.sampling_error()


def allowed_reference_stack(references: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """(n_models, n_models, n_tasks): reference of j on t if j may inform i, else NaN."""
    return np.where(allowed[:, :, None], references[None, :, :], np.nan)


def task_query_counts(records: pd.DataFrame) -> pd.Series:
    """Number of distinct queries per task in the records (the task's known pool)."""
    return records.groupby("task")["query_id"].nunique().rename("task_queries")
