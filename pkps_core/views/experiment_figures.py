"""The Experiments page's figures, built from a protocol's results (the page lays them out).

Pure functions of :class:`~pkps_core.protocols.ProtocolResult` frames, so they can be tested
without the app. Names from the data (models, tasks) reach Plotly escaped
(:func:`~pkps_core.views.space.plotly_text`); methods and levers are the code's own names.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from pkps_core.views.experiments import (
    METHOD_COLOURS,
    hover_format,
    lever_axis_title,
    lever_label,
)
from pkps_core.views.space import plotly_text

# Levers whose values are whole numbers on a scale (budget 1, 2, 4, …): ticks at the values
# swept only (a continuous axis put ticks at 1.5 and 2.5, settings nobody ran).
WHOLE_LEVERS = ("budget", "cohort", "n_tasks", "core_set")


def swept_levers(result) -> list[str]:
    """The levers with more than one value in ``result`` (what a chart can be plotted against)."""
    return [lever for lever in result.levers if result.summary[lever].nunique() > 1]


def _lever_axis(figure: go.Figure, lever: str, values: pd.Series) -> None:
    """Ticks at the swept values of a numeric lever; a log axis for the budget (1 … 32)."""
    numbers = pd.to_numeric(values, errors="coerce").dropna().unique()
    if not len(numbers) or pd.to_numeric(values, errors="coerce").isna().any():
        return
    ticks = np.sort(numbers)
    axis = {"tickvals": list(ticks), "ticktext": [f"{v:g}" for v in ticks]}
    if lever in WHOLE_LEVERS and ticks.min() > 0 and ticks.max() / ticks.min() >= 8:
        axis["type"] = "log"
        axis["minor"] = {"showgrid": False, "ticks": ""}
    figure.update_xaxes(**axis)


def mae_figure(result, x: str | None = None) -> go.Figure:
    """MAE against the swept lever ``x`` (a line per method, a facet per other swept
    setting), or a bar per method when nothing is swept (a one-point line says nothing)."""
    swept = swept_levers(result)
    summary = result.summary.dropna(subset=["mae"])
    labels = {"mae": "MAE (score units; mean ± SEM over seeds)", "method": "method"}
    labels |= {lever: lever_axis_title(lever) for lever in result.levers}
    if not swept:
        fixed = ", ".join(
            f"{lever_label(lever)} {summary[lever].iloc[0]}" for lever in result.levers
        )
        figure = px.bar(
            summary,
            x="method",
            y="mae",
            error_y="sem",
            color="method",
            color_discrete_map=METHOD_COLOURS,
            labels=labels,
            title=f"At {fixed}" if len(summary) else None,
        )
        figure.update_layout(showlegend=False)
        figure.update_traces(hovertemplate="%{x}<br>MAE %{y:.3f}<extra></extra>")
        return figure
    x = x if x in swept else swept[0]
    others = [lever for lever in swept if lever != x]
    facet = None
    if others:
        summary = summary.assign(
            setting=summary[others]
            .astype(str)
            .agg(", ".join, axis=1)
            .radd(", ".join(lever_label(o) for o in others) + ": ")
        )
        facet = "setting"
    figure = px.line(
        summary.sort_values(x),
        x=x,
        y="mae",
        error_y="sem",
        color="method",
        color_discrete_map=METHOD_COLOURS,
        facet_col=facet,
        markers=True,
        labels=labels,
    )
    # a facet's title is its setting, not "setting=…" (Plotly's column=value)
    figure.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    figure.update_traces(
        hovertemplate=f"{lever_axis_title(x)} %{{x{hover_format(summary[x])}}}<br>"
        "%{fullData.name}: MAE %{y:.3f}<extra></extra>"
    )
    _lever_axis(figure, x, summary[x])
    return figure


def gain_frame(result, comparator: str) -> pd.DataFrame:
    """Per target cell, each method's absolute error below ``comparator``'s (above 0: the
    method wins); empty when ``comparator`` did not run."""
    cell = ["seed", *result.levers, "model", "task"]
    errors = result.long.pivot_table(index=cell, columns="method", values="abs_err")
    if comparator not in errors.columns:
        return pd.DataFrame()
    return (
        errors.drop(columns=comparator)
        .rsub(errors[comparator], axis=0)
        .melt(ignore_index=False, var_name="method", value_name="gain")
        .dropna()
        .reset_index()
    )


def improvement_figure(gains: pd.DataFrame, comparator: str, levers) -> go.Figure:
    """A box of :func:`gain_frame`'s gains per method, against the first swept lever."""
    x = next((lever for lever in levers if gains[lever].nunique() > 1), "method")
    figure = px.box(
        gains,
        x=x,
        y="gain",
        color="method",
        color_discrete_map=METHOD_COLOURS,
        labels={
            x: lever_axis_title(x),
            "gain": f"abs. error of {comparator} − method's (score units)",
        },
    )
    x_format = hover_format(gains[x]) if x != "method" else ""
    figure.update_traces(
        hovertemplate=f"{lever_axis_title(x)} %{{x{x_format}}}<br>"
        f"%{{fullData.name}}: gain over {comparator} %{{y:.3f}}<extra></extra>"
    )
    figure.add_hline(y=0, line_dash="dot")
    if x != "method":
        _lever_axis(figure, x, gains[x])
    return figure


def similarity_figure(points: pd.DataFrame) -> go.Figure:
    """Each target cell's similarity to the source models against its normalised gap."""
    # names are data: escaped for Plotly, carried in customdata rather than px's hover_data
    points = points.assign(
        model_text=points["model"].map(plotly_text),
        task_text=points["task"].map(plotly_text),
    )
    figure = px.scatter(
        points,
        x="similarity",
        y="normalised_gap",
        color="method",
        color_discrete_map=METHOD_COLOURS,
        custom_data=["model_text", "task_text", "seed"],
        labels={
            "similarity": "similarity to the source models (0–1)",
            "normalised_gap": "normalised gap (error ÷ spread of scores)",
        },
    )
    figure.update_traces(
        hovertemplate="%{customdata[0]} · task %{customdata[1]} · seed %{customdata[2]}<br>"
        "similarity %{x:.3f}, normalised gap %{y:.3f}<extra>%{fullData.name}</extra>"
    )
    return figure
