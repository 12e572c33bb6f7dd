"""Opening a store file: refusals in one line, read-only readers, a bounded wait for a lock.

DuckDB lets one process hold a database file for writing, or any number of processes hold
it read-only; a second process that asks while a writer holds it gets a lock error at once.
:func:`connect` turns that into a bounded wait (``wait`` seconds, default
:data:`DEFAULT_WAIT` or the ``PKPS_STORE_WAIT`` environment variable), announced once
through ``on_wait``, and then one line naming the process that holds the file. A path that
is a directory, a file that is not a DuckDB database, or a DuckDB database that is not a
store is refused with a :class:`StoreError` before anything is written.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from pkps_core.records import RecordsError
from pkps_core.store import host

DEFAULT_WAIT = 30.0
"""Seconds a command waits for another process to release a store file."""

POLL_SECONDS = 0.2
STORE_TABLES = frozenset({"meta", "responses"})
"""Tables whose presence makes a DuckDB file a store (``schema`` creates them)."""


class StoreError(RecordsError):
    """A store file cannot be opened: wrong kind of file, missing, or held by another
    process for longer than the wait."""


def announce_on_stderr(message: str) -> None:
    """The commands' ``on_wait``: the one "waiting for …" line, on stderr."""
    print(message, file=sys.stderr, flush=True)


def default_wait() -> float:
    """``PKPS_STORE_WAIT`` (seconds) if set to a number ≥ 0, else :data:`DEFAULT_WAIT`."""
    text = os.environ.get("PKPS_STORE_WAIT", "").strip()
    if not text:
        return DEFAULT_WAIT
    try:
        value = float(text)
    except ValueError:
        raise StoreError(f"PKPS_STORE_WAIT must be a number of seconds, got {text!r}") from None
    if value < 0:
        raise StoreError(f"PKPS_STORE_WAIT must be ≥ 0 seconds, got {text!r}")
    return value


def _holder(message: str) -> str:
    """'process 1234' from DuckDB's lock message, or 'another process'."""
    match = re.search(r"PID (\d+)", message)
    return f"process {match.group(1)}" if match else "another process"


def _is_lock_error(message: str) -> bool:
    return "Could not set lock" in message or "Conflicting lock" in message


def check_path(path: str, *, create: bool) -> bool:
    """Refuse a directory, or a missing file when it may not be created; True when the
    file does not exist yet (the caller creates it)."""
    target = Path(path)
    if target.is_dir():
        raise StoreError(
            f"{path} is a directory, not a store file; give a file path such as "
            f"{target / 'store.duckdb'}"
        )
    if target.exists():
        return False
    if not create:
        raise StoreError(f"no store at {path}; create one with `ingest FILE --db {path}`")
    return True


def connect(
    path: str,
    *,
    read_only: bool = False,
    wait: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the existing or new store file ``path``.

    ``read_only`` opens an existing file read-only (several processes may read at once);
    within one process that already holds the file read-write, the connection shares that
    attachment (:mod:`pkps_core.store.host`: one DuckDB instance per process, the file
    attached to it; release the connection with :func:`pkps_core.store.host.release`). A
    lock held by another process is waited for up to ``wait`` seconds (None:
    :func:`default_wait`), calling ``on_wait(message)`` once when the wait starts.

    Raises
    ------
    StoreError
        ``path`` is not a DuckDB database, not a store, or still locked after ``wait``.
    """
    limit = default_wait() if wait is None else float(wait)
    started = time.monotonic()
    announced = False
    while True:
        try:
            return host.attach(path, read_only)
        except host.FileInUseHere:
            raise StoreError(
                f"cannot open the store {path} for writing: this process has it open "
                "read-only; close that reader first"
            ) from None
        except duckdb.IOException as exc:
            message = str(exc)
            if _is_os_failure(exc):
                raise StoreError(
                    f"cannot write the store {path}: {_first_line(exc)}; free some disk "
                    "space and retry"
                ) from None
            if not read_only and any(m in message for m in _NO_PERMISSION):
                raise StoreError(
                    f"cannot open the store {path} for writing: {_first_line(exc)}; this "
                    "command writes to it (readers such as info and report open it "
                    "read-only): use a copy you can write, or change the file's permissions"
                ) from None
            if not _is_lock_error(message):
                raise StoreError(
                    f"{path} is not a DuckDB store file ({_first_line(exc)}); give a store "
                    "made by `ingest`, or a new file name"
                ) from None
            waited = time.monotonic() - started
            if waited >= limit:
                raise StoreError(
                    f"the store {path} is in use by {_holder(message)} (waited {waited:.0f} s); "
                    "try again when it is done, or set PKPS_STORE_WAIT to wait longer"
                ) from None
            if not announced and on_wait is not None:
                on_wait(
                    f"waiting for {_holder(message)} to release the store {path} "
                    f"(up to {limit:.0f} s)…"
                )
                announced = True
            time.sleep(POLL_SECONDS)
        except duckdb.Error as exc:
            raise StoreError(f"cannot open the store {path}: {_first_line(exc)}") from None


def check_is_store(connection: duckdb.DuckDBPyConnection, path: str) -> None:
    """Refuse a DuckDB database that holds tables but not a store's (nothing is added)."""
    tables = {
        name
        for (name,) in connection.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema = 'main'"
        ).fetchall()
    }
    if tables and not STORE_TABLES <= tables:
        host.release(connection)
        shown = ", ".join(sorted(tables)[:5])
        raise StoreError(
            f"{path} is a DuckDB database but not a Perspective Explorer store (its tables: "
            f"{shown}); give a store made by `ingest`, or a new file name"
        )


def remove_new_paths(paths: list[Path]) -> None:
    """Remove a store file (and its WAL) and the folders made for it, as far as empty."""
    for path in paths:
        for leftover in (path, path.with_name(path.name + ".wal")):
            if leftover.is_file():
                leftover.unlink()
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()


_NO_PERMISSION = ("Permission denied", "Operation not permitted", "Read-only file system")


def _is_os_failure(exc: duckdb.Error) -> bool:
    """A DuckDB error that is the machine's (disk full, file-size limit, no memory), not
    the data's."""
    if isinstance(exc, duckdb.OutOfMemoryException):
        return True
    markers = ("Could not write", "No space left", "File too large", "out of memory")
    return any(marker in str(exc) for marker in markers)


def write_failure(exc: BaseException, path: str) -> StoreError | None:
    """The one-line error for a write the machine refused (disk full, file-size limit, no
    memory) during an ingest, or None for any other error."""
    if isinstance(exc, duckdb.Error) and _is_os_failure(exc):
        return StoreError(
            f"cannot write the store {path}: {_first_line(exc)}; free some disk space (or "
            "memory) and retry — nothing was ingested"
        )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
