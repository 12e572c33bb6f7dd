"""The comparison's figure: PKPS and DKPS on the same axes and one colour scale
(:mod:`pkps_core.views.comparison` aligns them and measures their agreement)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pkps_core.text import plotly_safe as plotly_text
from pkps_core.views.comparison import (
    FAMILY,
    MODES,
    OVERALL,
    OVERLAY,
    RESPONSES,
    SIDE_BY_SIDE,
    Comparison,
    is_categorical,
)

HIGHLIGHT = "#d62728"
MISSING_COLOUR = "#b0b0b0"
# distinct hues for families (Plotly's Dark24 without its near-greys), cycled beyond 20
FAMILY_COLOURS = (
    "#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#B68100", "#750D86", "#EB663B",
    "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE", "#862A16",
    "#A777F1", "#620042", "#1616A7", "#DA60CA",
)  # fmt: skip


def _padded_range(values: np.ndarray) -> list[float]:
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    margin = 0.08 * (high - low or 1.0)
    return [low - margin, high + margin]


def comparison_figure(
    comparison: Comparison,
    metadata: pd.DataFrame,
    colour: str = OVERALL,
    *,
    mode: str = SIDE_BY_SIDE,
    highlight: Sequence[str] = (),
    left_title: str = "PKPS",
    right_title: str = "DKPS (aligned to PKPS)",
    axis_unit: str | None = None,
    height: int = 400,
):
    """Both maps on the same axes and one colour scale (one colour bar, or one legend for
    a categorical colour), the highlighted models ringed in both; in ``OVERLAY`` mode one
    panel with a line from each model's DKPS position (open circle) to its PKPS position.

    Model names are escaped for Plotly; ``customdata[0]`` is the raw name (selections map
    back through it).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if colour not in metadata.columns:
        raise ValueError(f"unknown colour {colour!r}; choose one of {list(metadata.columns)}")
    frame = comparison.frame.join(metadata, on="model")
    frame["model_text"] = frame["model"].map(plotly_text)
    frame["family_text"] = frame[FAMILY].map(plotly_text)
    categorical = is_categorical(metadata, colour)
    colour_text = plotly_text(colour)
    axis_name = "UMAP" if comparison.view == "UMAP" else "MDS"
    unit = axis_unit or (
        "arbitrary units" if comparison.view == "UMAP" else "PKPS frame, distance units"
    )
    overlay = mode == OVERLAY
    panels = [("left", left_title)] if overlay else [("left", left_title), ("right", right_title)]
    figure = make_subplots(
        rows=1,
        cols=len(panels),
        subplot_titles=[title for _, title in panels] if not overlay else None,
        horizontal_spacing=0.1,
    )
    if overlay:
        segments_x = np.column_stack(
            [frame["x_right"], frame["x_left"], np.full(len(frame), np.nan)]
        ).ravel()
        segments_y = np.column_stack(
            [frame["y_right"], frame["y_left"], np.full(len(frame), np.nan)]
        ).ravel()
        figure.add_trace(
            go.Scatter(
                x=segments_x,
                y=segments_y,
                mode="lines",
                line={"color": "#9a9a9a", "width": 1},
                hoverinfo="skip",
                name="move from DKPS to PKPS",
            )
        )
        figure.add_trace(
            go.Scatter(
                x=frame["x_right"],
                y=frame["y_right"],
                mode="markers",
                marker={"size": 7, "symbol": "circle-open", "color": "#6b6b6b"},
                customdata=frame[["model", "model_text", "shift"]].to_numpy(dtype=object).tolist(),
                hovertemplate="<b>%{customdata[1]}</b> in DKPS (aligned)<br>"
                "moves %{customdata[2]:.3f} to its PKPS position<extra></extra>",
                name="DKPS position (aligned)",
            )
        )
    value_format = "" if categorical else ":.3f"
    hover = (
        "<b>%{customdata[4]}</b><br>family %{customdata[5]}<br>"
        f"{colour_text} %{{customdata[2]{value_format}}}<br>"
        "responses %{customdata[3]:,.0f}<br>DKPS → PKPS shift %{customdata[6]:.3f}<br>"
        f"{axis_name} 1 %{{x:.3f}}, {axis_name} 2 %{{y:.3f}}<extra>%{{meta}}</extra>"
    )
    custom_columns = ["model", FAMILY, colour, RESPONSES, "model_text", "family_text", "shift"]
    for column, (side, title) in enumerate(panels, start=1):
        x, y = frame[f"x_{side}"], frame[f"y_{side}"]
        custom = frame[custom_columns]
        groups = (
            [(value, frame[colour] == value) for value in sorted(frame[colour].unique())]
            if categorical
            else [(None, frame[colour].notna()), ("missing", frame[colour].isna())]
        )
        for index, (value, rows) in enumerate(groups):
            if categorical:
                marker = {"color": FAMILY_COLOURS[index % len(FAMILY_COLOURS)], "size": 10}
                name, legend = plotly_text(value), column == 1
            elif value is None:
                marker = {"color": frame.loc[rows, colour], "coloraxis": "coloraxis", "size": 10}
                name, legend = title, overlay
            else:
                marker = {"color": MISSING_COLOUR, "size": 8, "symbol": "circle-open"}
                name, legend = f"no {colour_text}", column == 1 and bool(rows.any())
            marker["line"] = marker.get("line", {"width": 0.5, "color": "white"})
            figure.add_trace(
                go.Scatter(
                    x=x[rows],
                    y=y[rows],
                    mode="markers",
                    marker=marker,
                    customdata=custom[rows].to_numpy(dtype=object).tolist(),
                    hovertemplate=hover,
                    meta=title,
                    name=name,
                    legendgroup=name,
                    showlegend=legend,
                ),
                row=1,
                col=column,
            )
        chosen = frame[frame["model"].isin(list(highlight))]
        if len(chosen):
            figure.add_trace(
                go.Scatter(
                    x=chosen[f"x_{side}"],
                    y=chosen[f"y_{side}"],
                    mode="markers+text",
                    marker={
                        "size": 20,
                        "symbol": "circle-open",
                        "color": HIGHLIGHT,
                        "line": {"width": 3, "color": HIGHLIGHT},
                    },
                    text=chosen["model_text"],
                    textposition="top center",
                    cliponaxis=False,
                    textfont={"color": HIGHLIGHT, "size": 12},
                    customdata=chosen[["model"]].to_numpy(dtype=object).tolist(),
                    hoverinfo="skip",
                    name="selected",
                    legendgroup="selected",
                    showlegend=False,
                ),
                row=1,
                col=column,
            )
    every_x = frame[["x_left", "x_right"]].to_numpy()
    every_y = frame[["y_left", "y_right"]].to_numpy()
    x_range, y_range = _padded_range(every_x), _padded_range(every_y)
    for column in range(1, len(panels) + 1):
        figure.update_xaxes(
            title_text=f"{axis_name} axis 1 ({unit})",
            range=x_range,
            automargin=True,
            zeroline=False,
            row=1,
            col=column,
        )
        figure.update_yaxes(
            title_text=f"{axis_name} axis 2 ({unit})",
            range=y_range,
            automargin=True,
            zeroline=False,
            row=1,
            col=column,
        )
    # distances are what the maps show: one unit is as long across as up
    # (the ranges grow to fill each panel rather than the panels shrinking)
    figure.update_yaxes(scaleanchor="x", scaleratio=1, constrain="range", row=1, col=1)
    if len(panels) == 2:
        # one zoom for both panels: the same model sits at comparable places
        figure.update_xaxes(matches="x", row=1, col=2)
        figure.update_yaxes(matches="y", scaleanchor="x2", constrain="range", row=1, col=2)
    coloraxis = {"colorscale": "Viridis", "showscale": not categorical}
    if not categorical:
        values = frame[colour].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        coloraxis |= {
            "cmin": float(low),
            "cmax": float(high) if high > low else float(low) + 1e-9,
            "colorbar": {"title": {"text": colour_text}, "len": 0.9, "thickness": 14},
        }
    figure.update_layout(
        coloraxis=coloraxis,
        height=height,
        margin={"t": 30, "l": 10, "r": 10, "b": 10},
        # a categorical colour's legend beside the maps (it scrolls), like a colour bar
        legend={"orientation": "v", "x": 1.02, "y": 1, "yanchor": "top"},
        hoverlabel={"align": "left"},
    )
    return figure
