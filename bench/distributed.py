"""The Dask engine on a LocalCluster for a cache past XL, and a 32-worker projection.

    PYTHONPATH=. .venv/bin/python -m bench.distributed --models 600 --tasks 40 --queries 100

starts ``--workers`` worker processes (one thread each, ``--memory-limit`` each), fits
:class:`PerspectiveSpace` with ``engine="dask"`` on an unpaired cache of that size, and
prints a markdown table: the time, each worker's peak memory, the split of the work
(tasks by kind, bytes scattered / moved between workers / gathered), the local engine's
working set the same fit would need in one process (with ``--local``, measured: the same
fit on the local engine in this process), and the projection to a 32-worker
cluster for 10M responses from the throughput measured here.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.caches import make_sized_records
from pkps_core.records import validate_records
from pkps_core.space import PerspectiveSpace, prepare_cache
from pkps_core.space.runtime import peak_rss_bytes, reset_peak_rss
from pkps_core.space.sums import y_cache_bytes

GIB = 1 << 30


def _sent_bytes(dask_worker) -> int:
    return int(dask_worker.transfer_outgoing_bytes_total)


def flops(path: str, rank, n_models, n_responses, n_queries, p) -> float:
    """Multiply-adds × 2 of one bandwidth's sums on the Dask engine (one model block).

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


def local_working_set(n_models, n_responses, n_queries, p) -> int:
    """Bytes the local engine holds at once: features, squared distances and one kernel
    (M × M each), and Y across bandwidths when it fits its cache (else one query block)."""
    y = n_models * n_queries * p * 8
    return n_responses * p * 8 + 2 * n_queries * n_queries * 8 + (y if y <= y_cache_bytes() else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=600)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--queries", type=int, default=100, help="queries per (model, task)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", type=float, default=3.0, help="GiB per worker")
    parser.add_argument("--block-mib", type=int, default=128, help="block_bytes in MiB")
    parser.add_argument("--bandwidth", default="cv", help="cv | median | FLOAT")
    parser.add_argument(
        "--local",
        action="store_true",
        help="also fit with the local engine in this process and report its time and peak",
    )
    args = parser.parse_args()
    import distributed

    bandwidth = args.bandwidth if args.bandwidth in ("cv", "median") else float(args.bandwidth)
    records = make_sized_records(args.models, args.tasks, args.queries, "unpaired", seed=0)
    prepared = prepare_cache(validate_records(records), validated=True)
    del records
    layout = prepared.layout
    n, n_resp, n_q = layout.n_models, layout.n_responses, layout.n_queries
    p = prepared.response_vectors.shape[1]
    limit = int(args.memory_limit * GIB)
    engines = []
    original = PerspectiveSpace._engine

    def capture(self, *a):
        engine = original(self, *a)
        engines.append(engine)
        return engine

    PerspectiveSpace._engine = capture
    with (
        distributed.LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, memory_limit=limit
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.run(reset_peak_rss)
        started = time.perf_counter()
        space = PerspectiveSpace(
            query_bandwidth=bandwidth,
            engine="dask",
            client=client,
            block_bytes=args.block_mib << 20,
        ).fit(prepared)
        seconds = time.perf_counter() - started
        peaks = client.run(peak_rss_bytes)
        moved = sum(client.run(_sent_bytes).values())
    engine = engines[0]
    local = _local_fit(prepared, bandwidth, space) if args.local else None
    reports = space.affinity_reports_
    total_flops = sum(
        flops(r.path if r.bandwidth > 0 else "delta", r.rank, n, n_resp, n_q, p) for r in reports
    )
    per_worker_rate = total_flops / seconds / args.workers
    paths = ", ".join(
        f"{r.bandwidth:.3g}: {r.path}" + (f" (r={r.rank})" if r.rank else "") for r in reports
    )
    print(f"## Dask engine, {args.workers} workers × 1 thread, {args.memory_limit:g} GiB each\n")
    print("| quantity | value |\n|---|---|")
    rows = [
        (
            "cache (unpaired)",
            f"{n} models × {args.tasks} tasks × {args.queries} queries = {n_resp:,} responses, "
            f"{n_q:,} unique queries, p = {p}",
        ),
        (
            "local engine's working set (one process)",
            f"{local_working_set(n, n_resp, n_q, p) / GIB:.1f} GiB",
        ),
        (
            "fit (bandwidth " + str(args.bandwidth) + ")",
            f"{seconds:.1f} s; chosen {space.query_bandwidth_:.3g}",
        ),
        ("paths", paths),
        ("peak memory per worker", ", ".join(f"{v / GIB:.2f} GiB" for v in peaks.values())),
        ("tasks", ", ".join(f"{k} {v}" for k, v in engine.task_counts.items())),
        (
            "bytes scattered / between workers / gathered",
            f"{engine.bytes_scattered / GIB:.2f} / {moved / GIB:.2f} / "
            f"{engine.bytes_gathered / GIB:.2f} GiB",
        ),
        ("work (counted FLOPs)", f"{total_flops:.3g}"),
        ("measured throughput per worker", f"{per_worker_rate / 1e9:.2f} GFLOP/s"),
    ]
    if local is not None:
        rows.insert(2, ("local engine, measured (one process)", local))
    for name, value in rows:
        print(f"| {name} | {value} |")
    _projection(per_worker_rate, p)


def _local_fit(prepared, bandwidth, remote) -> str:
    """The same fit on the local engine in this process: time, peak memory (VmHWM from a
    reset just before, so it counts the prepared cache this process already holds) and
    the largest difference of D from the Dask engine's."""
    reset_peak_rss()
    started = time.perf_counter()
    space = PerspectiveSpace(query_bandwidth=bandwidth).fit(prepared)
    seconds = time.perf_counter() - started
    peak = peak_rss_bytes()
    gap = float(np.max(np.abs(space.distance_matrix_ - remote.distance_matrix_)))
    return (
        f"{seconds:.1f} s, peak {peak / GIB:.2f} GiB; "
        f"largest difference of D from the Dask engine's {gap:.1e}"
    )


def _projection(rate: float, p: int, workers: int = 32, link: float = 1e9) -> None:
    """A 10M-response cache (2000 models × 50 tasks × 100 queries, unpaired, pools of
    400 per task) on ``workers`` workers, one exact bandwidth, at this throughput."""
    n, n_resp, n_q = 2000, 10_000_000, 50 * 400
    exact = flops("exact", None, n, n_resp, n_q, p)
    data = n_resp * (p + 1) * 8
    per_worker_bytes = data  # bound: every worker fetches every model block once per fit
    print(f"\n## Projection: {workers} workers, {n_resp:,} responses, one exact bandwidth\n")
    print(
        f"- work: 2 M N (p+1) + 2 n² M (p+1) = 2·{n_q}·{n_resp:.0e}·{p + 1}"
        f" + 2·{n}²·{n_q}·{p + 1} = {exact:.3g} FLOPs, {exact / workers:.3g} per worker"
    )
    print(
        f"- compute: {exact / workers:.3g} / {rate / 1e9:.2f} GFLOP/s = "
        f"{exact / workers / rate:.0f} s per exact bandwidth"
    )
    print(
        f"- bytes moved: the features N (p+1)·8 = {data / GIB:.1f} GiB, at most once to each "
        f"worker per fit: ≤ {workers * data / GIB:.0f} GiB in all, ≤ {per_worker_bytes / GIB:.1f} "
        f"GiB per worker = {per_worker_bytes / link:.0f} s at {link / 1e9:.0f} GB/s; partial "
        f"sums back: n² · 8 · tiles, {n * n * 8 / GIB:.2f} GiB per reduced bandwidth"
    )
    print(
        f"- total ≈ {exact / workers / rate + per_worker_bytes / link:.0f} s per exact "
        "bandwidth (Nyström and sparse bandwidths cost a fraction of it)"
    )


if __name__ == "__main__":
    main()
