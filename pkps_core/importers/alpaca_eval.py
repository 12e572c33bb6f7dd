"""AlpacaEval importer: ``results/<model>/model_outputs.json`` and its annotations.

Preferences come from ``<model>/<annotator>/annotations.json``: the annotator the user
names (``annotator=``, ``ingest --annotator``), else AlpacaEval's default
(:data:`ALPACA_ANNOTATOR`) when present, else the only (or first) annotator folder, named
in a note; score = preference − 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers._common import (
    _as_id,
    _as_score,
    _as_text,
    _find,
    _Log,
    _read_json,
    _strip_gz,
)
from pkps_core.records import RecordsError

ALPACA_ANNOTATOR = "weighted_alpaca_eval_gpt4_turbo"


def _alpaca_model_dirs(path: Path) -> list[Path]:
    """The model folders (each with a ``model_outputs.json``) that ``path`` names."""
    if path.is_file():
        if _strip_gz(path.name).lower() != "model_outputs.json":
            raise RecordsError(
                f"{path} is not an AlpacaEval model_outputs.json; give that file or the "
                "results/ folder holding it"
            )
        return [path.parent]
    if _find(path, "model_outputs.json"):
        return [path]
    folders = sorted(c for c in path.iterdir() if c.is_dir() and _find(c, "model_outputs.json"))
    if not folders:
        raise RecordsError(
            f"{path} holds no AlpacaEval model_outputs.json (in it or in a model folder "
            "under it); give an AlpacaEval results/ folder"
        )
    return folders


def _alpaca_preferences(path: Path, log: _Log) -> dict[tuple[str, str], object]:
    """The annotator's preference per (instruction, output_2) text pair."""
    annotations = _read_json(path)
    if not isinstance(annotations, list):
        raise RecordsError(f"{path} should be a JSON list of annotations")
    preferences: dict[tuple[str, str], object] = {}
    for position, annotation in enumerate(annotations):
        where = f"annotation {position}"
        if not isinstance(annotation, dict):
            log.skip(path, "annotation is not an object", where)
            continue
        instruction = _as_text(annotation.get("instruction"))
        output = _as_text(annotation.get("output_2"))
        if instruction is None or output is None:
            log.skip(path, "annotation without instruction or output_2 text", where)
            continue
        preferences[(instruction, output)] = annotation.get("preference")
    return preferences


def _annotations(folder: Path, log: _Log, annotator: str | None) -> Path | None:
    """The annotations file whose preferences score the model in ``folder``."""
    present = sorted(
        c.name for c in folder.iterdir() if c.is_dir() and _find(c, "annotations.json")
    )
    if annotator is not None:
        if annotator not in present:
            raise RecordsError(
                f"{folder}: no annotations by {annotator!r}; the annotators here are "
                f"{', '.join(present) or 'none'}"
            )
        chosen = annotator
    elif not present:
        log.warn(f"{folder.name}: no <annotator>/annotations.json; scores left empty")
        return None
    elif ALPACA_ANNOTATOR in present:
        chosen = ALPACA_ANNOTATOR
    else:
        chosen = present[0]
    others = [a for a in present if a != chosen]
    if others or chosen != ALPACA_ANNOTATOR:
        also = f"; also present: {', '.join(others)}" if others else ""
        log.warn(f"{folder.name}: scores from annotator {chosen!r}{also} (choose with --annotator)")
    return _find(folder / chosen, "annotations.json")


def _load_alpaca_model(folder: Path, log: _Log, annotator: str | None) -> pd.DataFrame:
    outputs_path = _find(folder, "model_outputs.json")
    outputs = _read_json(outputs_path)
    if not isinstance(outputs, list):
        raise RecordsError(f"{outputs_path} should be a JSON list of outputs")
    annotations_path = _annotations(folder, log, annotator)
    if annotations_path is None:
        preferences = {}
    else:
        preferences = _alpaca_preferences(annotations_path, log)
    rows = []
    for position, output in enumerate(outputs):
        # Upstream outputs follow the 805-instruction evaluation set, so the position is
        # the instruction's id (as in alpaca_eval_40.parquet: "alpaca-<position>").
        where = f"output {position}"
        if not isinstance(output, dict):
            log.skip(outputs_path, "output is not an object", where)
            continue
        instruction, text = _as_text(output.get("instruction")), _as_text(output.get("output"))
        if instruction is None or text is None:
            log.skip(outputs_path, "no instruction or output text", where)
            continue
        preference = _as_score(preferences.get((instruction, text)))
        if preference is None and annotations_path is not None:
            log.warn(f"{folder.name}: some outputs have no annotated preference (score NaN)")
        rows.append(
            {
                "model": _as_id(output.get("generator")) or folder.name,
                "task": _as_id(output.get("dataset")) or "alpaca_eval",
                "query_id": f"alpaca-{position}",
                "query": instruction,
                "response": text,
                "score": np.nan if preference is None else preference - 1.0,
            }
        )
    return pd.DataFrame(rows)


def _load_alpaca_eval(path: Path, log: _Log, annotator: str | None = None) -> pd.DataFrame:
    frames = [_load_alpaca_model(f, log, annotator) for f in _alpaca_model_dirs(path)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
