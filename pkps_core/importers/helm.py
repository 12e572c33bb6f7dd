"""HELM importer: a run folder with ``scenario_state.json`` and ``per_instance_stats.json``.

``run_spec.json``, when present, gives the task name and the run's groups; only the first
train trial of unperturbed instances is kept. The score is, in this order: the metric the
user names (``metric=``, ``ingest --metric``); the main metric HELM's schema declares for
the run's group (:data:`HELM_MAIN_METRICS`); the first of the run spec's metric names
that the stats hold. A note says which and why.
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
    _read_json,
)
from pkps_core.records import RecordsError


def _helm_task(run_name: str) -> str:
    """A HELM run name without its model arguments: ``mmlu:subject=x,method=y``."""
    scenario, _, args = run_name.partition(":")
    kept = [a for a in args.split(",") if a and not a.startswith(("model=", "model_deployment="))]
    return f"{scenario}:{','.join(kept)}" if kept else scenario


def _helm_stat_name(stat: object) -> str | None:
    """The metric name of an unperturbed stat, or None."""
    name = _get(stat, "name")
    if not isinstance(name, dict) or "perturbation" in name:
        return None
    return _as_text(name.get("name"))


# Main metric per HELM run group, as HELM's own leaderboard scores it: the groups'
# ``environment.main_name`` in HELM's schema, src/helm/benchmark/static/schema_classic.yaml
# (stanford-crfm/helm, commit 0b27cec9). Only per-instance metrics in [0, 1], higher is
# better, are listed (not bits_per_byte, absolute_value_difference, population-level F1).
HELM_MAIN_METRICS = {
    "babi_qa": "quasi_exact_match",
    "billsum_legal_summarization": "rouge_2",
    "blimp": "exact_match",
    "boolq": "quasi_exact_match",
    "code_humaneval": "pass",
    "dyck_language": "exact_match_indicator",
    "entity_data_imputation": "quasi_exact_match",
    "entity_matching": "quasi_exact_match",
    "eurlexsum_legal_summarization": "rouge_2",
    "gsm": "exact_match_indicator",
    "hellaswag": "exact_match",
    "imdb": "quasi_exact_match",
    "legal_support": "quasi_exact_match",
    "legalbench": "quasi_exact_match",
    "lsat_qa": "quasi_exact_match",
    "math_chain_of_thought": "math_equiv_chain_of_thought",
    "math_regular": "math_equiv",
    "med_qa": "quasi_exact_match",
    "mmlu": "exact_match",
    "msmarco_regular": "RR@10",
    "msmarco_trec": "NDCG@10",
    "multilexsum_legal_summarization": "rouge_2",
    "narrative_qa": "f1_score",
    "natural_qa_closedbook": "f1_score",
    "natural_qa_openbook_longans": "f1_score",
    "openbookqa": "exact_match",
    "quac": "f1_score",
    "raft": "quasi_exact_match",
    "summarization_cnndm": "rouge_2",
    "summarization_xsum": "rouge_2",
    "synthetic_reasoning": "quasi_exact_match",
    "synthetic_reasoning_natural": "f1_set_match",
    "truthful_qa": "exact_match",
    "wikifact": "quasi_exact_match",
    "wmt_14": "bleu_4",
}


def _helm_metric(
    run_spec: object, stats: list, folder: Path, chosen: str | None
) -> tuple[str | None, str]:
    """The metric that scores the run, and why (for the note).

    Raises
    ------
    RecordsError
        ``chosen`` names a metric the run's stats do not hold.
    """
    available = {
        _helm_stat_name(stat) for entry in stats for stat in _as_list(_get(entry, "stats"))
    } - {None}
    if chosen is not None:
        if chosen not in available:
            raise RecordsError(
                f"{folder}: the run has no metric {chosen!r}; choose one of "
                f"{', '.join(sorted(available)) or 'none (no unperturbed stats)'}"
            )
        return chosen, "chosen with --metric"
    groups = [g for g in _as_list(_get(run_spec, "groups")) if isinstance(g, str)]
    scenario = (_as_text(_get(run_spec, "name")) or "").partition(":")[0]
    for group in [*groups, scenario]:
        main = HELM_MAIN_METRICS.get(group)
        if main in available:
            return main, f"HELM's main metric for {group}"
    preferred: list[str] = []
    for spec in _as_list(_get(run_spec, "metric_specs")):
        preferred += [n for n in _as_list(_get(spec, "args", "names")) if isinstance(n, str)]
    preferred += ["exact_match", "quasi_exact_match", "f1_score", "rouge_l", "bleu_4"]
    metric = next((m for m in preferred if m in available), None)
    return metric, "the run spec's first metric (no main metric known for its group)"


def _helm_query(request_state: dict) -> str | None:
    """The instance's input text, with its lettered choices for multiple-choice runs."""
    text = _as_text(_get(request_state, "instance", "input", "text"))
    if text is None:
        return None
    mapping = request_state.get("output_mapping")
    if isinstance(mapping, dict) and mapping:
        # References of a generation task are gold answers; only list real choices.
        text += "\n" + "\n".join(f"{letter}. {choice}" for letter, choice in mapping.items())
    return text


def _helm_scores(stats: list, metric: str | None, stats_path: Path, log: _Log) -> dict:
    """The metric's mean per (instance id, train trial) of the unperturbed stats entries."""
    scores: dict[tuple[str, int], float] = {}
    for index, entry in enumerate(stats):
        where = f"entry {index}"
        if not isinstance(entry, dict):
            log.skip(stats_path, "stats entry is not an object", where)
            continue
        if entry.get("perturbation"):
            continue
        instance_id = _as_id(entry.get("instance_id"))
        trial = entry.get("train_trial_index", 0)
        if instance_id is None or not isinstance(trial, int):
            log.skip(stats_path, "stats entry without instance_id or train_trial_index", where)
            continue
        means = [
            _get(stat, "mean")
            for stat in _as_list(entry.get("stats"))
            if metric is not None and _helm_stat_name(stat) == metric
        ]
        if means and _as_score(means[0]) is None:
            log.skip(stats_path, f"{metric!r} mean is not a number (score left empty)", where)
        elif means:
            scores[(instance_id, trial)] = _as_score(means[0])
    return scores


def _helm_completion(request_state: dict) -> str | None:
    completions = _as_list(_get(request_state, "result", "completions"))
    return _as_text(_get(completions[0], "text")) if completions else None


def _load_helm(path: Path, log: _Log, metric: str | None = None) -> pd.DataFrame:
    folder = path if path.is_dir() else path.parent
    state_path = _find(folder, "scenario_state.json")
    stats_path = _find(folder, "per_instance_stats.json")
    if state_path is None or stats_path is None:
        raise RecordsError(
            f"{folder} is not a HELM run folder: it needs scenario_state.json and "
            "per_instance_stats.json"
        )
    state, stats = _read_json(state_path), _read_json(stats_path)
    if not isinstance(_get(state, "request_states"), list):
        raise RecordsError(f"{state_path} has no 'request_states' list; is it a HELM run?")
    if not isinstance(stats, list):
        raise RecordsError(f"{stats_path} should be a JSON list of per-instance stats")
    spec_path = _find(folder, "run_spec.json")
    run_spec = _read_json(spec_path) if spec_path else {}
    task = _helm_task(_as_text(_get(run_spec, "name")) or folder.name)
    metric, why = _helm_metric(run_spec, stats, folder, metric)
    if metric is None:
        log.warn(f"{folder.name}: no known main metric in per_instance_stats.json; scores NaN")
    else:
        other = "" if why.startswith("chosen") else "; another with --metric NAME"
        log.warn(f"{folder.name}: score = HELM metric {metric!r} ({why}{other})")
    scores = _helm_scores(stats, metric, stats_path, log)
    model = _as_id(_get(state, "adapter_spec", "model"))
    rows = []
    for index, request_state in enumerate(state["request_states"]):
        where = f"request state {index}"
        if not isinstance(request_state, dict):
            log.skip(state_path, "request state is not an object", where)
            continue
        if _get(request_state, "instance", "perturbation"):
            log.skip(state_path, "perturbed instance (only unperturbed ones are kept)", where)
            continue
        if request_state.get("train_trial_index", 0) != 0:
            log.skip(state_path, "train trial > 0 (the first trial is kept)", where)
            continue
        if request_state.get("reference_index") is not None:
            log.skip(state_path, "one request per answer choice is not supported", where)
            continue
        response = _helm_completion(request_state)
        if response is None:
            log.skip(state_path, "no completion text", where)
            continue
        instance_id = _as_id(_get(request_state, "instance", "id"))
        request_model = _as_id(_get(request_state, "request", "model")) or model
        if instance_id is None or request_model is None:
            log.skip(state_path, "no instance id or model", where)
            continue
        rows.append(
            {
                "model": request_model,
                "task": task,
                "query_id": instance_id,
                "query": _helm_query(request_state),
                "response": response,
                "score": scores.get((instance_id, 0), np.nan),
            }
        )
    return pd.DataFrame(rows)
