"""lm-evaluation-harness importer: ``samples_<task>_<timestamp>.jsonl``.

The model comes from the sibling ``results_<timestamp>.json`` (or the folder name), and so
does the metric direction (a lower-is-better metric in [0, 1] is stored as 1 − score); a
log-likelihood request's response is the continuation the model ranks highest.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers._common import (
    _as_id,
    _as_list,
    _as_score,
    _as_text,
    _find,
    _get,
    _Log,
    _orient_lower_is_better,
    _read_json,
    _read_jsonl,
    _strip_gz,
)
from pkps_core.records import RecordsError

_LM_EVAL_SAMPLES = re.compile(
    r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d.\-]+)\.jsonl$"
)


def _lm_eval_results(samples_path: Path, stamp: str) -> dict:
    candidates = [_find(samples_path.parent, f"results_{stamp}.json")]
    candidates += sorted(samples_path.parent.glob("results_*.json*"))
    for candidate in candidates:
        if candidate is not None and candidate.is_file():
            document = _read_json(candidate)
            if isinstance(document, dict):
                return document
    return {}


def _lm_eval_model(results: dict, samples_path: Path, log: _Log) -> str:
    if _as_id(results.get("model_name")):
        return str(results["model_name"])
    model_args = _as_text(_get(results, "config", "model_args")) or ""
    match = re.search(r"(?:pretrained|model)=([^,]+)", model_args)
    if match:
        return match.group(1)
    folder = samples_path.resolve().parent.name
    log.warn(
        f"{samples_path.name}: no results_*.json beside it names the model; used the "
        f"folder name {folder.replace('__', '/')!r}"
    )
    return folder.replace("__", "/")


def _lm_eval_arguments(item: dict) -> list[tuple[str | None, str | None]]:
    """(context, continuation) per request: new dict form and old list form."""
    arguments = item.get("arguments")
    if isinstance(arguments, dict):
        requests = [
            (request.get("arg_0"), request.get("arg_1"))
            for request in arguments.values()
            if isinstance(request, dict)
        ]
    else:
        requests = [
            (request[0], request[1] if len(request) > 1 else None)
            for request in _as_list(arguments)
            if isinstance(request, list) and request
        ]
    return [(_as_text(context), _as_text(continuation)) for context, continuation in requests]


def _lm_eval_response(item: dict, pairs: list[tuple[str | None, str | None]]) -> str | None:
    """The model's response text, or None when the record holds none."""
    filtered = item.get("filtered_resps")
    if filtered is None:
        filtered = [r[0] if isinstance(r, list) and r else r for r in _as_list(item.get("resps"))]
    if not isinstance(filtered, list) or not filtered:
        return None
    if isinstance(filtered[0], str):
        return filtered[0]
    # Log-likelihood requests: the response is the continuation the model ranks highest.
    likelihoods = [f[0] if isinstance(f, list) and f else f for f in filtered]
    numeric = [_as_score(v) for v in likelihoods]
    if any(v is None for v in numeric) or len(numeric) != len(pairs):
        return None
    best = int(np.argmax(numeric))
    return pairs[best][1]


def _load_lm_eval(path: Path, log: _Log) -> pd.DataFrame:
    match = _LM_EVAL_SAMPLES.match(_strip_gz(path.name))
    if match is None:
        raise RecordsError(
            f"{path.name} is not named samples_<task>_<timestamp>.jsonl as "
            "lm-evaluation-harness writes it; rename it so the task can be read"
        )
    task, stamp = match.group("task"), match.group("stamp")
    results = _lm_eval_results(path, stamp)
    model = _lm_eval_model(results, path, log)
    directions = _get(results, "higher_is_better", task)
    directions = {
        metric: higher
        for metric, higher in (directions.items() if isinstance(directions, dict) else ())
        if isinstance(higher, bool)
    }
    rows, kept_filter = [], None
    for number, item in _read_jsonl(path, log):
        where = f"line {number}"
        item_filter = item.get("filter")
        kept_filter = item_filter if kept_filter is None else kept_filter
        if item_filter != kept_filter:
            log.skip(
                path, f"filter {item_filter!r} (kept the first filter, {kept_filter!r})", where
            )
            continue
        query_id = _as_id(item.get("doc_id"))
        if query_id is None:
            log.skip(path, "no doc_id (a string or an integer)", where)
            continue
        metrics = _as_list(item.get("metrics")) or [k for k in directions if k in item]
        metric = next(
            (m for m in metrics if isinstance(m, str) and _as_score(item.get(m)) is not None),
            None,
        )
        if metric is None:
            log.skip(path, "no numeric per-sample metric", where)
            continue
        pairs = _lm_eval_arguments(item)
        response = _lm_eval_response(item, pairs)
        if response is None:
            log.skip(path, "no response text in filtered_resps/resps", where)
            continue
        rows.append(
            {
                "model": model,
                "task": task,
                "query_id": query_id,
                "query": pairs[0][0] if pairs else None,
                "response": response,
                "score": _as_score(item[metric]),
                "lower_is_better": None if metric not in directions else not directions[metric],
                "_metric": metric,
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    lower_metrics = frame.loc[frame["lower_is_better"].eq(True), "_metric"].unique()
    metric = lower_metrics[0] if len(lower_metrics) == 1 else None
    return _orient_lower_is_better(frame.drop(columns="_metric"), path, log, metric)
