"""The synthetic table (PKPS paper, Figure 2a–b): sample, DKPS and PKPS by (m, ρ).

Its numbers: docs/results/synthetic.md.

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/synthetic_table.py --seeds 10

The paper's generator (n = 60 models, T = 12 tasks, binary scores; RBF response kernel),
family holdout, MAE of every observed cell against its true score
(:func:`pkps_core.protocols.synthetic_query_efficiency`); mean ± SEM over seeds. At ρ = 0
DKPS's models share no query, so its distances are stand-ins and its cells there are
rounding noise: they moved between environments (0.261–0.267) while every other cell held.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from pkps_core.protocols import synthetic_query_efficiency

GRID = [
    (1, 0.0), (1, 1.0), (2, 0.0), (2, 0.5), (2, 1.0),
    (4, 0.0), (4, 0.25), (4, 1.0), (8, 0.0), (8, 1.0),
]  # fmt: skip
METHODS = ("sample", "dkps", "pkps")


def table(seeds: int) -> pd.DataFrame:
    """Mean and SEM of the per-seed MAE for every (m, ρ) of :data:`GRID` and method."""
    frames = [
        synthetic_query_efficiency(budgets=(m,), rhos=(rho,), seeds=range(seeds), methods=METHODS)
        for m, rho in GRID
    ]
    long = pd.concat(frames, ignore_index=True)
    return long.groupby(["budget", "rho", "method"])["mae"].agg(["mean", "sem"]).reset_index()


def markdown(summary: pd.DataFrame) -> str:
    """The table's layout: one row per (m, ρ), "mean ± sem" per method."""
    lines = ["| m | ρ | sample | DKPS | PKPS |", "|---|---|---|---|---|"]
    for (m, rho), rows in summary.groupby(["budget", "rho"], sort=True):
        cells = rows.set_index("method")
        entries = [
            f"{cells.at[name, 'mean']:.3f} ± {cells.at[name, 'sem']:.3f}" for name in METHODS
        ]
        lines.append(f"| {m} | {rho:g} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    started = time.perf_counter()
    print(markdown(table(args.seeds)))
    print(f"\n{args.seeds} seeds; total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
