"""Conversions between per-row vectors and Arrow arrays, and DuckDB query helpers."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _vectors_to_arrow(cells: Sequence[np.ndarray | None]) -> pa.Array:
    """A list<double> Arrow array from per-row vectors (None stays null)."""
    present = [c for c in cells if c is not None]
    if not present:
        return pa.nulls(len(cells), type=pa.list_(pa.float64()))
    lengths = np.array([0 if c is None else c.size for c in cells], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(np.concatenate(present).astype(np.float64, copy=False))
    mask = pa.array([c is None for c in cells])
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask)


def _arrow_to_vectors(column: pa.ChunkedArray) -> list[np.ndarray | None]:
    """Per-row float64 vectors from a list<double> Arrow column (null stays None)."""
    out: list[np.ndarray | None] = []
    for chunk in column.chunks:
        # ``offsets`` index ``values`` absolutely, also for a sliced chunk.
        offsets = chunk.offsets.to_numpy()
        values = chunk.values.to_numpy(zero_copy_only=False)
        valid = chunk.is_valid().to_numpy(zero_copy_only=False)
        out.extend(
            values[offsets[i] : offsets[i + 1]].copy() if valid[i] else None
            for i in range(len(chunk))
        )
    return out


def _arrow_table(
    cur: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()
) -> pa.Table:
    relation = cur.sql(sql, params=list(params))
    # duckdb >= 1.4 names it to_arrow_table(); older releases only have arrow().
    to_table = getattr(relation, "to_arrow_table", None) or relation.arrow
    return to_table()


def _first_row(
    cur: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object] = ()
) -> tuple | None:
    # fetchall, not fetchone: duckdb 2 refuses further statements on a cursor whose
    # result was not read to the end.
    rows = cur.execute(sql, list(params)).fetchall()
    return rows[0] if rows else None


def _stage(cur: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Make the Arrow ``table`` the temporary table ``name`` of the cursor's connection.

    The rows travel through a Parquet file read by DuckDB's own reader, not through
    ``cursor.register``: with duckdb 2.0 a registered Python object is read by the
    ``python_arrow_scan`` table function, which another connection to the same file opening
    in this process at that moment can make unresolvable ("Table Function with name
    python_arrow_scan does not exist", seen when two app sessions imported at once). A
    temporary table is private to the cursor and goes when it closes; ``CREATE OR
    REPLACE`` lets one cursor stage the same name again.
    """
    if not name.isidentifier():  # internal names only: no SQL is built from user strings
        raise ValueError(f"staging table name must be an identifier, got {name!r}")
    with tempfile.TemporaryDirectory(prefix="pkps-stage-") as folder:
        path = Path(folder) / "rows.parquet"
        pq.write_table(table, path)
        cur.execute(
            f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM read_parquet(?)", [str(path)]
        )
