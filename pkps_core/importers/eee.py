"""Every Eval Ever importer: instance-level ``*_samples.jsonl`` (schema 0.2.x and 0.3.0).

A sibling aggregate ``<evaluation uuid>.json`` supplies the metric direction: scores of a
lower-is-better metric are stored as 1 − score so that higher is better (a warning says so
per task), and refused when they lie outside [0, 1].
"""

from __future__ import annotations

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


def _eee_directions(samples_path: Path) -> dict[str, bool]:
    """lower_is_better per evaluation_result_id / evaluation_name from the aggregate JSON."""
    stem = _strip_gz(samples_path.name)
    if not stem.endswith("_samples.jsonl"):
        return {}
    aggregate = _find(samples_path.parent, stem[: -len("_samples.jsonl")] + ".json")
    if aggregate is None:
        return {}
    document = _read_json(aggregate)
    directions: dict[str, bool] = {}
    for result in _as_list(_get(document, "evaluation_results")):
        lower = _get(result, "metric_config", "lower_is_better")
        if not isinstance(lower, bool):
            continue
        for key in ("evaluation_result_id", "evaluation_name"):
            if _as_id(result.get(key)):
                directions[str(result[key])] = lower
    return directions


def _eee_response(item: dict) -> str | None:
    raw = _get(item, "output", "raw")
    if isinstance(raw, list) and raw and all(isinstance(r, str) for r in raw):
        return "\n".join(raw)
    if isinstance(raw, str):
        return raw
    for message in reversed(_as_list(item.get("messages"))):
        if _get(message, "role") == "assistant" and isinstance(_get(message, "content"), str):
            return message["content"]
    return None


def _load_eee(path: Path, log: _Log) -> pd.DataFrame:
    directions = _eee_directions(path)
    rows = []
    for number, item in _read_jsonl(path, log):
        where = f"line {number}"
        ids = {k: _as_id(item.get(k)) for k in ("model_id", "evaluation_name", "sample_id")}
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            log.skip(path, f"no {', '.join(missing)} (a string or an integer)", where)
            continue
        response = _eee_response(item)
        if response is None:
            log.skip(path, "no output.raw text or assistant message", where)
            continue
        score = _as_score(_get(item, "evaluation", "score"))
        if score is None:
            score = _as_score(_get(item, "evaluation", "is_correct"))
        if score is None:
            log.warn(f"{path.name}: some samples have no numeric evaluation.score (kept as NaN)")
        result_id = _as_id(item.get("evaluation_result_id"))
        lower = directions.get(result_id, directions.get(ids["evaluation_name"]))
        rows.append(
            {
                "model": ids["model_id"],
                "task": ids["evaluation_name"],
                "query_id": ids["sample_id"],
                "query": _as_text(_get(item, "input", "raw")),
                "response": response,
                "score": np.nan if score is None else score,
                "lower_is_better": lower,
                "_result_id": result_id,
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    if frame.duplicated(["model", "task", "query_id"]).any() and frame["_result_id"].notna().all():
        # One sample scored by several aggregate results: each result is its own task.
        frame["task"] = frame["_result_id"]
        log.warn(f"{path.name}: samples repeat per evaluation_result_id; used it as the task")
    return _orient_lower_is_better(frame.drop(columns="_result_id"), path, log)
