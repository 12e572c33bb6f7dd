"""Importers: the files evaluation tools write, mapped into the canonical record.

:func:`load` reads a file or folder, detects its format (:func:`detect_format`, or an
explicit ``format=``) and returns an :class:`ImportResult`: validated canonical records,
what was skipped and why, and warnings. :data:`FORMATS` names the formats, one module each:
``canonical`` (CSV / TSV / Parquet), ``eee`` (Every Eval Ever), ``lm_eval``
(lm-evaluation-harness), ``helm`` (HELM run folders), ``inspect`` (Inspect AI logs, module
``inspect_logs``) and ``alpaca_eval`` (AlpacaEval ``results/``). Any of these files may be
gzipped (``.gz``); a folder that is none of the folder formats is searched recursively and
every recognised file in it is imported.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from pkps_core.importers._common import (
    ImportResult,
    _find,
    _first_jsonl_object,
    _Log,
    _read_json,
    _strip_gz,
)
from pkps_core.importers.alpaca_eval import ALPACA_ANNOTATOR, _load_alpaca_eval
from pkps_core.importers.canonical import _CANONICAL_SUFFIXES, _load_canonical
from pkps_core.importers.eee import _load_eee
from pkps_core.importers.helm import _load_helm
from pkps_core.importers.inspect_logs import _load_inspect
from pkps_core.importers.lm_eval import _LM_EVAL_SAMPLES, _load_lm_eval
from pkps_core.records import RecordsError, validate_records

__all__ = ["ALPACA_ANNOTATOR", "FORMATS", "ImportResult", "detect_format", "load"]

FORMATS = ("canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval")


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
