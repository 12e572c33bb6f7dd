"""The RBF response kernel at the Perspective page's size: exact pair sums vs the opt-in
Nyström features of the responses (issue 19: "Perspective space on AlpacaEval, response
kernel → rbf: 178 s").

Run from the repository root::

    PYTHONPATH=. .venv/bin/python bench/rbf_response.py

On ``../shared/data/alpaca_eval/alpaca_eval_40.parquet`` (32k responses, default TF-IDF +
SVD embedding) when present, else on the synthetic ``M unpaired`` benchmark cache. Fits
the cross-validated PKPS space (default grid) with ``affinity_method="exact"`` and
``"nystrom"``; prints time, each bandwidth's path and reported error, and the true
max |ΔD| / max D against the exact sums.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.space import PerspectiveSpace, kernels
from pkps_core.space.prepare import prepare_cache

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"


def _distance(sums) -> np.ndarray:
    return kernels.distance_from_affinity(kernels.affinity_from_sums(sums)[0])[0]


def main() -> None:
    if ALPACA.exists():
        name, records = "AlpacaEval 40", pd.read_parquet(ALPACA)
    else:
        from bench.caches import make_bench_records

        name, records = "synthetic M unpaired", make_bench_records("M", "unpaired")
    started = time.perf_counter()
    prepared = prepare_cache(records)
    print(
        f"{name}: {prepared.layout.n_responses} responses, {prepared.layout.n_models} models, "
        f"features {prepared.response_vectors.shape[1]}-d; prepared in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    fits, rows = {}, []
    for method in ("exact", "nystrom"):
        started = time.perf_counter()
        fits[method] = PerspectiveSpace(response_kernel="rbf", affinity_method=method).fit(prepared)
        seconds = time.perf_counter() - started
        rows.append({"method": method, "seconds": round(seconds, 1)})
        print(f"{method}: {seconds:.1f} s", flush=True)
    exact, fast = fits["exact"], fits["nystrom"]
    for k, report in enumerate(fast.affinity_reports_):
        d_exact, d_fast = _distance(exact.kernel_sums_[k]), _distance(fast.kernel_sums_[k])
        print(
            f"  bandwidth {report.bandwidth:.4g}: {report.path}, reported {report.error:.2e} "
            f"({report.error_kind}), true {np.abs(d_fast - d_exact).max() / d_exact.max():.2e}"
        )
    print(pd.DataFrame(rows).to_string(index=False))
    print(f"same bandwidth chosen: {exact.query_bandwidth_ == fast.query_bandwidth_}")


if __name__ == "__main__":
    sys.exit(main())
