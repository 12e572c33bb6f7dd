"""What to evaluate next, and how well intervals covered: reading the trust columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

NEXT_COLUMNS = (
    "rank",
    "model",
    "task",
    "method",
    "n_responses",
    "task_queries",
    "prediction",
    "lower",
    "upper",
    "width",
    "extrapolation",
    "extrapolation_reason",
)


def next_cells(
    predictions: pd.DataFrame,
    target: str,
    *,
    method: str | None = None,
    top: int | None = 10,
    task_queries: pd.Series | None = None,
) -> pd.DataFrame:
    """Which of ``target``'s cells to evaluate next: the fewest responses first.

    Candidates are the model's cells with fewer responses than the task has queries
    (missing cells included): cells where more queries exist to be asked. They are
    ranked by their number of responses (missing cells first), then by interval width
    (widest first; cells without an interval last), then by task: taken in this order,
    the queries spread evenly over the tasks. Measured on AlpacaEval
    (``bench/next_queries.py``), spreading a new model's next queries evenly gave its
    overall score a smaller error than sending each to the widest interval, or to the
    task whose next query narrows the overall interval most.

    Parameters
    ----------
    predictions : DataFrame
        :func:`pkps_core.predict.predict` output with intervals.
    target : str
    method : str, optional
        Whose intervals rank the cells; default ``ensemble`` if present, else ``pkps``,
        else the first method.
    top : int or None, default=10
    task_queries : Series, optional
        Queries per task (:func:`task_query_counts` of the records); default: the task's
        most-observed cell's number of responses.

    Returns
    -------
    DataFrame with :data:`NEXT_COLUMNS`.
    """
    if target not in set(predictions["model"]):
        raise ValueError(f"unknown model {target!r}; choose one of the predicted models")
    methods = list(dict.fromkeys(predictions["method"]))
    if method is None:
        method = next((m for m in ("ensemble", "pkps") if m in methods), methods[0])
    if method not in methods:
        raise ValueError(f"method {method!r} is not in the predictions ({', '.join(methods)})")
    frame = predictions[predictions["method"] == method]
    if task_queries is None:
        task_queries = frame.groupby("task")["n_responses"].max()
    task_queries = task_queries.rename("task_queries")
    frame = frame[frame["model"] == target].join(task_queries, on="task")
    frame = frame[frame["n_responses"] < frame["task_queries"]].copy()
    frame["width"] = frame["upper"] - frame["lower"]
    frame = frame.sort_values(
        ["n_responses", "width", "task"],
        ascending=[True, False, True],
        na_position="last",
        kind="stable",
    )
    if top is not None:
        frame = frame.head(top)
    frame["rank"] = np.arange(1, len(frame) + 1)
    return frame.reset_index(drop=True)[list(NEXT_COLUMNS)]


def coverage_table(
    frame: pd.DataFrame, truth: str = "true_score", by: Sequence[str] = ("method",)
) -> pd.DataFrame:
    """Empirical coverage and mean width of intervals against ``truth``, per ``by``."""
    rows = frame.dropna(subset=["lower", "upper", truth])
    inside = (rows["lower"] <= rows[truth]) & (rows[truth] <= rows["upper"])
    grouped = rows.assign(inside=inside, width=rows["upper"] - rows["lower"]).groupby(list(by))
    return pd.DataFrame(
        {
            "coverage": grouped["inside"].mean(),
            "mean_width": grouped["width"].mean(),
            "cells": grouped.size(),
        }
    )
