"""Uploaded files to canonical records: importer detection, zip extraction, one ingest's worth.

Plain Python (no streamlit), so the Data page's upload path is tested without a browser.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pkps_core.importers import check_duplicates_across, load
from pkps_core.records import RecordsError, check_score_range, validate_records

UPLOAD_TYPES = ("csv", "tsv", "parquet", "pq", "json", "jsonl", "eval", "gz", "zip")
MAX_ZIP_BYTES = 2 * 1024**3


@dataclass
class UploadResult:
    """Records read from one or more uploaded files, ready for one ingest.

    Attributes
    ----------
    records : DataFrame
        Validated canonical records of every file, concatenated.
    source : str
        Label for the ingest (the file names).
    per_file : DataFrame
        One row per file: name, format(s), rows.
    skipped, warnings : list of str
        What the importers left out and why, and what they flagged, prefixed by file.
    """

    records: pd.DataFrame
    source: str
    per_file: pd.DataFrame
    skipped: list[str]
    warnings: list[str]


def _safe_name(name: str) -> str:
    """The last path component of an uploaded name (never a path into the file system)."""
    base = Path(name.replace("\\", "/")).name.strip()
    if base in ("", ".", ".."):
        raise RecordsError(f"uploaded file name {name!r} is not a file name")
    return base


def _extract_zip(data: bytes, folder: Path) -> Path:
    """Extract an uploaded zip archive under ``folder`` without leaving it."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        total = sum(info.file_size for info in archive.infolist())
        if total > MAX_ZIP_BYTES:
            raise RecordsError(
                f"the archive expands to {total / 1024**3:.1f} GiB, more than the "
                f"{MAX_ZIP_BYTES / 1024**3:.0f} GiB allowed; upload its files directly"
            )
        root = folder.resolve()
        for info in archive.infolist():
            target = (folder / info.filename).resolve()
            if not target.is_relative_to(root):
                raise RecordsError(f"the archive entry {info.filename!r} points outside it")
        archive.extractall(folder)
    return folder


def read_uploads(
    files: Sequence[tuple[str, bytes]],
    *,
    metric: str | None = None,
    annotator: str | None = None,
    percent_scores: bool = False,
) -> UploadResult:
    """Import uploaded files (canonical CSV/Parquet or any importer format) in memory.

    Each file is written to a private temporary folder under its own base name and read
    with :func:`pkps_core.importers.load` (format detected from the name and content); a
    ``.zip`` is extracted and imported as a folder (HELM runs, AlpacaEval ``results/``).
    Nothing is stored: the caller ingests :attr:`UploadResult.records` in one transaction.

    Parameters
    ----------
    files : sequence of (name, bytes)
    metric, annotator : str, optional
        Passed to :func:`pkps_core.importers.load`: the HELM / lighteval metric and the
        AlpacaEval annotator that give the score.
    percent_scores : bool, default=False
        The scores are percentages: rescaled to [0, 1]
        (:func:`pkps_core.records.check_score_range`).

    Returns
    -------
    UploadResult

    Raises
    ------
    RecordsError
        A file cannot be read or breaks the schema, two files share a name, or two files
        hold the same (model, task, query_id), or scores lie outside [0, 1] (outside
        [0, 100] with ``percent_scores``). Every bad file is reported, one line each
        starting with the file name, without the server's temporary paths.
    """
    if not files:
        raise RecordsError("no files uploaded")
    names = [_safe_name(name) for name, _ in files]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RecordsError(f"two uploads are named {repeated[0]!r}; upload each file once")
    frames, rows, skipped, warnings, errors = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="pkps-upload-") as tmp:
        for name, (_, data) in zip(names, files, strict=True):
            unit = Path(tmp) / name
            try:
                if name.lower().endswith(".zip"):
                    folder = _extract_zip(data, Path(tmp) / f"{name}.d")
                    result = load(folder, metric=metric, annotator=annotator)
                else:
                    unit.write_bytes(data)
                    result = load(unit, metric=metric, annotator=annotator)
            except (RecordsError, zipfile.BadZipFile) as exc:
                message = _scrub(str(exc), tmp)
                errors.append(message if message.startswith(f"{name}: ") else f"{name}: {message}")
                continue
            except Exception as exc:  # noqa: BLE001 - an importer tripped on malformed input
                # one line, never a traceback: the records do not have the shape the
                # detected importer expects
                detail = _scrub(f"{type(exc).__name__}: {exc}", tmp)
                errors.append(f"{name}: malformed records the importer cannot read ({detail})")
                continue
            frames.append((name, result.records))
            rows.append(
                {
                    "file": name,
                    "format": ", ".join(sorted(result.formats)),
                    "rows": len(result.records),
                    "models": result.records["model"].nunique(),
                    "tasks": result.records["task"].nunique(),
                }
            )
            skipped += [f"{name}: {line}" for line in result.skipped]
            warnings += [f"{name}: {line}" for line in result.warnings]
    if errors:
        raise RecordsError("\n".join(errors))
    check_duplicates_across(frames)
    records = validate_records(pd.concat([frame for _, frame in frames], ignore_index=True))
    records = check_score_range(records, percent=percent_scores)
    source = ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more"
    return UploadResult(records, source, pd.DataFrame(rows), skipped, warnings)


def _scrub(message: str, folder: str) -> str:
    """``message`` on one line, without the server's temporary folder in its paths."""
    for root in {folder, str(Path(folder).resolve())}:
        message = message.replace(root + "/", "").replace(root, "the upload")
    return " ".join(message.split())


def parse_task_map(text: str | None) -> dict[str, str]:
    """``OLD=NEW,OLD2=NEW2`` (the CLI's ``--task-map``) as a mapping; empty for None."""
    mapping: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        old, sep, new = part.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise RecordsError(
                f"task map entry {part.strip()!r} is not OLD=NEW; write e.g. "
                "--task-map 'my_task=store_task,other=store_other'"
            )
        mapping[old.strip()] = new.strip()
    return mapping


def match_store_tasks(
    uploaded: pd.DataFrame,
    store_tasks: Sequence[str],
    task_map: dict[str, str] | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """An upload's rows on the store's tasks: renamed by ``task_map``, the others left out.

    A model is predicted on the tasks the store's references hold; an upload's task that
    the store does not hold has no reference to learn from, so its rows are left out with
    a note naming them, and an upload with no task in the store is refused.

    Parameters
    ----------
    uploaded : DataFrame
        Validated records of the upload.
    store_tasks : sequence of str
        The tasks the store holds.
    task_map : dict, optional
        ``{upload's task: store's task}`` for names that differ.

    Returns
    -------
    records : DataFrame
        The rows on the store's tasks (task names mapped).
    notes : list of str
        One warning naming the tasks left out (empty when none is).

    Raises
    ------
    RecordsError
        The map names a store task that does not exist, or none of the upload's tasks
        (after the map) is in the store; the message names both sides' tasks.
    """
    known = set(map(str, store_tasks))
    task_map = {str(k): str(v) for k, v in (task_map or {}).items()}
    missing_targets = sorted(set(task_map.values()) - known)
    if missing_targets:
        raise RecordsError(
            f"the task map names task(s) the store does not hold: "
            f"{_listed(missing_targets)}; the store's tasks are {_listed(sorted(known))}"
        )
    tasks = uploaded["task"].astype(str).map(lambda t: task_map.get(t, t))
    inside = tasks.isin(known).to_numpy()
    outside = sorted(set(uploaded.loc[~inside, "task"].astype(str)))
    if not inside.any():
        raise RecordsError(
            f"none of the upload's tasks is in the store: {_listed(outside)} (the store's "
            f"tasks: {_listed(sorted(known))}); map each to a store task (the page's task "
            "mapping, or --task-map UPLOAD_TASK=STORE_TASK) or add references for them first"
        )
    records = uploaded.assign(task=tasks)[inside].reset_index(drop=True)
    notes = []
    if outside:
        notes.append(
            f"task(s) {_listed(outside)} are not in the store and were left out "
            f"({int((~inside).sum())} rows); only its responses on the "
            f"{tasks[inside].nunique()} task(s) the store holds are used — map the others "
            "to store tasks to include them"
        )
    return records, notes


def _listed(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
