"""Argument types of the command line (:mod:`pkps_core.cli`): each parses one option's
text or raises :class:`argparse.ArgumentTypeError` with what was expected."""

from __future__ import annotations

import argparse


def _bandwidth(text: str):
    if text in ("cv", "median"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bandwidth must be 'cv', 'median' or a number, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError("bandwidth must be >= 0")
    return value


def _csv_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _interval_level(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1), got {text!r}")
    return value


def _number_list(kind, *, allow_full: bool = False):
    """Comma-separated numbers of ``kind``; with ``allow_full``, ``full`` stands for None."""

    def parse(text: str) -> list:
        values = []
        for item in _csv_list(text):
            if allow_full and item.lower() in ("full", "all"):
                values.append(None)
                continue
            try:
                values.append(kind(item))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"expected comma-separated {kind.__name__} values, got {item!r}"
                ) from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def _components(text: str):
    if text == "elbow":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'elbow', got {text!r}") from None
