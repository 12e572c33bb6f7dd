"""Every Eval Ever importer: instance-level ``*_samples.jsonl`` (schema 0.2.x and 0.3.0).

A sibling aggregate ``<evaluation uuid>.json`` supplies the metric direction: scores of a
lower-is-better metric are kept as given, flagged in the ``lower_is_better`` column and in
the warnings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers._common import _as_score, _find, _Log, _read_json, _read_jsonl, _strip_gz


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
    for result in document.get("evaluation_results", []) if isinstance(document, dict) else []:
        lower = (result.get("metric_config") or {}).get("lower_is_better")
        if lower is None:
            continue
        for key in ("evaluation_result_id", "evaluation_name"):
            if result.get(key):
                directions[str(result[key])] = bool(lower)
    return directions


def _eee_response(item: dict) -> str | None:
    output = item.get("output") or {}
    raw = output.get("raw") if isinstance(output, dict) else None
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        return "\n".join(str(r) for r in raw)
    if isinstance(raw, str):
        return raw
    for message in reversed(item.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                return content
    return None


def _load_eee(path: Path, log: _Log) -> pd.DataFrame:
    directions = _eee_directions(path)
    rows = []
    for number, item in _read_jsonl(path, log):
        where = f"line {number}"
        missing = [k for k in ("model_id", "evaluation_name", "sample_id") if item.get(k) is None]
        if missing:
            log.skip(path, f"no {', '.join(missing)}", where)
            continue
        response = _eee_response(item)
        if response is None:
            log.skip(path, "no output.raw text or assistant message", where)
            continue
        evaluation = item.get("evaluation") or {}
        score = _as_score(evaluation.get("score"))
        if score is None:
            score = _as_score(evaluation.get("is_correct"))
        if score is None:
            log.warn(f"{path.name}: some samples have no numeric evaluation.score (kept as NaN)")
        query = (item.get("input") or {}).get("raw")
        result_id = item.get("evaluation_result_id")
        lower = directions.get(str(result_id), directions.get(str(item["evaluation_name"])))
        rows.append(
            {
                "model": str(item["model_id"]),
                "task": str(item["evaluation_name"]),
                "query_id": str(item["sample_id"]),
                "query": query if isinstance(query, str) else None,
                "response": response,
                "score": np.nan if score is None else score,
                "lower_is_better": lower,
                "_result_id": None if result_id is None else str(result_id),
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    if frame.duplicated(["model", "task", "query_id"]).any() and frame["_result_id"].notna().all():
        # One sample scored by several aggregate results: each result is its own task.
        frame["task"] = frame["_result_id"]
        log.warn(f"{path.name}: samples repeat per evaluation_result_id; used it as the task")
    flagged = frame.loc[frame["lower_is_better"].eq(True), "task"].unique()
    if len(flagged):
        log.warn(
            f"{path.name}: metric of task(s) {', '.join(map(repr, flagged))} is lower-is-better "
            "(per the aggregate JSON); scores kept as given and flagged in 'lower_is_better'"
        )
    if not frame["lower_is_better"].eq(True).any():
        frame = frame.drop(columns="lower_is_better")
    return frame.drop(columns="_result_id")
