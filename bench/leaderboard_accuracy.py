"""The completed leaderboard on a sparse AlpacaEval store, against the full data, over seeds.

Per seed: AlpacaEval-40 with half of each model's (model, task) cells removed (2 or 3 of
its 5, drawn per model) and the rest thinned to 4 responses, ingested into a fresh store
(texts embedded by the store), the reference predictor fitted on it as it is, and the
leaderboard built (:func:`pkps_core.leaderboard.build_leaderboard`). Against each model's
full-data overall score (the mean over its 805 scored responses):

- Spearman of the leaderboard's overall, of the observed responses' mean score, and of
  the observed responses' mean logit score (a diagnostic: the judge's graded scale);
- coverage of the overall 90 % interval (the query-weighted mean of the cells' ends) and
  of the narrower independent-errors interval, and their mean widths;
- the overall's mean absolute error, and the time to fit and to build the table.

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
    board = build_leaderboard(records, predictor)
    board_seconds = time.perf_counter() - started
    models = board.models.set_index("model")
    full = truth.reindex(models.index)
    observed = sparse.groupby("model")["score"].mean().reindex(models.index)
    clipped = sparse["score"].clip(LOGIT_EPS, 1 - LOGIT_EPS)
    logit = np.log(clipped / (1 - clipped)).groupby(sparse["model"]).mean().reindex(models.index)

    def covered(low: str, high: str) -> float:
        return float(((models[low] <= full) & (full <= models[high])).mean())

    return {
        "seed": seed,
        "spearman": spearmanr(models["overall"], full).statistic,
        "spearman_observed": spearmanr(observed, full).statistic,
        "spearman_observed_logit": spearmanr(logit, full).statistic,
        "coverage": covered("lower", "upper"),
        "coverage_independent": covered("lower_independent", "upper_independent"),
        "width": float((models["upper"] - models["lower"]).mean()),
        "width_independent": float(
            (models["upper_independent"] - models["lower_independent"]).mean()
        ),
        "mae": float((models["overall"] - full).abs().mean()),
        "mae_observed": float((observed - full).abs().mean()),
        "fit_s": fit_seconds,
        "board_s": board_seconds,
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
