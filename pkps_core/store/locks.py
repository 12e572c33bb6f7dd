"""Per-file write locks: one per process and database file, held by every writer to it.

Why writers must wait for each other is in the Notes of :class:`pkps_core.store.Store`.
"""

from __future__ import annotations

import threading
from pathlib import Path

_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.RLock:
    """The lock every writer to the database file ``path`` holds (one per process and file:
    two :class:`Store` objects on one file share DuckDB's database instance)."""
    if path == ":memory:":
        return threading.RLock()
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(str(Path(path).resolve()), threading.RLock())
