"""Command line: ``python -m pkps_core <command> …`` does the app's jobs headless.

The installed ``pkps`` command (:mod:`perspective_app.cli`) is this parser under its own
name, plus ``pkps app``.

Errors in the user's input end the program with exit status 2 and one line on stderr
that names the problem (no traceback).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pkps_core.cli_args import _bandwidth, _components, _csv_list, _interval_level, _number_list
from pkps_core.cli_common import (
    SELF_PAIRS_HELP,
    check_table_outputs,
    input_records,
    open_store,
    space_params,
)
from pkps_core.cli_fit import add_parser as add_fit_parser
from pkps_core.cli_leaderboard import add_parser as add_leaderboard_parser
from pkps_core.cli_predict import add_parser as add_predict_parser
from pkps_core.cli_report import add_parser as add_report_parser
from pkps_core.cli_report import add_percent_argument
from pkps_core.cli_scale import add_engine_arguments, add_export_parser, engine_session
from pkps_core.outputs import check_writable, os_error_message, write_table
from pkps_core.records import RecordsError, check_score_range
from pkps_core.space.kernels import RESPONSE_KERNEL_CHOICES
from pkps_core.space.runtime import keep_freed_memory
from pkps_core.text import counted, terminal_safe, terminal_safe_frame


def _records_for_csv(records: pd.DataFrame) -> pd.DataFrame:
    """Embedding columns as JSON arrays, so a CSV round-trips through ``read_records``."""
    import json

    out = records.copy()
    for column in ("query_embedding", "response_embedding"):
        if column in out.columns:
            out[column] = [json.dumps([round(float(x), 8) for x in v]) for v in out[column]]
    return out


def cmd_synth(args: argparse.Namespace) -> int:
    from pkps_core.synthetic import make_synthetic

    check_table_outputs(args.out, args.truth_out)
    cache = make_synthetic(
        n_models=args.models,
        n_tasks=args.tasks,
        budget=args.budget,
        rho=args.rho,
        p_task=args.p_task,
        p_query=args.p_query,
        random_state=args.seed,
    )
    records = cache.records
    if Path(args.out).suffix.lower() == ".csv":
        records = _records_for_csv(records)
    write_table(records, args.out)
    if args.truth_out:
        write_table(cache.truth, args.truth_out)
    print(
        f"wrote {len(cache.records)} responses of {args.models} models on {args.tasks} tasks "
        f"to {args.out}"
    )
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from pkps_core.importers import check_duplicates_across, load
    from pkps_core.store.families import reapply_families

    check_writable(args.db)  # before the files are read
    loaded = []  # every file is read before the store is touched: one transaction
    for source in args.paths:
        started = time.perf_counter()
        result = load(source, format=args.format, metric=args.metric, annotator=args.annotator)
        try:
            result.records = check_score_range(result.records, percent=args.percent_scores)
        except RecordsError as exc:
            raise RecordsError(f"{source}: {exc}") from None
        loaded.append((source, result, time.perf_counter() - started))
    # the rule of one folder or one upload: two files with one key are refused
    check_duplicates_across([(str(source), r.records) for source, r, _ in loaded])
    with open_store(args.db, read_only=False) as store:
        started = time.perf_counter()
        items = [(r.records, str(source), r.warnings) for source, r, _ in loaded]
        reports = store.ingest_many(items)
        reapply_families(store)  # families edited on the Data page survive a re-import
        share = (time.perf_counter() - started) / len(loaded)
    for (_, result, elapsed), report in zip(loaded, reports, strict=True):
        for line in [*result.warnings, *result.skipped]:
            print(terminal_safe(f"  note: {line}"))
        print(terminal_safe(f"{report} ({elapsed + share:.1f} s)"))
        if report.replaced:
            print(f"  {report.replaced} row(s) changed an existing (model, task, query_id)")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    with open_store(args.db, read_only=True) as store:
        summary = store.summary()
        print(
            f"{counted(summary['models'], 'model')}, {counted(summary['tasks'], 'task')}, "
            f"{counted(summary['responses'], 'response')}, "
            f"{counted(summary['families'], 'family', 'families')}"
        )
        coverage = store.coverage()
        if len(coverage):
            grid = summary["models"] * summary["tasks"]
            print(
                f"coverage: {len(coverage)} of {grid} (model, task) cells observed "
                f"({len(coverage) / max(grid, 1):.0%}); responses per observed cell: "
                f"median {coverage.n_responses.median():.0f}, "
                f"min {coverage.n_responses.min()}, max {coverage.n_responses.max()}"
            )
        pairs = store.pairedness()
        rho = pairs.loc[pairs.model_a != pairs.model_b, "rho"] if len(pairs) else ()
        if len(pairs) and not len(rho):
            print("pairedness: one model, no pair to compare")
        elif len(rho):
            print(
                f"pairedness (pooled over tasks): mean rho {rho.mean():.3f}, "
                f"median {rho.median():.3f}, share of model pairs with no shared query "
                f"{(rho == 0).mean():.0%}"
            )
    return 0


def cmd_next(args: argparse.Namespace) -> int:
    from pkps_core.predict import predict
    from pkps_core.trust import next_cells, task_query_counts

    records = input_records(args)
    if args.target not in set(records["model"].astype(str)):
        raise RecordsError(f"unknown target model {args.target!r}; it is not in the input")
    if args.top < 1:
        raise RecordsError("--top must be at least 1")
    started = time.perf_counter()
    predictions = predict(
        records,
        [args.method],
        holdout=args.holdout,
        space_params=space_params(args),
        n_neighbors=args.neighbors,
        intervals=args.interval,
    )
    ranking = next_cells(
        predictions,
        args.target,
        method=args.method,
        top=args.top,
        task_queries=task_query_counts(records),
    )
    elapsed = time.perf_counter() - started
    if not len(ranking):
        print(f"{terminal_safe(args.target)}: every cell is fully observed; nothing to evaluate")
        return 0
    target = terminal_safe(args.target)
    print(
        f"cells of {target} to evaluate next, widest {args.interval:.0%} interval "
        f"({args.method}) first ({elapsed:.1f} s):"
    )
    shown = terminal_safe_frame(ranking.drop(columns=["model", "method"]))
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pkps_core.predict import METHODS
    from pkps_core.protocols import format_summary, run_protocol
    from pkps_core.protocols.masks import DEFAULT_BUDGETS
    from pkps_core.records import cell_table
    from pkps_core.views import new_model_tables
    from pkps_core.views.experiments import budget_check

    if args.seeds < 1:
        raise RecordsError("--seeds must be at least 1")
    unknown = [m for m in args.methods or [] if m not in METHODS]
    if unknown:
        raise RecordsError(
            f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}"
        )
    check_table_outputs(args.out)
    space_params = {"response_kernel": args.response_kernel}
    if args.query_components is not None:
        space_params["query_components"] = args.query_components
    if args.response_components is not None:
        space_params["response_components"] = args.response_components

    def progress(fraction: float, message: str) -> None:
        print(f"  [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    with engine_session(args) as engine_params:
        records = input_records(args, engine_params.get("client"))
        budgets = args.budgets
        if args.protocol in DEFAULT_BUDGETS:  # as the Experiments page: repeats left out
            budgets, notes = budget_check(
                cell_table(records), budgets or DEFAULT_BUDGETS[args.protocol]
            )
            for note in notes:
                print(f"note: {note}", file=sys.stderr)
            if not budgets:
                raise RecordsError("no budget fits this cache; give smaller --budgets")
        result = run_protocol(
            records,
            args.protocol,
            budgets=budgets,
            rhos=args.rho,
            cohorts=args.cohort,
            p_tasks=args.p_task,
            p_queries=args.p_query,
            n_tasks=args.n_tasks,
            core_sets=args.core_set,
            modes=args.mode,
            target_share=args.target_share,
            seeds=range(args.seeds),
            methods=args.methods,
            space_params=space_params | engine_params,
            progress=progress,
        )
    elapsed = time.perf_counter() - started
    write_table(result.long, args.out)
    print(f"wrote {len(result.long)} rows to {args.out} in {elapsed:.1f} s")
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        print(f"\nMAE (mean ± SEM over {args.seeds} seeds of the per-seed mean over tasks):")
        print(format_summary(result.summary, result.levers).to_string())
        if len(result.tests):
            print("\nWilcoxon signed-rank tests on per-task error differences (two-sided):")
            print(result.tests.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        if len(result.correlations):
            print("\nPearson r of model similarity vs normalised gap (binary tasks):")
            print(result.correlations.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        for title, (caption, table) in new_model_tables(result).items():
            print(f"\n{title}. {caption}\n{table.to_string()}")
    return 0


def build_parser(prog: str = "python -m pkps_core") -> argparse.ArgumentParser:
    """Every command's parser; ``prog`` names the program in the help and usage lines."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Predict benchmark scores from sparse, unpaired caches of responses.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    synth = sub.add_parser("synth", help="write a synthetic cache (the PKPS paper's generator)")
    synth.add_argument("--out", required=True, help="output .csv or .parquet")
    synth.add_argument("--truth-out", help="also write every cell's true score here")
    synth.add_argument("--models", type=int, default=60)
    synth.add_argument("--tasks", type=int, default=12)
    synth.add_argument("--budget", type=int, default=4, help="queries per observed cell (m)")
    synth.add_argument("--rho", type=float, default=0.0, help="pairing: shared-query fraction")
    synth.add_argument("--p-task", type=float, default=1.0, help="task coverage")
    synth.add_argument("--p-query", type=float, default=1.0, help="query depth")
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(run=cmd_synth)

    add_predict_parser(sub)

    nxt = sub.add_parser(
        "next", help="rank a model's missing or thinly observed cells by interval width"
    )
    nxt.add_argument("--input", help="canonical .csv / .parquet, or a Parquet dataset DIR")
    nxt.add_argument("--db", help="a store made by `ingest` (instead of --input)")
    nxt.add_argument("--target", required=True, help="the model whose cells to rank")
    nxt.add_argument("--top", type=int, default=10, help="how many cells to show")
    nxt.add_argument("--method", default="pkps", help="whose intervals rank the cells")
    nxt.add_argument("--holdout", choices=["model", "family"], default="model")
    nxt.add_argument("--bandwidth", type=_bandwidth, default="cv", help="cv | median | FLOAT")
    nxt.add_argument("--response-kernel", choices=RESPONSE_KERNEL_CHOICES, default="linear")
    nxt.add_argument("--self-pairs", choices=["include", "exclude"], help=SELF_PAIRS_HELP)
    nxt.add_argument("--components", type=int, default=8, help="MDS dimension d")
    nxt.add_argument("--neighbors", type=int, default=5, help="K of the KNN regression")
    nxt.add_argument("--seed", type=int, default=0)
    nxt.add_argument(
        "--interval", type=_interval_level, default=0.9, help="interval level (default 0.9)"
    )
    nxt.set_defaults(run=cmd_next)

    ingest = sub.add_parser("ingest", help="import files/folders into a DuckDB store")
    ingest.add_argument("paths", nargs="+", help="files or folders (any supported format)")
    ingest.add_argument("--db", required=True, help="store file (created if absent)")
    ingest.add_argument(
        "--format",
        choices=["canonical", "eee", "lm_eval", "helm", "inspect", "alpaca_eval", "lighteval"],
        help="skip format detection",
    )
    ingest.add_argument(
        "--metric",
        help="HELM / lighteval: the per-sample metric that gives the score (default: the main "
        "metric HELM's schema names for the run's group; lighteval's first metric)",
    )
    ingest.add_argument(
        "--annotator",
        help="AlpacaEval: the annotator folder whose preferences give the score (default: "
        "weighted_alpaca_eval_gpt4_turbo when present)",
    )
    add_percent_argument(ingest)
    ingest.set_defaults(run=cmd_ingest)

    evaluate = sub.add_parser(
        "evaluate", help="run an evaluation protocol (seeded sweep) and print the summary"
    )
    evaluate.add_argument("--input", help="canonical .csv / .parquet, or a Parquet dataset DIR")
    evaluate.add_argument("--db", help="a store made by `ingest` (instead of --input)")
    evaluate.add_argument(
        "--protocol",
        required=True,
        choices=["query-efficiency", "completion", "interpolation", "extrapolation", "new-model"],
    )
    evaluate.add_argument(
        "--budgets",
        type=_number_list(int),
        default=None,
        help="queries per cell m (default 1,2,4,8; new-model: 1,2,4,8,16)",
    )
    evaluate.add_argument("--rho", type=_number_list(float), default=[0.0], help="pairing")
    evaluate.add_argument(
        "--cohort",
        type=_number_list(int, allow_full=True),
        default=[None],
        help="models kept (n; 'full')",
    )
    evaluate.add_argument(
        "--p-task",
        type=_number_list(float),
        default=None,
        help="task coverage (default 1 for query-efficiency, 0.5 for completion)",
    )
    evaluate.add_argument(
        "--p-query", type=_number_list(float), default=[0.5], help="query depth (completion)"
    )
    evaluate.add_argument(
        "--n-tasks",
        type=_number_list(int, allow_full=True),
        default=[None],
        help="tasks T (completion; 'full')",
    )
    evaluate.add_argument(
        "--core-set", type=_number_list(int), default=[50], help="core-set size (splits)"
    )
    evaluate.add_argument(
        "--mode", type=_csv_list, default=["scored", "responses-only"], help="new-model: modes"
    )
    evaluate.add_argument(
        "--target-share", type=float, default=0.25, help="new-model: share of families as targets"
    )
    evaluate.add_argument("--seeds", type=int, default=4, help="number of seeds (0 … N-1)")
    evaluate.add_argument(
        "--methods", type=_csv_list, default=None, help="comma-separated (default per protocol)"
    )
    evaluate.add_argument("--response-kernel", choices=RESPONSE_KERNEL_CHOICES, default="linear")
    evaluate.add_argument("--query-components", type=int, default=None, help="query PCA size")
    evaluate.add_argument(
        "--response-components", type=_components, default=None, help="response PCA: INT | elbow"
    )
    evaluate.add_argument("--out", required=True, help="long results .csv or .parquet")
    add_engine_arguments(evaluate)
    evaluate.set_defaults(run=cmd_evaluate)

    info = sub.add_parser("info", help="counts, coverage and pairedness of a store")
    info.add_argument("--db", required=True)
    info.set_defaults(run=cmd_info)
    add_report_parser(sub)
    add_fit_parser(sub)
    add_leaderboard_parser(sub)
    add_export_parser(sub)
    return parser


def _error(message: str) -> int:
    print(f"error: {terminal_safe(' '.join(message.split()))}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run one command (``argv``, default ``sys.argv[1:]``) with :func:`build_parser`'s
    parser or ``parser`` (one built on it, as ``pkps``'s): input errors end with status 2."""
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    try:
        keep_freed_memory()  # a fit's temporaries reuse freed memory (runtime.py)
        return args.run(args)
    except (RecordsError, ValueError) as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(os_error_message(exc, action="use"))
    except MemoryError:
        return _error(
            f"out of memory in `{args.command}`: the input is too large for this machine's "
            "memory; split it into smaller files or select fewer models or tasks"
        )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
