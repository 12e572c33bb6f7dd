"""Importers: the files evaluation tools write, mapped into the canonical record.

:func:`load` reads a file or folder, detects its format (or takes an explicit one) and
returns an :class:`ImportResult`: validated canonical records, what was skipped and why,
and warnings. Formats (names accepted by ``format=``):

``canonical``
    CSV / TSV / Parquet in the canonical schema (:func:`pkps_core.records.read_records`).
``eee``
    Every Eval Ever instance-level ``*_samples.jsonl`` (schema 0.2.x and 0.3.0). A sibling
    aggregate ``<evaluation uuid>.json`` supplies the metric direction: scores of a
    lower-is-better metric are kept as given, flagged in the ``lower_is_better`` column
    and in the warnings.
``lm_eval``
    lm-evaluation-harness ``samples_<task>_<timestamp>.jsonl``; the model comes from the
    sibling ``results_<timestamp>.json`` (or the folder name).
``helm``
    A HELM run folder: ``scenario_state.json`` + ``per_instance_stats.json``
    (+ ``run_spec.json`` for the task name and main metric).
``inspect``
    Inspect AI JSON logs (``inspect eval --log-format json``).
``alpaca_eval``
    AlpacaEval ``results/<model>/model_outputs.json`` with
    ``<model>/weighted_alpaca_eval_gpt4_turbo/annotations.json``; score = preference − 1.

Any of these files may be gzipped (``.gz``). A folder that is none of the folder formats
is searched recursively and every recognised file in it is imported.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.records import RecordsError, read_records, validate_records

FORMATS = ("canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval")
ALPACA_ANNOTATOR = "weighted_alpaca_eval_gpt4_turbo"
_CANONICAL_SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")
_LM_EVAL_SAMPLES = re.compile(
    r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d.\-]+)\.jsonl$"
)
# Inspect's value_to_float: C(orrect) / I(ncorrect) / P(artial) / N(o answer).
_INSPECT_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}


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


# ---------------------------------------------------------------------- file helpers


def _strip_gz(name: str) -> str:
    return name[:-3] if name.lower().endswith(".gz") else name


def _read_text(path: Path) -> str:
    """A text file's content, gunzipping when the bytes are gzip."""
    with open(path, "rb") as handle:
        raw = handle.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise RecordsError(f"{path} is a damaged gzip file ({exc}); re-create it") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RecordsError(
            f"{path} is not UTF-8 text (byte {exc.start}); save it as UTF-8 and retry"
        ) from None


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
        if not isinstance(item, dict):
            log.skip(path, "line is not a JSON object", f"line {number}")
            continue
        yield number, item


def _first_jsonl_object(path: Path) -> dict | None:
    try:
        for line in _read_text(path).splitlines():
            if line.strip():
                item = json.loads(line)
                return item if isinstance(item, dict) else None
    except (RecordsError, json.JSONDecodeError):
        return None
    return None


def _find(folder: Path, name: str) -> Path | None:
    """``folder/name`` or ``folder/name.gz``, whichever exists."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
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


# ---------------------------------------------------------------------- detection


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a file or folder, one of :data:`FORMATS`, or ``"folder"``.

    ``"folder"`` means a folder that is not itself a HELM run or AlpacaEval results tree;
    :func:`load` then imports every recognised file under it.

    Raises
    ------
    RecordsError
        The path does not exist, or a file's format cannot be recognised.
    """
    target = Path(path)
    if not target.exists():
        raise RecordsError(f"not found: {target}")
    if target.is_dir():
        if _find(target, "scenario_state.json") and _find(target, "per_instance_stats.json"):
            return "helm"
        if _find(target, "model_outputs.json") or any(
            _find(child, "model_outputs.json") for child in target.iterdir() if child.is_dir()
        ):
            return "alpaca_eval"
        return "folder"
    name = _strip_gz(target.name).lower()
    if name.endswith(_CANONICAL_SUFFIXES):
        return "canonical"
    if name == "model_outputs.json":
        return "alpaca_eval"
    if name in ("scenario_state.json", "per_instance_stats.json"):
        return "helm"
    if name.endswith(".jsonl"):
        first = _first_jsonl_object(target) or {}
        if "sample_id" in first and "evaluation_name" in first:
            return "eee"
        if "doc_id" in first or _LM_EVAL_SAMPLES.match(_strip_gz(target.name)):
            return "lm_eval"
        if name.endswith("_samples.jsonl"):
            return "eee"
    if name.endswith(".json"):
        try:
            document = _read_json(target)
        except RecordsError:
            document = None
        if isinstance(document, dict) and "eval" in document and "samples" in document:
            return "inspect"
    raise RecordsError(
        f"cannot tell the format of {target}; pass format= one of {', '.join(FORMATS)} "
        "(a canonical file must end in .csv, .tsv or .parquet)"
    )


# ---------------------------------------------------------------------- canonical


def _load_canonical(path: Path, log: _Log) -> pd.DataFrame:
    if path.is_dir():
        raise RecordsError(f"{path} is a folder; the canonical format is one CSV/Parquet file")
    return read_records(str(path))


# ---------------------------------------------------------------------- Every Eval Ever


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


# ---------------------------------------------------------------------- lm-evaluation-harness


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
    if results.get("model_name"):
        return str(results["model_name"])
    model_args = str((results.get("config") or {}).get("model_args") or "")
    match = re.search(r"(?:pretrained|model)=([^,]+)", model_args)
    if match:
        return match.group(1)
    folder = samples_path.resolve().parent.name
    log.warn(
        f"{samples_path.name}: no results_*.json beside it names the model; used the "
        f"folder name {folder.replace('__', '/')!r}"
    )
    return folder.replace("__", "/")


def _lm_eval_arguments(item: dict) -> list[tuple[str, str | None]]:
    """(context, continuation) per request: new dict form and old list form."""
    arguments = item.get("arguments")
    pairs: list[tuple[str, str | None]] = []
    if isinstance(arguments, dict):
        for request in arguments.values():
            if isinstance(request, dict):
                context = request.get("arg_0")
                continuation = request.get("arg_1")
                pairs.append(
                    (str(context), continuation if isinstance(continuation, str) else None)
                )
    elif isinstance(arguments, list):
        for request in arguments:
            if isinstance(request, list | tuple) and request:
                continuation = request[1] if len(request) > 1 else None
                pairs.append(
                    (str(request[0]), continuation if isinstance(continuation, str) else None)
                )
    return pairs


def _lm_eval_response(item: dict, pairs: list[tuple[str, str | None]]) -> str | None:
    filtered = item.get("filtered_resps")
    if filtered is None:
        filtered = [r[0] if isinstance(r, list) and r else r for r in item.get("resps") or []]
    if not isinstance(filtered, list) or not filtered:
        return None
    if isinstance(filtered[0], str):
        return filtered[0]
    # Log-likelihood requests: the response is the continuation the model ranks highest.
    likelihoods = [f[0] if isinstance(f, list | tuple) else f for f in filtered]
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
    directions = (results.get("higher_is_better") or {}).get(task) or {}
    rows, kept_filter, metric_used = [], None, None
    for number, item in _read_jsonl(path, log):
        where = f"line {number}"
        item_filter = item.get("filter")
        kept_filter = item_filter if kept_filter is None else kept_filter
        if item_filter != kept_filter:
            log.skip(path, f"filter {item_filter!r} (kept the first filter, {kept_filter!r})")
            continue
        if "doc_id" not in item:
            log.skip(path, "no doc_id", where)
            continue
        metrics = item.get("metrics") or [k for k in directions if k in item]
        metric = next((m for m in metrics if _as_score(item.get(m)) is not None), None)
        if metric is None:
            log.skip(path, "no numeric per-sample metric", where)
            continue
        metric_used = metric_used or metric
        pairs = _lm_eval_arguments(item)
        response = _lm_eval_response(item, pairs)
        if response is None:
            log.skip(path, "no response in filtered_resps/resps", where)
            continue
        rows.append(
            {
                "model": model,
                "task": task,
                "query_id": str(item["doc_id"]),
                "query": pairs[0][0] if pairs else None,
                "response": response,
                "score": _as_score(item[metric]),
                "lower_is_better": None if metric not in directions else not directions[metric],
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    if frame["lower_is_better"].eq(True).any():
        log.warn(
            f"{path.name}: metric {metric_used!r} of task {task!r} is lower-is-better (per "
            "results_*.json); scores kept as given and flagged in 'lower_is_better'"
        )
    if not frame["lower_is_better"].eq(True).any():
        frame = frame.drop(columns="lower_is_better")
    return frame


# ---------------------------------------------------------------------- HELM


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


# ---------------------------------------------------------------------- Inspect AI


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
        users = [_inspect_text(m.get("content")) for m in raw if m.get("role") == "user"]
        raw = "\n\n".join(u for u in users if u) or None
    if not isinstance(raw, str):
        return None
    choices = sample.get("choices")
    if isinstance(choices, list) and choices:
        raw += "\n\n" + "\n".join(f"{chr(ord('A') + i)}) {c}" for i, c in enumerate(choices))
    return raw


def _inspect_score(sample: dict, scorer: str | None) -> object:
    scores = sample.get("scores") or {}
    if not scores:
        return None
    chosen = scores.get(scorer) if scorer in scores else next(iter(scores.values()))
    value = chosen.get("value") if isinstance(chosen, dict) else None
    if isinstance(value, str) and value in _INSPECT_LETTERS:
        return _INSPECT_LETTERS[value]
    return value


def _load_inspect(path: Path, log: _Log) -> pd.DataFrame:
    document = _read_json(path)
    if not isinstance(document, dict) or "eval" not in document:
        raise RecordsError(f"{path} is not an Inspect JSON log (no 'eval' header)")
    header = document["eval"]
    if document.get("status") not in (None, "success"):
        log.warn(f"{path.name}: log status is {document.get('status')!r}, not 'success'")
    model = str(header.get("model"))
    task = str(header.get("task_display_name") or header.get("task", "")).rsplit("/", 1)[-1]
    scorers = [s.get("name") for s in header.get("scorers") or [] if isinstance(s, dict)]
    scorer = scorers[0] if scorers else None
    if len(scorers) > 1:
        log.warn(f"{path.name}: several scorers; score = {scorer!r}")
    samples = document.get("samples") or []
    if not samples:
        log.skip(path, "log has no samples (run with log_samples=True)")
    rows = []
    for index, sample in enumerate(samples):
        where = f"sample {sample.get('id', index)}"
        if sample.get("epoch", 1) != 1:
            log.skip(path, "epoch > 1 (the first epoch's response is kept)", where)
            continue
        if sample.get("error"):
            log.skip(path, "sample ended in an error", where)
            continue
        choices = (sample.get("output") or {}).get("choices") or []
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        response = _inspect_text((message or {}).get("content"))
        if response is None:
            response = (sample.get("output") or {}).get("completion")
        if not isinstance(response, str):
            log.skip(path, "no model output", where)
            continue
        value = _inspect_score(sample, scorer)
        score = _as_score(value)
        if score is None and value is not None:
            log.skip(path, f"score value {value!r} is not numeric", where)
            continue
        rows.append(
            {
                "model": model,
                "task": task,
                "query_id": str(sample.get("id")),
                "query": _inspect_query(sample),
                "response": response,
                "score": np.nan if score is None else score,
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------- AlpacaEval


def _alpaca_model_dirs(path: Path) -> list[Path]:
    if path.is_file():
        return [path.parent]
    if _find(path, "model_outputs.json"):
        return [path]
    return sorted(c for c in path.iterdir() if c.is_dir() and _find(c, "model_outputs.json"))


def _load_alpaca_model(folder: Path, log: _Log) -> pd.DataFrame:
    outputs_path = _find(folder, "model_outputs.json")
    outputs = _read_json(outputs_path)
    if not isinstance(outputs, list):
        raise RecordsError(f"{outputs_path} should be a JSON list of outputs")
    annotations_path = _find(folder / ALPACA_ANNOTATOR, "annotations.json")
    preferences: dict[tuple[str, str], object] = {}
    if annotations_path is None:
        log.warn(f"{folder.name}: no {ALPACA_ANNOTATOR}/annotations.json; scores left empty")
    else:
        for annotation in _read_json(annotations_path):
            key = (annotation.get("instruction"), annotation.get("output_2"))
            preferences[key] = annotation.get("preference")
    rows = []
    for position, output in enumerate(outputs):
        # Upstream outputs follow the 805-instruction evaluation set, so the position is
        # the instruction's id (as in alpaca_eval_40.parquet: "alpaca-<position>").
        where = f"output {position}"
        instruction, text = output.get("instruction"), output.get("output")
        if not isinstance(instruction, str) or not isinstance(text, str):
            log.skip(outputs_path, "no instruction or output text", where)
            continue
        preference = _as_score(preferences.get((instruction, text)))
        if preference is None and annotations_path is not None:
            log.warn(f"{folder.name}: some outputs have no annotated preference (score NaN)")
        rows.append(
            {
                "model": str(output.get("generator") or folder.name),
                "task": str(output.get("dataset") or "alpaca_eval"),
                "query_id": f"alpaca-{position}",
                "query": instruction,
                "response": text,
                "score": np.nan if preference is None else preference - 1.0,
            }
        )
    return pd.DataFrame(rows)


def _load_alpaca_eval(path: Path, log: _Log) -> pd.DataFrame:
    frames = [_load_alpaca_model(folder, log) for folder in _alpaca_model_dirs(path)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ---------------------------------------------------------------------- entry point

_LOADERS: dict[str, Callable[[Path, _Log], pd.DataFrame]] = {
    "canonical": _load_canonical,
    "eee": _load_eee,
    "lm_eval": _load_lm_eval,
    "helm": _load_helm,
    "inspect": _load_inspect,
    "alpaca_eval": _load_alpaca_eval,
}


def _folder_units(folder: Path, log: _Log) -> Iterable[tuple[str, Path]]:
    """(format, path) for every importable unit under a plain folder."""
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        kind = detect_format(here)
        if kind in ("helm", "alpaca_eval"):
            dirs.clear()
            yield kind, here
            continue
        dirs.sort()
        for name in sorted(files):
            child = here / name
            plain = _strip_gz(name).lower()
            if (
                plain.startswith("results_")
                or plain.endswith(".schema.json")
                or (".schema." in plain)
            ):
                continue  # sidecars read by the samples importers, and JSON schemas
            try:
                yield detect_format(child), child
            except RecordsError:
                if plain.endswith(".json") and (here / f"{plain[:-5]}_samples.jsonl").exists():
                    continue  # an Every Eval Ever aggregate, read with its samples
                log.skip(child, "not a recognised evaluation file")


def load(path_or_dir: str | os.PathLike[str], format: str | None = None) -> ImportResult:
    """Import a file or folder written by an evaluation tool into canonical records.

    Parameters
    ----------
    path_or_dir : str or path-like
        A file, a format's folder (HELM run, AlpacaEval ``results/``), or any folder
        (every recognised file under it is imported).
    format : str, optional
        One of :data:`FORMATS` to skip detection (e.g. a file with an unusual name).

    Returns
    -------
    ImportResult
        Validated records plus what was skipped and why, and warnings.

    Raises
    ------
    RecordsError
        Unknown format, unreadable file, nothing importable, or records that break the
        canonical schema (the message names the rows and what to do).
    """
    path = Path(path_or_dir)
    if not path.exists():
        raise RecordsError(f"not found: {path}")
    if format is not None and format not in FORMATS:
        raise RecordsError(f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    log = _Log()
    kind = format or detect_format(path)
    units = list(_folder_units(path, log)) if kind == "folder" else [(kind, path)]
    frames, counts = [], Counter()
    for unit_kind, unit_path in units:
        frame = _LOADERS[unit_kind](unit_path, log)
        if not frame.empty:
            frames.append(frame)
            counts[unit_kind] += len(frame)
    if not frames:
        reasons = "; ".join(log.lines()) or "no rows found"
        raise RecordsError(f"nothing to import from {path}: {reasons}")
    combined = pd.concat(frames, ignore_index=True)
    return ImportResult(validate_records(combined), log.lines(), log.warnings, dict(counts))
