"""Store files attached to one DuckDB instance per process (``pkps_core.store.host``): each
open is an ATTACH, the last close a DETACH that releases the file to other processes, and
stores open side by side never see each other's tables."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import duckdb
import pandas as pd
import pytest

from pkps_core.store import Store, StoreError, host


def _frame(models: list[str]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": models,
            "task": "t",
            "query_id": [f"q{k}" for k in range(len(models))],
            "query": "What?",
            "response": [f"answer of {m}" for m in models],
            "score": 0.5,
        }
    )


def _attached(path) -> bool | None:
    """None when the file is not attached here, else whether it is read-only."""
    return host.attached_files().get(os.path.realpath(path))


def _other_process_writes(path) -> subprocess.CompletedProcess:
    code = (
        "import duckdb, sys\n"
        "c = duckdb.connect(sys.argv[1])\n"
        "c.execute(\"UPDATE meta SET value = value WHERE key = 'version'\")\n"
        "c.close()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
    )


def test_the_last_close_releases_the_file_to_other_processes(tmp_path):
    path = tmp_path / "a.duckdb"
    first = Store(path)
    second = Store(path)  # the same file in one process: one attachment, shared
    assert _attached(path) is False
    assert len([k for k in host.attached_files() if k == os.path.realpath(path)]) == 1
    first.ingest(_frame(["m1", "m2"]))
    assert second.summary()["responses"] == 2  # the same database, not a copy
    first.close()
    assert _attached(path) is False  # still in use by the second
    held = _other_process_writes(path)
    assert held.returncode != 0 and "lock" in held.stderr.lower(), held.stderr
    second.close()
    assert _attached(path) is None
    assert _other_process_writes(path).returncode == 0
    assert not (tmp_path / "a.duckdb.wal").exists()  # checkpointed at the detach


def test_a_store_opened_per_operation_holds_nothing_between_them(tmp_path):
    path = tmp_path / "b.duckdb"
    store = Store(path, hold=False)
    assert _attached(path) is None
    store.ingest(_frame(["m1"]))
    assert _attached(path) is None
    assert _other_process_writes(path).returncode == 0
    assert store.summary()["responses"] == 1


def test_a_connection_dropped_without_a_close_releases_its_file(tmp_path):
    path = tmp_path / "c.duckdb"
    Store(path).ingest(_frame(["m1"]))  # never closed: dropped at once
    gc.collect()
    assert _attached(path) is None
    assert _other_process_writes(path).returncode == 0


def test_a_reader_shares_a_writer_and_a_writer_is_refused_next_to_a_reader(tmp_path):
    path = tmp_path / "d.duckdb"
    with Store(path) as store:
        store.ingest(_frame(["m1", "m2", "m3"]))
    with Store(path, read_only=True) as reader:
        assert _attached(path) is True
        with pytest.raises(StoreError, match="open read-only; close that reader first"):
            Store(path)
        assert reader.summary()["responses"] == 3
    with Store(path) as writer, Store(path, read_only=True) as reader:
        assert _attached(path) is False  # the reader uses the writer's attachment
        writer.ingest(_frame(["m4"]).assign(query_id="q9"))
        assert reader.summary()["responses"] == 4
    assert _attached(path) is None


def test_stores_open_side_by_side_keep_their_own_tables(tmp_path):
    store_path, other_path = tmp_path / "e.duckdb", tmp_path / "other.duckdb"
    with duckdb.connect(str(other_path)) as other:
        other.execute("CREATE TABLE invoices (id INTEGER)")
    with Store(store_path) as store:
        store.ingest(_frame(["m1", "m2"]))
        # a DuckDB file of other tables is still refused while a store is attached
        # (the check reads the file's own tables, not every attached database's)
        with pytest.raises(StoreError, match="not a Perspective Explorer store"):
            Store(other_path)
        with Store(tmp_path / "f.duckdb") as second:
            second.ingest(_frame(["x"]))
            assert second.summary()["responses"] == 1
            assert store.summary()["responses"] == 2
            assert set(second.records(with_embeddings=False)["model"]) == {"x"}
    assert host.attached_files() == {}
    with duckdb.connect(str(other_path), read_only=True) as other:
        tables = other.execute("SELECT table_name FROM information_schema.tables").fetchall()
    assert tables == [("invoices",)]


def test_a_forked_child_starts_without_the_parents_files(tmp_path):
    path = tmp_path / "g.duckdb"
    with Store(path) as store:
        store.ingest(_frame(["m1"]))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: nothing attached, and its own instance works
            ok = host.attached_files() == {}
            with Store(tmp_path / "child.duckdb") as own:
                own.ingest(_frame(["c"]))
                ok = ok and own.summary()["responses"] == 1
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.waitpid(pid, 0)
        assert answer == b"1"
        assert store.summary()["responses"] == 1


def test_threads_opening_and_closing_at_once_leave_nothing_attached(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    paths = [tmp_path / "h.duckdb", tmp_path / "i.duckdb"]
    for path in paths:
        with Store(path) as store:
            store.ingest(_frame(["m1", "m2"]))

    def read(k: int) -> int:
        # the app's way on one file, readers on the other (a writer next to a reader in
        # one process is refused: the test above)
        store = Store(paths[k % 2], hold=False, read_only=k % 2 == 1)
        return sum(store.summary()["responses"] for _ in range(5))

    with ThreadPoolExecutor(8) as pool:
        totals = list(pool.map(read, range(64)))
    assert totals == [10] * 64
    assert host.attached_files() == {}
    assert all(_other_process_writes(path).returncode == 0 for path in paths)
