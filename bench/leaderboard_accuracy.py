"""The completed leaderboard on a sparse AlpacaEval store, against the full data, over seeds.

Per seed: AlpacaEval-40 with half of each model's (model, task) cells removed (2 or 3 of
its 5, drawn per model) and the rest thinned to 4 responses, ingested into a fresh store
(texts embedded by the store), the reference predictor fitted on it as it is, and the
leaderboard built (:func:`pkps_core.leaderboard.build_leaderboard`): as the app builds it
(``fill="auto"``: no cell is observed here, so the additive logit model fills the table)
and, for comparison, filled by the fitted predictor (``fill="predictor"``, the table
before the logit fill). Against each model's full-data overall score (the mean over its
805 scored responses, which no fill sees):

- Spearman of both tables' overall, of the observed responses' mean score, and of the
  observed responses' mean logit score (a diagnostic: the judge's graded scale);
- coverage of the overall 90 % interval (the query-weighted mean of the cells' ends) of
  both, and of the narrower independent-errors interval, and the mean widths;
- the overall's mean absolute error, the cells left empty, and the time to fit the
  predictor and to build each table.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/leaderboard_accuracy.py --seeds 6
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
BUDGET = 4
LOGIT_EPS = 1e-6


def sparse_split(data: pd.DataFrame, seed: int, budget: int = BUDGET) -> pd.DataFrame:
    """Half of each model's cells removed (odd counts: rounded up or down at random), the
    rest thinned to ``budget`` responses."""
    rng = np.random.default_rng(seed)
    tasks = np.sort(data["task"].unique())
    kept = []
    for model in np.sort(data["model"].unique()):
        removed = len(tasks) // 2 + int(rng.random() < 0.5) * (len(tasks) % 2)
        kept += [(model, t) for t in rng.choice(tasks, len(tasks) - removed, replace=False)]
    cells = pd.DataFrame(kept, columns=["model", "task"])
    sparse = data.merge(cells, on=["model", "task"])
    return sparse.groupby(["model", "task"]).sample(budget, random_state=seed)


def one_seed(data: pd.DataFrame, seed: int, workdir: Path) -> dict:
    from pkps_core.leaderboard import build_leaderboard
    from pkps_core.predictor import stored_predictor
    from pkps_core.store import Store

    sparse = sparse_split(data, seed)
    truth = data.groupby("model")["score"].mean()
    with Store(workdir / f"sparse-{seed}.duckdb") as store:
        store.ingest(sparse, source=f"sparse AlpacaEval, seed {seed}")
        records = store.records()
        started = time.perf_counter()
        predictor = stored_predictor(store, fit="always", records=records)
        fit_seconds = time.perf_counter() - started
    started = time.perf_counter()
    board = build_leaderboard(records, predictor)  # auto: the logit fill on this store
    board_seconds = time.perf_counter() - started
    started = time.perf_counter()
    placed = build_leaderboard(records, predictor, fill="predictor")
    placed_seconds = time.perf_counter() - started
    models = board.models.set_index("model")
    others = placed.models.set_index("model").reindex(models.index)
    full = truth.reindex(models.index)
    observed = sparse.groupby("model")["score"].mean().reindex(models.index)
    clipped = sparse["score"].clip(LOGIT_EPS, 1 - LOGIT_EPS)
    logit = np.log(clipped / (1 - clipped)).groupby(sparse["model"]).mean().reindex(models.index)

    def covered(frame: pd.DataFrame, low: str = "lower", high: str = "upper") -> float:
        return float(((frame[low] <= full) & (full <= frame[high])).mean())

    return {
        "seed": seed,
        "spearman": spearmanr(models["overall"], full).statistic,
        "spearman_predictor": spearmanr(others["overall"], full).statistic,
        "spearman_observed": spearmanr(observed, full).statistic,
        "spearman_observed_logit": spearmanr(logit, full).statistic,
        "coverage": covered(models),
        "coverage_independent": covered(models, "lower_independent", "upper_independent"),
        "coverage_predictor": covered(others),
        "width": float((models["upper"] - models["lower"]).mean()),
        "width_predictor": float((others["upper"] - others["lower"]).mean()),
        "mae": float((models["overall"] - full).abs().mean()),
        "mae_predictor": float((others["overall"] - full).abs().mean()),
        "mae_observed": float((observed - full).abs().mean()),
        "empty_cells": int(board.cells["value"].isna().sum()),
        "fit_s": fit_seconds,
        "board_s": board_seconds,
        "board_predictor_s": placed_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--out", help="write the per-seed table here too (CSV)")
    args = parser.parse_args()
    if not ALPACA.exists():
        print(f"skipped: {ALPACA} is absent")
        return
    data = pd.read_parquet(ALPACA)
    workdir = Path(tempfile.mkdtemp(prefix="pkps-leaderboard-"))
    rows = []
    for seed in range(args.seeds):
        rows.append(one_seed(data, seed, workdir))
        print(" ".join(f"{k}={v:.3f}" for k, v in rows[-1].items()), flush=True)
    table = pd.DataFrame(rows)
    summary = table.drop(columns="seed").agg(["mean", "sem"]).T
    print("\n| measure | mean | SEM |\n|---|---|---|")
    for name, row in summary.iterrows():
        print(f"| {name} | {row['mean']:.3f} | {row['sem']:.3f} |")
    if args.out:
        from pkps_core.outputs import write_table

        write_table(table, args.out)


if __name__ == "__main__":
    main()
