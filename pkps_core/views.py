"""Data shaping for the app's pages: heatmap matrices, paging, neighbours, exports.

Everything here is plain pandas/numpy so it can be tested without a browser; the
Streamlit pages only lay these frames out. Nothing in this module imports streamlit.
"""

from __future__ import annotations

import io
import math
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.importers import load
from pkps_core.predict import OUTPUT_COLUMNS
from pkps_core.records import RecordsError, validate_records

MODEL_ORDERS = ("model", "family", "score")
UPLOAD_TYPES = ("csv", "tsv", "parquet", "pq", "json", "jsonl", "gz", "zip")
MAX_ZIP_BYTES = 2 * 1024**3
_KEYS = ["model", "task", "query_id"]


# ---------------------------------------------------------------------- uploads


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


def read_uploads(files: Sequence[tuple[str, bytes]]) -> UploadResult:
    """Import uploaded files (canonical CSV/Parquet or any importer format) in memory.

    Each file is written to a private temporary folder under its own base name and read
    with :func:`pkps_core.importers.load` (format detected from the name and content); a
    ``.zip`` is extracted and imported as a folder (HELM runs, AlpacaEval ``results/``).
    Nothing is stored: the caller ingests :attr:`UploadResult.records` in one transaction.

    Parameters
    ----------
    files : sequence of (name, bytes)

    Returns
    -------
    UploadResult

    Raises
    ------
    RecordsError
        A file cannot be read or breaks the schema (the message starts with the file
        name), two files share a name, or two files hold the same (model, task, query_id).
    """
    if not files:
        raise RecordsError("no files uploaded")
    names = [_safe_name(name) for name, _ in files]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RecordsError(f"two uploads are named {repeated[0]!r}; upload each file once")
    frames, rows, skipped, warnings = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="pkps-upload-") as tmp:
        for name, (_, data) in zip(names, files, strict=True):
            unit = Path(tmp) / name
            try:
                if name.lower().endswith(".zip"):
                    result = load(_extract_zip(data, Path(tmp) / f"{name}.d"))
                else:
                    unit.write_bytes(data)
                    result = load(unit)
            except (RecordsError, zipfile.BadZipFile) as exc:
                raise RecordsError(f"{name}: {exc}") from None
            frames.append(result.records.assign(_file=name))
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
    combined = pd.concat(frames, ignore_index=True)
    _check_cross_file_duplicates(combined)
    records = validate_records(combined.drop(columns="_file"))
    source = ", ".join(names) if len(names) <= 3 else f"{names[0]} and {len(names) - 1} more"
    return UploadResult(records, source, pd.DataFrame(rows), skipped, warnings)


def _check_cross_file_duplicates(combined: pd.DataFrame) -> None:
    duplicated = combined.duplicated(_KEYS, keep=False)
    if not duplicated.any():
        return
    first = combined.loc[duplicated, [*_KEYS, "_file"]]
    key = tuple(first.iloc[0][_KEYS])
    files = first[(first[_KEYS] == pd.Series(key, index=_KEYS)).all(axis=1)]["_file"].unique()
    raise RecordsError(
        f"(model, task, query_id) {key} appears in {' and '.join(files)} "
        f"({int(duplicated.sum())} rows repeat across files); upload one version of each "
        "response"
    )


# ---------------------------------------------------------------------- store overview


def model_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per model: family, tasks covered, responses, mean sample score and reference.

    ``cells`` is :func:`pkps_core.records.cell_table` output (one row per observed cell).
    """
    return (
        cells.groupby("model", sort=True)
        .agg(
            family=("family", "first"),
            tasks=("task", "nunique"),
            responses=("n_responses", "sum"),
            mean_sample_score=("sample_score", "mean"),
            mean_reference=("reference", "mean"),
        )
        .reset_index()
    )


def model_order(cells: pd.DataFrame, by: str = "model", task: str | None = None) -> list[str]:
    """Models ordered by name, by family (then name), or by score (best first).

    The score is the mean sample score over the model's cells, or its sample score in
    ``task`` when given (models without a scored response there come last).
    """
    if by not in MODEL_ORDERS:
        raise ValueError(f"order must be one of {MODEL_ORDERS}, got {by!r}")
    table = model_table(cells)
    if by == "model":
        return table["model"].tolist()
    if by == "family":
        return table.sort_values(["family", "model"], kind="stable")["model"].tolist()
    scores = table.set_index("model")["mean_sample_score"]
    if task is not None:
        in_task = cells[cells["task"] == task].set_index("model")["sample_score"]
        scores = in_task.reindex(scores.index)
    ranked = pd.DataFrame({"model": scores.index, "score": scores.to_numpy()})
    ranked = ranked.sort_values(["score", "model"], ascending=[False, True], na_position="last")
    return ranked["model"].tolist()


def paginate(items: Sequence, page: int, per_page: int) -> tuple[list, int]:
    """Items of 1-based ``page`` (clipped to the valid range) and the number of pages."""
    n_pages = max(1, math.ceil(len(items) / per_page))
    page = min(max(int(page), 1), n_pages)
    start = (page - 1) * per_page
    return list(items[start : start + per_page]), n_pages


def coverage_matrix(
    cells: pd.DataFrame, models: Sequence[str], tasks: Sequence[str] | None = None
) -> pd.DataFrame:
    """Responses per (model, task) as a models × tasks frame; NaN marks a missing cell."""
    tasks = sorted(cells["task"].unique()) if tasks is None else list(tasks)
    matrix = cells.pivot_table(
        index="model", columns="task", values="n_responses", aggfunc="sum", sort=True
    )
    return matrix.reindex(index=list(models), columns=tasks).astype(float)


def family_coverage(cells: pd.DataFrame, tasks: Sequence[str] | None = None) -> pd.DataFrame:
    """Fraction of each family's models with responses in each task (families × tasks).

    The aggregate view of :func:`coverage_matrix` for stores too large to show per model;
    0 means no model of the family answered anything in that task.
    """
    tasks = sorted(cells["task"].unique()) if tasks is None else list(tasks)
    sizes = cells.groupby("family")["model"].nunique()
    observed = cells.groupby(["family", "task"])["model"].nunique().unstack("task")
    fraction = observed.div(sizes, axis=0).reindex(columns=tasks).fillna(0.0)
    return fraction.sort_index()


def pairedness_matrix(
    pairs: pd.DataFrame, rows: Sequence[str], columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """ρ (fraction of the row model's queries the column model also answered).

    ``pairs`` is :meth:`pkps_core.store.Store.pairedness` output. Models absent from it
    (no responses in the selected task) give NaN rows/columns.
    """
    columns = list(rows) if columns is None else list(columns)
    matrix = pairs.pivot(index="model_a", columns="model_b", values="rho")
    return matrix.reindex(index=list(rows), columns=columns).astype(float)


def family_pairedness(pairs: pd.DataFrame, family_of: pd.Series) -> pd.DataFrame:
    """Mean ρ between the models of two families (families × families), self-pairs left out."""
    frame = pairs[pairs["model_a"] != pairs["model_b"]].assign(
        family_a=lambda f: f["model_a"].map(family_of),
        family_b=lambda f: f["model_b"].map(family_of),
    )
    matrix = frame.pivot_table(
        index="family_a", columns="family_b", values="rho", aggfunc="mean", sort=True
    )
    families = sorted(set(family_of.loc[family_of.index.isin(pairs["model_a"])]))
    return matrix.reindex(index=families, columns=families)


# ---------------------------------------------------------------------- perspective space


@dataclass(frozen=True)
class SpaceSummary:
    """What the app shows of a fitted :class:`~pkps_core.space.PerspectiveSpace`.

    Small and picklable (no cache, no kernel sums), so it can be cached by value.
    """

    coordinates: pd.DataFrame
    distance: np.ndarray
    query_kernel: str
    query_bandwidth: float
    median_query_distance: float
    bandwidth_grid: np.ndarray
    cv_errors: np.ndarray
    affinity_path: str
    eigenvalues: np.ndarray

    @property
    def models(self) -> np.ndarray:
        return self.coordinates["model"].to_numpy(dtype=str)

    def cv_curve(self) -> pd.DataFrame:
        """Bandwidth grid against the leave-one-model-out KNN error (NaN-free rows)."""
        scale = self.median_query_distance
        frame = pd.DataFrame(
            {
                "bandwidth": self.bandwidth_grid,
                "multiple_of_median": self.bandwidth_grid / scale
                if scale and np.isfinite(scale)
                else np.nan,
                "cv_error": self.cv_errors,
            }
        )
        frame["chosen"] = np.isclose(frame["bandwidth"], self.query_bandwidth)
        return frame.dropna(subset=["cv_error"])


def summarize_space(space) -> SpaceSummary:
    """The displayable part of a fitted perspective space."""
    return SpaceSummary(
        coordinates=space.coordinates(),
        distance=np.asarray(space.distance_matrix_, dtype=float),
        query_kernel=space.query_kernel,
        query_bandwidth=float(space.query_bandwidth_),
        median_query_distance=float(space.median_query_distance_),
        bandwidth_grid=np.asarray(space.bandwidth_grid_, dtype=float),
        cv_errors=np.asarray(space.cv_errors_, dtype=float),
        affinity_path=str(space.affinity_path_),
        eigenvalues=np.asarray(space.eigenvalues_, dtype=float),
    )


def umap_2d(coordinates: np.ndarray, random_state: int = 0) -> np.ndarray:
    """UMAP of the d-dimensional coordinates to 2-D (needs the optional ``umap-learn``).

    Raises
    ------
    ImportError
        umap-learn is not installed.
    """
    import umap  # optional dependency: imported only when the UMAP view is asked for

    n = len(coordinates)
    if n < 4:
        return np.asarray(coordinates, dtype=float)[:, :2]
    reducer = umap.UMAP(
        n_components=2,
        n_neighbors=min(15, n - 1),
        random_state=random_state,
        init="random",
        n_jobs=1,
    )
    return reducer.fit_transform(np.asarray(coordinates, dtype=float))


def scatter_frame(
    summary: SpaceSummary, cells: pd.DataFrame, task: str, xy: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per model: 2-D position, family, score in ``task``, responses there and overall.

    ``score`` is the cell's reference (its trusted full-task score, else the sample score);
    NaN where the model has no responses in ``task``. ``xy`` defaults to the first two
    MDS axes.
    """
    coordinates = summary.coordinates
    if xy is None:
        dims = [c for c in coordinates.columns if c.startswith("dim_")]
        xy = (
            coordinates[dims[:2]].to_numpy()
            if len(dims) >= 2
            else np.c_[coordinates[dims[0]].to_numpy(), np.zeros(len(coordinates))]
        )
    in_task = cells[cells["task"] == task].set_index("model")
    frame = pd.DataFrame(
        {
            "model": coordinates["model"],
            "family": coordinates["family"],
            "x": xy[:, 0],
            "y": xy[:, 1],
            "score": coordinates["model"].map(in_task["reference"]),
            "sample_score": coordinates["model"].map(in_task["sample_score"]),
            "task_responses": coordinates["model"].map(in_task["n_responses"]).fillna(0),
            "responses": coordinates["n_responses"],
        }
    )
    frame["task_responses"] = frame["task_responses"].astype(int)
    return frame


def selected_models(*selections: object) -> list[str]:
    """Model ids of the points in Plotly selection states (through ``customdata[0]``).

    Accepts the ``event.selection`` mappings returned by ``st.plotly_chart(...,
    on_select="rerun")``; points without customdata (e.g. a reference line) are ignored.
    """
    chosen: list[str] = []
    for selection in selections:
        if not selection:
            continue
        for point in selection.get("points", []) or []:
            custom = point.get("customdata")
            if isinstance(custom, list | tuple) and custom:
                model = str(custom[0])
            elif isinstance(custom, str):
                model = custom
            else:
                continue
            if model not in chosen:
                chosen.append(model)
    return chosen


def nearest_neighbours(
    distance: np.ndarray, models: Sequence[str], selected: Sequence[str], k: int = 5
) -> pd.DataFrame:
    """The ``k`` nearest other models of each selected model in the space.

    Returns
    -------
    DataFrame
        Columns ``model, rank, neighbour, distance`` (rank 1 = nearest), ties broken by
        name.
    """
    models = np.asarray(models, dtype=str)
    position = {m: i for i, m in enumerate(models)}
    rows = []
    for model in selected:
        if model not in position:
            continue
        i = position[model]
        others = np.array([j for j in range(len(models)) if j != i], dtype=int)
        order = np.lexsort((models[others], distance[i, others]))[:k]
        for rank, j in enumerate(others[order], start=1):
            rows.append(
                {
                    "model": model,
                    "rank": rank,
                    "neighbour": models[j],
                    "distance": float(distance[i, j]),
                }
            )
    return pd.DataFrame(rows, columns=["model", "rank", "neighbour", "distance"])


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def similar_query_responses(
    records: pd.DataFrame, model: str, others: Sequence[str], n: int = 3
) -> pd.DataFrame:
    """A few responses of ``model`` next to other models' responses to similar queries.

    For every query of ``model`` the most similar query each other model answered is
    found — by cosine similarity of query embeddings where the records carry them (the
    RBF kernel's view), otherwise only the identical (task, query_id) (the delta
    kernel's). The ``n`` most similar pairs per other model are returned.

    Returns
    -------
    DataFrame
        Columns ``neighbour, similarity, task, query, response, score, neighbour_task,
        neighbour_query, neighbour_response, neighbour_score``.
    """
    columns = [
        "neighbour",
        "similarity",
        "task",
        "query",
        "response",
        "score",
        "neighbour_task",
        "neighbour_query",
        "neighbour_response",
        "neighbour_score",
    ]
    frame = records.reset_index(drop=True)
    for column in ("query", "response", "score"):
        if column not in frame.columns:
            frame[column] = None if column != "score" else np.nan
    own = frame[frame["model"] == model]
    if own.empty:
        return pd.DataFrame(columns=columns)
    has_vectors = "query_embedding" in frame.columns
    own_vectors = _unit_rows(np.vstack(own["query_embedding"].tolist())) if has_vectors else None
    out = []
    for other in others:
        theirs = frame[frame["model"] == other]
        if theirs.empty or other == model:
            continue
        if has_vectors:
            similarity = own_vectors @ _unit_rows(np.vstack(theirs["query_embedding"].tolist())).T
            best = similarity.argmax(axis=1)
            best_similarity = similarity[np.arange(len(own)), best]
        else:
            key_of = {
                k: j for j, k in enumerate(zip(theirs["task"], theirs["query_id"], strict=True))
            }
            match = [key_of.get(k, -1) for k in zip(own["task"], own["query_id"], strict=True)]
            best = np.maximum(np.asarray(match, dtype=int), 0)
            best_similarity = np.where(np.asarray(match) >= 0, 1.0, np.nan)
        ranked = np.argsort(-np.nan_to_num(best_similarity, nan=-np.inf), kind="stable")[:n]
        for i in ranked:
            if not np.isfinite(best_similarity[i]):
                continue
            mine, match_row = own.iloc[i], theirs.iloc[best[i]]
            out.append(
                {
                    "neighbour": other,
                    "similarity": float(best_similarity[i]),
                    "task": mine["task"],
                    "query": mine["query"],
                    "response": mine["response"],
                    "score": mine["score"],
                    "neighbour_task": match_row["task"],
                    "neighbour_query": match_row["query"],
                    "neighbour_response": match_row["response"],
                    "neighbour_score": match_row["score"],
                }
            )
    return pd.DataFrame(out, columns=columns)


# ---------------------------------------------------------------------- predictions


def mae_table(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method: MAE against references, cells scored, cells predicted.

    Parameters
    ----------
    predictions : DataFrame
        :func:`pkps_core.predict.predict` output.
    models : sequence of str, optional
        Restrict the evaluation to these models' cells (e.g. the targets).

    Returns
    -------
    DataFrame
        Index ``method`` (in input order); columns ``MAE`` (NaN where no cell has both a
        prediction and a reference), ``cells_scored``, ``cells_predicted``, ``cells``.
    """
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    methods = list(dict.fromkeys(predictions["method"]))
    scored = frame.dropna(subset=["prediction", "reference_score"])
    error = (scored["prediction"] - scored["reference_score"]).abs()
    table = pd.DataFrame(
        {
            "MAE": error.groupby(scored["method"]).mean(),
            "cells_scored": error.groupby(scored["method"]).size(),
            "cells_predicted": frame["prediction"].notna().groupby(frame["method"]).sum(),
            "cells": frame.groupby("method").size(),
        }
    ).reindex(methods)
    table.index.name = "method"
    for column in ("cells_scored", "cells_predicted", "cells"):
        table[column] = table[column].fillna(0).astype(int)
    return table


def per_task_mae(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """MAE against references per task (rows) and method (columns)."""
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    scored = frame.dropna(subset=["prediction", "reference_score"])
    error = (scored["prediction"] - scored["reference_score"]).abs()
    table = error.groupby([scored["task"], scored["method"]]).mean().unstack("method")
    methods = [m for m in dict.fromkeys(predictions["method"]) if m in table.columns]
    return table.reindex(columns=methods)


def export_bytes(frame: pd.DataFrame, file_format: str) -> bytes:
    """A table as CSV or Parquet bytes, written as the CLI writes files (no index)."""
    buffer = io.BytesIO()
    if file_format == "csv":
        frame.to_csv(buffer, index=False)
    elif file_format == "parquet":
        frame.to_parquet(buffer, index=False)
    else:
        raise ValueError(f"file_format must be 'csv' or 'parquet', got {file_format!r}")
    return buffer.getvalue()


def prediction_export(predictions: pd.DataFrame) -> pd.DataFrame:
    """Predictions with exactly the CLI's output columns, in its order."""
    return predictions.loc[:, list(OUTPUT_COLUMNS)].reset_index(drop=True)


def coordinates_export(summaries: dict[str, SpaceSummary]) -> pd.DataFrame:
    """Model coordinates of several spaces in one long frame (``space`` first column)."""
    frames = [s.coordinates.assign(space=name) for name, s in summaries.items()]
    combined = pd.concat(frames, ignore_index=True)
    return combined[["space", *[c for c in combined.columns if c != "space"]]]


# ---------------------------------------------------------------------- trust


def error_bar_frame(predictions: pd.DataFrame) -> pd.DataFrame:
    """Scored cells with the distances from the prediction to ``lower`` and ``upper``
    (``err_minus``, ``err_plus``; NaN without an interval), for plotly's error bars."""
    frame = predictions.dropna(subset=["prediction", "reference_score"]).copy()
    frame["err_plus"] = frame["upper"] - frame["prediction"]
    frame["err_minus"] = frame["prediction"] - frame["lower"]
    frame["inside"] = (frame["lower"] <= frame["reference_score"]) & (
        frame["reference_score"] <= frame["upper"]
    )
    return frame


def interval_table(predictions: pd.DataFrame, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Per method: coverage of the references by the intervals, mean width, warned cells.

    Returns
    -------
    DataFrame
        Index ``method``; columns ``coverage`` (share of cells with a reference and an
        interval whose reference lies inside), ``mean_width``, ``cells_with_interval``,
        ``extrapolation_cells``.
    """
    frame = predictions if models is None else predictions[predictions["model"].isin(models)]
    methods = list(dict.fromkeys(predictions["method"]))
    bars = error_bar_frame(frame).dropna(subset=["lower", "upper"])
    with_interval = frame.dropna(subset=["lower", "upper"])
    table = pd.DataFrame(
        {
            "coverage": bars.groupby("method")["inside"].mean(),
            "mean_width": (with_interval["upper"] - with_interval["lower"])
            .groupby(with_interval["method"])
            .mean(),
            "cells_with_interval": with_interval.groupby("method").size(),
            "extrapolation_cells": frame.groupby("method")["extrapolation"].sum(),
        }
    ).reindex(methods)
    table.index.name = "method"
    for column in ("cells_with_interval", "extrapolation_cells"):
        table[column] = table[column].fillna(0).astype(int)
    return table


def cell_overview(predictions: pd.DataFrame, methods: Sequence[str]) -> pd.DataFrame:
    """One row per (model, task): the cell's facts, each method's prediction, and the
    extrapolation warnings (``extrapolation``: any method warned; ``extrapolation_reason``:
    ``method: reason`` for each method that did)."""
    wide = predictions.pivot_table(
        index=["model", "task"], columns="method", values="prediction", dropna=False, sort=True
    ).reindex(columns=list(methods))
    info = predictions.drop_duplicates(["model", "task"]).set_index(["model", "task"])[
        ["sample_score", "n_responses", "reference_score"]
    ]
    warned = predictions[predictions["extrapolation"].astype(bool)]
    reasons = (
        (warned["method"] + ": " + warned["extrapolation_reason"])
        .groupby([warned["model"], warned["task"]])
        .agg(" | ".join)
        .rename("extrapolation_reason")
    )
    table = info.join(wide).join(reasons)
    table["extrapolation_reason"] = table["extrapolation_reason"].fillna("")
    table.insert(
        len(info.columns) + len(wide.columns), "extrapolation", table["extrapolation_reason"] != ""
    )
    return table.reset_index()
