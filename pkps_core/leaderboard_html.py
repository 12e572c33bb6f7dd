"""The completed leaderboard as a self-contained HTML page (:func:`leaderboard_html`)."""

from __future__ import annotations

import html

import numpy as np

from pkps_core.leaderboard import KIND_WORDS, KINDS, Leaderboard, task_column

__all__ = ["leaderboard_html"]


def _colour(value: float) -> str:
    """A light red → yellow → green background for a score in [0, 1]."""
    if not np.isfinite(value):
        return "#ffffff"
    v = float(np.clip(value, 0.0, 1.0))
    red = int(255 if v < 0.5 else 255 - (v - 0.5) * 2 * 120)
    green = int(140 + min(v, 0.5) * 2 * 100)
    return f"#{red:02x}{green:02x}96"


def leaderboard_html(board: Leaderboard, title: str = "Leaderboard") -> str:
    """A self-contained HTML page of the table: cells coloured by score, estimated and
    predicted cells in italics on a hatched background, the interval in each cell's
    tooltip, and a legend. Every name is escaped."""
    wide = board.wide()
    esc = html.escape
    head = ["#", "model", "family", "overall", "90 % interval", "rank interval", "observed"]
    head = [esc(h) for h in head] + [esc(t) for t in board.tasks]
    lines = []
    for row in wide.itertuples(index=False):
        values = dict(zip(wide.columns, row, strict=True))
        cells = [
            f"<td>{int(values['rank'])}</td>",
            f"<td>{esc(str(values['model']))}</td>",
            f"<td>{esc(str(values['family']))}</td>",
            f"<td style='background:{_colour(values['overall'])}'>{values['overall']:.3f}</td>",
            f"<td>{values['lower']:.3f} – {values['upper']:.3f}</td>",
            f"<td>{int(values['rank_lower'])} – {int(values['rank_upper'])}</td>",
            f"<td>{values['observed_fraction']:.0%}</td>",
        ]
        for task in board.tasks:
            name = task_column(task)
            value, kind = values[name], values[f"{name} kind"]
            low, high = values[f"{name} lower"], values[f"{name} upper"]
            tip = f"{kind}: {value:.3f} (interval {low:.3f} – {high:.3f})"
            cells.append(
                f"<td class='{esc(kind)}' style='background-color:{_colour(value)}' "
                f"title='{esc(tip)}'>{value:.3f}</td>"
            )
        lines.append("<tr>" + "".join(cells) + "</tr>")
    legend = "".join(
        f"<li><span class='{kind} swatch'>0.50</span> {esc(KIND_WORDS[kind])}</li>"
        for kind in KINDS
    )
    style = (
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{padding:3px 8px;border:1px solid #ddd;text-align:right}"
        "td:nth-child(2),td:nth-child(3){text-align:left}"
        ".estimated{font-style:italic;background-image:repeating-linear-gradient(45deg,"
        "transparent 0 6px,rgba(0,0,0,.07) 6px 8px)}"
        ".predicted{font-style:italic;color:#555;background-image:repeating-linear-gradient("
        "45deg,transparent 0 3px,rgba(0,0,0,.16) 3px 5px)}"
        ".swatch{display:inline-block;padding:0 6px;border:1px solid #ddd;"
        "background-color:#fff}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{style}</style></head><body><h1>{esc(title)}</h1>"
        f"<p>Overall: the query-weighted mean of a model's tasks; intervals at "
        f"{board.level:.0%}; cells not observed filled by {esc(board.source)}. "
        "Hover a cell for its interval.</p>"
        f"<ul>{legend}</ul><table><thead><tr>"
        + "".join(f"<th>{h}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(lines)
        + "</tbody></table></body></html>"
    )
