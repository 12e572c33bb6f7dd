"""What every Plotly figure of the app must say (issue 18/19): the rules as one checker.

:func:`figure_problems` reads a figure's JSON (what ``st.plotly_chart`` sends, or
``fig.to_plotly_json()``) and lists what a reader would miss:

- every cartesian axis a trace is drawn on has a human title: non-empty, no raw column
  name (no underscore); a numeric axis says its unit or scale in parentheses
  ("score (0–1)", "MAE (score units)", "MDS axis 1 (PKPS distance)");
- every colour scale shown (heatmap, marker colours with a colour bar, a shared
  colour axis) has a colour-bar title naming its quantity;
- every hover shows numbers to 3 decimals: each ``%{…}`` placeholder of a non-integer
  number carries a ``.3f`` format (integer counts may use ``,.0f`` / ``d`` or none), and
  no hovered trace falls back to Plotly's default hover (raw numbers).
"""

from __future__ import annotations

import base64
import re

import numpy as np

PLACEHOLDER = re.compile(r"%\{([^}:]+)(?::([^}]*))?\}")
INTEGER_FORMATS = {",.0f", ".0f", "d", ",d", ",", ""}


def _array(value) -> np.ndarray:
    """A figure array, decoding Plotly's base64 typed arrays."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        shape = value.get("shape")
        return flat.reshape([int(n) for n in str(shape).split(",")]) if shape else flat
    return np.asarray(value if value is not None else [], dtype=object)


def _numbers(values: np.ndarray) -> np.ndarray | None:
    """The finite numbers of ``values``, or None when they are not numbers (text)."""
    flat = values.ravel()
    numeric = [v for v in flat if v is not None and not isinstance(v, str)]
    if not numeric or len(numeric) < sum(v is not None for v in flat):
        return None
    try:
        numbers = np.asarray(numeric, dtype=float)
    except (TypeError, ValueError):
        return None
    return numbers[np.isfinite(numbers)]


def _placeholder_values(trace: dict, name: str) -> np.ndarray | None:
    """The data a hover placeholder reads (None: not a data array we can check)."""
    match = re.fullmatch(r"customdata\[(\d+)\]", name)
    if match:
        custom = _array(trace.get("customdata"))
        if custom.ndim == 0 or custom.size == 0:
            return None
        return custom[..., int(match.group(1))]
    if name in ("x", "y", "z"):
        return _array(trace.get(name))
    if name == "marker.color":
        return _array((trace.get("marker") or {}).get("color"))
    return None


def _axis_title(axis: dict) -> str:
    title = axis.get("title")
    if isinstance(title, dict):
        return str(title.get("text") or "")
    return str(title or "")


def _is_numeric(trace: dict, letter: str, axis: dict) -> bool:
    if axis.get("type") in ("category", "multicategory"):
        return False
    if axis.get("type") in ("linear", "log", "date"):
        return True
    values = _array(trace.get(letter))
    return values.size > 0 and _numbers(values) is not None


def figure_problems(figure: dict, where: str = "") -> list[str]:
    """Everything in ``figure`` that breaks the rules above, one line each."""
    layout = figure.get("layout", {})
    traces = figure.get("data", [])
    problems: list[str] = []
    checked_axes: dict[str, bool] = {}
    for trace in traces:
        kind = trace.get("type", "scatter")
        if kind in ("pie", "table", "indicator"):
            continue
        for letter in ("x", "y"):
            ref = trace.get(f"{letter}axis", letter)
            axis_key = f"{letter}axis{ref[1:]}"
            numeric = _is_numeric(trace, letter, layout.get(axis_key, {}))
            checked_axes[axis_key] = checked_axes.get(axis_key, False) or numeric
        problems += _colour_problems(trace, layout)
        problems += _hover_problems(trace)
    for axis_key, numeric in sorted(checked_axes.items()):
        title = _axis_title(layout.get(axis_key, {}))
        if not title.strip():
            problems.append(f"{axis_key} has no title")
        elif "_" in title:
            problems.append(f"{axis_key} title {title!r} reads like a raw column name")
        elif numeric and not re.search(r"\(.+\)", title):
            problems.append(f"{axis_key} title {title!r} gives no unit or scale in parentheses")
    return [f"{where}: {p}" if where else p for p in problems]


def _colour_problems(trace: dict, layout: dict) -> list[str]:
    name = trace.get("name") or trace.get("type")
    marker = trace.get("marker") or {}
    if trace.get("type") == "heatmap":
        if trace.get("showscale") is False:
            return []
        bar = trace.get("colorbar") or {}
    elif marker.get("coloraxis"):
        axis = layout.get(marker["coloraxis"], {})
        if axis.get("showscale") is False:
            return []
        bar = axis.get("colorbar") or {}
    elif marker.get("colorbar") or marker.get("showscale"):
        bar = marker.get("colorbar") or {}
    else:
        return []
    title = _axis_title(bar)
    if not title.strip():
        return [f"trace {name!r}: colour bar without a title"]
    if "_" in title:
        return [f"trace {name!r}: colour bar title {title!r} reads like a column name"]
    return []


def _hover_problems(trace: dict) -> list[str]:
    name = trace.get("name") or trace.get("type")
    if trace.get("hoverinfo") in ("skip", "none"):
        return []
    template = trace.get("hovertemplate")
    if isinstance(template, list):
        template = " ".join(map(str, template))
    if not template:
        return [f"trace {name!r}: Plotly's default hover (numbers unformatted)"]
    problems = []
    for field, fmt in PLACEHOLDER.findall(template):
        values = _placeholder_values(trace, field)
        if values is None:
            continue
        numbers = _numbers(values)
        if numbers is None or numbers.size == 0:
            continue
        integral = bool(np.all(numbers == np.round(numbers)))
        if integral and fmt in INTEGER_FORMATS:
            continue
        if not fmt.endswith(".3f"):
            problems.append(f"trace {name!r}: %{{{field}}} shown as {fmt or 'raw'}, not .3f")
    return problems
