"""A cache as a Parquet dataset partitioned by task: the scale-out input.

The DuckDB file stays the store of one machine; a dataset directory
(``DIR/task=<name>/*.parquet``, Hive partitioning) is what a cluster or any Arrow reader
scans lazily, one task's files at a time, reading only the columns it asks for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from pkps_core.outputs import atomic_directory, check_writable
from pkps_core.records import RecordsError

ROWS_PER_FILE = 1 << 18


def check_export_target(directory: str | Path) -> Path:
    """Refuse, in one line, a ``directory`` that :func:`export_parquet` cannot write: a
    file, a folder that cannot be written, or a non-empty folder that is not a Parquet
    dataset (nothing of the user's is deleted)."""
    target = check_writable(directory, directory=True)
    if target.exists() and any(target.iterdir()) and not _is_dataset(target):
        raise RecordsError(
            f"{target} is a non-empty directory that is not a Parquet dataset; "
            "give a new or empty directory"
        )
    return target


def export_parquet(records: pd.DataFrame, directory: str | Path) -> int:
    """Write canonical ``records`` as a dataset partitioned by task; returns the files.

    An existing dataset at ``directory`` is replaced, only once the new one is complete
    (:func:`~pkps_core.outputs.atomic_directory`); any other non-empty directory is
    refused (:func:`check_export_target`).
    """
    target = check_export_target(directory)
    table = pa.Table.from_pandas(records.reset_index(drop=True), preserve_index=False)
    with atomic_directory(target) as partial:
        ds.write_dataset(
            table,
            partial,
            format="parquet",
            partitioning=["task"],
            partitioning_flavor="hive",
            max_rows_per_file=ROWS_PER_FILE,
            max_rows_per_group=min(ROWS_PER_FILE, 1 << 16),
            existing_data_behavior="overwrite_or_ignore",
        )
        files = len(list(partial.rglob("*.parquet")))
    return files


def _is_dataset(directory: Path) -> bool:
    return any(directory.rglob("*.parquet"))


def read_parquet_dataset(
    directory: str | Path,
    tasks: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Records of a Parquet dataset directory (only ``tasks`` / ``columns`` if given).

    Raises :class:`RecordsError` in one line when ``directory`` holds no Parquet files.
    """
    source = Path(directory)
    if not source.is_dir() or not _is_dataset(source):
        raise RecordsError(
            f"{source} is not a Parquet dataset (no .parquet files under it); make one with "
            "`python -m pkps_core export --db STORE --to-parquet DIR` or give a file"
        )
    try:
        dataset = ds.dataset(source, format="parquet", partitioning="hive")
        scan_filter = None if tasks is None else ds.field("task").isin(list(tasks))
        table = dataset.to_table(columns=list(columns) if columns else None, filter=scan_filter)
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecordsError(f"cannot read the Parquet dataset {source}: {exc}") from None
    frame = table.to_pandas()
    if "task" in frame.columns:
        frame["task"] = frame["task"].astype(str)
    return frame
