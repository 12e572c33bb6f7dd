"""Importers: the files evaluation tools write, mapped into the canonical record.

:func:`load` reads a file or folder, detects its format (:func:`detect_format`, or an
explicit ``format=``) and returns an :class:`ImportResult`: validated canonical records,
what was skipped and why, and warnings. :data:`FORMATS` names the formats, one module each:
``canonical`` (CSV / TSV / Parquet), ``eee`` (Every Eval Ever), ``lm_eval``
(lm-evaluation-harness), ``helm`` (HELM run folders), ``inspect`` (Inspect AI logs, module
``inspect_logs``: ``.eval`` and JSON logs), ``alpaca_eval`` (AlpacaEval ``results/``) and
``lighteval`` (lighteval's ``details_*.parquet``). Any of these files may be gzipped
(``.gz``); a folder that is none of the folder formats is searched recursively and every
recognised file in it is imported; a file in it that cannot be read is named in a note
and the others are imported (a file named alone that cannot be read is an error).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pandas as pd

from pkps_core.importers._common import (
    TOO_DEEP,
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
from pkps_core.importers.lighteval import _load_lighteval, is_details_file
from pkps_core.importers.lm_eval import _LM_EVAL_SAMPLES, _load_lm_eval
from pkps_core.reading import check_regular_file, out_of_memory
from pkps_core.records import RecordsError, validate_records

__all__ = [
    "ALPACA_ANNOTATOR",
    "FORMATS",
    "ImportResult",
    "check_duplicates_across",
    "detect_format",
    "load",
]

FORMATS = ("canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval", "lighteval")


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
    if not target.is_dir():
        check_regular_file(target)
    if target.is_dir():
        if _find(target, "scenario_state.json") and _find(target, "per_instance_stats.json"):
            return "helm"
        if _find(target, "model_outputs.json") or any(
            _find(child, "model_outputs.json") for child in target.iterdir() if child.is_dir()
        ):
            return "alpaca_eval"
        return "folder"
    name = _strip_gz(target.name).lower()
    if is_details_file(target):
        return "lighteval"
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
    if name.endswith(".eval"):
        return "inspect"  # Inspect's default log format, a zip archive
    if name.endswith(".json"):
        try:
            document = _read_json(target)
        except RecordsError as exc:
            if TOO_DEEP in str(exc):
                raise
            document = None
        header = document.get("eval") if isinstance(document, dict) else None
        if isinstance(header, dict) and ("samples" in document or "task" in header):
            return "inspect"  # a log without samples is named as such by the importer
    raise RecordsError(
        f"cannot tell the format of {target}: a canonical file must end in .csv, .tsv or "
        f".parquet, and none of {', '.join(FORMATS[1:])} recognised it by its name or first "
        "record; name the format with `pkps ingest --format` (format= in Python)"
    )


_LOADERS: dict[str, Callable[[Path, _Log], pd.DataFrame]] = {
    "canonical": _load_canonical,
    "eee": _load_eee,
    "lm_eval": _load_lm_eval,
    "helm": _load_helm,
    "inspect": _load_inspect,
    "alpaca_eval": _load_alpaca_eval,
    "lighteval": _load_lighteval,
}


# Files a folder format reads, or its tool writes beside them (HELM's run outputs):
# part of the unit, not reported as unrecognised.
_HELM_RUN_FILES = frozenset(
    {
        "run_spec.json",
        "scenario.json",
        "scenario_state.json",
        "stats.json",
        "per_instance_stats.json",
        "instances.json",
        "display_predictions.json",
        "display_requests.json",
        "costs.json",
    }
)


def _part_of_unit(kind: str, unit: Path, child: Path) -> bool:
    plain = _strip_gz(child.name).lower()
    if kind == "helm":
        return child.parent == unit and plain in _HELM_RUN_FILES
    return plain in ("model_outputs.json", "annotations.json")  # AlpacaEval


def _folder_units(folder: Path, log: _Log, forced: str | None = None) -> Iterable[tuple[str, Path]]:
    """(format, path) for every importable unit under a folder: HELM run and AlpacaEval
    folders (``forced`` names the format of ``folder`` itself), and every other file
    whose format is recognised; a file that is none is named in a note, and so is one
    that is not a regular file (a pipe would block the import, a device never end)."""
    claimed: list[tuple[str, Path]] = []  # folder units, with the files they read
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        owner = next(((k, u) for k, u in claimed if here.is_relative_to(u)), None)
        if owner is None:
            kind = forced if (forced and here == folder) else detect_format(here)
            if kind in ("helm", "alpaca_eval"):
                owner = (kind, here)
                claimed.append(owner)
                yield owner
        dirs.sort()
        for name in sorted(files):
            child = here / name
            plain = _strip_gz(name).lower()
            if owner is not None and _part_of_unit(*owner, child):
                continue
            if (
                plain.startswith("results_")
                or plain.endswith(".schema.json")
                or (".schema." in plain)
            ):
                continue  # sidecars read by the samples importers, and JSON schemas
            if not child.is_file():
                log.skip(child, "not a regular file (a pipe, device, socket or broken link)")
                continue
            try:
                yield detect_format(child), child
            except RecordsError:
                if plain.endswith(".json") and (here / f"{plain[:-5]}_samples.jsonl").exists():
                    continue  # an Every Eval Ever aggregate, read with its samples
                log.skip(child, "not a recognised evaluation file")


def _read_unit(
    kind: str, path: Path, log: _Log, forced: bool, options: dict[str, dict]
) -> pd.DataFrame:
    """One unit through its importer; a file that does not have the shape the importer
    expects (most often a ``format=`` that is not the file's) is one line."""
    try:
        return _LOADERS[kind](path, log, **options.get(kind, {}))
    except RecordsError:
        raise
    except RecursionError:
        raise RecordsError(f"{path}: {TOO_DEEP}; re-create the file") from None
    except MemoryError:
        raise out_of_memory(path) from None
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        hint = (
            f"check that it is a {kind} file, or leave out the format to detect it"
            if forced
            else "the file does not have the structure its format's tool writes"
        )
        raise RecordsError(f"{path} cannot be read as {kind} ({detail}); {hint}") from None


def check_duplicates_across(named: Sequence[tuple[str, pd.DataFrame]]) -> None:
    """Refuse a (model, task, query_id) that two files (or folder units) both hold, naming
    the files: which of two versions to keep is the user's choice, whether the files come
    in one folder, one upload or one ``ingest a b`` command.

    Raises
    ------
    RecordsError
    """
    keys = ["model", "task", "query_id"]
    frames = [
        frame[keys].astype(str).assign(_file=name)
        for name, frame in named
        if len(frame) and set(keys) <= set(frame.columns)
    ]
    if len(frames) < 2:
        return
    combined = pd.concat(frames, ignore_index=True).drop_duplicates()
    duplicated = combined.duplicated(keys, keep=False)
    if not duplicated.any():
        return
    first = combined.loc[duplicated].iloc[0]
    key = tuple(first[keys])
    files = combined.loc[duplicated & (combined[keys] == first[keys]).all(axis=1), "_file"]
    repeated = int(combined.loc[duplicated].drop_duplicates(keys).shape[0])
    raise RecordsError(
        f"(model, task, query_id) {key} appears in {' and '.join(dict.fromkeys(files))} "
        f"({repeated} key(s) repeat across files); keep one version of each response — "
        "remove it from one file, or import the files one at a time to let the later "
        "replace the earlier"
    )


def load(
    path_or_dir: str | os.PathLike[str],
    format: str | None = None,
    *,
    metric: str | None = None,
    annotator: str | None = None,
) -> ImportResult:
    """Import a file or folder written by an evaluation tool into canonical records.

    Parameters
    ----------
    path_or_dir : str or path-like
        A file, a format's folder (HELM run, AlpacaEval ``results/``), or any folder
        (every recognised file under it is imported).
    format : str, optional
        One of :data:`FORMATS` to skip detection (e.g. a file with an unusual name).
    metric : str, optional
        HELM and lighteval: the per-sample metric that gives the score (default: the
        main metric HELM's schema names for the run's group; lighteval's first metric).
    annotator : str, optional
        AlpacaEval: the annotator folder whose preferences give the score (default:
        ``weighted_alpaca_eval_gpt4_turbo`` when present).

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
    if path.is_dir() and format not in (None, "helm", "alpaca_eval"):
        raise RecordsError(
            f"{path} is a folder; format {format!r} is a file's: give the file, or leave "
            "out the format to import every recognised file in the folder"
        )
    if path.is_dir():
        units = list(_folder_units(path, log, forced=format))
    else:
        check_regular_file(path)
        units = [(format or detect_format(path), path)]
    options = {
        "helm": {"metric": metric},
        "lighteval": {"metric": metric},
        "alpaca_eval": {"annotator": annotator},
    }
    named, counts = [], Counter()
    for unit_kind, unit_path in units:
        try:
            frame = _read_unit(unit_kind, unit_path, log, format is not None, options)
        except RecordsError as exc:
            if unit_path == path:
                raise  # the file or folder the user named: its error is the command's
            # one bad file of a folder: the others are imported, and it is named
            reason = str(exc).removeprefix(str(unit_path)).lstrip(":; ")
            log.skip(unit_path, f"not imported: {' '.join(reason.split())}")
            continue
        if not frame.empty:
            named.append((_unit_name(unit_path, path), frame))
            counts[unit_kind] += len(frame)
    if not named:
        reasons = "; ".join(log.lines()) or "no rows found"
        raise RecordsError(f"nothing to import from {path}: {reasons}")
    check_duplicates_across(named)
    combined = pd.concat([frame for _, frame in named], ignore_index=True)
    return ImportResult(validate_records(combined), log.lines(), log.warnings, dict(counts))


def _unit_name(unit: Path, top: Path) -> str:
    """A unit's path as the user knows it: relative to the imported folder."""
    return str(unit.relative_to(top)) if unit != top and unit.is_relative_to(top) else unit.name
