"""Names are data: model, task and query names made safe for where they are shown.

Plotly reads a small HTML subset in every label, tick and hover text (``<a href>``,
``<b>``, ``<br>``, entities), so a model called ``<a href=…>x</a>`` would become a link;
:func:`plotly_safe` escapes ``&``, ``<`` and ``>`` so Plotly draws the name as written. A
terminal obeys ANSI escape sequences and other control characters in printed names;
:func:`terminal_safe` shows them as ``\\x1b``-style escapes instead.
"""

from __future__ import annotations

import re

import pandas as pd

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plotly_safe(text: object) -> str:
    """``text`` with ``&``, ``<``, ``>`` as HTML entities: Plotly shows it literally."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def terminal_safe(text: object) -> str:
    """``text`` with control characters (ESC, BEL, CR, …; tab and newline kept) written as
    ``\\xNN`` so a printed name cannot move the cursor, recolour or retitle the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def terminal_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` with every text cell (and the column names) terminal-safe."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = [terminal_safe(v) if isinstance(v, str) else v for v in out[column]]
    out.columns = [terminal_safe(c) for c in out.columns]
    return out


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 model"``, ``"2 models"``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
