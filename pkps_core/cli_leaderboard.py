"""``python -m pkps_core leaderboard``: the completed model × task table of a store.

Fills the cells not observed (:func:`pkps_core.leaderboard.fill_method`): on a thin store
of graded scores with the additive logit model, else with the store's fitted reference
predictor (fitting and keeping it first when there is none or it is stale, with progress
on stderr; every model with a cell not observed placed) — or reads the table kept in the
store when the store has not changed since it was built (by ``fit`` or an earlier run) —
and writes one row per model:
``overall``, ``lower``, ``upper``, ``rank``, ``rank_lower``, ``rank_upper``,
``observed_fraction`` and per task its value, kind and interval
(:meth:`pkps_core.leaderboard.Leaderboard.wide`) as CSV or Parquet, or a self-contained
HTML page.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pkps_core.cli_fit import progress_on_stderr
from pkps_core.outputs import OutputError, check_writable, table_format, write_table, write_text

FORMATS = (".csv", ".parquet", ".pq", ".html")


def output_kind(path: str) -> str:
    """``csv``, ``parquet`` or ``html`` from the name (:class:`OutputError` otherwise)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".html":
        return "html"
    if suffix not in FORMATS:
        raise OutputError(f"output {path}: unknown file type; use .csv, .parquet or .html")
    return table_format(path)


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from pkps_core.leaderboard import cell_kinds, fill_method, stored_leaderboard
    from pkps_core.leaderboard_html import leaderboard_html
    from pkps_core.predictor import StaleFit, stored_predictor
    from pkps_core.records import RecordsError
    from pkps_core.store import Store
    from pkps_core.store.opening import announce_on_stderr

    if not Path(args.db).is_file():
        raise RecordsError(f"no store at {args.db}; create one with `ingest`")
    kind = output_kind(args.out)
    check_writable(args.out)
    started = time.perf_counter()
    params = {"holdout": args.holdout, "random_state": args.seed}
    with Store(args.db, on_wait=announce_on_stderr) as store:
        # the table `fit` kept (or an earlier run of this command) when the store has not
        # changed since; else built, and kept for the next reader
        board = stored_leaderboard(store, compute=False, level=args.level, **params)
        read = board is not None
        if board is None:
            records = store.records()
            if not len(records):
                raise RecordsError(
                    f"the store {args.db} holds no responses; `ingest` a cache first"
                )
            kinds = cell_kinds(records)
            open_cells = bool((kinds["kind"] != "observed").any())
            predictor = None
            try:
                if open_cells and fill_method(kinds, records) == "predictor":
                    predictor = stored_predictor(
                        store,
                        fit="if-stale" if args.fit else "never",
                        records=records,
                        progress=progress_on_stderr,
                        **params,
                    )
            except StaleFit as exc:
                raise RecordsError(str(exc)) from None
            board = stored_leaderboard(
                store,
                refresh=True,
                level=args.level,
                records=records,
                predictor=predictor,
                progress=progress_on_stderr,
                **params,
            )
    wide = board.wide()
    if kind == "html":
        write_text(args.out, leaderboard_html(board, title=f"Leaderboard of {Path(args.db).name}"))
    else:
        write_table(wide, args.out, kind)
    counts = board.cells["kind"].value_counts()
    print(
        f"wrote {args.out}: {len(wide)} models × {len(board.tasks)} tasks "
        f"({', '.join(f'{counts.get(k, 0)} {k}' for k in ('observed', 'estimated', 'predicted'))}"
        f" cells) in {time.perf_counter() - started:.1f} s"
        f"{' (read from the table kept in the store)' if read else ''}",
        file=sys.stderr,
    )
    return 0


def add_parser(sub) -> None:
    """Register ``leaderboard`` on the CLI's subparsers."""
    from pkps_core.cli_args import _interval_level

    parser = sub.add_parser(
        "leaderboard",
        help="the completed leaderboard: every model × task, observed or predicted, with "
        "intervals and ranks",
    )
    parser.add_argument("--db", required=True, help="a store made by `ingest`")
    parser.add_argument("--out", required=True, help="board.csv, board.parquet or board.html")
    parser.add_argument(
        "--level",
        type=_interval_level,
        default=0.9,
        help="coverage of the intervals (default 0.9)",
    )
    parser.add_argument("--holdout", choices=["model", "family"], default="family")
    parser.add_argument("--seed", type=int, default=0, help="the fitted predictor's seed")
    parser.add_argument(
        "--no-fit",
        dest="fit",
        action="store_false",
        help="refuse (exit 2) instead of fitting the predictor when the store has no current fit",
    )
    parser.set_defaults(run=cmd_leaderboard)
