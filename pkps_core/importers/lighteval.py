"""lighteval importer: the per-sample details Hugging Face's lighteval writes.

lighteval's ``EvaluationTracker`` saves one Parquet file per task and run,
``details/<org>/<model>/<date>/details_<suite|task|few-shot>_<date>.parquet``, one row per
sample with the fields of its ``DetailsLogger.Detail``: ``example`` (the query),
``full_prompt``, ``predictions``, ``choices``, ``gold`` / ``gold_index`` and ``metrics``
(metric name → this sample's score), besides token counts and hashes. The Open LLM
Leaderboard published these details for thousands of models.

Mapping: model from the run (``config_general.model_name`` of a ``results_<date>.json``
beside or above the file, else the ``<org>/<model>`` folders), task from the file name,
query id from the example (a digest of its text, so every model's row of one example
shares it), query = ``example``, response = the generated text, or for a
log-likelihood task the choice the model ranks highest, score = the task's first metric
(lighteval lists a task's main metric first), or the one named by ``metric=``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from pkps_core.importers._common import _as_score, _as_text, _Log, _read_json
from pkps_core.reading import max_read_bytes, too_large
from pkps_core.records import RecordsError

DETAILS_FILE = re.compile(
    r"^details_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.parquet$"
)
REQUIRED = ("example", "predictions", "metrics")


def is_details_file(path: Path) -> bool:
    return DETAILS_FILE.match(path.name) is not None


def _model(path: Path, date: str, log: _Log) -> str:
    """The model of the run: its results file's ``config_general.model_name``, else the
    ``<org>/<model>`` folders above the run's date folder."""
    for folder in (path.parent, path.parent.parent, path.parent.parent.parent):
        for results in sorted(folder.glob(f"results_{date}*.json")) or sorted(
            folder.glob("results_*.json")
        ):
            document = _read_json(results)
            name = document.get("config_general", {}) if isinstance(document, dict) else {}
            name = name.get("model_name") if isinstance(name, dict) else None
            if isinstance(name, str) and name.strip():
                return name
    parts = path.parent.parts
    run = parts[-3:-1] if path.parent.name.startswith(date[:10]) else parts[-1:]
    model = "/".join(p for p in run if p and p != "details")
    log.warn(f"{path.name}: no results_*.json names the model; used the folders {model!r}")
    return model


def _metrics(value: object) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _response(predictions: object, choices: object) -> str | None:
    """The generated text, or the highest-ranked choice of a log-likelihood task
    (``predictions`` then holds one log-likelihood, or ``[log-likelihood, is_greedy]``,
    per choice)."""
    values = list(predictions) if isinstance(predictions, list | tuple | np.ndarray) else []
    if not values:
        return _as_text(predictions)
    if isinstance(values[0], str):
        return values[0]
    scores = [
        _as_score(v[0] if isinstance(v, list | tuple | np.ndarray) and len(v) else v)
        for v in values
    ]
    options = list(choices) if isinstance(choices, list | tuple | np.ndarray) else []
    if any(s is None for s in scores) or len(options) != len(scores):
        return None
    return _as_text(options[int(np.argmax(scores))])


def _load_lighteval(path: Path, log: _Log, metric: str | None = None) -> pd.DataFrame:
    match = DETAILS_FILE.match(path.name)
    if match is None:
        raise RecordsError(
            f"{path.name} is not named details_<task>_<date>.parquet as lighteval writes "
            "it; rename it so the task can be read"
        )
    if path.stat().st_size > max_read_bytes():
        raise too_large(path, max_read_bytes())
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a damaged file vary
        raise RecordsError(f"{path} is not a readable Parquet file ({exc})") from None
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise RecordsError(
            f"{path} has no {', '.join(missing)} column(s); lighteval's details have "
            f"{', '.join(REQUIRED)}"
        )
    task, date = match.group("task"), match.group("date")
    model = _model(path, date, log)
    details = table.to_pylist()
    names = list(dict.fromkeys(k for row in details for k in _metrics(row.get("metrics"))))
    if metric is not None and metric not in names:
        raise RecordsError(
            f"{path.name}: no metric {metric!r}; choose one of {', '.join(names) or 'none'}"
        )
    chosen = metric or next(iter(names), None)
    if chosen is not None:
        why = "chosen with --metric" if metric else "the task's first metric"
        other = "" if metric else "; another with --metric NAME"
        log.warn(f"{path.name}: score = lighteval metric {chosen!r} ({why}{other})")
    rows, seen = [], {}
    for number, detail in enumerate(details, start=1):
        example = _as_text(detail.get("example"))
        if example is None:
            log.skip(path, "no example text", f"row {number}")
            continue
        response = _response(detail.get("predictions"), detail.get("choices"))
        if response is None:
            log.skip(path, "no prediction text or rankable choices", f"row {number}")
            continue
        digest = hashlib.sha256(example.encode("utf-8")).hexdigest()[:16]
        seen[digest] = seen.get(digest, 0) + 1
        score = _as_score(_metrics(detail.get("metrics")).get(chosen)) if chosen else None
        rows.append(
            {
                "model": model,
                "task": task,
                # a repeated example keeps its own id: its n-th occurrence in every model
                "query_id": digest if seen[digest] == 1 else f"{digest}-{seen[digest]}",
                "query": example,
                "response": response,
                "score": np.nan if score is None else score,
            }
        )
    unscored = sum(row["score"] != row["score"] for row in rows)
    if unscored:
        log.warn(f"{path.name}: {unscored} row(s) without a numeric {chosen!r} score")
    return pd.DataFrame(rows)
