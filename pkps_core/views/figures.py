"""The Data, Perspective space and Predictions pages' figures (the pages lay them out).

Pure functions of frames, testable without the app. Names from the data reach Plotly escaped
(:func:`~pkps_core.views.space.plotly_text`: tick labels, hovers, legend entries), the data
keep the raw names. The comparison of PKPS and DKPS is
:func:`~pkps_core.views.comparison_figure.comparison_figure`, the predicted-vs-reference
scatter :func:`~pkps_core.views.predictions.predicted_vs_reference_figure`, the Experiments
page's charts :mod:`~pkps_core.views.experiment_figures`, the Leaderboard page's
:mod:`~pkps_core.views.leaderboard_figures`.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from pkps_core.views.space import plotly_text

MISSING_COLOUR = "#d9d9d9"


def heatmap(
    matrix: pd.DataFrame,
    colorscale,
    zmin,
    zmax,
    value_label: str,
    axes: tuple[str, str],
    value_format: str = ".3f",
    hover_values: pd.DataFrame | None = None,
    hover_label: str | None = None,
) -> go.Figure:
    """A heatmap with missing cells drawn in grey (and named in the hover).

    ``axes`` is ``(x title, y title)``. ``hover_values`` (same shape, e.g. the counts behind
    a share) adds a second number to each cell's hover, as ``hover_label``.
    """
    x_title, y_title = axes
    columns, rows = list(matrix.columns), list(matrix.index)
    extra = hover_values.reindex(index=rows, columns=columns) if hover_values is not None else None
    labels = [
        [
            [plotly_text(r), plotly_text(c)] + ([] if extra is None else [extra.loc[r, c]])
            for c in columns
        ]
        for r in rows
    ]
    missing = matrix.isna().astype(float).where(matrix.isna())
    where = f"{y_title} %{{customdata[0]}}<br>{x_title} %{{customdata[1]}}<br>"
    shown = f"{value_label} %{{z:{value_format}}}"
    if extra is not None:
        shown = f"{hover_label} %{{customdata[2]:,.0f}}<br>{shown}"
    figure = go.Figure(
        [
            go.Heatmap(
                z=matrix.to_numpy(),
                x=columns,
                y=rows,
                customdata=labels,
                colorscale=colorscale,
                zmin=zmin,
                zmax=zmax,
                colorbar={"title": {"text": value_label}},
                hovertemplate=f"{where}{shown}<extra></extra>",
                xgap=1,
                ygap=1,
            ),
            go.Heatmap(
                z=missing.to_numpy(),
                x=columns,
                y=rows,
                customdata=labels,
                colorscale=[[0, MISSING_COLOUR], [1, MISSING_COLOUR]],
                showscale=False,
                hovertemplate=f"{where}missing<extra></extra>",
                xgap=1,
                ygap=1,
            ),
        ]
    )
    figure.update_yaxes(
        autorange="reversed",
        type="category",
        title=y_title,
        tickvals=rows,
        ticktext=[plotly_text(r) for r in rows],
    )
    figure.update_xaxes(
        type="category",
        title=x_title,
        tickvals=columns,
        ticktext=[plotly_text(c) for c in columns],
    )
    figure.update_layout(
        height=min(2400, 200 + 16 * len(matrix.index)), margin={"t": 30, "l": 10, "r": 10}
    )
    return figure


def coverage_share(counts: pd.DataFrame, task_sizes: pd.Series | None = None) -> pd.DataFrame:
    """Each cell's responses as a share of its task's largest cell (or of ``task_sizes``,
    responses per task): a complete cache is 1 everywhere, whatever each task's size (the
    counts drew one stripe per task). NaN stays missing."""
    sizes = counts.max(axis=0) if task_sizes is None else task_sizes.reindex(counts.columns)
    return counts.div(sizes.where(sizes > 0), axis=1)


def coverage_figure(counts: pd.DataFrame) -> tuple[go.Figure, bool]:
    """The models × tasks coverage heatmap: colour the share of the task's largest cell,
    hover the responses; and whether every cell shown is complete (share 1)."""
    share = coverage_share(counts)
    complete = bool(len(share)) and bool(np.isclose(share.to_numpy(dtype=float), 1.0).all())
    figure = heatmap(
        share,
        "Viridis",
        0,
        1,
        "share of the task's largest cell",
        ("task", "model"),
        ".3f",
        hover_values=counts,
        hover_label="responses",
    )
    return figure, complete


def cv_curve_figure(curve: pd.DataFrame, delta_error: float, delta_note: str) -> go.Figure:
    """The cross-validation error by bandwidth (log axis, the chosen one starred) and the
    delta limit as a dashed line (``delta_note`` ends its label)."""
    # the delta limit (multiple 0) has no place on a log axis: it is the dashed line
    curve = curve.query("multiple_of_median > 0")
    figure = go.Figure(
        go.Scatter(
            x=curve["multiple_of_median"],
            y=curve["cv_error"],
            mode="lines+markers",
            name="PKPS",
            hovertemplate="%{x:.3f} × median: error %{y:.3f}<extra></extra>",
        )
    )
    if np.isfinite(delta_error):
        figure.add_hline(
            y=delta_error,
            line_dash="dash",
            line_color="#7f7f7f",
            annotation_text=f"δ limit (bandwidth → 0, = DKPS): {delta_error:.3f}{delta_note}",
            annotation_position="top left",
        )
    chosen = curve[curve["chosen"]]
    figure.add_trace(
        go.Scatter(
            x=chosen["multiple_of_median"],
            y=chosen["cv_error"],
            mode="markers",
            marker={"size": 14, "symbol": "star"},
            name="chosen",
            hoverinfo="skip",
        )
    )
    figure.update_xaxes(
        type="log",
        title="bandwidth (× median query distance, log scale)",
        tickvals=list(curve["multiple_of_median"]),
        ticktext=[f"{m:g}" for m in curve["multiple_of_median"]],
        minor={"showgrid": False, "ticks": ""},
    )
    figure.update_yaxes(title="leave-one-model-out KNN MAE (score units)")
    figure.update_layout(height=300, showlegend=False, margin={"t": 20})
    return figure


def per_task_bars(by_task: pd.DataFrame) -> go.Figure:
    """MAE per task (x) and method (a bar each), from :func:`per_task_mae`'s table."""
    long = by_task.reset_index().melt(id_vars="task", var_name="method", value_name="MAE")
    figure = go.Figure(
        [
            go.Bar(
                name=html.escape(str(method)),
                x=group["task"].map(html.escape),
                y=group["MAE"],
                hovertemplate="task %{x}<br>MAE %{y:.3f}<extra>%{fullData.name}</extra>",
            )
            for method, group in long.groupby("method", sort=False)
        ]
    )
    figure.update_layout(
        barmode="group",
        height=320,
        xaxis_title="task",
        yaxis_title="MAE (score units)",
        margin={"t": 20},
    )
    return figure
