"""The :class:`Store` class: one connection to a store file, its ingests and its reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pandas as pd

from pkps_core.records import (
    CANONICAL_COLUMNS,
    RecordsError,
    check_score_range,
    validate_records,
)
from pkps_core.store import host
from pkps_core.store.arrow import (
    _arrow_table,
    _arrow_to_vectors,
    _first_row,
    _stage,
)
from pkps_core.store.embeddings import DEFAULT_EMBEDDER_NAME, _default_embedder, fill_embeddings
from pkps_core.store.ingest import (
    IngestReport,
    _check_embedding_lengths,
    _incoming_table,
    _merge,
)
from pkps_core.store.locks import _write_lock
from pkps_core.store.opening import (
    StoreError,
    check_is_store,
    check_path,
    connect,
    remove_new_paths,
    write_failure,
)
from pkps_core.store.schema import (
    _CONTENT_COLUMNS,
    _EMBEDDING_COLUMNS,
    _SCALAR_COLUMNS,
    _SCHEMA,
    COVERAGE_SQL,
    PAIRED_QUERIES_SQL,
)

if TYPE_CHECKING:
    from pkps_core.embed import TextEmbedder

_VERSION_SQL = "SELECT value FROM meta WHERE key = 'version'"


class Store:
    """A DuckDB file holding responses, their embeddings and a change counter.

    Parameters
    ----------
    path : str or Path
        The database file; it and its folder are created on first use (unless
        ``create=False``). ``":memory:"`` gives a throw-away in-memory store.
    read_only : bool, default=False
        Open an existing store for reading only: any number of processes may read one
        file at once; embeddings missing from it are computed in memory, not stored.
    create : bool, default=True
        False refuses a path with no store (e.g. a mistyped path) instead of creating it.
    wait : float, optional
        Seconds to wait while another process holds the file (default ``PKPS_STORE_WAIT``
        or 30); ``on_wait(message)`` is called once when the wait starts.
    hold : bool, default=True
        Keep the file open until :meth:`close`. False opens it for each operation only
        (the app does this), so other processes can use the file in between.

    Notes
    -----
    All SQL is parameterised; user strings travel only as bound values or as rows staged
    in a temporary table from a Parquet file (:func:`~pkps_core.store.arrow._stage`), never
    as SQL text. One connection per :class:`Store`; each operation runs on its
    own cursor, so a store can be shared across threads (e.g. ``st.cache_resource``). An
    open attaches the file to the process's one DuckDB instance and the last close detaches
    it (:mod:`pkps_core.store.host`: about 1.3 ms where a new instance took 17 ms). Writes
    (ingests, new embeddings) to one file are serialised by a per-file lock
    (:mod:`pkps_core.store.locks`): DuckDB's optimistic concurrency would otherwise abort the
    second of two concurrent ingests ("Conflict on update" of the version counter). Across
    processes DuckDB's file lock lets one writer or many readers hold a file; a process
    that finds it held waits (``wait``) and then fails with one line naming the holder
    (:mod:`pkps_core.store.opening`). A store this object created is removed again when a
    ``with`` block leaves it empty because of an error.

    Examples
    --------
    >>> with Store("data/store.duckdb") as store:          # doctest: +SKIP
    ...     print(store.ingest(frame, source="cache.csv"))
    ...     records = store.records(tasks=["gsm8k"])
    """

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        create: bool = True,
        wait: float | None = None,
        on_wait: Callable[[str], None] | None = None,
        hold: bool = True,
    ) -> None:
        self.path = str(path)
        self.read_only = bool(read_only)
        self._open = {"read_only": self.read_only, "wait": wait, "on_wait": on_wait}
        self._new_paths: list[Path] = []  # file and folders this object created
        if self.path == ":memory:":
            self._connection = duckdb.connect(self.path)
        else:
            if check_path(self.path, create=create and not read_only):
                target = Path(self.path)
                self._new_paths = [target, *[p for p in target.parents if not p.exists()]]
                target.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._connection = connect(
                    self.path, read_only=self.read_only, wait=wait, on_wait=on_wait
                )
                check_is_store(self._connection, self.path)
            except BaseException:
                self._remove_new_paths()
                raise
        self._write_lock = _write_lock(self.path)
        if not self.read_only:
            with self._write_lock, self._cursor() as cur:
                for statement in _SCHEMA:
                    cur.execute(statement)
        if not hold and self.path != ":memory:":
            # Each operation opens the file and closes it again: other processes can
            # read and write between two operations (e.g. an ingest while the app runs).
            host.release(self._connection)
            self._connection = None

    @classmethod
    def connect(cls, path: str | Path) -> Store:
        """Open (creating if needed) the store at ``path``."""
        return cls(path)

    def close(self) -> None:
        """Close the connection; the store cannot be used afterwards."""
        if self._connection is not None:
            host.release(self._connection)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        # A store this object created and left empty because of an error leaves nothing.
        empty = exc_type is not None and self._new_paths and self.summary()["responses"] == 0
        self.close()
        if empty:
            self._remove_new_paths()

    def _remove_new_paths(self) -> None:
        remove_new_paths(self._new_paths)
        self._new_paths = []

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._connection is not None:
            cursor = host.cursor(self._connection)
            try:
                yield cursor
            finally:
                cursor.close()
            return
        connection = connect(self.path, **self._open)
        try:
            yield connection
        finally:
            host.release(connection)

    @property
    def version(self) -> int:
        """Counter bumped by every change to the stored responses."""
        with self._cursor() as cur:
            return int(_first_row(cur, _VERSION_SQL)[0])

    # ------------------------------------------------------------------ ingest

    def ingest(
        self, records: pd.DataFrame, *, source: str = "upload", notes: Sequence[str] = ()
    ) -> IngestReport:
        """Validate ``records`` and merge them into the store in one transaction.

        Parameters
        ----------
        records : DataFrame
            A cache in the canonical schema (see :func:`pkps_core.records.validate_records`).
        source : str, default="upload"
            Label stored with the rows and in the ingest log.
        notes : sequence of str
            The importer's notes, kept in the ingest log (:meth:`ingest_log`).

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
        return self.ingest_many([(records, source, notes)])[0]

    def ingest_many(self, items: Sequence[tuple]) -> list[IngestReport]:
        """Merge several ``(records, source)`` or ``(records, source, notes)`` in one
        transaction: all of them, or (on any error, e.g. a query text conflict in the
        last) none. Raises as :meth:`ingest`."""
        if self.read_only:
            raise StoreError(f"the store {self.path} was opened read-only; it cannot ingest")
        prepared = []
        for records, source, *notes in items:
            # refused before the transaction: nothing is written (issue 37's scale rule)
            frame = check_score_range(validate_records(records))
            dropped = tuple(c for c in frame.columns if c not in CANONICAL_COLUMNS)
            logged = "\n".join(notes[0]) if notes and len(notes[0]) else None
            prepared.append((frame, source, dropped, _incoming_table(frame, source), logged))
        reports = []
        with self._write_lock, self._cursor() as cur:
            cur.execute("BEGIN TRANSACTION")
            try:
                for frame, source, dropped, incoming, logged in prepared:
                    _check_embedding_lengths(cur, frame)
                    _stage(cur, "incoming", incoming)
                    added, replaced, unchanged = _merge(cur, source, logged)
                    cur.execute("DROP TABLE incoming")
                    reports.append(IngestReport(source, added, replaced, unchanged, dropped))
                cur.execute("COMMIT")
            except BaseException as exc:
                with suppress(duckdb.Error):  # a failed COMMIT has already rolled back
                    cur.execute("ROLLBACK")
                if (refusal := write_failure(exc, self.path)) is not None:
                    raise refusal from None
                raise
        return reports

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
            for kind in ("query", "response"):  # the default embedder made only if it embeds
                fill_embeddings(self, frame, kind, embedder)
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

    def has_fitted_embedder(self, kind: str, embedder: TextEmbedder | None = None) -> bool:
        """Whether :meth:`fitted_embedder` would return one, without reading its state
        (tens of MB on a large store)."""
        name = DEFAULT_EMBEDDER_NAME if embedder is None else embedder.name
        with self._cursor() as cur:
            row = _first_row(
                cur, "SELECT count(*) FROM embedders WHERE embedder = ?", [f"{name}|{kind}"]
            )
        return bool(row and row[0])

    def fitted_embedder(
        self, kind: str, embedder: TextEmbedder | None = None
    ) -> TextEmbedder | None:
        """The fitted embedder whose vectors :meth:`records` gives ``kind`` ("query" or
        "response") texts, to embed texts from outside the store alike (a new model's
        upload); None until a read with embeddings has fitted it. Writes nothing."""
        from sklearn.base import clone

        template = _default_embedder() if embedder is None else embedder
        with self._cursor() as cur:
            row = _first_row(
                cur, "SELECT state FROM embedders WHERE embedder = ?", [f"{template.name}|{kind}"]
            )
        return None if row is None else clone(template, safe=False).set_state(bytes(row[0]))

    def reset_embeddings(self) -> None:
        """Drop cached vectors and fitted embedders; the next read refits on all texts."""
        if self.read_only:
            raise StoreError(f"the store {self.path} was opened read-only")
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
            return cur.execute(COVERAGE_SQL).df()

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
            found = cur.execute(PAIRED_QUERIES_SQL, [task, task]).fetchnumpy()
        return _pairedness_frame(found)

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
            # the version through the same open (a DuckDB open costs 25-40 ms)
            version = _first_row(cur, _VERSION_SQL)[0]
        keys = ("models", "tasks", "families", "responses", "scored", "queries")
        out = {k: int(v) for k, v in zip(keys, row, strict=True)}
        out["version"] = int(version)
        return out

    def ingest_log(self) -> pd.DataFrame:
        """One row per successful ingest: source, time, added, replaced, unchanged, notes."""
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


def _pairedness_frame(found: dict) -> pd.DataFrame:
    """:meth:`Store.pairedness` from its (model, query) codes (``PAIRED_QUERIES_SQL``: the
    pairs, then one row per model with its name): shared counts by one sparse product of
    the models × queries incidence matrix with its transpose, rows in name order."""
    from scipy import sparse  # here: opening a store does not need SciPy

    is_name = np.ma.getmaskarray(found["j"])  # NULL query: a model's name row
    i, j = np.ma.getdata(found["i"]), np.ma.getdata(found["j"])
    names = np.asarray(np.ma.getdata(found["model"])[is_name], dtype=object)
    names = names[np.argsort(i[is_name])]
    rows, keys = i[~is_name].astype(np.int64), j[~is_name].astype(np.int64)
    n = len(names)
    incidence = sparse.csr_array(
        (np.ones(len(rows), dtype=np.int64), (rows, keys)),
        shape=(n, int(keys.max()) + 1 if len(keys) else 0),
    )
    shared = (incidence @ incidence.T).toarray().astype(np.int64, copy=False)
    sizes = np.diagonal(shared).copy()  # a model's queries: those it shares with itself
    return pd.DataFrame(
        {
            "model_a": pd.array(np.repeat(names, n), dtype="str"),
            "model_b": pd.array(np.tile(names, n), dtype="str"),
            "n_shared": shared.ravel(),
            "n_queries_a": np.repeat(sizes, n),
            "rho": (shared / sizes[:, None]).ravel() if n else np.zeros(0),
        }
    )
