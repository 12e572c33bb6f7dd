"""Inspect AI importer: ``.eval`` logs (Inspect's default) and JSON logs
(``inspect eval --log-format json``).

An ``.eval`` log is a zip archive: ``header.json`` (or, for a run that did not finish,
``_journal/start.json``) holds the ``eval`` header, and ``samples/<id>_epoch_<n>.json``
one sample each, the same sample objects a JSON log lists under ``samples``; both map
alike. Named ``inspect_logs`` so that it does not shadow the standard library's
``inspect``. The first scorer gives the score; Inspect's letter values map as its
``value_to_float`` does.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers._common import (
    _as_id,
    _as_list,
    _as_score,
    _as_text,
    _get,
    _Log,
    _read_json,
)
from pkps_core.reading import max_read_bytes, too_large
from pkps_core.records import RecordsError

# Inspect's value_to_float: C(orrect) / I(ncorrect) / P(artial) / N(o answer).
_INSPECT_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


def _inspect_text(content: object) -> str | None:
    """Text of an Inspect message content: a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        text = "\n".join(p for p in parts if isinstance(p, str))
        return text or None
    return None


def _inspect_query(sample: dict) -> str | None:
    raw = sample.get("input")
    if isinstance(raw, list):
        users = [_inspect_text(_get(m, "content")) for m in raw if _get(m, "role") == "user"]
        raw = "\n\n".join(u for u in users if u) or None
    if not isinstance(raw, str):
        return None
    choices = sample.get("choices")
    if isinstance(choices, list) and choices:
        raw += "\n\n" + "\n".join(f"{chr(ord('A') + i)}) {c}" for i, c in enumerate(choices))
    return raw


def _inspect_score(sample: dict, scorer: str | None) -> object:
    scores = sample.get("scores")
    if not isinstance(scores, dict) or not scores:
        return None
    chosen = scores.get(scorer) if scorer in scores else next(iter(scores.values()))
    value = chosen.get("value") if isinstance(chosen, dict) else None
    if isinstance(value, str) and value in _INSPECT_LETTERS:
        return _INSPECT_LETTERS[value]
    return value


def _inspect_response(sample: dict) -> str | None:
    """The first choice's message text, else the output's completion text."""
    choices = _as_list(_get(sample, "output", "choices"))
    response = _inspect_text(_get(choices[0], "message", "content")) if choices else None
    return response if response is not None else _as_text(_get(sample, "output", "completion"))


_SAMPLE_ENTRY = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")


def _eval_json(archive: zipfile.ZipFile, name: str, path: Path) -> object:
    try:
        return json.loads(archive.read(name).decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        detail = "JSON nested too deeply to read" if isinstance(exc, RecursionError) else exc
        raise RecordsError(f"{path}: {name} in the log is not readable JSON ({detail})") from None


def read_eval_log(path: Path) -> dict:
    """An Inspect ``.eval`` log as the document a JSON log holds: ``status``, ``eval``
    and ``samples`` (sorted by epoch, then id), from the archive's ``header.json``, or
    ``_journal/start.json`` for a run that did not finish, and ``samples/*.json``."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise RecordsError(
            f"{path} is not a readable Inspect .eval log (a zip archive): {exc}; re-create it, "
            "or convert it with `inspect log convert --to json`"
        ) from None
    with archive:
        names = set(archive.namelist())
        limit = max_read_bytes()
        if sum(info.file_size for info in archive.infolist()) > limit:
            raise too_large(path, limit)
        if "header.json" in names:
            document = _eval_json(archive, "header.json", path)
        elif "_journal/start.json" in names:
            document = _eval_json(archive, "_journal/start.json", path)
            if isinstance(document, dict):
                document.setdefault("status", "started")
        else:
            raise RecordsError(
                f"{path} is a zip archive without Inspect's header.json or "
                "_journal/start.json; is it an Inspect .eval log?"
            )
        if not isinstance(document, dict):
            raise RecordsError(f"{path}: the log's header is not a JSON object")
        entries = []
        for name in names:
            match = _SAMPLE_ENTRY.match(name)
            if match:
                entries.append((int(match.group("epoch")), match.group("id"), name))
        document["samples"] = [
            _eval_json(archive, name, path) for *_, name in sorted(entries, key=_entry_order)
        ]
    return document


def _entry_order(entry: tuple[int, str, str]) -> tuple:
    epoch, sample_id, _ = entry
    return (epoch, 0, int(sample_id), "") if sample_id.isdigit() else (epoch, 1, 0, sample_id)


def _load_inspect(path: Path, log: _Log) -> pd.DataFrame:
    if path.suffix.lower() == ".eval":
        document, kind = read_eval_log(path), "Inspect .eval log"
    else:
        document, kind = _read_json(path), "Inspect JSON log"
    if not isinstance(document, dict) or not isinstance(document.get("eval"), dict):
        raise RecordsError(f"{path} is not an {kind} (no 'eval' header)")
    header = document["eval"]
    if document.get("status") not in (None, "success"):
        log.warn(f"{path.name}: log status is {document.get('status')!r}, not 'success'")
    model = _as_id(header.get("model"))
    task = _as_id(header.get("task_display_name")) or _as_id(header.get("task"))
    if model is None or task is None:
        raise RecordsError(f"{path}: the 'eval' header names no model or task")
    task = task.rsplit("/", 1)[-1]
    scorers = [_as_text(_get(s, "name")) for s in _as_list(header.get("scorers"))]
    scorer = scorers[0] if scorers else None
    if len(scorers) > 1:
        log.warn(f"{path.name}: several scorers; score = {scorer!r}")
    samples = document.get("samples")
    if samples is not None and not isinstance(samples, list):
        raise RecordsError(f"{path}: 'samples' should be a JSON list")
    if not samples:
        raise RecordsError(
            f"{path} is an Inspect log with no samples (the run was logged without them); "
            "run the eval again with samples kept (the default; not --no-log-samples or "
            "log_samples=False) to import its responses"
        )
    rows = []
    for index, sample in enumerate(samples or []):
        if not isinstance(sample, dict):
            log.skip(path, "sample is not an object", f"sample {index}")
            continue
        query_id = _as_id(sample.get("id"))
        where = f"sample {query_id or index}"
        if query_id is None:
            log.skip(path, "no sample id (a string or an integer)", where)
            continue
        if sample.get("epoch", 1) != 1:
            log.skip(path, "epoch > 1 (the first epoch's response is kept)", where)
            continue
        if sample.get("error"):
            log.skip(path, "sample ended in an error", where)
            continue
        response = _inspect_response(sample)
        if response is None:
            log.skip(path, "no model output", where)
            continue
        value = _inspect_score(sample, scorer)
        score = _as_score(value)
        if score is None and value is not None:
            # One line for all such samples: the value goes in the example, not the reason.
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
            named = f"score of scorer {scorer!r}" if scorer else "score"
            log.skip(path, f"{named} is not numeric", f"{where}: {shown}")
            continue
        rows.append(
            {
                "model": model,
                "task": task,
                "query_id": query_id,
                "query": _inspect_query(sample),
                "response": response,
                "score": np.nan if score is None else score,
            }
        )
    unscored = sum(row["score"] != row["score"] for row in rows)  # NaN
    if unscored:
        log.warn(
            f"{path.name}: {unscored} row(s) without a score (the log has no scorer results "
            "for them)"
        )
    return pd.DataFrame(rows)
