"""The Dask engine's scaling table: workers 1, 2, 4, … against the local engine on as many cores.

    PYTHONPATH=. .venv/bin/python -m bench.distributed --models 100 --tasks 10 --queries 50

fits :class:`PerspectiveSpace` (bandwidth CV by default) on an unpaired cache of that size
(``bench.caches.make_sized_records``), for each worker count of ``--workers`` (default:
1, 2, 4, … up to the cores) on a fresh ``LocalCluster`` of that many worker processes × 1
thread, and with the local engine on as many BLAS threads in this process; best of
``--repeats`` runs each, after ``--warm-up`` untimed fits (default 1: a worker's first tasks
pay its imports and the first touch of its buffers). It prints one markdown table — time,
speed-up over one worker, efficiency per core, the ratio to the local engine, bytes moved,
peak memory per worker, the tasks and their median length, the largest difference of D
from the local engine's — then a projection to a 32-worker cluster from the throughput
measured, and writes a ``distributed.performance_report`` of the first run per worker
count to ``--report-dir`` (where bokeh is importable).

``--scheduler tcp://host:8786`` measures an existing cluster instead (its workers as they
are; the local engine on this machine's cores).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from bench.caches import make_sized_records
from pkps_core.records import validate_records
from pkps_core.space import PerspectiveSpace, prepare_cache
from pkps_core.space.runtime import peak_rss_bytes, reset_peak_rss

GIB, MIB = 1 << 30, 1 << 20


def flops(path: str, rank, n_models, n_responses, n_queries, p) -> float:
    """Multiply-adds × 2 of one bandwidth's sums.

    exact: the transfers 2 M N (p+1) and the contraction 2 n² M (p+1); sparse: the
    same contraction, the transfers in proportion to the kept entries (not counted);
    nystrom: the projections 2 r N (p+1) and the inner products 2 n² r (p+1); delta:
    the contraction only.
    """
    width = p + 1
    if path == "nystrom":
        return 2.0 * rank * n_responses * width + 2.0 * n_models**2 * rank * width
    contraction = 2.0 * n_models**2 * n_queries * width
    return contraction + (2.0 * n_queries * n_responses * width if path == "exact" else 0.0)


def _sent_bytes(dask_worker) -> int:
    return int(dask_worker.transfer_outgoing_bytes_total)


def _cpu_seconds(dask_worker=None) -> float:
    return time.process_time()


def _warm(dask_worker) -> None:
    """Import the engine's modules on a worker before the clock runs."""
    import pkps_core.space.dask_engine  # noqa: F401


def _dask_fit(client, prepared, bandwidth, block_bytes, report: Path | None):
    """One fit on the cluster: seconds, the space, its backend's counters, peak memory
    per worker, bytes sent between workers, task lengths."""
    import distributed

    engines = []
    original = PerspectiveSpace._engine

    def capture(self, *args):
        engines.append(original(self, *args))
        return engines[-1]

    client.run(reset_peak_rss)
    sent = sum(client.run(_sent_bytes).values())
    cpu = sum(client.run(_cpu_seconds).values()) + time.process_time()
    PerspectiveSpace._engine = capture
    try:
        with (
            distributed.performance_report(filename=str(report)) if report else nullcontext(),
            distributed.get_task_stream(client=client) as stream,
        ):
            started = time.perf_counter()
            space = PerspectiveSpace(
                query_bandwidth=bandwidth, engine="dask", client=client, block_bytes=block_bytes
            ).fit(prepared)
            seconds = time.perf_counter() - started
    finally:
        PerspectiveSpace._engine = original
    cpu = sum(client.run(_cpu_seconds).values()) + time.process_time() - cpu
    peaks = client.run(peak_rss_bytes)
    between = sum(client.run(_sent_bytes).values()) - sent
    lengths = [
        part["stop"] - part["start"]
        for task in stream.data
        for part in task["startstops"]
        if part["action"] == "compute" and not str(task["key"]).startswith("warm_up")
    ]  # (the warm-ups run while the data travel: not a pass's tasks)
    backend = engines[0].backend
    return {
        "seconds": seconds,
        "cpu": cpu,
        "space": space,
        "tasks": Counter(backend.task_counts),
        "scattered": backend.bytes_moved["scattered"],
        "gathered": backend.bytes_moved["gathered"],
        "between": between,
        "peak": max(peaks.values()),
        "task_ms": 1e3 * float(np.median(lengths)) if lengths else float("nan"),
        "task_seconds": float(np.sum(lengths)),
    }


def _local_fit(prepared, bandwidth, block_bytes, threads: int):
    with threadpool_limits(limits=threads, user_api="blas"):
        started, cpu = time.perf_counter(), time.process_time()
        space = PerspectiveSpace(query_bandwidth=bandwidth, block_bytes=block_bytes).fit(prepared)
        return time.perf_counter() - started, time.process_time() - cpu, space


def _has_bokeh() -> bool:
    """Whether a performance report can be drawn (it needs bokeh, which the project does
    not install: ``pip install --target DIR bokeh`` and DIR on PYTHONPATH will do)."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        print("no bokeh: no performance report (the table has the task stream)", file=sys.stderr)
        return False
    return True


def _commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "pkps_core/space", "bench/distributed.py"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return head + (" (with uncommitted changes to the engine)" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--queries", type=int, default=50, help="queries per (model, task)")
    parser.add_argument("--workers", help="comma-separated worker counts (default 1, 2, 4, …)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per row; the best is kept")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        help="untimed fits per row first (a worker's first tasks pay imports and page faults)",
    )
    parser.add_argument("--memory-limit", type=float, default=3.0, help="GiB per worker")
    parser.add_argument("--block-mib", type=int, default=128, help="block_bytes in MiB")
    parser.add_argument("--bandwidth", default="cv", help="cv | median | FLOAT")
    parser.add_argument("--scheduler", help="an existing cluster (tcp://host:8786) instead")
    parser.add_argument("--report-dir", default="/tmp", help="performance reports go here")
    args = parser.parse_args()
    import distributed

    cores = os.cpu_count() or 1
    counts = (
        [int(w) for w in args.workers.split(",")]
        if args.workers
        else [2**k for k in range(cores.bit_length()) if 2**k <= cores]
    )
    bandwidth = args.bandwidth if args.bandwidth in ("cv", "median") else float(args.bandwidth)
    block_bytes = args.block_mib * MIB
    records = make_sized_records(args.models, args.tasks, args.queries, "unpaired", seed=0)
    prepared = prepare_cache(validate_records(records), validated=True)
    del records
    layout = prepared.layout
    n, n_resp, n_q = layout.n_models, layout.n_responses, layout.n_queries
    p = prepared.response_vectors.shape[1]
    print(f"load average before: {os.getloadavg()[0]:.2f} (1 min)", file=sys.stderr)
    rows = []
    for workers in [None] if args.scheduler else counts:
        if workers is None:
            client = distributed.Client(args.scheduler)
            cluster = None
            workers = len(client.scheduler_info(n_workers=-1)["workers"])
        else:
            cluster = distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                memory_limit=int(args.memory_limit * GIB),
                dashboard_address=None,
            )
            client = distributed.Client(cluster)
        try:
            client.run(_warm)
            for _ in range(args.warm_up):
                PerspectiveSpace(
                    query_bandwidth=bandwidth, engine="dask", client=client, block_bytes=block_bytes
                ).fit(prepared)
            report = Path(args.report_dir) / f"dask-performance-{workers}-workers.html"
            report = report if _has_bokeh() else None
            runs = [
                _dask_fit(client, prepared, bandwidth, block_bytes, report if k == 0 else None)
                for k in range(args.repeats)
            ]
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
        threads = min(workers, cores)
        for _ in range(args.warm_up):
            _local_fit(prepared, bandwidth, block_bytes, threads)
        local = min(
            (_local_fit(prepared, bandwidth, block_bytes, threads) for _ in range(args.repeats)),
            key=lambda run: run[0],
        )
        best = min(runs, key=lambda run: run["seconds"])
        gap = float(np.max(np.abs(best["space"].distance_matrix_ - local[2].distance_matrix_)))
        rows.append({"workers": workers, "local": local[0], "local_cpu": local[1], "gap": gap})
        rows[-1].update(best)
        print(f"{workers} worker(s): {best['seconds']:.2f} s", file=sys.stderr)
    print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)", file=sys.stderr)
    _table(args, rows, n, n_resp, n_q, p)


def _table(args, rows, n, n_resp, n_q, p) -> None:
    reports = rows[0]["space"].affinity_reports_
    total_flops = sum(
        flops(r.path if r.bandwidth > 0 else "delta", r.rank, n, n_resp, n_q, p) for r in reports
    )
    paths = ", ".join(
        f"{r.bandwidth:.3g}: {r.path}" + (f" (r={r.rank})" if r.rank else "") for r in reports
    )
    print(f"Command: `{shlex.join(['python', '-m', 'bench.distributed', *sys.argv[1:]])}`  ")
    print(f"Commit: {_commit()}  ")
    print(
        f"Cache: {n} models × {args.tasks} tasks × {args.queries} queries, unpaired = "
        f"{n_resp:,} responses, {n_q:,} unique queries, p = {p}; bandwidth "
        f"{args.bandwidth}; block_bytes {args.block_mib} MiB; best of {args.repeats} after "
        f"{args.warm_up} untimed fit(s) per row  "
    )
    print(f"Paths: {paths}\n")
    print(
        "| workers × 1 thread | Dask (s) | speed-up over 1 worker | efficiency per core "
        "| local engine, same cores (s) | Dask / local | CPU s, Dask (workers + client) / local "
        "| bytes scattered / between workers / gathered (MiB) | peak memory per worker (GiB) "
        "| tasks | median task (ms) | max \\|ΔD\\| vs local |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|")
    one = next((r["seconds"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        speedup = one / r["seconds"] if one else float("nan")
        tasks = ", ".join(f"{kind} {count}" for kind, count in sorted(r["tasks"].items()))
        print(
            f"| {r['workers']} | {r['seconds']:.2f} | {speedup:.2f} | "
            f"{speedup / r['workers']:.0%} | {r['local']:.2f} | {r['seconds'] / r['local']:.2f} | "
            f"{r['cpu']:.1f} / {r['local_cpu']:.1f} | "
            f"{r['scattered'] / MIB:.0f} / {r['between'] / MIB:.0f} / {r['gathered'] / MIB:.1f} | "
            f"{r['peak'] / GIB:.2f} | {tasks} | {r['task_ms']:.0f} | {r['gap']:.1e} |"
        )
    widest = rows[-1]
    rate = total_flops / widest["seconds"] / widest["workers"]
    _projection(rate, p)


def _projection(rate: float, p: int, workers: int = 32, link: float = 1e9) -> None:
    """A 10M-response cache (2000 models × 50 tasks × 100 queries, unpaired, pools of
    400 per task) on ``workers`` workers, one exact bandwidth, at this throughput."""
    n, n_resp, n_q = 2000, 10_000_000, 50 * 400
    exact = flops("exact", None, n, n_resp, n_q, p)
    data = n_resp * (p + 1) * 8
    print(f"\n**Projection: {workers} workers, {n_resp:,} responses, one exact bandwidth**\n")
    print(f"- throughput measured per worker (counted FLOPs / fit time): {rate / 1e9:.2f} GFLOP/s")
    print(
        f"- work: 2 M N (p+1) + 2 n² M (p+1) = 2·{n_q}·{n_resp:.0e}·{p + 1}"
        f" + 2·{n}²·{n_q}·{p + 1} = {exact:.3g} FLOPs, {exact / workers:.3g} per worker"
    )
    print(
        f"- compute: {exact / workers:.3g} / {rate / 1e9:.2f} GFLOP/s = "
        f"{exact / workers / rate:.0f} s per exact bandwidth"
    )
    print(
        f"- bytes moved: the features N (p+1)·8 = {data / GIB:.1f} GiB, scattered twice (by "
        f"model and by query); a task reads one column block and one run of query pieces, "
        f"so a worker reads at most every block once per pass: ≤ {2 * data / GIB:.1f} GiB = "
        f"{2 * data / link:.0f} s at {link / 1e9:.0f} GB/s"
    )
    print(
        f"- total ≈ {exact / workers / rate + 2 * data / link:.0f} s per exact bandwidth "
        "(one pass serves every exact bandwidth of the grid; sparse and Nyström ones cost a "
        "fraction of it)"
    )


if __name__ == "__main__":
    main()
