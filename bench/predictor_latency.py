"""The fitted reference predictor against the refit path, on AlpacaEval-40 and the demo store.

Run from the repository root (about 10 minutes on 2 cores)::

    PYTHONPATH=. .venv/bin/python bench/predictor_latency.py --out docs/results/predictor-latency.md

Five AlpacaEval models are held out as new (their 4 responses per task uploaded, scored);
the other 35 are ingested into a fresh DuckDB store (under ``/tmp``). Measured in one run:
the refit path (:func:`pkps_core.views.new_model.new_model_report`) for one new model; the
predictor's fit (``stored_predictor(fit="always")``, handed the records as the refit path
is; median of 3); a new model's warm latency (predictor in memory, median of 5) split into
embedding the upload and placing it
(:func:`~pkps_core.views.new_model.placed_model_report`); cold latency (a fresh Python
process that opens the store, reads the kept fit and reports the upload; a fresh
``report --model`` process on a stored model; and a fresh ``report --responses`` process
on the upload's file); the demo store's warm latency; and a batch
of responses-only new models (10 held-out models × 17 draws of 4 responses per task =
167 models against 30 references) against ``predict --targets``'s path (one
:func:`pkps_core.predict.predict` call with every new model as a target) in the same run.

The Done-when lines of the predictor's issue compare with the refit path "today", the day
the issue was filed: ``--baseline REV`` (default :data:`FILED_AT`, the commit before the
predictor's first) checks that revision out in a temporary git worktree and times its
refit path for the same new model and its ``predict --targets`` path for the same batch,
on the same records (embedded here, handed over as Parquet), in the same run. The refit
path of this checkout is timed too: it shares the predictor's speed-ups (closed-form
ridges, shadows appended to the prepared references), so both ratios are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
HELD_OUT = 5
FILED_AT = "af48532^"  # the refit path as it was when the predictor's issue was filed
BATCH_MODELS, BATCH_DRAWS, BATCH_SIZE = 10, 17, 167

COLD = """
import sys, time
started = time.perf_counter()
import pandas as pd
from pkps_core.predictor import stored_predictor
from pkps_core.store import Store
from pkps_core.views.uploaded_model import embedded_like_the_store
from pkps_core.views.placed_model import placed_model_report
upload = pd.read_parquet(sys.argv[2])
with Store(sys.argv[1], read_only=True) as store:
    predictor = stored_predictor(store, fit="never")
    embedders = {k: store.fitted_embedder(k) for k in ("query", "response")}
upload = embedded_like_the_store(upload, embedders)
report = placed_model_report(predictor, upload)
print(f"{time.perf_counter() - started:.2f}")
"""


BASELINE = """
import sys, time
import pandas as pd
from pkps_core.predict import build_context, predict
from pkps_core.views.new_model import new_model_report
import statistics
combined = pd.read_parquet(sys.argv[1])
refits = []
for _ in range(5):
    started = time.perf_counter()
    new_model_report(combined, sys.argv[2])
    refits.append(time.perf_counter() - started)
everything = pd.read_parquet(sys.argv[3])
keep = sorted(pd.read_parquet(sys.argv[4])["model"])
batches = []
for _ in range(5):
    started = time.perf_counter()
    predict(build_context(everything, holdout="family", targets=keep), ["ensemble"], intervals=0.9)
    batches.append(time.perf_counter() - started)
print(statistics.median(refits), statistics.median(batches))
"""


def _baseline(revision: str, workdir: Path, *arguments: object) -> tuple[float, float] | None:
    """The refit path and ``predict --targets``'s path of ``revision`` on the same files
    (None, with a note, where the revision is not in this clone)."""
    root = Path(__file__).resolve().parents[1]
    tree = workdir / "baseline"
    added = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", str(tree), revision],
        capture_output=True,
        text=True,
    )
    if added.returncode:
        print(f"baseline {revision} skipped: {added.stderr.strip()}", file=sys.stderr)
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", BASELINE, *map(str, arguments)],
            capture_output=True,
            text=True,
            check=True,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
        )
        refit, batch = map(float, done.stdout.split()[-2:])
        return refit, batch
    finally:
        subprocess.run(
            ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
        )


def _thin(records: pd.DataFrame, m: int, seed: int) -> pd.DataFrame:
    return records.groupby(["model", "task"]).sample(m, random_state=seed)


def _timed(function, *args, **kwargs):
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the markdown table here too")
    parser.add_argument(
        "--baseline",
        default=FILED_AT,
        help="git revision whose refit paths are timed in the same run ('' to skip; default "
        "%(default)s: the day the predictor's issue was filed)",
    )
    args = parser.parse_args()
    if not ALPACA.exists():
        print(f"skipped: {ALPACA} is absent")
        return
    from pkps_core.demo import ensure_demo_store
    from pkps_core.predict import build_context, predict
    from pkps_core.predictor import stored_predictor
    from pkps_core.store import Store
    from pkps_core.views.new_model import new_model_report
    from pkps_core.views.placed_model import placed_model_report
    from pkps_core.views.uploaded_model import embedded_like_the_store

    rows = []

    def record(name: str, seconds: float) -> None:
        rows.append((name, seconds))
        print(f"| {name} | {seconds:.2f} |", flush=True)

    data = pd.read_parquet(ALPACA)
    models = sorted(data["model"].unique())
    rng = np.random.default_rng(0)
    new_models = list(rng.choice(models, HELD_OUT, replace=False))
    references = data[~data["model"].isin(new_models)]
    uploads = _thin(data[data["model"].isin(new_models)], 4, 0)
    workdir = Path(tempfile.mkdtemp(prefix="pkps-bench-"))
    db = workdir / "alpaca.duckdb"
    with Store(db) as store:
        _, seconds = _timed(store.ingest, references, source="alpaca")
        store_records, read_seconds = _timed(store.records)
        embedders = {k: store.fitted_embedder(k) for k in ("query", "response")}
    record("AlpacaEval: ingest 35 references", seconds)
    record("AlpacaEval: first read of the store's records (embeds every text once)", read_seconds)
    first = uploads[uploads["model"] == new_models[0]]
    embedded, embed_seconds = _timed(embedded_like_the_store, first, embedders)
    combined = pd.concat([store_records, embedded], ignore_index=True)
    refit = statistics.median(
        _timed(new_model_report, combined, new_models[0])[1] for _ in range(5)
    )
    record("refit path: one new model (new_model_report, median of 5)", refit)
    fits = []
    with Store(db) as store:  # handed the records, as the refit path is
        for _ in range(3):
            predictor, seconds = _timed(
                stored_predictor, store, fit="always", records=store_records
            )
            fits.append(seconds)
    fit_seconds = statistics.median(fits)
    record("fit the predictor (12 profiles) and keep it in the store (median of 3)", fit_seconds)
    warm = []
    for model in new_models:
        upload = uploads[uploads["model"] == model]
        embedded, embed_seconds = _timed(embedded_like_the_store, upload, embedders)
        _, placed = _timed(placed_model_report, predictor, embedded)
        warm.append((embed_seconds, placed))
    record("warm: embed the upload (median of 5)", statistics.median(w[0] for w in warm))
    record(
        "warm: place + members + intervals + report (median)",
        statistics.median(w[1] for w in warm),
    )
    record("warm: total (median)", statistics.median(sum(w) for w in warm))
    upload_file = workdir / "upload.parquet"
    first.to_parquet(upload_file)
    cold = []
    for _ in range(2):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", COLD, str(db), str(upload_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        cold.append((time.perf_counter() - started, float(done.stdout.strip().splitlines()[-1])))
    record("cold: fresh process, read fit + report the upload (best of 2)", min(c[0] for c in cold))
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pkps_core",
            "report",
            "--db",
            str(db),
            "--model",
            models[1] if models[1] not in new_models else models[2],
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    record(
        "cold: `report --model` of a stored model (fresh process)", time.perf_counter() - started
    )
    responses = []
    for _ in range(2):  # the upload's file as a user gives it: read, embedded, placed
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pkps_core", "report", "--db", str(db)]
            + ["--responses", str(upload_file)],
            capture_output=True,
            text=True,
            check=True,
        )
        responses.append(time.perf_counter() - started)
    record(
        "cold: `report --responses` of the upload's file (fresh process, best of 2)", min(responses)
    )

    demo = ensure_demo_store(workdir / "demo.duckdb")
    with Store(demo) as store:
        demo_records = store.records()
        demo_predictor, demo_fit = _timed(
            stored_predictor, store, fit="always", records=demo_records
        )
    demo_model = sorted(demo_records["model"].unique())[0]
    demo_upload = _thin(demo_records[demo_records["model"] == demo_model], 2, 0).assign(
        model="uploaded model", family="uploaded"
    )
    demo_warm = [_timed(placed_model_report, demo_predictor, demo_upload)[1] for _ in range(5)]
    record("demo store: fit the predictor", demo_fit)
    record("demo store: warm placement + report (median of 5)", statistics.median(demo_warm))

    batch_refs = data[~data["model"].isin(models[:BATCH_MODELS])]
    draws = []
    for k in range(BATCH_DRAWS):
        part = _thin(data[data["model"].isin(models[:BATCH_MODELS])], 4, k)
        draws.append(part.assign(model=part["model"] + f" #{k}", score=np.nan))
    batch = pd.concat(draws, ignore_index=True)
    keep = sorted(batch["model"].unique())[:BATCH_SIZE]
    batch = batch[batch["model"].isin(keep)]
    from bench.embed_cache import embed_with

    everything = embed_with(pd.concat([batch_refs, batch], ignore_index=True), "tfidf")
    batch_refs_e = everything[~everything["model"].isin(keep)]
    batch_e = everything[everything["model"].isin(keep)]
    from pkps_core.predictor import ReferencePredictor

    batch_predictor, batch_fit = _timed(
        ReferencePredictor(modes=("responses-only",), budgets=(4,)).fit, batch_refs_e
    )
    # median of 5 calls each: the first call of a process pays page faults and caches
    fast_batch = statistics.median(_timed(batch_predictor.predict, batch_e)[1] for _ in range(5))

    def targets_path():  # what predict --targets does: a fresh context (its caches) each time
        context = build_context(everything, holdout="family", targets=keep)
        return predict(context, ["ensemble"], intervals=0.9)

    slow_batch = statistics.median(_timed(targets_path)[1] for _ in range(5))
    record(f"batch: {len(keep)} responses-only models, fit (m = 4 profile)", batch_fit)
    record(f"batch: {len(keep)} models placed in one call (median of 5)", fast_batch)
    record("batch: the same through predict --targets's path (median of 5)", slow_batch)
    baseline = None
    if args.baseline:
        combined_file, batch_file, keep_file = (
            workdir / "combined.parquet",
            workdir / "batch.parquet",
            workdir / "keep.parquet",
        )
        combined.to_parquet(combined_file)
        everything.to_parquet(batch_file)
        pd.DataFrame({"model": keep}).to_parquet(keep_file)
        baseline = _baseline(
            args.baseline, workdir, combined_file, new_models[0], batch_file, keep_file
        )
    if baseline is not None:
        record(f"filed-day refit path ({args.baseline}): one new model (median of 5)", baseline[0])
        record(
            f"filed-day predict --targets path ({args.baseline}): the batch (median of 5)",
            baseline[1],
        )
    lines = ["| step | seconds |", "|---|---|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in rows]
    lines.append("")
    warm_total = statistics.median(sum(w) for w in warm)
    lines.append(
        f"Ratios in this run: refit / warm total = {refit / warm_total:.0f}×; "
        f"batch predict --targets / placed = {slow_batch / fast_batch:.0f}×; "
        f"fit / one refit = {fit_seconds / refit:.1f}×."
    )
    if baseline is not None:
        lines.append(
            f"Against the filed-day paths ({args.baseline}), same run: batch predict --targets / "
            f"placed = {baseline[1] / fast_batch:.0f}×; fit / one refit = "
            f"{fit_seconds / baseline[0]:.1f}×; refit / warm total = "
            f"{baseline[0] / warm_total:.0f}×."
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
        header = (
            "# The fitted reference predictor: latency\n\n"
            "Regenerate with `PYTHONPATH=. .venv/bin/python bench/predictor_latency.py "
            f"--out docs/results/predictor-latency.md` (commit {commit}, {os.cpu_count()} cores, "
            f"load average {load} at the end, OPENBLAS_NUM_THREADS={threads}).\n\n"
        )
        Path(args.out).write_text(header + text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
