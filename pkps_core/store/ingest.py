"""Ingest: a validated frame merged into ``responses`` and the report of what changed.

The functions run on the caller's cursor inside its transaction; see
:meth:`pkps_core.store.Store.ingest`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from pkps_core.records import RecordsError
from pkps_core.store.arrow import _first_row, _vectors_to_arrow
from pkps_core.store.schema import _CONTENT_COLUMNS


@dataclass(frozen=True)
class IngestReport:
    """What one :meth:`Store.ingest` did.

    Attributes
    ----------
    source : str
        Label of the ingested input (file name, upload name).
    added : int
        Rows whose (model, task, query_id) was new to the store.
    replaced : int
        Rows that changed an existing (model, task, query_id); the old row is gone.
    unchanged : int
        Rows identical to what the store already held (nothing written).
    dropped_columns : tuple of str
        Input columns outside the canonical schema, not stored.
    """

    source: str
    added: int
    replaced: int
    unchanged: int
    dropped_columns: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = (
            f"{self.source}: {self.added} added, {self.replaced} replaced, "
            f"{self.unchanged} unchanged"
        )
        if self.dropped_columns:
            text += f" (columns not stored: {', '.join(self.dropped_columns)})"
        return text


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text (the same as DuckDB's ``sha256``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _strings(values: pd.Series) -> pa.Array:
    """A text column as an Arrow string array; a ``str`` column hands over its own Arrow
    data instead of a Python object per cell."""
    if isinstance(values.dtype, pd.StringDtype):
        return pa.array(values.array, type=pa.string())
    return pa.array(values.to_numpy(dtype=object), type=pa.string())


def _text_hashes(texts: pa.Array) -> pa.Array:
    """:func:`text_hash` of each text (null stays null), each distinct text hashed once:
    a cache repeats its query texts across models and its responses often."""
    encoded = texts.dictionary_encode()  # null stays a null index
    distinct = encoded.dictionary.to_pylist()
    return pa.array([text_hash(text) for text in distinct], type=pa.string()).take(encoded.indices)


def _incoming_table(frame: pd.DataFrame, source: str) -> pa.Table:
    n = len(frame)
    columns: dict[str, pa.Array] = {}
    for name in ("model", "task", "query_id", "family"):
        columns[name] = _strings(frame[name])
    for name in ("query", "response"):
        texts = _strings(frame[name]) if name in frame.columns else pa.nulls(n, pa.string())
        columns[name] = texts
        columns[f"{name}_hash"] = _text_hashes(texts)
    for name in ("score", "reference_score"):
        values = frame[name].to_numpy(dtype=float) if name in frame.columns else np.full(n, np.nan)
        columns[name] = pa.array(values, type=pa.float64(), from_pandas=True)
    for name in ("query_embedding", "response_embedding"):
        cells = frame[name].tolist() if name in frame.columns else [None] * n
        columns[name] = _vectors_to_arrow(cells)
    columns["source"] = pa.array([source] * n, type=pa.string())
    return pa.table(columns)


def _check_embedding_lengths(cur: duckdb.DuckDBPyConnection, frame: pd.DataFrame) -> None:
    for column in ("query_embedding", "response_embedding"):
        if column not in frame.columns:
            continue
        new_length = int(frame[column].iloc[0].size)
        row = _first_row(
            cur, f"SELECT len({column}) FROM responses WHERE {column} IS NOT NULL LIMIT 1"
        )
        if row is not None and int(row[0]) != new_length:
            raise RecordsError(
                f"column '{column}' has {new_length} values per row but the store holds "
                f"{int(row[0])}-value embeddings; embed with the same model as the stored "
                "rows, or drop the column and let the store embed the text"
            )


def _merge(
    cur: duckdb.DuckDBPyConnection, source: str, notes: str | None = None
) -> tuple[int, int, int]:
    same = " AND ".join(f"i.{c} IS NOT DISTINCT FROM r.{c}" for c in _CONTENT_COLUMNS[3:])
    cur.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE incoming_status AS
        SELECT i.model, i.task, i.query_id,
               CASE WHEN r.model IS NULL THEN 'added'
                    WHEN {same} THEN 'unchanged'
                    ELSE 'replaced' END AS status
        FROM incoming i
        LEFT JOIN responses r USING (model, task, query_id)
        """
    )
    counts = dict(
        cur.execute("SELECT status, count(*) FROM incoming_status GROUP BY status").fetchall()
    )
    added, replaced, unchanged = (int(counts.get(k, 0)) for k in ("added", "replaced", "unchanged"))
    if added + replaced:
        cur.execute(
            """
            DELETE FROM responses r USING incoming_status s
            WHERE s.status = 'replaced'
              AND r.model = s.model AND r.task = s.task AND r.query_id = s.query_id
            """
        )
        columns = ", ".join((*_CONTENT_COLUMNS, "query_hash", "response_hash", "source"))
        cur.execute(
            f"""
            INSERT INTO responses ({columns})
            SELECT {", ".join(f"i.{c}" for c in columns.split(", "))}
            FROM incoming i JOIN incoming_status s USING (model, task, query_id)
            WHERE s.status <> 'unchanged'
            """
        )
        conflict = _first_row(
            cur,
            """
            SELECT task, query_id, count(DISTINCT query) AS n
            FROM responses WHERE query IS NOT NULL
            GROUP BY task, query_id HAVING count(DISTINCT query) > 1
            ORDER BY task, query_id LIMIT 1
            """,
        )
        if conflict is not None:
            task, query_id, n_texts = conflict
            raise RecordsError(
                f"query_id {query_id!r} of task {task!r} would have {n_texts} different "
                "query texts (the store already holds another text for it); a query_id "
                "must keep one text — give the variants distinct query_ids"
            )
        cur.execute("UPDATE meta SET value = value + 1 WHERE key = 'version'")
    cur.execute(
        "INSERT INTO ingests (source, added, replaced, unchanged, notes) VALUES (?, ?, ?, ?, ?)",
        [source, added, replaced, unchanged, notes],
    )
    cur.execute("DROP TABLE incoming_status")
    return added, replaced, unchanged
