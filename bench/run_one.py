"""Measure one benchmark cache in its own process (so peak memory is its own).

Prints one JSON line. Timings are medians over ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import numpy as np

from bench.caches import make_bench_records
from pkps_core.records import validate_records
from pkps_core.space import PerspectiveSpace, kernels, prepare_cache
from pkps_core.space.sums import kernel_sums


def _median_time(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def _rel_error(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", required=True)
    parser.add_argument("--pairing", default="paired")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--check-exact", action="store_true")
    args = parser.parse_args()

    records = make_bench_records(args.size, args.pairing, extra_models=1)
    last = sorted(records.model.unique())[-1]
    base, added = records[records.model != last], records[records.model == last]
    start = time.perf_counter()
    prepared = prepare_cache(validate_records(base), validated=True)
    prep_seconds = time.perf_counter() - start

    probe = PerspectiveSpace(query_bandwidth="median").fit(prepared)  # warm-up
    scale = probe.median_query_distance_

    one_seconds, _ = _median_time(
        lambda: PerspectiveSpace(query_bandwidth=scale, bandwidth_scale=scale).fit(prepared),
        args.repeats,
    )
    cv_seconds, space = _median_time(
        lambda: PerspectiveSpace(query_bandwidth="cv", bandwidth_scale=scale).fit(prepared),
        args.repeats,
    )
    paths = [r.path + (f"(r={r.rank})" if r.rank else "") for r in space.affinity_reports_]
    approximate = [r for r in space.affinity_reports_ if r.error_kind != "exact"]
    reported = max((r.error for r in approximate), default=0.0)
    kinds = sorted({r.error_kind for r in approximate}) or ["exact"]

    update_seconds, _ = _median_time(
        lambda: (
            PerspectiveSpace(query_bandwidth="cv", bandwidth_scale=scale)
            .fit(prepared)
            .update(added)
        ),
        1,
    )
    fit_only, _ = _median_time(
        lambda: PerspectiveSpace(query_bandwidth="cv", bandwidth_scale=scale).fit(prepared),
        1,
    )
    update_seconds = max(update_seconds - fit_only, 0.0)

    row = {
        "size": args.size,
        "pairing": args.pairing,
        "models": len(prepared.models),
        "responses": int(prepared.layout.n_responses),
        "unique_queries": int(prepared.layout.n_queries),
        "prepare_s": round(prep_seconds, 3),
        "one_bandwidth_s": round(one_seconds, 3),
        "cv_grid_s": round(cv_seconds, 3),
        "update_one_model_s": round(update_seconds, 3),
        "paths": paths,
        "chosen_sigma_over_median": round(space.query_bandwidth_ / scale, 3),
        "reported_error": reported,
        "error_kind": "+".join(kinds),
    }
    if args.check_exact:
        exact = PerspectiveSpace(
            query_bandwidth="cv", bandwidth_scale=scale, affinity_method="exact"
        ).fit(prepared)
        row["error_vs_exact"] = max(
            _rel_error(
                kernels.distance_from_affinity(kernels.affinity_from_sums(a)[0])[0],
                kernels.distance_from_affinity(kernels.affinity_from_sums(b)[0])[0],
            )
            for a, b in zip(space.kernel_sums_, exact.kernel_sums_, strict=True)
        )
        row["same_cv_choice"] = bool(exact.query_bandwidth_ == space.query_bandwidth_)
        if prepared.layout.n_responses <= 30_000:
            # the straightforward O(N^2) pairwise sum, itself checked against Eq. (1) as
            # written (pkps_core/space/definition.py)
            worst = 0.0
            query_sq = kernels.squared_distances(exact.query_vectors_)
            for sigma, fast in zip(exact.bandwidth_grid_, exact.kernel_sums_, strict=True):
                qk = kernels.query_kernel_matrix(query_sq, sigma)
                slow = kernel_sums(
                    prepared.layout, exact.features_, qk, "linear", method="pairwise"
                )
                worst = max(
                    worst,
                    _rel_error(
                        kernels.distance_from_affinity(kernels.affinity_from_sums(fast)[0])[0],
                        kernels.distance_from_affinity(kernels.affinity_from_sums(slow)[0])[0],
                    ),
                )
            row["exact_vs_pairwise"] = worst
    row["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
