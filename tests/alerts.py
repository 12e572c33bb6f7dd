"""Reading the app's alerts in AppTest: a fixed headline, then the user-derived detail as a
literal code block inside the same box (``perspective_app.shared.widgets.alert``)."""

from __future__ import annotations

import re

_BLOCK = re.compile(r"\n\n(`{3,})text\n(.*)\n\1$", re.DOTALL)


def headline(element) -> str:
    """The alert's fixed wording."""
    match = _BLOCK.search(element.value)
    return element.value[: match.start()] if match else element.value


def detail(element) -> str:
    """The alert's detail as the user sees it ('' when it has none)."""
    match = _BLOCK.search(element.value)
    return match.group(2) if match else ""


def details(at) -> list[str]:
    """Every alert's detail, sidebar included, in page order per kind."""
    kinds = (at.error, at.warning, at.info, at.success)
    return [detail(e) for elements in kinds for e in elements if detail(e)]
