"""Widgets every page uses: tables with their columns explained and sized, alerts that
show user-derived text literally, and download buttons that never rerun the page."""

from __future__ import annotations

import re
from pathlib import PurePath

import pandas as pd
import streamlit as st

from pkps_core.views.columns import column_help
from pkps_core.views.widths import column_widths


def column_tooltips(frame) -> dict:
    """``column_config`` giving each of ``frame``'s columns its meaning as a tooltip."""
    data = frame.data if isinstance(getattr(frame, "data", None), pd.DataFrame) else frame  # Styler
    columns = list(getattr(data, "columns", []))
    index_names = [n for n in getattr(getattr(data, "index", None), "names", []) if n]
    names = [*columns, *index_names]
    return {name: st.column_config.Column(help=text) for name, text in column_help(names).items()}


def table_config(frame, column_config: dict | None = None, *, hide_index=None) -> dict:
    """``column_config`` for ``frame``: every column's meaning as its header tooltip
    (:func:`pkps_core.views.columns.column_help`) and a pixel width that fits its header
    and its longest cell (:func:`pkps_core.views.widths.column_widths`, capped for long
    free text); ``column_config`` entries win, and keep a width they give."""
    config = column_tooltips(frame)
    for name, given in (column_config or {}).items():
        if isinstance(given, str):
            given = st.column_config.Column(given)
        if isinstance(given, dict) and not given.get("help") and name in config:
            given = {**given, "help": config[name]["help"]}
        config[name] = given
    for name, width in column_widths(frame, config, hide_index=hide_index).items():
        config[name] = {**(config.get(name) or {}), "width": width}
    return config


def table(frame, *, column_config: dict | None = None, **kwargs):
    """``st.dataframe`` with :func:`table_config`'s tooltips and widths (no header or
    cell cut at the column's edge, bar capped long text)."""
    from pandas.io.formats.style import Styler

    data = frame.data if isinstance(frame, Styler) else frame  # a Styler draws its frame
    config = table_config(data, column_config, hide_index=kwargs.get("hide_index"))
    return st.dataframe(frame, column_config=config, **kwargs)


def literal_block(text: str) -> str:
    """``text`` as a Markdown code block, shown literally with its line breaks (no emphasis,
    link, HTML, emoji or ``:icon:`` reaches the reader); the fence is longer than any run
    of backticks in ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def alert(kind: str, headline: str, detail: str | None = None) -> None:
    """An alert box with fixed wording and, inside the same box, the user-derived detail
    (file and model names, messages quoting the input) as a literal block
    (:func:`literal_block`: nothing in it is read as Markdown)."""
    body = headline if not detail else f"{headline}\n\n{literal_block(detail)}"
    getattr(st, kind)(body)


# a download's media type by its file's suffix
MEDIA_TYPES = {
    ".csv": "text/csv",
    ".parquet": "application/vnd.apache.parquet",
    ".html": "text/html",
    ".png": "image/png",
}


def download_button(label: str, data, file_name: str, *, where=None, **kwargs):
    """``st.download_button`` (or ``where.download_button``: a column) for ``file_name``,
    its media type from the suffix (:data:`MEDIA_TYPES`), with ``on_click="ignore"``: a
    click does not rerun the page. A rerun during the browser's fetch re-registers the
    file, which cancelled the download when the file's bytes (its name) had changed, and a
    second click during that rerun was lost. ``data``: bytes, or a callable that returns
    them on click; ``kwargs`` (``key``, ``help``) go to Streamlit."""
    suffix = PurePath(file_name).suffix.lower()
    if suffix not in MEDIA_TYPES:
        raise ValueError(f"no media type for {file_name!r}: add its suffix to MEDIA_TYPES")
    return (st if where is None else where).download_button(
        label,
        data,
        file_name=file_name,
        mime=MEDIA_TYPES[suffix],
        on_click="ignore",
        **kwargs,
    )


class progress_bar:  # noqa: N801 - used as a function: shared.progress_bar("…")
    """An ``st.progress`` bar showing ``text``, called as the ``progress(fraction,
    message)`` callback the library's long calls take: the fraction clamped to [0, 1], the
    message cut to ``limit`` characters (model names can be long); :meth:`empty` removes
    it."""

    def __init__(self, text: str, limit: int = 80):
        self._bar = st.progress(0.0, text=text)
        self._limit = limit

    def __call__(self, fraction: float, message: str) -> None:
        self._bar.progress(min(max(float(fraction), 0.0), 1.0), text=str(message)[: self._limit])

    def empty(self) -> None:
        self._bar.empty()
