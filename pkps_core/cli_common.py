"""What the CLI's commands share: opening a store, reading ``--input`` / ``--db``,
checking outputs before the work, the space settings and the interval arguments."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from pkps_core.cli_args import _interval_level
from pkps_core.outputs import check_writable, table_format
from pkps_core.reading import read_records
from pkps_core.records import RecordsError

SELF_PAIRS_HELP = "default: exclude with --targets (budgets differ), else include"


def check_table_outputs(*paths: str | None) -> None:
    """Refuse an output table that cannot be written, before the work that makes it."""
    for path in paths:
        if path:
            check_writable(path)
            table_format(path)


def open_store(path: str, *, read_only: bool):
    """The store at ``path``; a wait for another process is announced on stderr."""
    from pkps_core.store import Store
    from pkps_core.store.opening import announce_on_stderr

    return Store(path, read_only=read_only, create=not read_only, on_wait=announce_on_stderr)


def input_records(args: argparse.Namespace, client=None) -> pd.DataFrame:
    """The records of ``--input`` / ``--db``; a dataset directory with a Dask ``client`` is
    read and embedded on the cluster."""
    if bool(args.input) == bool(args.db):
        raise RecordsError("give exactly one of --input FILE or --db PATH")
    if args.input and Path(args.input).is_dir():
        if client is not None:
            from pkps_core.cli_scale import read_on_cluster

            return read_on_cluster(args.input, client)
        from pkps_core.store.parquet import read_parquet_dataset

        return read_parquet_dataset(args.input)
    if args.input:
        return read_records(args.input)
    with open_store(args.db, read_only=True) as store:
        return store.records()


def space_params(args: argparse.Namespace) -> dict:
    params = {"query_bandwidth": args.bandwidth, "response_kernel": args.response_kernel}
    params |= {"n_components": args.components, "random_state": args.seed}
    return params | ({"self_pairs": args.self_pairs} if args.self_pairs else {})


def interval_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--interval",
        type=_interval_level,
        default=0.9,
        help="level of the conformal intervals in lower/upper, with extrapolation warnings "
        "(default 0.9)",
    )
    group.add_argument(
        "--no-interval",
        dest="interval",
        action="store_const",
        const=None,
        help="skip intervals and warnings (faster; lower/upper stay empty)",
    )
