"""What one store operation costs to open and close the file, as the app does per operation.

Run from the repository root (a few seconds)::

    PYTHONPATH=. .venv/bin/python bench/store_opens.py [--repeats 200]

Times, on a copy of the demo store: a ``duckdb.connect`` of the file with one query and its
close (a DuckDB instance per open: how every store operation opened the file before
``pkps_core.store.host``), the same on an in-memory database, and ``Store.version`` and
``Store.summary`` of a store opened per operation (``hold=False``, the app's way: the file
attached to the process's one instance and detached again). Prints one Markdown table of
milliseconds of CPU and wall per operation (medians of ``--rounds`` rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _per_call(work: Callable[[], object], repeats: int) -> tuple[float, float]:
    work()  # warm
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        work()
    return (
        1000 * (time.process_time() - cpu) / repeats,
        1000 * (time.perf_counter() - wall) / repeats,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    import duckdb

    from pkps_core.demo import ensure_demo_store
    from pkps_core.store import Store

    with tempfile.TemporaryDirectory() as folder:
        path = str(ensure_demo_store(Path(folder) / "demo.duckdb"))

        def instance_per_open() -> None:
            connection = duckdb.connect(path, read_only=False)
            connection.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            connection.close()

        def in_memory_instance() -> None:
            duckdb.connect(":memory:").close()

        store = Store(path, hold=False)
        cases = {
            "`duckdb.connect(file)`, one query, close (an instance per open: before)": (
                instance_per_open
            ),
            "`duckdb.connect(':memory:')`, close (an instance alone)": in_memory_instance,
            "`Store(hold=False).version` (attach, one query, detach: now)": lambda: store.version,
            "`Store(hold=False).summary()` (the same, one read)": store.summary,
        }
        rows = []
        for label, work in cases.items():
            runs = [_per_call(work, args.repeats) for _ in range(args.rounds)]
            rows.append(
                (
                    label,
                    statistics.median(r[0] for r in runs),
                    statistics.median(r[1] for r in runs),
                )
            )
    print("| operation | CPU ms | wall ms |")
    print("|---|---|---|")
    for label, cpu, wall in rows:
        print(f"| {label} | {cpu:.2f} | {wall:.2f} |")


if __name__ == "__main__":
    main()
