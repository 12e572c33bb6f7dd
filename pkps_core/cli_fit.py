"""``python -m pkps_core fit``: fit a store's reference predictor once and keep it there.

The New model page, ``report`` and the Python API (:func:`pkps_core.predictor.stored_predictor`)
then read it instead of refitting: a new model is placed in about a second. The store's
leaderboard (:func:`pkps_core.leaderboard.stored_leaderboard`) is built and kept too
(``--no-leaderboard`` skips it), so the Leaderboard page's first open is a read.
"""

from __future__ import annotations

import argparse
import sys
import time

from pkps_core.cli_args import _csv_list
from pkps_core.predictor.grid import PROFILE_BUDGETS


def _budgets(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in _csv_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"budgets must be integers like 1,2,4; got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"budgets must be at least 1; got {text!r}")
    return values


def progress_on_stderr(fraction: float, message: str) -> None:
    """A one-line progress bar on stderr (a new line per step, so logs keep it)."""
    width = 24
    done = int(round(fraction * width))
    print(f"[{'#' * done}{'.' * (width - done)}] {fraction:4.0%} {message}", file=sys.stderr)


def cmd_fit(args: argparse.Namespace) -> int:
    from pkps_core.leaderboard import stored_leaderboard
    from pkps_core.predictor import stored_predictor
    from pkps_core.store import Store
    from pkps_core.store.opening import announce_on_stderr

    started = time.perf_counter()
    params = {"budgets": args.budgets, "holdout": args.holdout, "random_state": args.seed}
    # the file is opened for each read and write only (hold=False): the fit computes in
    # memory for seconds to minutes, and readers (`info`, `report`, the app) go on
    # meanwhile instead of waiting for it; an ingest in between leaves the fit stale
    with Store(args.db, create=False, hold=False, on_wait=announce_on_stderr) as store:
        version = store.version  # before the records: a change after them leaves it stale
        records = store.records()
        kept = {"records": records, "store_version": version, "progress": progress_on_stderr}
        predictor = stored_predictor(store, fit="always", **kept, **params)
        fitted = time.perf_counter()
        board = None
        if args.leaderboard:
            board = stored_leaderboard(
                store,
                refresh=True,  # the predictor was refitted: so is the table
                predictor=predictor,
                **kept,
                **params,
            )
    done = time.perf_counter()
    print(
        f"fitted the reference predictor of {args.db}: {len(predictor.references_)} references, "
        f"{len(predictor.tasks_)} tasks, {len(predictor.profiles_)} profiles "
        f"(m = {', '.join(map(str, args.budgets))}; scored and responses-only) in "
        f"{fitted - started:.1f} s; kept in the store"
    )
    if board is not None:
        print(
            f"kept its leaderboard ({len(board.models)} models × {len(board.tasks)} tasks; "
            f"the Leaderboard page reads it) in {done - fitted:.1f} s"
        )
    return 0


def add_parser(sub) -> None:
    """Register ``fit`` on the CLI's subparsers."""
    parser = sub.add_parser(
        "fit", help="fit the store's reference predictor once (new models are then placed fast)"
    )
    parser.add_argument("--db", required=True, help="a store made by `ingest`")
    parser.add_argument(
        "--budgets",
        type=_budgets,
        default=PROFILE_BUDGETS,
        help="responses per task the new models will have (calibration grid; default "
        + ",".join(map(str, PROFILE_BUDGETS))
        + ")",
    )
    parser.add_argument("--holdout", choices=["model", "family"], default="family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-leaderboard",
        dest="leaderboard",
        action="store_false",
        help="do not build and keep the leaderboard after the fit (it is then built on the "
        "Leaderboard page's first open)",
    )
    parser.set_defaults(run=cmd_fit)
