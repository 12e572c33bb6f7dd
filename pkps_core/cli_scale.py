"""The command line's scale-out parts: ``--engine dask --scheduler ADDRESS`` for
``predict`` / ``evaluate`` (a progress bar and the dashboard link on stderr), and
``export --db STORE --to-parquet DIR`` (a Parquet dataset partitioned by task, which
``--input DIR`` reads: on the cluster, embedding included, with ``--engine dask``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator

BAR_WIDTH = 30


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=["local", "dask"],
        default="local",
        help="where the kernel sums run: this process or a Dask cluster",
    )
    parser.add_argument(
        "--scheduler",
        help="Dask scheduler address, e.g. tcp://host:8786 (default $PKPS_DASK_SCHEDULER)",
    )


def _progress_line(done: int, total: int, label: str) -> None:
    filled = BAR_WIDTH * done // max(total, 1)
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    end = "\n" if done == total else ""
    print(f"\r  [{bar}] {done}/{total} tasks: {label}", end=end, file=sys.stderr, flush=True)


@contextlib.contextmanager
def engine_session(args: argparse.Namespace) -> Iterator[dict]:
    """The space parameters of the chosen engine, with the cluster connected meanwhile."""
    if getattr(args, "engine", "local") != "dask":
        yield {}
        return
    from pkps_core.space.dask_engine import SCHEDULER_ENV, connect, reporting_progress

    address = args.scheduler or os.environ.get(SCHEDULER_ENV)
    if not address:
        raise ValueError(
            f"--engine dask needs --scheduler tcp://host:8786 or {SCHEDULER_ENV}; start a "
            "cluster with `dask scheduler` and `dask worker tcp://HOST:8786`"
        )
    client = connect(address)
    try:
        workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        print(f"dask: {workers} worker(s) at {address}", file=sys.stderr)
        if client.dashboard_link:
            print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
        with reporting_progress(_progress_line):
            yield {"engine": "dask", "client": client}
    finally:
        client.close()


def read_on_cluster(directory: str, client):
    """A dataset directory read and embedded on the cluster, with a progress line."""
    from pkps_core.space.dask_inputs import read_dataset_on_cluster

    started = time.perf_counter()
    records = read_dataset_on_cluster(directory, client, progress=_progress_line)
    print(
        f"dask: read and embedded {len(records):,} records on the cluster in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )
    return records


def add_export_parser(sub) -> None:
    export = sub.add_parser(
        "export", help="write a store's records as a Parquet dataset partitioned by task"
    )
    export.add_argument("--db", required=True, help="a store made by `ingest`")
    export.add_argument("--to-parquet", required=True, metavar="DIR", help="dataset directory")
    export.set_defaults(run=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from pkps_core.store import Store
    from pkps_core.store.opening import announce_on_stderr
    from pkps_core.store.parquet import check_export_target, export_parquet

    check_export_target(args.to_parquet)  # before the store is read
    started = time.perf_counter()
    with Store(args.db, read_only=True, create=False, on_wait=announce_on_stderr) as store:
        records = store.records()
    files = export_parquet(records, args.to_parquet)
    print(
        f"wrote {len(records)} responses of {records['task'].nunique()} tasks to "
        f"{args.to_parquet} ({files} Parquet files, {time.perf_counter() - started:.1f} s)"
    )
    return 0
