"""What width each table column needs so that neither its header nor a cell is cut.

Streamlit's ``st.dataframe`` (glide data grid, drawn on a canvas) sizes a column from its
header and its first rows only, and cuts longer text at the column's edge. The app's
tables (``perspective_app.shared.table``) therefore give every column an explicit pixel
width from :func:`column_widths`: the header label plus the grid's padding and the column
menu it shows on hover, or the longest cell text as the grid displays it, whichever is
wider.

Text width is estimated per character from :data:`CHAR_WIDTHS`, the advance widths of
Streamlit's default font ("Source Sans", 400, 14 px, the grid's header and cell font)
measured with a canvas ``measureText`` in Chromium, then widened by :data:`SAFETY` (other
browsers and font rasterisers round differently): slightly wide rather than cut.
``tests/browser/test_table_labels.py`` measures the drawn grids against the real font.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

# Measured advance widths (px) of "Source Sans" 400 at 14 px, grouped by width.
_WIDTH_GROUPS = {
    3: " !'.:I|ijl·",
    4: "(),-;[]",
    5: '"/\\frt{}',
    6: "*?Lx°",
    7: "0123456789#$+=^_EFJVXYahknsuvyz~–±−×≤≥µü",
    8: "<>`ABCDHKNPRSUZbcdegopqé",
    9: "&GT→",
    10: "MOQw",
    11: "Wm—",
    12: "@",
    13: "%…",
}
CHAR_WIDTHS: dict[str, int] = {ch: w for w, chars in _WIDTH_GROUPS.items() for ch in chars}
UNKNOWN_CHAR_WIDTH = 14  # any character not measured (CJK, symbols): the widest and more
SAFETY = 1.06
# The grid's geometry (glide data grid with Streamlit's theme): 8 px of padding each side
# of a cell, a 1 px border; a header's title starts 8 px in and, with the column menu
# shown on hover, fades out over the column's last 35 px.
CELL_PADDING = 2 * 8 + 2
HEADER_PADDING = 8 + 36
# Streamlit's list column draws each item as a bubble: 8 px padding each side, 4 px apart.
BUBBLE_EXTRA = 2 * 8 + 4
# Long free text (responses, queries, notes) is capped rather than stretching the table:
# such a column cuts its longest cells, whose full text shows when the cell is
# double-clicked (the grid's read-only overlay) and in the table's CSV download.
MAX_WIDTH = 400
MIN_WIDTH = 50  # Streamlit's smallest column
# Formatting every cell of a very large column is slow; its widest text is among the
# longest texts (strings) or the extreme values (numbers).
MAX_MEASURED = 2000
INDEX = "_index"


def text_width(text: str) -> int:
    """Estimated width in px of ``text`` in the grid's font (conservative)."""
    raw = sum(CHAR_WIDTHS.get(ch, UNKNOWN_CHAR_WIDTH) for ch in text)
    return math.ceil(raw * SAFETY)


def header_width(label: str) -> int:
    """Width a column needs for its header ``label`` to show whole, menu included."""
    return text_width(label) + HEADER_PADDING


def cell_width(texts: Iterable[str]) -> int:
    """Width a column needs for the widest of ``texts`` (0 for none)."""
    return max((text_width(t) for t in texts), default=0) + CELL_PADDING


def number_text(value: float, fmt: str | None = None, *, integer: bool = False) -> str:
    """``value`` as Streamlit's number column shows it: with a printf-style ``fmt``
    ("%.3f"), else integers plain and floats rounded to 4 decimals with trailing zeros
    trimmed (more decimals only for magnitudes below 1e-4); NaN and infinities empty.
    Named formats ("dollar", "percent", …) get a text at least as long as theirs."""
    if value is None or not np.isfinite(value):
        return ""
    if fmt and "%" in fmt:
        try:
            return fmt % value
        except (TypeError, ValueError):
            pass
    if fmt == "plain":
        return repr(float(value))
    if fmt in {"compact", "scientific", "engineering"}:
        return f"{value:.3e}"
    if fmt == "percent":
        return f"{value * 100:,.2f}%"
    if fmt:  # localized, dollar, euro, yen, accounting, bytes: separators, symbol, cents
        return f"(${value:,.2f})"
    if integer:
        return str(int(round(value)))
    decimals = 4 if value == 0 or abs(value) >= 1e-4 else -math.floor(math.log10(abs(value)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def display_texts(values: pd.Series, fmt: str | None = None, styler_precision=None) -> list:
    """The texts a column of ``values`` shows (a sample for very large columns): numbers
    per :func:`number_text` (or, for a pandas Styler's data, with its ``precision``),
    datetimes as ``YYYY-MM-DD HH:MM:SS``, missing values as ``None``; lists become a
    list of their items' texts (bubbles)."""
    if pd.api.types.is_bool_dtype(values):
        return []
    if pd.api.types.is_numeric_dtype(values):
        numbers = pd.to_numeric(values, errors="coerce").dropna().drop_duplicates()
        if len(numbers) > MAX_MEASURED:
            numbers = pd.concat([numbers.nlargest(20), numbers.nsmallest(20), numbers.head(200)])
        integer = pd.api.types.is_integer_dtype(values)
        missing = ["None"] if values.isna().any() else []  # the grid's grey "None"
        if styler_precision is not None and not fmt and not integer:
            return [f"{v:.{styler_precision}f}" for v in numbers] + missing
        return [number_text(float(v), fmt, integer=integer) for v in numbers] + missing
    if pd.api.types.is_datetime64_any_dtype(values):
        stamps = values.dropna().drop_duplicates().head(MAX_MEASURED)
        return [s.strftime("%Y-%m-%d %H:%M:%S") for s in stamps] + (
            ["None"] if values.isna().any() else []
        )
    try:
        values = values.drop_duplicates()
    except TypeError:  # lists (unhashable) are measured one by one
        pass
    texts = []
    for value in values.head(MAX_MEASURED * 50):
        if isinstance(value, list | tuple | np.ndarray):
            texts.append([str(v) for v in value])
        elif value is None or (isinstance(value, float) and math.isnan(value)):
            texts.append("None")
        else:
            texts.append(str(value))
    return texts


def _cells_width(texts: list) -> int:
    """Width the widest of ``texts`` (strings, or lists of strings drawn as bubbles)
    needs, padding included; 0 for none."""
    strings = [t for t in texts if isinstance(t, str)]
    if len(strings) > MAX_MEASURED:  # the widest text is among the longest ones
        strings = sorted(set(strings), key=len)[-MAX_MEASURED:]
    need = cell_width(strings) if strings else 0
    for items in (t for t in texts if not isinstance(t, str)):
        need = max(need, sum(text_width(t) + BUBBLE_EXTRA for t in items) + CELL_PADDING)
    return need


def required_width(label: str, texts: list) -> int:
    """Width a column headed ``label`` showing ``texts`` needs for nothing to be cut."""
    return max(header_width(label), _cells_width(texts))


def column_width(label: str, texts: list) -> int:
    """Pixel width for a column headed ``label`` showing ``texts``: what
    :func:`required_width` asks, with the cells' share capped at :data:`MAX_WIDTH` (the
    header is never cut) and at least :data:`MIN_WIDTH`."""
    return max(header_width(label), MIN_WIDTH, min(_cells_width(texts), MAX_WIDTH))


def _label(name: str, given) -> str:
    if isinstance(given, str):
        return given
    if isinstance(given, Mapping) and given.get("label") is not None:
        return str(given["label"])
    return name


def _format(given) -> str | None:
    if isinstance(given, Mapping):
        return (given.get("type_config") or {}).get("format")
    return None


def _styler_precision(frame) -> int | None:
    if isinstance(getattr(frame, "data", None), pd.DataFrame):  # a pandas Styler
        return int(pd.get_option("styler.format.precision"))
    return None


def column_widths(
    frame, column_config: Mapping | None = None, *, hide_index: bool | None = None
) -> dict[str, int]:
    """Pixel width per column of ``frame`` (a DataFrame or a pandas Styler), keyed as
    ``column_config`` is (the index as its name, or ``_index`` when it has none).

    ``column_config`` gives each column's label (``st.column_config`` entries, a plain
    label string) and number format (``"%.3f"``), which the widths follow; columns it
    hides (``None``) or gives a width already are left out.
    """
    config = dict(column_config or {})
    precision = _styler_precision(frame)
    data = frame.data if precision is not None else frame
    out: dict[str, int] = {}
    columns = [(str(name), data[name]) for name in data.columns if data[name].ndim == 1]
    index_keys = []
    if not hide_index:  # the grid shows each index level as a column, headed by its name
        for level, name in enumerate(data.index.names):
            key = str(name) if name is not None else INDEX
            index_keys.append(key)
            columns.append((key, pd.Series(data.index.get_level_values(level))))
    for key, values in columns:
        given = config.get(key, config.get(INDEX) if key in index_keys else None)
        if key in config and given is None:
            continue  # hidden
        if isinstance(given, Mapping) and given.get("width") is not None:
            continue
        label = _label("" if key == INDEX else key, given)
        # a checkbox (16 px) is narrower than any header's padding: booleans have no texts
        out[key] = column_width(label, display_texts(values, _format(given), precision))
    return out
