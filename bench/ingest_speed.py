"""Importing a large text CSV: read → ingest → first read of the store, timed by stage.

The cache is the browser test's million-row upload (``make_text_records``: 1000 models ×
4 tasks × 250 queries of a 25,000-query pool, short texts) written as a CSV to a temporary
folder. The stages are the Data page's: :func:`pkps_core.uploads.read_uploads` on the
file's bytes (read, importer validation, the upload's validation of the concatenation),
:meth:`Store.ingest` of its records, and the first :meth:`Store.records` (embeds every
distinct text once, then validates the frame with its embeddings). A last row times
:func:`validate_records` alone on the records read, its share of that last stage. Prints a
Markdown table.

Run with ``PYTHONPATH=. .venv/bin/python bench/ingest_speed.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from bench.caches import make_text_records
from pkps_core.records import validate_records
from pkps_core.store import Store
from pkps_core.uploads import read_uploads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--queries", type=int, default=250, help="queries per (model, task)")
    parser.add_argument("--pool", type=int, default=25_000, help="queries per task to draw from")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()

    frame = make_text_records(args.models, args.tasks, args.queries, args.pool, seed=args.seed)
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pkps-ingest-speed-") as tmp:
        csv = Path(tmp) / "million.csv"
        frame.to_csv(csv, index=False)
        data = csv.read_bytes()
        del frame

        started = time.perf_counter()
        result = read_uploads([(csv.name, data)])
        rows.append(("read_uploads (read + validate)", time.perf_counter() - started))

        with Store(Path(tmp) / "store.duckdb") as store:
            started = time.perf_counter()
            report = store.ingest(result.records, source=result.source)
            rows.append(("Store.ingest", time.perf_counter() - started))

            started = time.perf_counter()
            records = store.records()
            rows.append(("first Store.records (embeds texts)", time.perf_counter() - started))
    started = time.perf_counter()
    validate_records(records)
    validating = time.perf_counter() - started
    assert report.added == len(result.records) == len(records), (report, len(records))
    rows.append(("total", sum(seconds for _, seconds in rows)))
    # the last step of Store.records, on a frame like the one it validates
    rows.append(("(validate_records of those records, with embeddings)", validating))

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(records):,} rows ({args.models} models × {args.tasks} tasks × {args.queries} "
        f"queries, pool {args.pool:,}), CSV {len(data) / 1e6:.0f} MB; load average {load} "
        f"at the end; peak RSS {peak_mib:,.0f} MiB"
    )
    print()
    print("| stage | seconds |")
    print("|---|---|")
    for stage, seconds in rows:
        print(f"| {stage} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
