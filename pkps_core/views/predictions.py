"""The Predictions page's tables: MAE per method and task, intervals, cell overview, exports."""

from __future__ import annotations

import io
from collections.abc import Sequence

import pandas as pd

from pkps_core.predict import OUTPUT_COLUMNS


def mae_table(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method: MAE against references, cells scored, cells predicted.

    Parameters
    ----------
    predictions : DataFrame
        :func:`pkps_core.predict.predict` output.
    models : sequence of str, optional
        Restrict the evaluation to these models' cells (e.g. the targets).

    Returns
    -------
    DataFrame
        Index ``method`` (in input order); columns ``MAE`` (NaN where no cell has both a
        prediction and a reference), ``cells_scored``, ``cells_predicted``, ``cells``.
    """
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    methods = list(dict.fromkeys(predictions["method"]))
    scored = frame.dropna(subset=["prediction", "reference_score"])
    error = (scored["prediction"] - scored["reference_score"]).abs()
    table = pd.DataFrame(
        {
            "MAE": error.groupby(scored["method"]).mean(),
            "cells_scored": error.groupby(scored["method"]).size(),
            "cells_predicted": frame["prediction"].notna().groupby(frame["method"]).sum(),
            "cells": frame.groupby("method").size(),
        }
    ).reindex(methods)
    table.index.name = "method"
    for column in ("cells_scored", "cells_predicted", "cells"):
        table[column] = table[column].fillna(0).astype(int)
    return table


def per_task_mae(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """MAE against references per task (rows) and method (columns)."""
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    scored = frame.dropna(subset=["prediction", "reference_score"])
    error = (scored["prediction"] - scored["reference_score"]).abs()
    table = error.groupby([scored["task"], scored["method"]]).mean().unstack("method")
    methods = [m for m in dict.fromkeys(predictions["method"]) if m in table.columns]
    return table.reindex(columns=methods)


def export_bytes(frame: pd.DataFrame, file_format: str) -> bytes:
    """A table as CSV or Parquet bytes, written as the CLI writes files (no index)."""
    buffer = io.BytesIO()
    if file_format == "csv":
        frame.to_csv(buffer, index=False)
    elif file_format == "parquet":
        frame.to_parquet(buffer, index=False)
    else:
        raise ValueError(f"file_format must be 'csv' or 'parquet', got {file_format!r}")
    return buffer.getvalue()


def prediction_export(predictions: pd.DataFrame) -> pd.DataFrame:
    """Predictions with exactly the CLI's output columns, in its order."""
    return predictions.loc[:, list(OUTPUT_COLUMNS)].reset_index(drop=True)


def error_bar_frame(predictions: pd.DataFrame) -> pd.DataFrame:
    """Scored cells with the distances from the prediction to ``lower`` and ``upper``
    (``err_minus``, ``err_plus``; NaN without an interval), for plotly's error bars."""
    frame = predictions.dropna(subset=["prediction", "reference_score"]).copy()
    frame["err_plus"] = frame["upper"] - frame["prediction"]
    frame["err_minus"] = frame["prediction"] - frame["lower"]
    frame["inside"] = (frame["lower"] <= frame["reference_score"]) & (
        frame["reference_score"] <= frame["upper"]
    )
    return frame


def interval_table(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method: coverage of the references by the intervals, mean width, warned cells.

    Returns
    -------
    DataFrame
        Index ``method``; columns ``coverage`` (share of cells with a reference and an
        interval whose reference lies inside), ``mean_width``, ``cells_with_interval``,
        ``extrapolation_cells``.
    """
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    methods = list(dict.fromkeys(predictions["method"]))
    bars = error_bar_frame(frame).dropna(subset=["lower", "upper"])
    with_interval = frame.dropna(subset=["lower", "upper"])
    table = pd.DataFrame(
        {
            "coverage": bars.groupby("method")["inside"].mean(),
            "mean_width": (with_interval["upper"] - with_interval["lower"])
            .groupby(with_interval["method"])
            .mean(),
            "cells_with_interval": with_interval.groupby("method").size(),
            "extrapolation_cells": frame.groupby("method")["extrapolation"].sum(),
        }
    ).reindex(methods)
    table.index.name = "method"
    for column in ("cells_with_interval", "extrapolation_cells"):
        table[column] = table[column].fillna(0).astype(int)
    return table


def cell_overview(predictions: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """One row per (model, task): the cell's facts, each method's prediction, and the
    extrapolation warnings (``extrapolation``: any method warned; ``extrapolation_reason``:
    ``method: reason`` for each method that did)."""
    wide = predictions.pivot_table(
        index=["model", "task"], columns="method", values="prediction", dropna=False, sort=True
    ).reindex(columns=list(methods))
    info = predictions.drop_duplicates(["model", "task"]).set_index(["model", "task"])[
        ["sample_score", "n_responses", "reference_score"]
    ]
    warned = predictions[predictions["extrapolation"].astype(bool)]
    reasons = (
        (warned["method"] + ": " + warned["extrapolation_reason"])
        .groupby([warned["model"], warned["task"]])
        .agg(" | ".join)
        .rename("extrapolation_reason")
    )
    table = info.join(wide).join(reasons)
    table["extrapolation_reason"] = table["extrapolation_reason"].fillna("")
    table.insert(
        len(info.columns) + len(wide.columns), "extrapolation", table["extrapolation_reason"] != ""
    )
    return table.reset_index()
