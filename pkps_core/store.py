"""The response store: one DuckDB file holding a validated cache and its embeddings.

Tables
------
``responses``
    One row per (model, task, query_id) in the canonical schema, plus the sha256 of the
    query and response texts and the source the row came from.
``embeddings``
    Vectors keyed by (text sha256, embedder key), where the key is the embedder's
    ``name`` and the column kind (query / response): nothing is embedded twice.
``embedders``
    The fitted state of each embedder key. A TF-IDF/SVD basis depends on the corpus it
    was fit on, so the store fits once (on every distinct text of that kind in the store
    at that moment) and later embeds only new texts into the same space.
    :meth:`Store.reset_embeddings` drops both tables to refit on the current corpus.
``ingests``
    One row per successful ingest with its counts.
``meta``
    ``version``: a counter bumped by every change to ``responses`` (the app's cache key).

All SQL is parameterised; user strings travel only as bound values or registered Arrow
tables, never as SQL text. One connection per :class:`Store`; each operation runs on its
own cursor, so a store can be shared across threads (e.g. ``st.cache_resource``). Writes
(ingests, new embeddings) to one file are serialised by a per-file lock: DuckDB's
optimistic concurrency would otherwise abort the second of two concurrent ingests
("Conflict on update" of the version counter). Other processes cannot open a file that
one process holds open for writing (DuckDB's file lock).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
from sklearn.base import clone

from pkps_core.embed import TextEmbedder, default_embedder
from pkps_core.records import CANONICAL_COLUMNS, RecordsError, validate_records

_SCALAR_COLUMNS = ("query", "response", "score", "reference_score")
_EMBEDDING_COLUMNS = ("query_embedding", "response_embedding")
_CONTENT_COLUMNS = CANONICAL_COLUMNS  # the canonical schema, in its order
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value BIGINT NOT NULL)
    """,
    """
    CREATE TABLE IF NOT EXISTS responses (
        model VARCHAR NOT NULL,
        task VARCHAR NOT NULL,
        query_id VARCHAR NOT NULL,
        query VARCHAR,
        response VARCHAR,
        score DOUBLE,
        family VARCHAR NOT NULL,
        reference_score DOUBLE,
        query_embedding DOUBLE[],
        response_embedding DOUBLE[],
        query_hash VARCHAR,
        response_hash VARCHAR,
        source VARCHAR,
        PRIMARY KEY (model, task, query_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS embeddings (
        text_hash VARCHAR NOT NULL,
        embedder VARCHAR NOT NULL,
        vector DOUBLE[] NOT NULL,
        PRIMARY KEY (text_hash, embedder)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS embedders (
        embedder VARCHAR PRIMARY KEY,
        state BLOB NOT NULL,
        n_texts BIGINT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS ingests (
        source VARCHAR,
        ingested_at TIMESTAMP DEFAULT current_timestamp,
        added BIGINT,
        replaced BIGINT,
        unchanged BIGINT
    )
    """,
    "INSERT INTO meta VALUES ('version', 0) ON CONFLICT DO NOTHING",
)


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


_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.RLock:
    """The lock every writer to the database file ``path`` holds (one per process and file:
    two :class:`Store` objects on one file share DuckDB's database instance)."""
    if path == ":memory:":
        return threading.RLock()
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(str(Path(path).resolve()), threading.RLock())


def text_hash(text: str) -> str:
    """sha256 hex digest of the UTF-8 text (the same as DuckDB's ``sha256``)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class Store:
    """A DuckDB file holding responses, their embeddings and a change counter.

    Parameters
    ----------
    path : str or Path
        The database file; it and its folder are created on first use. ``":memory:"``
        gives a throw-away in-memory store.

    Examples
    --------
    >>> with Store("data/store.duckdb") as store:          # doctest: +SKIP
    ...     print(store.ingest(frame, source="cache.csv"))
    ...     records = store.records(tasks=["gsm8k"])
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._connection = duckdb.connect(self.path)
        self._write_lock = _write_lock(self.path)
        with self._write_lock, self._cursor() as cur:
            for statement in _SCHEMA:
                cur.execute(statement)

    @classmethod
    def connect(cls, path: str | Path) -> Store:
        """Open (creating if needed) the store at ``path``."""
        return cls(path)

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        self._connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        cursor = self._connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()

    @property
    def version(self) -> int:
        """Counter bumped by every change to the stored responses."""
        with self._cursor() as cur:
            return int(_first_row(cur, "SELECT value FROM meta WHERE key = 'version'")[0])

    # ------------------------------------------------------------------ ingest

    def ingest(self, records: pd.DataFrame, *, source: str = "upload") -> IngestReport:
        """Validate ``records`` and merge them into the store in one transaction.

        Parameters
        ----------
        records : DataFrame
            A cache in the canonical schema (see :func:`pkps_core.records.validate_records`).
        source : str, default="upload"
            Label stored with the rows and in the ingest log.

        Returns
        -------
        IngestReport
            How many rows were added, replaced or already present unchanged.

        Raises
        ------
        RecordsError
            The input breaks the schema, its embeddings differ in length from those
            already stored, or it gives a stored (task, query_id) a second query text.
            The store is left exactly as it was.
        """
        frame = validate_records(records)
        dropped = tuple(c for c in frame.columns if c not in CANONICAL_COLUMNS)
        incoming = self._incoming_table(frame, source)
        with self._write_lock, self._cursor() as cur:
            self._check_embedding_lengths(cur, frame)
            cur.register("incoming", incoming)
            cur.execute("BEGIN TRANSACTION")
            try:
                counts = self._merge(cur, source)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                cur.unregister("incoming")
        added, replaced, unchanged = counts
        return IngestReport(source, added, replaced, unchanged, dropped)

    @staticmethod
    def _incoming_table(frame: pd.DataFrame, source: str) -> pa.Table:
        n = len(frame)
        columns: dict[str, pa.Array] = {}
        for name in ("model", "task", "query_id", "family"):
            columns[name] = pa.array(frame[name].tolist(), type=pa.string())
        for name in ("query", "response"):
            values = frame[name].tolist() if name in frame.columns else [None] * n
            columns[name] = pa.array(values, type=pa.string())
            columns[f"{name}_hash"] = pa.array(
                [None if v is None else text_hash(v) for v in values], type=pa.string()
            )
        for name in ("score", "reference_score"):
            values = (
                frame[name].to_numpy(dtype=float) if name in frame.columns else np.full(n, np.nan)
            )
            columns[name] = pa.array(values, type=pa.float64(), from_pandas=True)
        for name in ("query_embedding", "response_embedding"):
            cells = frame[name].tolist() if name in frame.columns else [None] * n
            columns[name] = _vectors_to_arrow(cells)
        columns["source"] = pa.array([source] * n, type=pa.string())
        return pa.table(columns)

    @staticmethod
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

    @staticmethod
    def _merge(cur: duckdb.DuckDBPyConnection, source: str) -> tuple[int, int, int]:
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
        added, replaced, unchanged = (
            int(counts.get(k, 0)) for k in ("added", "replaced", "unchanged")
        )
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
            "INSERT INTO ingests (source, added, replaced, unchanged) VALUES (?, ?, ?, ?)",
            [source, added, replaced, unchanged],
        )
        cur.execute("DROP TABLE incoming_status")
        return added, replaced, unchanged

    # ------------------------------------------------------------------ reading

    def records(
        self,
        models: Sequence[str] | None = None,
        tasks: Sequence[str] | None = None,
        *,
        with_embeddings: bool = True,
        embedder: TextEmbedder | None = None,
    ) -> pd.DataFrame:
        """The stored responses as a validated canonical frame.

        Parameters
        ----------
        models, tasks : sequence of str, optional
            Keep only these models / tasks (default: all).
        with_embeddings : bool, default=True
            Add ``query_embedding`` / ``response_embedding``: precomputed vectors where the
            whole selection has them, otherwise vectors of the text from the cache,
            embedding (and caching) only texts not embedded before.
        embedder : TextEmbedder, optional
            Default :class:`pkps_core.embed.TfidfSvdEmbedder`.

        Returns
        -------
        DataFrame
            Sorted by model, task, query_id. Columns that are empty for the whole
            selection (e.g. ``reference_score`` never given) are left out.

        Raises
        ------
        RecordsError
            Nothing matches the selection, or it mixes rows with precomputed embeddings
            and rows without (neither text for all rows nor vectors for all rows).
        """
        frame = self._select(models, tasks)
        if with_embeddings:
            template = default_embedder() if embedder is None else embedder
            for kind in ("query", "response"):
                self._fill_embeddings(frame, kind, template)
        # A column empty for the whole selection was never given; a partly empty
        # embedding column cannot be used (validate_records would reject it).
        absent = [c for c in _SCALAR_COLUMNS if frame[c].isna().all()]
        absent += [c for c in _EMBEDDING_COLUMNS if frame[c].isna().any()]
        return validate_records(frame.drop(columns=[*absent, "query_hash", "response_hash"]))

    def _select(self, models: Sequence[str] | None, tasks: Sequence[str] | None) -> pd.DataFrame:
        conditions, params = [], []
        if models is not None:
            conditions.append("list_contains(?, model)")
            params.append([str(m) for m in models])
        if tasks is not None:
            conditions.append("list_contains(?, task)")
            params.append([str(t) for t in tasks])
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        columns = ", ".join((*_CONTENT_COLUMNS, "query_hash", "response_hash"))
        with self._cursor() as cur:
            table = _arrow_table(
                cur,
                f"SELECT {columns} FROM responses {where} ORDER BY model, task, query_id",
                params,
            )
        if table.num_rows == 0:
            chosen = [f"models {list(models)}"] if models is not None else []
            chosen += [f"tasks {list(tasks)}"] if tasks is not None else []
            raise RecordsError(
                f"no stored responses for {' and '.join(chosen) or 'the store'}; ingest data "
                "first or check the names against Store.coverage()"
            )
        frame = table.drop_columns(list(_EMBEDDING_COLUMNS)).to_pandas()
        for column in _EMBEDDING_COLUMNS:
            frame[column] = pd.Series(_arrow_to_vectors(table.column(column)), dtype=object)
        return frame

    def _fill_embeddings(self, frame: pd.DataFrame, kind: str, template: TextEmbedder) -> None:
        column, hashes = f"{kind}_embedding", frame[f"{kind}_hash"]
        has_vector = frame[column].notna()
        if has_vector.all() or hashes.isna().all():
            return
        if has_vector.any() and hashes.isna().any():
            raise RecordsError(
                f"the selection mixes rows with precomputed {column} "
                f"({int(has_vector.sum())} rows) and rows with neither vectors nor {kind} "
                f"text ({int((~has_vector & hashes.isna()).sum())} rows); select models/tasks "
                "of one kind or re-ingest the missing embeddings"
            )
        if hashes.isna().any():
            # Text for some rows only: embeddings from text cannot cover the selection.
            return
        vectors = self._embed_hashes(kind, frame, template)
        frame[column] = [vectors[h] for h in hashes]

    def _embed_hashes(
        self, kind: str, frame: pd.DataFrame, template: TextEmbedder
    ) -> dict[str, np.ndarray]:
        key = f"{template.name}|{kind}"
        wanted = frame.drop_duplicates(f"{kind}_hash")
        wanted_hashes = pa.table({"text_hash": pa.array(wanted[f"{kind}_hash"].tolist())})
        # Under the write lock: two sessions embedding the same new texts would otherwise
        # both fit an embedder and insert the same keys.
        with self._write_lock, self._cursor() as cur:
            cur.register("wanted", wanted_hashes)
            cached = _arrow_table(
                cur,
                """
                SELECT e.text_hash, e.vector FROM embeddings e
                JOIN wanted w USING (text_hash) WHERE e.embedder = ?
                """,
                [key],
            )
            cur.unregister("wanted")
            vectors = dict(
                zip(
                    cached.column("text_hash").to_pylist(),
                    _arrow_to_vectors(cached.column("vector")),
                    strict=True,
                )
            )
            missing = wanted[~wanted[f"{kind}_hash"].isin(vectors)]
            if missing.empty:
                return vectors
            embedder = self._fitted_embedder(cur, key, kind, template)
            new = embedder.transform(missing[kind].tolist())
            rows = pa.table(
                {
                    "text_hash": pa.array(missing[f"{kind}_hash"].tolist(), type=pa.string()),
                    "embedder": pa.array([key] * len(missing), type=pa.string()),
                    "vector": _vectors_to_arrow(list(new)),
                }
            )
            cur.register("new_vectors", rows)
            cur.execute("INSERT OR IGNORE INTO embeddings SELECT * FROM new_vectors")
            cur.unregister("new_vectors")
        vectors.update(zip(missing[f"{kind}_hash"], new, strict=True))
        return vectors

    @staticmethod
    def _fitted_embedder(
        cur: duckdb.DuckDBPyConnection, key: str, kind: str, template: TextEmbedder
    ) -> TextEmbedder:
        embedder = clone(template, safe=False)
        row = _first_row(cur, "SELECT state FROM embedders WHERE embedder = ?", [key])
        if row is not None:
            return embedder.set_state(bytes(row[0]))
        corpus = [
            text
            for (text,) in cur.execute(
                f"SELECT DISTINCT {kind} FROM responses WHERE {kind} IS NOT NULL ORDER BY {kind}"
            ).fetchall()
        ]
        embedder.fit(corpus)
        cur.execute(
            "INSERT INTO embedders VALUES (?, ?, ?)", [key, embedder.get_state(), len(corpus)]
        )
        return embedder

    def reset_embeddings(self) -> None:
        """Drop cached vectors and fitted embedders; the next read refits on all texts."""
        with self._write_lock, self._cursor() as cur:
            cur.execute("BEGIN TRANSACTION")
            cur.execute("DELETE FROM embeddings")
            cur.execute("DELETE FROM embedders")
            cur.execute("COMMIT")

    # ------------------------------------------------------------------ statistics

    def coverage(self) -> pd.DataFrame:
        """Responses per observed (model, task) cell, as a tidy frame.

        Returns
        -------
        DataFrame
            Columns ``model, task, n_responses, n_scored, sample_score`` (the mean of the
            observed scores), one row per cell with responses; sorted by model, task.
            Cells without responses are absent.
        """
        with self._cursor() as cur:
            return cur.execute(
                """
                SELECT model, task, count(*) AS n_responses, count(score) AS n_scored,
                       avg(score) AS sample_score
                FROM responses GROUP BY model, task ORDER BY model, task
                """
            ).df()

    def pairedness(self, task: str | None = None) -> pd.DataFrame:
        """Shared-query fraction ρ between every ordered pair of models, in SQL.

        Parameters
        ----------
        task : str, optional
            Restrict to one task. Default: pooled over tasks, where a query is a
            (task, query_id) pair.

        Returns
        -------
        DataFrame
            Columns ``model_a, model_b, n_shared, n_queries_a, rho`` with
            ``rho = n_shared / n_queries_a`` (the fraction of model_a's queries that
            model_b also answered; not symmetric). Every ordered pair of models with
            responses in the selection appears, including ``rho = 0`` and the diagonal
            (``rho = 1``).
        """
        with self._cursor() as cur:
            return cur.execute(
                """
                WITH q AS (
                    SELECT DISTINCT model, task, query_id FROM responses
                    WHERE ?::VARCHAR IS NULL OR task = ?::VARCHAR
                ),
                sizes AS (SELECT model, count(*) AS n_queries FROM q GROUP BY model),
                shared AS (
                    SELECT a.model AS model_a, b.model AS model_b, count(*) AS n_shared
                    FROM q a JOIN q b ON a.task = b.task AND a.query_id = b.query_id
                    GROUP BY a.model, b.model
                )
                SELECT sa.model AS model_a, sb.model AS model_b,
                       coalesce(s.n_shared, 0) AS n_shared,
                       sa.n_queries AS n_queries_a,
                       coalesce(s.n_shared, 0) / sa.n_queries AS rho
                FROM sizes sa CROSS JOIN sizes sb
                LEFT JOIN shared s ON s.model_a = sa.model AND s.model_b = sb.model
                ORDER BY model_a, model_b
                """,
                [task, task],
            ).df()

    def summary(self) -> dict[str, int]:
        """Counts: models, tasks, families, responses, scored responses, queries, version."""
        with self._cursor() as cur:
            row = _first_row(
                cur,
                """
                SELECT count(DISTINCT model), count(DISTINCT task), count(DISTINCT family),
                       count(*), count(score), count(DISTINCT (task, query_id))
                FROM responses
                """,
            )
        keys = ("models", "tasks", "families", "responses", "scored", "queries")
        out = {k: int(v) for k, v in zip(keys, row, strict=True)}
        out["version"] = self.version
        return out

    def ingest_log(self) -> pd.DataFrame:
        """One row per successful ingest: source, time, added, replaced, unchanged."""
        with self._cursor() as cur:
            return cur.execute("SELECT * FROM ingests ORDER BY ingested_at").df()

    def content_hash(self) -> str:
        """sha256 over every stored response row (canonical columns, key order)."""
        columns = ", ".join(f"{c} := {c}" for c in _CONTENT_COLUMNS)
        with self._cursor() as cur:
            digest = _first_row(
                cur,
                f"""
                SELECT sha256(coalesce(string_agg(to_json(struct_pack({columns})), chr(10)
                                       ORDER BY model, task, query_id), ''))
                FROM responses
                """,
            )[0]
        return str(digest)
