"""How far the new-model ensemble moves from itself: the noise floor under the comparison of
the fitted predictor (``ensemble-placed``) with the refit path (``ensemble``).

Run from the repository root (about 20 minutes on 2 cores for the defaults)::

    PYTHONPATH=. .venv/bin/python bench/predictor_noise_floor.py --seeds 24

The new-model protocol of ``bench/new_model_table.py`` (AlpacaEval-40, a quarter of the
families as new models, family holdout, 90 % intervals) runs once per draw (``--draws``,
default 2; two processes at a time), with both methods: the first draw as that bench runs
it, each other one with every fit's random draws moved (``draw_offset`` = 1000 × the draw:
the calibration shadows, the spaces' ``random_state``, the predictor's) while the masks —
the targets and the responses they kept — stay the same. Each method is then compared
with itself on the same targets (its first two draws), and the placed ensemble with the
refit one within each draw, as ``bench/new_model_table.py --paired`` does: cell MAE, the
overall-score Spearman over the ~10 targets of a seed and its seed-by-seed difference
(mean ± SEM), 90 % coverage; and the placed − refit Spearman averaged over every draw. The
first ``--issue-seeds`` seeds (default 8, the predictor issue's protocol) are tabulated on
their own too.

A difference between two methods means something only beside the difference between a
method and itself.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

REFIT, PLACED = "ensemble", "ensemble-placed"
REDRAWN = " (redrawn)"  # the second draw's methods
DRAW_STEP = 1000  # draw k moves every fit's random draws by k × DRAW_STEP


def drawn(method: str, draw: int) -> str:
    """The method's label in draw ``draw`` (0: as bench/new_model_table.py runs it)."""
    return method if draw == 0 else method + (REDRAWN if draw == 1 else f" (draw {draw})")


ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"


def _sweep(path: str, seeds: list[int], budgets: list[int], modes: list[str], draw: int):
    """One protocol run (in a worker process, BLAS on one thread): the long rows, the
    methods of a moved draw renamed (:func:`drawn`)."""
    offset = draw * DRAW_STEP
    from pkps_core.protocols import new_model_protocol, prepare_records

    records = prepare_records(pd.read_parquet(path))

    def progress(fraction: float, message: str) -> None:
        print(f"  [offset {offset}: {fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    result = new_model_protocol(
        records,
        budgets=budgets,
        modes=modes,
        seeds=seeds,
        holdout="family",
        methods=[REFIT, PLACED],
        progress=progress,
        draw_offset=offset,
    )
    long = result.long
    return long.assign(method=long["method"].map(lambda method: drawn(method, draw)))


def comparisons(long: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The four paired tables: each method against its other draw, and the placed ensemble
    against the refit one within each draw."""
    from bench.new_model_table import paired_comparison

    pairs = [
        ("The refit path against itself, its fits' draws moved", REFIT, REFIT + REDRAWN),
        ("The fitted predictor against itself, its draws moved", PLACED, PLACED + REDRAWN),
        ("The fitted predictor against the refit path (first draw)", REFIT, PLACED),
        (
            "The fitted predictor against the refit path (moved draw)",
            REFIT + REDRAWN,
            PLACED + REDRAWN,
        ),
    ]
    return [(title, paired_comparison(long, a, b)) for title, a, b in pairs]


def spread_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, m), seed by seed (mean ± SEM over seeds): the placed − refit Spearman
    difference averaged over every draw, each method against its other draw, and the
    per-seed standard deviation of one draw's placed − refit beside refit′ − refit."""
    from bench.new_model_table import seed_spearman

    rho = seed_spearman(long)
    draws = [d for d in range(len(rho.columns)) if drawn(PLACED, d) in rho.columns]
    placed = rho[PLACED] - rho[REFIT]
    each = [rho[drawn(PLACED, d)] - rho[drawn(REFIT, d)] for d in draws]
    columns = {
        f"placed − refit, the {len(draws)} draws averaged": sum(each) / len(each),
        "refit′ − refit": rho[REFIT + REDRAWN] - rho[REFIT],
        "placed′ − placed": rho[PLACED + REDRAWN] - rho[PLACED],
    }
    rows = []
    for (mode, budget), index in placed.groupby(level=["mode", "budget"]).groups.items():
        row = {"mode": mode, "m": int(budget)}
        for name, values in columns.items():
            part = values.loc[index].dropna()
            sem = part.std(ddof=1) / np.sqrt(len(part))
            row[name] = f"{part.mean():+.3f} ± {sem:.3f}"
        sd = [values.loc[index].std(ddof=1) for values in (placed, columns["refit′ − refit"])]
        row["sd per seed: placed − refit / refit′ − refit"] = f"{sd[0]:.3f} / {sd[1]:.3f}"
        rows.append(row)
    return pd.DataFrame(rows)


def draws_table(long: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, m), every draw side by side: each draw's placed − refit Spearman (mean
    over seeds), the placed ensemble's cell MAE over the refit one's (each averaged over
    the draws), and the range of each method's 90 % coverage over the draws."""
    from bench.new_model_table import cell_mae, interval_coverage, seed_spearman

    rho = seed_spearman(long)
    draws = [d for d in range(len(rho.columns)) if drawn(PLACED, d) in rho.columns]
    rows = []
    for (mode, budget), part in long.groupby(["mode", "budget"], sort=True):
        row = {"mode": mode, "m": int(budget)}
        index = (mode, budget)
        for d in draws:
            difference = rho.loc[index, drawn(PLACED, d)] - rho.loc[index, drawn(REFIT, d)]
            row[f"draw {d + 1}"] = f"{difference.dropna().mean():+.3f}"
        mae = {m: np.mean([cell_mae(part, drawn(m, d)) for d in draws]) for m in (REFIT, PLACED)}
        row["cell MAE placed / refit"] = f"{mae[PLACED] / mae[REFIT] - 1:+.1%}"
        for m, label in ((REFIT, "refit"), (PLACED, "placed")):
            covered = [interval_coverage(part, drawn(m, d)) for d in draws]
            row[f"coverage {label}"] = f"{min(covered):.2f}–{max(covered):.2f}"
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--issue-seeds", type=int, default=8)
    parser.add_argument("--budgets", default="1,2,4,8,16")
    parser.add_argument("--modes", default="scored,responses-only")
    parser.add_argument("--draws", type=int, default=2, help="draws of every fit (≥ 2)")
    parser.add_argument("--input", default=str(ALPACA))
    parser.add_argument("--out", help="also write the long rows of every draw here (.csv)")
    parser.add_argument(
        "--long", help="tabulate these saved --out files (comma-separated) instead of running"
    )
    args = parser.parse_args()
    from bench.new_model_table import _plain_markdown

    started = time.perf_counter()
    if args.long:
        long = pd.concat([pd.read_csv(p) for p in args.long.split(",")], ignore_index=True)
    else:
        if not Path(args.input).exists():
            print(f"skipped: {args.input} is absent")
            return
        seeds = list(range(args.seeds))
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core per run
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(2, mp_context=spawn) as pool:
            runs = [
                pool.submit(_sweep, args.input, seeds, budgets, modes, draw)
                for draw in range(args.draws)
            ]
            long = pd.concat([run.result() for run in runs], ignore_index=True)
        if args.out:
            long.to_csv(args.out, index=False)
    n_seeds = long["seed"].nunique()
    targets = long.groupby("seed")["n_targets"].first()
    n_draws = sum(drawn(PLACED, d) in set(long["method"]) for d in range(long["method"].nunique()))
    print(
        f"{n_seeds} seeds ({targets.min()}–{targets.max()} targets each), {n_draws} draws "
        f"(moved by {DRAW_STEP} each); {time.perf_counter() - started:.0f} s"
    )
    print(
        "\n### The overall-score Spearman, seed by seed: the placed ensemble against the refit"
        f" one, and each against its own other draw (all {n_seeds} seeds)\n"
    )
    print(_plain_markdown(spread_table(long)))
    print(
        "\n### Draw by draw: placed − refit Spearman (mean over seeds), cell MAE over all "
        "draws, 90 % coverage's range over the draws\n"
    )
    print(_plain_markdown(draws_table(long)))
    first = sorted(long["seed"].unique())[: args.issue_seeds]
    for label, part in (
        (f"all {n_seeds} seeds", long),
        (f"seeds {first[0]}–{first[-1]}", long[long["seed"].isin(first)]),
    ):
        for title, table in comparisons(part):
            print(f"\n### {title}, {label}\n")
            print(_plain_markdown(table))


if __name__ == "__main__":
    main()
