"""The Data page's tables: model summary and order, paging, coverage and pairedness matrices."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

MODEL_ORDERS = ("model", "family", "score")


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
    # the distinct models first: isin over the pairs' column (a million rows for a thousand
    # models) builds one Arrow scalar per row under pandas 3, about 5 s
    models = pairs["model_a"].unique()
    families = sorted(set(family_of.loc[family_of.index.isin(models)]))
    return matrix.reindex(index=families, columns=families)


def store_path_problem(path: str, *, create: bool) -> str | None:
    """Why ``path`` cannot be opened as a store, or None if it can.

    A store is a ``.duckdb`` file. An existing file must be a file (not a folder); a new
    one is made only when ``create`` is set, and never in a folder that does not exist (a
    mistyped folder would otherwise be created silently, with an empty store in it).
    """
    target = Path(path).expanduser()
    if target.suffix != ".duckdb":
        return "A store is a .duckdb file; give a path ending in .duckdb."
    if target.is_dir():
        return f"{target} is a folder, not a store file."
    if target.exists():
        return None
    if not target.parent.is_dir():
        return (
            f"The folder {target.parent} does not exist, so nothing was opened or created. "
            "Check the path for a typo."
        )
    if not create:
        return (
            f"There is no store at {target}. Tick “Create a new store if the file does not "
            "exist” to make an empty one there."
        )
    return None


def confined_store_path(
    name: str, folder: Path, *, allowed: Sequence[str] = ()
) -> tuple[Path | None, str | None]:
    """``name`` (relative to the store folder, or absolute) resolved, if it stays inside
    ``folder``: ``(path, None)``, else ``(None, why)`` in one line.

    A served app takes store names from its URL, so a name may not climb out of the store
    folder: ``..`` is refused, symlinks are resolved before the check (a link inside the
    folder pointing out of it is outside), and an absolute path must lie inside the
    folder. The ``allowed`` paths (the store named at launch) are accepted wherever they are.
    """
    raw = str(name).strip()
    if not raw:
        return None, "No store name given."
    candidate = Path(raw).expanduser()
    if ".." in candidate.parts:
        return None, (
            f"The store path {raw!r} climbs out with '..'; give a store name inside the store "
            f"folder {folder}. Nothing was opened or created."
        )
    resolved = (candidate if candidate.is_absolute() else Path(folder) / candidate).resolve()
    if resolved in {Path(a).expanduser().resolve() for a in allowed}:
        return resolved, None
    if not resolved.is_relative_to(Path(folder).resolve()):
        return None, (
            f"The store path {raw!r} is outside the store folder {folder}; stores are opened "
            "or created only inside it (set PKPS_DATA_DIR to use another folder). Nothing was "
            "opened or created."
        )
    return resolved, None


def stores_in(folder: Path) -> list[str]:
    """The store files in ``folder`` (names, sorted), for a picker."""
    folder = Path(folder)
    return sorted(p.name for p in folder.glob("*.duckdb") if p.is_file()) if folder.is_dir() else []


def import_store_name(file_names: Sequence[str], folder: Path) -> str:
    """A new store's default file name for an import of ``file_names``: the first file's
    whole name (``x.csv`` → ``x-csv.duckdb``, so ``x.parquet`` does not collide with it),
    with ``-2``, ``-3``, … where ``folder`` already has a store of that name."""
    first = Path(file_names[0]).name if file_names else "uploaded"
    stem = "-".join(part for part in first.split(".") if part) or "uploaded"
    name, n = f"{stem}.duckdb", 1
    while (Path(folder) / name).exists():
        n += 1
        name = f"{stem}-{n}.duckdb"
    return name


def error_lines(message: str, width: int = 400) -> list[str]:
    """A failure message as short lines, one per problem (a long line is cut at ``width``)."""
    lines = [" ".join(line.split()) for line in str(message).splitlines()]
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines if line]
