"""The Leaderboard page's figures: the cell map and the rank plot (the page lays them out).

Pure functions of the leaderboard's frames (:class:`~pkps_core.leaderboard.Leaderboard`'s
``models`` and ``wide()``), testable without the app. Model and task names are data: they
reach Plotly escaped (:func:`~pkps_core.views.space.plotly_text`), so a name such as
``<b>x</b>`` is drawn as written, not as markup.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from pkps_core.leaderboard import KIND_MARK, LEVEL, task_column
from pkps_core.views.space import plotly_text

HIGHLIGHT_COLOUR = "#d62728"
MODEL_COLOUR = "#1f77b4"


def rank_figure(
    models: pd.DataFrame, highlight: str | None = None, level: float = LEVEL
) -> go.Figure:
    """Each model's overall score with its ``level`` interval as error bars, one row per
    model from the lowest score up; ``highlight`` (a model) drawn in red.

    ``models`` has the leaderboard's model rows: ``model``, ``overall``, ``lower``,
    ``upper``, ``rank``, ``rank_lower``, ``rank_upper``, ``observed_fraction``.
    """
    order = models.sort_values("overall")
    colour = [HIGHLIGHT_COLOUR if m == highlight else MODEL_COLOUR for m in order["model"]]
    figure = go.Figure(
        go.Scatter(
            x=order["overall"],
            y=[plotly_text(m) for m in order["model"]],
            mode="markers",
            marker={"color": colour, "size": 8},
            error_x={
                "type": "data",
                "symmetric": False,
                "array": order["upper"] - order["overall"],
                "arrayminus": order["overall"] - order["lower"],
                "thickness": 2,
            },
            customdata=order[["rank", "rank_lower", "rank_upper", "observed_fraction"]],
            hovertemplate="%{y}<br>overall %{x:.3f}<br>rank %{customdata[0]} "
            "(%{customdata[1]}–%{customdata[2]})<br>observed %{customdata[3]:.0%}<extra></extra>",
        )
    )
    figure.update_layout(
        height=max(300, 18 * len(order) + 80),
        xaxis_title=f"overall score ({level:.0%} interval)",
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
    )
    return figure


def cell_map_figure(wide: pd.DataFrame, tasks: Sequence[str]) -> go.Figure:
    """The model × task heatmap of ``wide`` (the leaderboard's wide table indexed by model,
    rows in the order drawn, top down): colour the score, text the score with its kind's
    mark, hover the kind and the interval."""
    names = [task_column(t) for t in tasks]
    values = wide[names].to_numpy(dtype=float)
    kinds = wide[[f"{n} kind" for n in names]].to_numpy(dtype=str)
    low = wide[[f"{n} lower" for n in names]].to_numpy(dtype=float)
    high = wide[[f"{n} upper" for n in names]].to_numpy(dtype=float)
    marks = [
        [f"{v:.2f}{KIND_MARK[k]}" for v, k in zip(r, kr, strict=True)]
        for r, kr in zip(values, kinds, strict=True)
    ]
    hover = [
        [f"{k} {v:.3f} ({lo:.3f}–{hi:.3f})" for v, k, lo, hi in zip(r, kr, lr, hr, strict=True)]
        for r, kr, lr, hr in zip(values, kinds, low, high, strict=True)
    ]
    figure = go.Figure(
        go.Heatmap(
            z=values,
            x=[plotly_text(t) for t in tasks],
            y=[plotly_text(m) for m in wide.index],
            text=marks,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{y} · %{x}<br>%{customdata}<extra></extra>",
            colorscale="RdYlGn",
            zmin=0.0,
            zmax=1.0,
        )
    )
    figure.update_layout(
        height=max(300, 20 * len(wide) + 80),
        yaxis={"autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 10, "b": 40},
    )
    return figure
