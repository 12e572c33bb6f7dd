"""A new model's report as figures, HTML and text: what the New model page shows, headless.

The tables and figures of a :class:`~pkps_core.views.new_model.NewModelReport` as one
self-contained HTML file (plotly.js inside: it opens offline), as PNG (needs the optional
``kaleido`` and a Chrome or Chromium, :func:`figures_png`) or as a text summary; the
``report`` command (:mod:`pkps_core.cli_report`) writes them. Model and task names are
data: they are escaped wherever they reach Plotly (which renders ``<b>``, ``<a>``,
``<br>``) or HTML.
"""

from __future__ import annotations

import html
import math
import os
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from pkps_core.text import plotly_safe as plotly_text

if TYPE_CHECKING:  # the report's computation is imported only when a command runs
    from pkps_core.views.new_model import NewModelReport

HIGHLIGHT = "#d62728"
REFERENCE_COLOUR = "#8c8c8c"
# Debian's Chromium, which choreographer (kaleido's browser driver) does not look for.
DEBIAN_CHROMIUM = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
# PNGs are read outside the app (slides, papers): wide enough to stay sharp, with a
# title saying whose report and which store (the page's figures carry that around them)
PNG_WIDTH = 1600
PNG_HEIGHTS = {"tasks": 720, "map": 960}
PNG_FONT_SIZE = 16
# a browser that does not answer (a start that stalls on a loaded machine) is given up after
# this many seconds and started once more; drawing both figures takes 3-20 s here
PNG_TIMEOUT = 90.0
PNG_ATTEMPTS = 2


class PngUnavailable(RuntimeError):
    """A PNG cannot be made here (no kaleido, or no Chrome/Chromium); the message is one
    line saying which and what to do."""


def png_browser() -> str | None:
    """The Chrome/Chromium that renders PNGs, or None: ``$BROWSER_PATH``, else what
    choreographer finds (a ``kaleido_get_chrome`` download, Chrome or Chromium on the
    usual paths), else ``$PKPS_CHROMIUM`` or Debian's ``chromium-headless-shell`` /
    ``chromium``. Nothing is downloaded."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"]
    try:
        from choreographer.browsers.chromium import Chromium
    except ImportError:
        return None
    found = Chromium.find_browser(skip_local=False)
    candidates = (found, os.environ.get("PKPS_CHROMIUM", "").strip(), *DEBIAN_CHROMIUM)
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def figures_png(figures, *, width: int = PNG_WIDTH) -> list[bytes]:
    """``figures`` as PNG bytes, drawn by kaleido in one local headless Chrome/Chromium
    session with the plotly.js of the installed plotly package (offline: no CDN, no
    MathJax).

    Raises
    ------
    PngUnavailable
        kaleido is not installed, or no browser is found, or the browser fails.
    """
    try:
        import asyncio

        from kaleido import Kaleido
    except ImportError:
        raise PngUnavailable(
            "PNG export needs the optional package kaleido (pip install kaleido) and a "
            "Chrome or Chromium; the HTML export has the same figures"
        ) from None
    browser = png_browser()
    if browser is None:
        raise PngUnavailable(
            "PNG export needs a Chrome or Chromium and none was found (set BROWSER_PATH "
            "to one); the HTML export has the same figures"
        )

    async def draw() -> list[bytes]:
        async with Kaleido(n=1, path=browser, mathjax=False) as kaleido:
            return [
                await kaleido.calc_fig(
                    figure,
                    opts={"format": "png", "width": width, "height": figure.layout.height or 450},
                )
                for figure in figures
            ]

    for attempt in range(1, PNG_ATTEMPTS + 1):
        try:
            return _in_a_thread(lambda: asyncio.run(draw()), PNG_TIMEOUT)
        except TimeoutError:
            if attempt < PNG_ATTEMPTS:
                continue
            raise PngUnavailable(
                f"PNG export failed in {browser}: no answer in {PNG_TIMEOUT:.0f} s "
                f"({PNG_ATTEMPTS} tries); the HTML export has the same figures"
            ) from None
        except Exception as exc:  # the browser's own failures (crash, sandbox)
            text = str(exc).strip()
            first_line = text.splitlines()[0] if text else type(exc).__name__
            raise PngUnavailable(f"PNG export failed in {browser}: {first_line}") from exc
    raise AssertionError("unreachable")


def _in_a_thread(work, timeout: float):
    """``work()`` in a daemon thread of its own, its result or its exception;
    ``TimeoutError`` when it has not finished in ``timeout`` seconds (the thread is left
    behind: a daemon, it does not hold up the interpreter's exit). A thread of its own also
    because ``asyncio.run`` refuses to start where an event loop already runs (a caller's
    asyncio code, or Playwright's sync API in the same process)."""
    import threading

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="pkps-png", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer in {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def png_figures(report: NewModelReport, store: str | None = None) -> dict:
    """The report's two figures as the PNGs draw them, by name: ``tasks`` (per task) and
    ``map`` (PKPS); each titled with the model and, when given, the store's name, at
    :data:`PNG_HEIGHTS` and a larger font for :data:`PNG_WIDTH` pixels."""
    subject = plotly_text(report.model) + (f" · store {plotly_text(store)}" if store else "")
    titles = {
        "tasks": f"{subject}: predicted score per task ({report.method}, "
        f"{report.level:.0%} interval)",
        "map": f"{subject}: where it stands among the references (PKPS map)",
    }
    figures = {"tasks": tasks_figure(report), "map": scatter_figure(report)}
    for name, figure in figures.items():
        figure.update_layout(
            title={"text": titles[name], "x": 0.01, "xanchor": "left"},
            height=PNG_HEIGHTS[name],
            font={"size": PNG_FONT_SIZE},
            margin={"t": 70, "l": 20, "r": 20, "b": 20},
            legend={"orientation": "h", "y": -0.12 if name == "map" else -0.2},
        )
    return figures


def report_pngs(report: NewModelReport, store: str | None = None) -> dict[str, bytes]:
    """The report's two figures as PNG (:func:`png_figures`), by name: ``tasks`` (per
    task) and ``map`` (PKPS)."""
    figures = png_figures(report, store)
    return dict(zip(figures, figures_png(list(figures.values())), strict=True))


def _interval(report: NewModelReport) -> str:
    low, high = report.overall["lower"], report.overall["upper"]
    return f"{low:.3f}–{high:.3f}" if math.isfinite(low) and math.isfinite(high) else "none"


def headline(report: NewModelReport) -> str:
    """One sentence: overall prediction, interval, rank and its interval."""
    overall, rank = report.overall, report.rank
    text = (
        f"predicted overall score {overall['prediction']:.3f} "
        f"({report.level:.0%} interval {_interval(report)}) by {report.method}, "
        f"rank {rank['rank']} of {rank['references'] + 1} "
        f"(interval {rank['best']}–{rank['worst']}; {rank['best_independent']}–"
        f"{rank['worst_independent']} if the tasks' errors were independent)"
    )
    if math.isfinite(overall["sample_score"]):
        text += f"; sample score over its scored tasks {overall['sample_score']:.3f}"
    return text


def scatter_figure(report: NewModelReport):
    """The references in PKPS (first two MDS axes) coloured by overall score, the new
    model drawn as a large red star."""
    import plotly.graph_objects as go

    frame = report.scatter
    references = frame[frame["role"] == "reference"]
    target = frame[frame["role"] == "new model"]
    hover = "%{text}<br>overall %{marker.color:.3f}<extra></extra>"
    figure = go.Figure(
        [
            go.Scatter(
                x=references["x"],
                y=references["y"],
                mode="markers",
                name="references",
                text=[plotly_text(m) for m in references["model"]],
                marker={
                    "color": references["overall"],
                    "colorscale": "Viridis",
                    "size": 9,
                    "colorbar": {"title": {"text": "overall score (0–1)"}},
                },
                hovertemplate=hover,
            ),
            go.Scatter(
                x=target["x"],
                y=target["y"],
                mode="markers",
                name=f"{plotly_text(report.model)} (predicted)",
                text=[plotly_text(m) for m in target["model"]],
                marker={"color": HIGHLIGHT, "size": 18, "symbol": "star"},
                hovertemplate="%{text}<br>new model<extra></extra>",
            ),
        ]
    )
    figure.update_layout(
        height=380,
        margin={"t": 30, "l": 10, "r": 10, "b": 10},
        xaxis_title="PKPS MDS axis 1 (distance units)",
        yaxis_title="PKPS MDS axis 2 (distance units)",
        legend={"orientation": "h", "y": -0.2},
    )
    figure.update_yaxes(scaleanchor="x", scaleratio=1)
    _titles_clear_of_ticks(figure)
    return figure


def _titles_clear_of_ticks(figure) -> None:
    """Margins grow to hold the tick labels and the axis titles beside them (without,
    a small margin draws the y title over the tick labels)."""
    figure.update_xaxes(automargin=True, title_standoff=12)
    figure.update_yaxes(automargin=True, title_standoff=12)


def tasks_figure(report: NewModelReport):
    """Per task: the prediction with its interval, the sample score and the reference."""
    import plotly.graph_objects as go

    tasks = report.tasks
    names = [plotly_text(t) for t in tasks["task"]]
    figure = go.Figure(
        [
            go.Scatter(
                x=names,
                y=tasks["prediction"],
                mode="markers",
                name=f"predicted ({report.method}, {report.level:.0%} interval)",
                marker={"color": HIGHLIGHT, "size": 10},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": tasks["upper"] - tasks["prediction"],
                    "arrayminus": tasks["prediction"] - tasks["lower"],
                },
                hovertemplate="%{x}: %{y:.3f}<extra>predicted</extra>",
            ),
            go.Scatter(
                x=names,
                y=tasks["sample_score"],
                mode="markers",
                name="sample score (its own scored responses)",
                marker={"symbol": "x", "size": 9, "color": "#1f77b4"},
                hovertemplate="%{x}: %{y:.3f}<extra>sample</extra>",
            ),
        ]
    )
    if tasks["reference_score"].notna().any():
        figure.add_trace(
            go.Scatter(
                x=names,
                y=tasks["reference_score"],
                mode="markers",
                name="reference score (full task)",
                marker={"symbol": "diamond-open", "size": 10, "color": "black"},
                hovertemplate="%{x}: %{y:.3f}<extra>reference</extra>",
            )
        )
    figure.update_layout(
        height=360,
        margin={"t": 30, "l": 10, "r": 10, "b": 10},
        xaxis_title="task",
        yaxis_title="score (mean per-response score, 0–1)",
        legend={"orientation": "h", "y": -0.3},
    )
    _titles_clear_of_ticks(figure)
    return figure


def _cell_html(value: object) -> str:
    """One table cell: escaped text (its line breaks kept by the page's ``white-space:
    pre-wrap``), numbers to 4 decimals, nothing for a missing value."""
    if isinstance(value, float | np.floating):
        return "" if math.isnan(value) else f"{value:.4f}"
    if value is None or value is pd.NA or value is pd.NaT:
        return ""
    return html.escape(str(value))


def _table_html(frame: pd.DataFrame) -> str:
    """A table whose text cells keep their line breaks (``DataFrame.to_html`` writes a
    response's newlines as a literal ``\\n``)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{_cell_html(v)}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False, name=None)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def report_html(report: NewModelReport, store: str | None = None) -> str:
    """The whole report as one self-contained HTML page: plotly.js is inside (about
    4.6 MB), so the figures show without internet. ``store`` names the store in the
    heading."""
    subject = html.escape(report.model) + (f" · store {html.escape(store)}" if store else "")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>New model report: {subject}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
        "td{white-space:pre-wrap;max-width:40em}</style></head><body>",
        f"<h1>New model report: {subject}</h1>",
        f"<p>{html.escape(headline(report))}. Holdout: {html.escape(report.holdout)}.</p>",
        "<h2>Warnings</h2>",
        "<ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in report.warnings) + "</ul>"
        if report.warnings
        else "<p>No extrapolation warning.</p>",
        "<h2>Overall</h2>",
        _table_html(report.overall_rows()),
        "<h2>Per task</h2>",
        _table_html(report.rows()),
        tasks_figure(report).to_html(
            full_html=False, include_plotlyjs=True, div_id="pkps-tasks-figure"
        ),
        "<h2>Where it stands</h2>",
        scatter_figure(report).to_html(
            full_html=False, include_plotlyjs=False, div_id="pkps-map-figure"
        ),
        "<h3>Nearest references in PKPS</h3>",
        _table_html(report.neighbours),
        "<h3>Their responses to the queries closest to its own</h3>",
        _table_html(report.responses),
        "<h3>Standings</h3>",
        _table_html(report.standings),
        "<h2>What to evaluate next</h2>",
        _table_html(report.next_cells),
        "<h2>Ensemble weights</h2>",
        _table_html(report.weights),
        "</body></html>",
    ]
    return "\n".join(parts)


def report_text(report: NewModelReport) -> str:
    """A plain-text summary for the terminal."""
    lines = [f"{report.model}: {headline(report)}"]
    lines += [f"warning: {w}" for w in report.warnings]
    shown = report.rows().drop(columns=["model", "method", "extrapolation_reason", "note"])
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        lines.append(shown.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        near = ", ".join(
            f"{r.neighbour} ({r.distance:.3g})" for r in report.neighbours.itertuples()
        )
        lines.append(f"nearest references in PKPS: {near or 'none'}")
        if len(report.next_cells):
            lines.append(
                "evaluate next (fewest responses first: spread the queries evenly; "
                "expected_gain = interval width one more query is expected to remove):"
            )
            lines.append(
                report.next_cells.head(5).to_string(index=False, float_format=lambda x: f"{x:.4f}")
            )
    lines.append(f"({report.elapsed:.1f} s)")
    return "\n".join(lines)
