"""HELM importer: a run folder with ``scenario_state.json`` and ``per_instance_stats.json``.

``run_spec.json``, when present, gives the task name and the main metric; only the first
train trial of unperturbed instances is kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers._common import _find, _Log, _read_json
from pkps_core.records import RecordsError


def _helm_task(run_name: str) -> str:
    """A HELM run name without its model arguments: ``mmlu:subject=x,method=y``."""
    scenario, _, args = run_name.partition(":")
    kept = [a for a in args.split(",") if a and not a.startswith(("model=", "model_deployment="))]
    return f"{scenario}:{','.join(kept)}" if kept else scenario


def _helm_metric(run_spec: dict, stats: list) -> str | None:
    available = {
        s["name"]["name"]
        for entry in stats
        for s in entry.get("stats", [])
        if isinstance(s.get("name"), dict) and "perturbation" not in s["name"]
    }
    preferred: list[str] = []
    for spec in run_spec.get("metric_specs", []):
        preferred += list((spec.get("args") or {}).get("names") or [])
    preferred += ["exact_match", "quasi_exact_match", "f1_score", "rouge_l", "bleu_4"]
    return next((m for m in preferred if m in available), None)


def _helm_query(request_state: dict) -> str | None:
    """The instance's input text, with its lettered choices for multiple-choice runs."""
    text = ((request_state.get("instance") or {}).get("input") or {}).get("text")
    if not isinstance(text, str):
        return None
    mapping = request_state.get("output_mapping")
    if isinstance(mapping, dict) and mapping:
        # References of a generation task are gold answers; only list real choices.
        text += "\n" + "\n".join(f"{letter}. {choice}" for letter, choice in mapping.items())
    return text


def _load_helm(path: Path, log: _Log) -> pd.DataFrame:
    folder = path if path.is_dir() else path.parent
    state_path = _find(folder, "scenario_state.json")
    stats_path = _find(folder, "per_instance_stats.json")
    if state_path is None or stats_path is None:
        raise RecordsError(
            f"{folder} is not a HELM run folder: it needs scenario_state.json and "
            "per_instance_stats.json"
        )
    state, stats = _read_json(state_path), _read_json(stats_path)
    spec_path = _find(folder, "run_spec.json")
    run_spec = _read_json(spec_path) if spec_path else {}
    task = _helm_task(str(run_spec.get("name") or folder.name))
    metric = _helm_metric(run_spec, stats)
    if metric is None:
        log.warn(f"{folder.name}: no known main metric in per_instance_stats.json; scores NaN")
    else:
        log.warn(f"{folder.name}: score = HELM metric {metric!r}")
    scores: dict[tuple[str, int], float] = {}
    for entry in stats:
        if entry.get("perturbation"):
            continue
        for stat in entry.get("stats", []):
            name = stat.get("name") or {}
            if name.get("name") == metric and "perturbation" not in name:
                scores[(str(entry["instance_id"]), int(entry.get("train_trial_index", 0)))] = float(
                    stat["mean"]
                )
    model = (state.get("adapter_spec") or {}).get("model")
    rows = []
    for index, request_state in enumerate(state.get("request_states", [])):
        where = f"request state {index}"
        instance = request_state.get("instance") or {}
        if instance.get("perturbation"):
            log.skip(state_path, "perturbed instance (only unperturbed ones are kept)", where)
            continue
        if request_state.get("train_trial_index", 0) != 0:
            log.skip(state_path, "train trial > 0 (the first trial is kept)", where)
            continue
        if request_state.get("reference_index") is not None:
            log.skip(state_path, "one request per answer choice is not supported", where)
            continue
        completions = (request_state.get("result") or {}).get("completions") or []
        if not completions or not isinstance(completions[0].get("text"), str):
            log.skip(state_path, "no completion text", where)
            continue
        instance_id = str(instance.get("id"))
        request_model = (request_state.get("request") or {}).get("model") or model
        rows.append(
            {
                "model": str(request_model),
                "task": task,
                "query_id": instance_id,
                "query": _helm_query(request_state),
                "response": completions[0]["text"],
                "score": scores.get((instance_id, 0), np.nan),
            }
        )
    return pd.DataFrame(rows)
