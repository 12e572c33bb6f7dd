"""``predict``: every (model, task) cell by the chosen methods; targets are masked to a
budget and judged against their full data; with ``--db`` and a current kept fit the
ensemble places the targets with the store's fitted reference predictor."""

from __future__ import annotations

import argparse
import time

import pandas as pd

from pkps_core.cli_args import _bandwidth, _csv_list
from pkps_core.cli_common import (
    SELF_PAIRS_HELP,
    check_table_outputs,
    input_records,
    interval_arguments,
    open_store,
    space_params,
)
from pkps_core.cli_scale import add_engine_arguments, engine_session
from pkps_core.outputs import write_table
from pkps_core.records import RecordsError
from pkps_core.space.kernels import RESPONSE_KERNEL_CHOICES, RESPONSE_KERNEL_NOTE


def _kept_fit(args: argparse.Namespace, records: pd.DataFrame):
    """The store's fitted reference predictor for ``predict --targets … --methods ensemble``
    when it is current for these settings (``fit --db`` with the same holdout, seed and
    default space settings), else None (the ensemble is refitted, as without one)."""
    from pkps_core.predictor import StaleFit, stored_predictor

    default_space = (
        args.bandwidth == "cv"
        and args.response_kernel == "linear"
        and args.self_pairs is None
        and args.components == 8
    )
    if not (args.db and args.targets and "ensemble" in args.methods and default_space):
        return None
    with open_store(args.db, read_only=True) as store:
        try:
            return stored_predictor(
                store,
                fit="never",
                records=records,
                holdout=args.holdout,
                n_neighbors=args.neighbors,
                random_state=args.seed,
            )
        except StaleFit:
            return None


def cmd_predict(args: argparse.Namespace) -> int:
    from pkps_core.predict import predict, reference_is_sample, self_pairs_setting
    from pkps_core.protocols.masks import mask_targets
    from pkps_core.views import mae_caption, mae_table, prediction_export

    check_table_outputs(args.out)
    if args.budget < 1:
        raise RecordsError(f"--budget must be at least 1 response per task, got {args.budget}")
    started = time.perf_counter()
    with engine_session(args) as engine_params:
        records = input_records(args, engine_params.get("client"))
        kept = _kept_fit(args, records) if not engine_params else None
        if args.targets:
            # the targets keep --budget responses per task; the rest is their truth
            records = mask_targets(records, args.targets, args.budget, seed=args.seed)
        methods = [m for m in args.methods if kept is None or m != "ensemble"]
        parts = []
        if methods:
            parts.append(
                predict(
                    records,
                    methods,
                    holdout=args.holdout,
                    targets=args.targets,
                    space_params=space_params(args) | engine_params,
                    n_neighbors=args.neighbors,
                    intervals=args.interval,
                )
            )
        if kept is not None:  # the targets placed by the store's fitted predictor
            placed = kept.predict(records[records["model"].isin(args.targets)], level=args.interval)
            parts.append(placed.drop(columns="profile"))
        predictions = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    elapsed = time.perf_counter() - started
    settings = {
        "holdout": args.holdout,
        "bandwidth": str(args.bandwidth),
        "response_kernel": args.response_kernel,
        "budget": args.budget if args.targets else None,
        "seed": args.seed,
        "self_pairs": self_pairs_setting(space_params(args), bool(args.targets)),
    }
    write_table(
        prediction_export(predictions, targets=args.targets or (), settings=settings), args.out
    )
    how = " (ensemble: the targets placed by the store's fitted predictor)" if kept else ""
    print(f"wrote {len(predictions)} predictions to {args.out} in {elapsed:.1f} s{how}")
    if args.interval is not None:
        flagged = predictions.groupby("method")["extrapolation"].sum()
        print(
            f"{args.interval:.0%} conformal intervals in lower/upper; extrapolation warnings: "
            + ", ".join(f"{m} {int(n)}" for m, n in flagged.items())
        )
    self_reference = not args.targets and reference_is_sample(predictions, records)
    table = mae_table(predictions, args.targets, self_reference=self_reference)
    if table["cells_scored"].sum():
        budget = args.budget if args.targets else None
        print(mae_caption(self_reference=self_reference, budget=budget) + ":")
        for method, row in table.iterrows():
            value = "—" if pd.isna(row["MAE"]) else f"{row['MAE']:.4f}"
            note = f"  ({row['note']})" if row["note"] else ""
            print(f"  {method:<12} {value:>7}  over {int(row['cells_scored'])} cells{note}")
    return 0


def add_parser(sub) -> None:
    """Register ``predict`` on the CLI's subparsers."""
    pred = sub.add_parser("predict", help="predict every (model, task) cell")
    pred.add_argument("--input", help="canonical .csv / .parquet, or a Parquet dataset DIR")
    pred.add_argument("--db", help="a store made by `ingest` (instead of --input)")
    pred.add_argument("--out", required=True, help="output .csv or .parquet")
    pred.add_argument(
        "--methods", type=_csv_list, default=["sample", "dkps", "pkps"], help="comma-separated"
    )
    pred.add_argument("--holdout", choices=["model", "family"], default="model")
    pred.add_argument("--bandwidth", type=_bandwidth, default="cv", help="cv | median | FLOAT")
    pred.add_argument(
        "--targets",
        type=_csv_list,
        default=None,
        help="models to treat as new: they keep --budget responses per task and are judged "
        "against their full-data cell scores (reference_score)",
    )
    pred.add_argument(
        "--budget",
        type=int,
        default=4,
        help="with --targets: responses each target keeps per task, drawn with --seed (default 4)",
    )
    pred.add_argument(
        "--response-kernel",
        choices=RESPONSE_KERNEL_CHOICES,
        default="linear",
        help=RESPONSE_KERNEL_NOTE,
    )
    pred.add_argument("--self-pairs", choices=["include", "exclude"], help=SELF_PAIRS_HELP)
    pred.add_argument("--components", type=int, default=8, help="MDS dimension d")
    pred.add_argument("--neighbors", type=int, default=5, help="K of the KNN regression")
    pred.add_argument("--seed", type=int, default=0)
    interval_arguments(pred)
    add_engine_arguments(pred)
    pred.set_defaults(run=cmd_predict)
