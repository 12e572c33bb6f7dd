"""The Predictions page's tables: MAE per method and task, intervals, cell overview, exports."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pkps_core.outputs import table_bytes
from pkps_core.predict import METHODS, OUTPUT_COLUMNS
from pkps_core.trust import reason_words

SELF_JUDGED_NOTE = (
    "not judged: it reads the cell's own scores, which are the reference here; mark "
    "targets for an honest error"
)


def mae_table(
    predictions: pd.DataFrame,
    models: Sequence[str] | None = None,
    *,
    self_reference: bool = False,
) -> pd.DataFrame:
    """Per method: MAE against references, cells scored, cells predicted.

    Parameters
    ----------
    predictions : DataFrame
        :func:`pkps_core.predict.predict` output.
    models : sequence of str, optional
        Restrict the evaluation to these models' cells (e.g. the targets).
    self_reference : bool, default=False
        The references are the cells' own sample scores (no target, no
        ``reference_score``): a method that reads the cell's own scores
        (:attr:`~pkps_core.methods.registry.Method.reads_own_scores`) would be judged
        against itself, so it gets no MAE and a note saying so.

    Returns
    -------
    DataFrame
        Index ``method`` (in input order); columns ``MAE`` (the plain mean of the absolute
        errors over the cells with both a prediction and a reference; NaN where none has,
        or the method is judged against itself), ``cells_scored``, ``cells_predicted``,
        ``cells`` and ``note`` (why an MAE is missing).
    """
    frame = predictions if not models else predictions[predictions["model"].isin(models)]
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
    table["note"] = ""
    if self_reference:
        own = [m for m in methods if m in METHODS and METHODS[m].reads_own_scores]
        table.loc[own, "MAE"] = np.nan
        table.loc[own, "note"] = SELF_JUDGED_NOTE
    table.loc[(table["note"] == "") & (table["cells_scored"] == 0), "note"] = (
        "no cell has both a prediction and a reference"
    )
    return table


def mae_caption(*, self_reference: bool, budget: int | None) -> str:
    """What the MAE is measured against and how it averages, in words."""
    if budget is not None:
        against = (
            "each target cell's full-data score (reference_score: the mean of all its scored "
            f"responses), while the prediction saw at most {budget} of them (cells with no "
            "more than that hide nothing and are not judged)"
        )
    elif self_reference:
        against = (
            "each cell's sample score (no reference_score, no target); methods that read "
            "the cell's own scores are not judged against it"
        )
    else:
        against = "reference_score (each cell's given full-task score)"
    return f"MAE against {against}; the plain mean over cells of |prediction − reference|"


def reference_is_sample_score(cells: pd.DataFrame) -> bool:
    """True when the store gives no ``reference_score`` (its cells'
    :func:`~pkps_core.records.cell_table`): without targets each cell's reference is then
    its own sample score."""
    return not np.isfinite(pd.to_numeric(cells["reference_score"], errors="coerce")).any()


def per_task_mae(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """MAE against references per task (rows) and method (columns)."""
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    scored = frame.dropna(subset=["prediction", "reference_score"])
    error = (scored["prediction"] - scored["reference_score"]).abs()
    table = error.groupby([scored["task"], scored["method"]]).mean().unstack("method")
    methods = [m for m in dict.fromkeys(predictions["method"]) if m in table.columns]
    return table.reindex(columns=methods)


def export_bytes(frame: pd.DataFrame, file_format: str) -> bytes:
    """A table as CSV or Parquet bytes, as the CLI writes files (no index; CSV cells that
    a spreadsheet would run as formulas neutralised, :func:`pkps_core.outputs.csv_safe`)."""
    return table_bytes(frame, file_format)


def prediction_export(
    predictions: pd.DataFrame,
    *,
    targets: Sequence[str] = (),
    settings: dict | None = None,
) -> pd.DataFrame:
    """Predictions as the CLI writes them: its output columns, then ``target`` (the model
    was predicted as new: thinned to the budget, judged against its full data) and one
    column per setting the run used (``holdout``, ``bandwidth``, ``response_kernel``,
    ``budget``, …), so a file read tomorrow says how it was made."""
    out = predictions.loc[:, list(OUTPUT_COLUMNS)].reset_index(drop=True)
    out["target"] = out["model"].isin(list(targets))
    for name, value in (settings or {}).items():
        out[name] = "" if value is None else value
    return out


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
    the checks that fired, as short labels (:func:`pkps_core.trust.reason_words`; the
    full reasons, with their numbers, are in the predictions' own column);
    ``warned_by``: the methods that warned)."""
    wide = predictions.pivot_table(
        index=["model", "task"], columns="method", values="prediction", dropna=False, sort=True
    ).reindex(columns=list(methods))
    info = predictions.drop_duplicates(["model", "task"]).set_index(["model", "task"])[
        ["sample_score", "n_responses", "reference_score"]
    ]
    warned = predictions[predictions["extrapolation"].astype(bool)]
    cells = warned.groupby(["model", "task"], sort=False)
    labels = cells["extrapolation_reason"].agg(
        lambda reasons: "; ".join(
            dict.fromkeys(w for r in reasons for w in reason_words(r, short=True))
        )
    )
    by = cells["method"].agg(lambda names: ", ".join(pd.Index(methods).intersection(names)))
    table = info.join(wide).join(labels.rename("extrapolation_reason"))
    table = table.join(by.rename("warned_by"))
    for column in ("extrapolation_reason", "warned_by"):
        table[column] = table[column].fillna("")
    table.insert(
        len(info.columns) + len(wide.columns), "extrapolation", table["extrapolation_reason"] != ""
    )
    return table.reset_index()


def method_notes(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per method, why some cells have no prediction: the distinct ``note`` texts of its
    unpredicted cells with how many cells each explains (methods predicting every cell
    are left out).

    Returns
    -------
    DataFrame
        Columns ``method, cells, note``, most cells first within a method.
    """
    missing = predictions[predictions["prediction"].isna()]
    notes = missing["note"].fillna("").replace("", "no reason given")
    table = (
        missing.assign(note=notes)
        .groupby(["method", "note"], sort=False)
        .size()
        .rename("cells")
        .reset_index()
    )
    order = {m: i for i, m in enumerate(dict.fromkeys(predictions["method"]))}
    table = table.sort_values(
        ["method", "cells"], key=lambda c: c.map(order) if c.name == "method" else -c
    )
    return table[["method", "cells", "note"]].reset_index(drop=True)


def predicted_vs_reference_figure(
    scored: pd.DataFrame, *, highlight: str | None = None, level: float | None = None
):
    """Predicted against reference score, one facet per method, legible at 1,000+ cells.

    Points only (WebGL), each with its interval in the hover; error bars only on the
    ``highlight`` model's cells (drawn in red); cells warned as extrapolation in orange;
    the identity line and equal axes on every facet.

    Parameters
    ----------
    scored : DataFrame
        :func:`error_bar_frame` rows (cells with a prediction and a reference).
    highlight : str, optional
        A model whose cells get their intervals drawn.
    level : float, optional
        The intervals' coverage level, for the hover (None: no intervals).
    """
    import html

    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    methods = list(dict.fromkeys(scored["method"]))
    columns = min(len(methods), 3) or 1
    rows = -(-len(methods) // columns) or 1
    figure = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=[html.escape(m) for m in methods],
        horizontal_spacing=0.08,
        vertical_spacing=0.12,
    )
    values = pd.concat([scored["reference_score"], scored["prediction"]])
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = 0.03 * max(high - low, 1e-9)
    span = [low - pad, high + pad]
    interval = f"{level:.0%} interval" if level else "interval"
    hover = (
        "%{customdata[0]}<br>task %{customdata[1]}<br>reference %{x:.3f}<br>"
        "predicted %{y:.3f}<br>"
        + (f"{interval} %{{customdata[2]:.3f}}–%{{customdata[3]:.3f}}<br>" if level else "")
        + "%{customdata[4]}<extra></extra>"
    )
    groups = (
        ("cells", "#1f77b4", False),
        ("extrapolation warned", "#ff7f0e", True),
    )
    for k, method in enumerate(methods):
        row, col = k // columns + 1, k % columns + 1
        part = scored[scored["method"] == method]
        warned = part["extrapolation"].astype(bool)
        for name, colour, flag in groups:
            cells = part[warned == flag]
            custom = pd.DataFrame(
                {
                    "model": cells["model"].map(lambda s: html.escape(str(s))),
                    "task": cells["task"].map(lambda s: html.escape(str(s))),
                    "lower": cells["lower"],
                    "upper": cells["upper"],
                    "warned": np.where(flag, "extrapolation warned", ""),
                }
            )
            figure.add_trace(
                go.Scattergl(
                    x=cells["reference_score"],
                    y=cells["prediction"],
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=k == 0,
                    marker={"color": colour, "size": 5, "opacity": 0.6},
                    customdata=custom.to_numpy(dtype=object),
                    hovertemplate=hover,
                ),
                row=row,
                col=col,
            )
        if highlight is not None:
            chosen = part[part["model"] == highlight]
            figure.add_trace(
                go.Scatter(
                    x=chosen["reference_score"],
                    y=chosen["prediction"],
                    mode="markers",
                    name=f"{html.escape(str(highlight))} ({interval})",
                    legendgroup="highlight",
                    showlegend=k == 0,
                    marker={"color": "#d62728", "size": 8},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": chosen["err_plus"],
                        "arrayminus": chosen["err_minus"],
                        "color": "#d62728",
                    },
                    hoverinfo="skip",
                ),
                row=row,
                col=col,
            )
        figure.add_trace(
            go.Scatter(
                x=span,
                y=span,
                mode="lines",
                line={"dash": "dash", "color": "grey", "width": 1},
                name="identity (predicted = reference)",
                legendgroup="identity",
                showlegend=k == 0,
                hoverinfo="skip",
            ),
            row=row,
            col=col,
        )
    # short titles: three facets share a row, and longer ones ran into their neighbours
    figure.update_xaxes(range=span, title_text="reference (mean score)", constrain="domain")
    figure.update_yaxes(
        range=span, title_text="predicted (mean score)", title_standoff=4, constrain="domain"
    )
    for k in range(len(methods)):
        suffix = "" if k == 0 else str(k + 1)
        figure.update_yaxes(
            scaleanchor=f"x{suffix}", scaleratio=1, row=k // columns + 1, col=k % columns + 1
        )
    figure.update_layout(
        height=340 * rows + 60,
        margin={"t": 40, "l": 10, "r": 10, "b": 10},
        legend={"orientation": "h", "y": -0.08 if rows == 1 else -0.04},
    )
    return figure
