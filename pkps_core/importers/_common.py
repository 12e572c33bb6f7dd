"""Shared pieces of the importers: the result type, the skip/warning log, and readers.

Readers of (possibly gzipped) text, JSON and JSON Lines files that raise
:class:`~pkps_core.records.RecordsError` with a message saying what to fix, and the
per-response score coercion every format uses.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pkps_core.reading import not_utf8, open_bounded, out_of_memory
from pkps_core.records import RecordsError


@dataclass
class ImportResult:
    """Records read by :func:`load`, with what was left out and why.

    Attributes
    ----------
    records : DataFrame
        Validated canonical records.
    skipped : list of str
        One line per skipped file or group of skipped rows: where, how many, why.
    warnings : list of str
        Things kept but worth knowing (e.g. a lower-is-better metric, missing scores).
    formats : dict of str to int
        Rows imported per format.
    """

    records: pd.DataFrame
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    formats: dict[str, int] = field(default_factory=dict)


class _Log:
    """Collects skipped rows per (source, reason) and warnings while reading."""

    def __init__(self) -> None:
        self.skips: Counter[tuple[str, str]] = Counter()
        self.examples: dict[tuple[str, str], str] = {}
        self.warnings: list[str] = []

    def skip(self, source: Path | str, reason: str, where: str = "") -> None:
        key = (Path(source).name, reason)
        self.skips[key] += 1
        if where:
            self.examples.setdefault(key, where)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def lines(self) -> list[str]:
        out = []
        for (source, reason), count in self.skips.items():
            noun = "item" if count == 1 else "items"
            example = self.examples.get((source, reason))
            at = f" (e.g. {example})" if example else ""
            out.append(f"{source}: {count} {noun} skipped — {reason}{at}")
        return out


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def _read_bytes(path: Path) -> bytes:
    """A file's bytes, gunzipped, at most :func:`~pkps_core.reading.max_read_bytes`."""
    try:
        with open_bounded(path) as handle:
            return handle.read()
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise RecordsError(f"{path} is a damaged gzip file ({exc}); re-create it") from None
    except OSError as exc:
        raise RecordsError(f"cannot read {path}: {exc.strerror or exc}") from None
    except MemoryError:
        raise out_of_memory(path) from None


def _read_text(path: Path) -> str:
    """A text file's content, gunzipping when the bytes are gzip."""
    raw = _read_bytes(path)
    raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, raw, exc) from None
    except MemoryError:
        raise out_of_memory(path) from None


TOO_DEEP = "JSON nested too deeply to read"


def _read_json(path: Path) -> object:
    text = _read_text(path)
    if not text.strip():
        raise RecordsError(f"{path} is empty; it should hold a JSON document")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordsError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise RecordsError(
            f"{path}: {TOO_DEEP} (arrays or objects nested thousands deep); no evaluation "
            "tool writes such a file — re-create it"
        ) from None
    except MemoryError:
        raise out_of_memory(path) from None


def _read_jsonl(path: Path, log: _Log) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each line; unparseable lines are skipped and logged."""
    text = _read_text(path)
    if not text.strip():
        raise RecordsError(f"{path} is empty; it should hold one JSON object per line")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            log.skip(path, f"not valid JSON ({exc.msg})", f"line {number}")
            continue
        except RecursionError:
            log.skip(path, TOO_DEEP, f"line {number}")
            continue
        except MemoryError:
            raise out_of_memory(path) from None
        if not isinstance(item, dict):
            log.skip(path, "line is not a JSON object", f"line {number}")
            continue
        yield number, item


FIRST_LINE_BYTES = 64 * 1024**2


def _first_jsonl_object(path: Path) -> dict | None:
    """The first non-empty line's JSON object (read alone, at most 64 MiB), or None."""
    try:
        with open_bounded(path) as handle:
            while line := handle.readline(FIRST_LINE_BYTES):
                if line.strip():
                    item = json.loads(line.decode("utf-8-sig"))
                    return item if isinstance(item, dict) else None
    except (RecordsError, OSError, EOFError, zlib.error, ValueError, RecursionError):
        return None
    return None


def _find(folder: Path, name: str) -> Path | None:
    """``folder/name`` or ``folder/name.gz``, whichever exists."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _get(node: object, *keys: str) -> object:
    """``node[k1][k2]…`` through JSON objects; None where a step is not an object or lacks
    the key (a malformed record then reads as a missing field instead of crashing)."""
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _as_list(value: object) -> list:
    """A JSON array as a list; anything else (null, a number, an object) as empty."""
    return value if isinstance(value, list) else []


def _as_text(value: object) -> str | None:
    """A JSON string as is; anything else as None."""
    return value if isinstance(value, str) else None


def _as_id(value: object) -> str | None:
    """An identifier: a non-blank string or an integer, as text; anything else None."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _as_score(value: object) -> float | None:
    """A per-response score as float: numbers, booleans and numeric strings; else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _orient_lower_is_better(
    frame: pd.DataFrame, source: Path, log: _Log, metric: str | None = None
) -> pd.DataFrame:
    """Scores of lower-is-better tasks as ``1 − score``, so every stored score is
    higher-is-better; the ``lower_is_better`` column (True / False / None per row) is
    dropped, since nothing downstream reads it and the flipped scores no longer need it.

    Raises
    ------
    RecordsError
        A lower-is-better task has a score outside [0, 1], which ``1 − score`` cannot
        orient.
    """
    lower = frame.pop("lower_is_better").eq(True).to_numpy()
    named = f" {metric!r}" if metric else ""
    for task in frame.loc[lower, "task"].unique():
        rows = lower & frame["task"].eq(task).to_numpy()
        scores = frame.loc[rows, "score"].astype(float)
        outside = scores.notna() & ~scores.between(0.0, 1.0)
        if outside.any():
            first = frame.loc[outside[outside].index[0]]
            raise RecordsError(
                f"{source}: task {task!r} has a lower-is-better metric{named} with scores "
                f"outside [0, 1] (e.g. query_id {first['query_id']!r}: {first['score']}), "
                "which cannot be turned into higher-is-better scores; rescale them to [0, 1] "
                "or leave the task out"
            )
        frame.loc[rows, "score"] = 1.0 - scores
        log.warn(
            f"{source.name}: task {task!r}: lower-is-better metric{named}; stored 1 − score "
            "so higher is better"
        )
    return frame
