"""One DuckDB instance per process, to which store files are attached and detached.

Opening a file with ``duckdb.connect`` makes a database instance, and every instance builds
DuckDB's whole catalog of built-in functions: 16–18 ms of CPU per open on the 2-core
machine, paid two to seven times per click in the app (it opens the store for each
operation, so other processes can use the file in between). Here each process makes one
in-memory instance, once, and a store file is ``ATTACH``-ed to it (about 1.3 ms) and
``DETACH``-ed when its last user is done, which checkpoints and closes the file and
releases DuckDB's file lock exactly as closing its own instance did. Other processes see
the same locks: a file attached for writing is held by this process alone, one attached
read-only may be read by others (``docs/development.md`` has the measurements).

Within the process a file is attached once and shared, as DuckDB's instance cache shared
an instance before: a read-only open of a file attached for writing uses that attachment,
and a write open of a file only attached read-only is refused (DuckDB refused it too: the
same file in one process with another configuration). The connections handed out are
cursors of the instance with the file's database made current (``USE``), so unqualified
table names mean the store's tables. A connection released without :func:`release` (its
last reference dropped) releases its file too, through a ``weakref.finalize``.

The path is bound as a parameter (never SQL text); the alias is this module's own counter.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb


class FileInUseHere(Exception):
    """The file is attached read-only in this process and was asked for writing."""


@dataclass
class _Attached:
    alias: str
    read_only: bool
    users: int = 0


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.host: duckdb.DuckDBPyConnection | None = None
        self.attached: dict[str, _Attached] = {}
        self.finalizers: dict[int, weakref.finalize] = {}
        self.owner: int | None = None  # the thread holding ``lock``
        self.pending: list[str] = []  # releases deferred by the lock's own holder
        self.aliases = itertools.count()
        self.gone = False  # the registry of the process this one was forked from


_REGISTRY = _Registry()


_FORKED_FROM: list[_Registry] = []


def _after_fork_in_child() -> None:
    # the parent's instance (its threads, its file handles) is not this process's: a
    # child makes its own on first use, and holds no file until it attaches one. The
    # parent's registry is kept referenced and marked gone: freeing its DuckDB objects
    # here (without the parent's threads) would crash the child, and a finalizer of an
    # inherited connection must not detach anything.
    global _REGISTRY
    _REGISTRY.gone = True
    _FORKED_FROM.append(_REGISTRY)
    _REGISTRY = _Registry()


os.register_at_fork(after_in_child=_after_fork_in_child)


def attach(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to the store file ``path`` with its database current.

    Raises what DuckDB raises for the file (``duckdb.IOException`` for a lock held by
    another process, a file that is not a DuckDB database, a directory), or
    :class:`FileInUseHere`.
    """
    registry = _REGISTRY
    key = os.path.realpath(path)
    with _holding(registry):
        if registry.host is None:
            registry.host = duckdb.connect(":memory:")
        entry = registry.attached.get(key)
        if entry is None:
            alias = f"pkps_store_{next(registry.aliases)}"
            options = "READ_ONLY, TYPE DUCKDB" if read_only else "TYPE DUCKDB"
            with registry.host.cursor() as cursor:
                cursor.execute(f"ATTACH ? AS {alias} ({options})", [path])
            entry = registry.attached[key] = _Attached(alias, read_only)
        elif entry.read_only and not read_only:
            raise FileInUseHere(key)
        connection = registry.host.cursor()
        connection.execute(f"USE {entry.alias}")
        entry.users += 1
        registry.finalizers[id(connection)] = weakref.finalize(
            connection, _released, registry, key, id(connection)
        )
    return connection


def cursor(connection: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A new cursor of ``connection`` on the same database (for another thread)."""
    current = connection.execute("SELECT current_database()").fetchone()[0]
    new = connection.cursor()
    if current != "memory":
        new.execute(f"USE {_quoted(current)}")
    return new


def release(connection: duckdb.DuckDBPyConnection) -> None:
    """Close ``connection``; its file is detached when it was the file's last user."""
    registry = _REGISTRY
    finalizer = registry.finalizers.pop(id(connection), None)
    connection.close()
    if finalizer is not None:
        finalizer()


def attached_files() -> dict[str, bool]:
    """The files attached in this process, each with whether it is read-only."""
    return {key: entry.read_only for key, entry in _REGISTRY.attached.items()}


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


@contextmanager
def _holding(registry: _Registry) -> Iterator[None]:
    """The registry's lock; releases deferred while it is held (a connection collected
    inside the region, on this thread) are done before it is let go."""
    with registry.lock:
        registry.owner = threading.get_ident()
        try:
            yield
        finally:
            while registry.pending:
                _detach_one(registry, registry.pending.pop())
            registry.owner = None


def _released(registry: _Registry, key: str, connection_id: int) -> None:
    # called once per connection: by release(), or when the connection is collected,
    # which may happen on the thread that holds the lock, inside the locked region: that
    # release waits for the region's end instead of for the lock (it would never come)
    registry.finalizers.pop(connection_id, None)
    if registry.gone:
        return
    if registry.owner == threading.get_ident():
        registry.pending.append(key)
        return
    with _holding(registry):
        _detach_one(registry, key)


def _detach_one(registry: _Registry, key: str) -> None:
    entry = registry.attached.get(key)
    if entry is None:
        return
    entry.users -= 1
    if entry.users > 0 or registry.host is None:
        return
    del registry.attached[key]
    with registry.host.cursor() as cursor:
        try:
            cursor.execute(f"DETACH {entry.alias}")
        except duckdb.IOException as exc:
            # Detached, but its closing checkpoint could not be written (a full disk):
            # the committed changes stay in the file's WAL, replayed at the next open,
            # as when a DuckDB instance of its own closed on a full disk (which says
            # nothing). Anything else is raised.
            if "CHECKPOINT during DETACH failed" not in str(exc):
                raise
