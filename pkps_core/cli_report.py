"""``python -m pkps_core report``: one model's report, headless.

``report --db STORE --model NAME [--out report.html]`` predicts one model of a store as
new (the store's kept fit when current, else :func:`pkps_core.views.new_model.new_model_report`)
and writes the tables and figures as one self-contained HTML file, or the figures as PNG
(``--out report.png``), or prints a text summary (:mod:`pkps_core.report`). ``--responses
FILE`` instead of ``--model`` predicts a file's one model as new with the New model page's
upload rules (scores in [0, 1] or ``--percent-scores``; tasks the store lacks left out with
a note, mapped with ``--task-map``, refused when none is the store's); the store is opened
read-only and never changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from pkps_core.outputs import check_writable, write_bytes, write_table, write_text
from pkps_core.report import (
    PngUnavailable,
    headline,
    report_html,
    report_pngs,
    report_text,
)
from pkps_core.text import terminal_safe


def _overall_csv(path: str) -> Path:
    """Where ``--csv``'s overall row goes: ``NAME-overall.csv`` beside the task rows."""
    target = Path(path)
    return target.with_name(f"{target.stem}-overall{target.suffix or '.csv'}")


def _report_outputs(args: argparse.Namespace) -> list[Path]:
    """The files ``report`` will write (``--out``, the PNG map beside it), each checked
    writable; ``--csv`` is checked too."""
    if args.csv:
        check_writable(args.csv)
        check_writable(_overall_csv(args.csv))
    if not args.out:
        return []
    target = Path(args.out)
    targets = [target]
    if target.suffix.lower() == ".png":
        targets.append(target.with_name(f"{target.stem}-map.png"))
    for path in targets:
        check_writable(path)
    return targets


def cmd_report(args: argparse.Namespace) -> int:
    from pkps_core.records import RecordsError
    from pkps_core.store import Store
    from pkps_core.store.opening import announce_on_stderr
    from pkps_core.views.new_model import (
        new_model_report,
        thinned_store_model,
        without_truth_on,
    )
    from pkps_core.views.placed_model import placed_model_report

    targets = _report_outputs(args)  # checked before the work
    if args.budget is not None and (args.responses or args.budget < 1):
        raise RecordsError(
            "--budget keeps that many of a store model's responses per task (--model, at "
            f"least 1), got {args.budget}"
            + (" with --responses, whose file is used as given" if args.responses else "")
        )
    upload, notes = None, []
    if args.responses:
        upload = _read_responses(args)  # the file's own faults first, before the store
    with Store(args.db, read_only=True, on_wait=announce_on_stderr) as store:
        if upload is not None:
            upload, notes = _on_store_tasks(upload, store, args)
        records = store.records()
        if upload is None and args.model not in set(records["model"].astype(str)):
            raise RecordsError(f"unknown model {args.model!r}; it is not in the records")
        predictor = None if args.refit else _kept_predictor(store, records, args)
        unjudged: list[str] = []
        if upload is None:  # with --budget, the rest of its responses judge the prediction
            records, unjudged = thinned_store_model(
                records, args.model, args.budget, seed=args.seed
            )
        if upload is not None:
            report, more = _upload_report(upload, records, store, predictor, args)
            notes += more
        elif predictor is not None:
            report = placed_model_report(predictor, records[records["model"] == args.model])
        else:
            report = new_model_report(
                records, args.model, holdout=args.holdout, space_params={"random_state": args.seed}
            )
        report = without_truth_on(report, unjudged)
    if unjudged and args.budget is not None:
        notes.append(
            f"{len(unjudged)} task(s) have at most {args.budget} responses of "
            f"{args.model}, so none is hidden there to judge the prediction: "
            + ", ".join(unjudged[:5])
            + (", …" if len(unjudged) > 5 else "")
        )
    for note in notes:
        print(terminal_safe(f"note: {note}"), file=sys.stderr)
    name = terminal_safe(report.model)
    if args.csv:
        write_table(report.rows(), args.csv, "csv")
        write_table(report.overall_rows(), _overall_csv(args.csv), "csv")
    if args.out and Path(args.out).suffix.lower() == ".png":
        try:
            pngs = report_pngs(report, store=Path(args.db).name)
        except PngUnavailable as exc:
            print(f"no PNG written: {exc}", file=sys.stderr)
            return 1
        target, map_target = targets
        write_bytes(target, pngs["tasks"])
        write_bytes(map_target, pngs["map"])
        print(
            f"wrote the figures of {name} to {target} (per task) and {map_target} "
            f"(PKPS map): {headline(report)}"
        )
    elif args.out:
        write_text(args.out, report_html(report, store=Path(args.db).name))
        print(f"wrote the report of {name} to {args.out}: {headline(report)}")
    else:
        print(report_text(report))
    return 0


def _read_responses(args: argparse.Namespace) -> pd.DataFrame:
    """``--responses``' records, read as the New model page reads an upload (any importer
    format, one model, scores in [0, 1] or rescaled with ``--percent-scores``)."""
    from pkps_core.records import RecordsError
    from pkps_core.uploads import read_uploads

    path = Path(args.responses)
    if not path.is_file():
        raise RecordsError(
            f"--responses {args.responses}: not a file; give one model's responses as one "
            "file (a folder format, a HELM run or AlpacaEval results/, as a .zip of it)"
        )
    records = read_uploads(
        [(path.name, path.read_bytes())], percent_scores=args.percent_scores
    ).records
    models = sorted(records["model"].astype(str).unique())
    if len(models) != 1:
        raise RecordsError(
            f"{path.name} holds {len(models)} models ({', '.join(map(repr, models[:5]))}); "
            "--responses takes one model's responses"
        )
    return records


def _on_store_tasks(upload: pd.DataFrame, store, args) -> tuple[pd.DataFrame, list[str]]:
    """The upload on the store's tasks (``--task-map``), as the New model page does."""
    from pkps_core.uploads import match_store_tasks, parse_task_map

    store_tasks = sorted(store.coverage()["task"].astype(str).unique())
    return match_store_tasks(upload, store_tasks, parse_task_map(args.task_map))


def _upload_report(upload, records, store, predictor, args):
    """The report of an uploaded model, placed by the kept predictor where the store has
    text embedders for its texts, else refitted with the store (the page's two paths)."""
    from pkps_core.views.new_model import new_model_report
    from pkps_core.views.placed_model import placed_model_report
    from pkps_core.views.uploaded_model import (
        embedded_like_the_store,
        upload_as_new,
        upload_target,
    )

    # read once (each is a stored state of up to tens of MB), for either path
    embedders = {kind: store.fitted_embedder(kind) for kind in ("query", "response")}
    embeddable = all(e is not None for e in embedders.values())
    if predictor is not None and embeddable:
        named, _, notes = upload_as_new(upload, records["model"].unique())
        embedded = embedded_like_the_store(named, embedders)
        return placed_model_report(predictor, embedded), notes
    combined, model, notes = upload_target(upload, records, embedders)
    report = new_model_report(
        combined, model, holdout=args.holdout, space_params={"random_state": args.seed}
    )
    return report, notes


def _kept_predictor(store, records, args):
    """The store's fitted reference predictor (``fit``), or None when it has none for these
    settings or its references changed since (the report then refits, as without one: a
    stale fit is never read; stderr stays for errors)."""
    from pkps_core.predictor import StaleFit, stored_predictor

    try:
        return stored_predictor(
            store, fit="never", records=records, holdout=args.holdout, random_state=args.seed
        )
    except StaleFit:
        return None


def add_percent_argument(parser) -> None:
    """``--percent-scores``: the input's scores are percentages (rescaled to [0, 1])."""
    parser.add_argument(
        "--percent-scores",
        action="store_true",
        help="the scores are percentages (0-100): divide them by 100 (without it, scores "
        "outside [0, 1] are refused)",
    )


def add_parser(sub) -> None:
    """Register ``report`` on the CLI's subparsers."""
    parser = sub.add_parser("report", help="a new model's report: predictions, rank, next")
    parser.add_argument("--db", required=True, help="a store made by `ingest`")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="the store's model to predict as new")
    which.add_argument(
        "--responses",
        help="a file of one model's responses (any format `ingest` reads; a folder format "
        "as a .zip of it) to predict as new against the store, as the New model page's "
        "upload; the store is not changed",
    )
    add_percent_argument(parser)
    parser.add_argument(
        "--task-map",
        help="with --responses: the file's task names that differ from the store's, as "
        "FILE_TASK=STORE_TASK,… (tasks the store lacks are left out with a note)",
    )
    parser.add_argument(
        "--out",
        help="write the report as HTML here, or with a .png name its two figures as PNG "
        "(NAME.png per task, NAME-map.png the PKPS map; needs kaleido and a Chromium); "
        "else print a summary",
    )
    parser.add_argument(
        "--csv",
        help="also write the per-task rows as CSV here, and the overall row beside it "
        "(NAME-overall.csv)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        help="with --model: keep this many of its responses per task (drawn with --seed) "
        "and judge the prediction on the rest, as a new model that answered that few "
        "(without it every stored response is used, and the truth shown beside the "
        "prediction is the store's reference_score, else the mean of those same scores)",
    )
    parser.add_argument("--holdout", choices=["model", "family"], default="family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--refit",
        action="store_true",
        help="refit everything for this model instead of reading the store's fitted predictor",
    )
    parser.set_defaults(run=cmd_report)
