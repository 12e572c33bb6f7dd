"""Tables for the baselines (issue 5): the second paper's study and leave-one-family-out MAE.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python bench/baselines_table.py

(a) Estimation gap (percentage points, mean ± SEM over seeds) of Random-Sampling,
    Random-Sampling-Learn and AIPW on a 2PL bank of 80 models × 500 items, core set 50,
    under the random 75/25 split and the extrapolation split (bottom 50 % sources, top
    30 % targets) — "How Benchmark Prediction from Fewer Data Misses the Mark".
(b) MAE of ``predict --methods sample,irt,lrmc,rs-learn,aipw,dkps,pkps,ensemble
    --holdout family`` against the true full-task scores:
    - the synthetic demo (``make_synthetic()`` defaults: every cell observed with 4
      unpaired queries) and the same generator with half the cells missing;
    - AlpacaEval (``../shared/data/alpaca_eval/alpaca_eval_40.parquet``, if present) as
      stored: every model answered every item, so the reference of a cell *is* its sample
      score (the table measures how well each method recovers it without the cell);
    - AlpacaEval as a query-efficiency + completion problem: 30 % of the families are
      targets that keep 16 random items per task and lose one task entirely; the other
      models keep every response; references are the full-task means.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pkps_core.itemsim import make_2pl
from pkps_core.predict import predict
from pkps_core.protocols import estimation_gap_study
from pkps_core.records import default_family
from pkps_core.synthetic import make_synthetic

METHODS = ["sample", "irt", "lrmc", "rs-learn", "aipw", "dkps", "pkps", "ensemble"]
ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"


def second_paper_table(seeds: int) -> pd.DataFrame:
    bank = make_2pl(n_models=80, n_items=500, random_state=0)
    gaps = estimation_gap_study(bank.scores, seeds=range(seeds), n_core=50)
    grouped = gaps.groupby(["method", "split"])["gap"]
    mean = grouped.mean().unstack("split") * 100
    sem = grouped.sem().unstack("split") * 100
    return mean.round(2).astype(str) + " ± " + sem.round(2).astype(str)


def mae_columns(predictions: pd.DataFrame, truth: pd.DataFrame, label: str) -> pd.DataFrame:
    """MAE per method on observed and on missing cells (n = cells with a prediction)."""
    frame = predictions.merge(truth, on=["model", "task"])
    frame = frame.dropna(subset=["true_score"])
    kind = np.where(frame["n_responses"] > 0, "observed", "missing")
    error = (frame["prediction"] - frame["true_score"]).abs()
    columns = {}
    for name in ("observed", "missing"):
        part = error[kind == name]
        if not len(part):
            continue
        methods = frame.loc[kind == name, "method"]
        mae = part.groupby(methods).mean()
        count = part.notna().groupby(methods).sum()
        total = methods.value_counts()
        columns[f"{label} {name}"] = {
            m: "n/a" if count[m] == 0 else f"{mae[m]:.4f} ({count[m]}/{total[m]})"
            for m in mae.index
        }
    return pd.DataFrame(columns)


def run_predict(records: pd.DataFrame, targets=None, **space) -> tuple[pd.DataFrame, float]:
    started = time.perf_counter()
    predictions = predict(
        records, METHODS, holdout="family", targets=targets, space_params=space or None
    )
    return predictions, time.perf_counter() - started


def synthetic_tables() -> list[pd.DataFrame]:
    tables = []
    for label, kwargs in (("synthetic", {}), ("synthetic p_task=0.5", {"p_task": 0.5})):
        cache = make_synthetic(**kwargs)
        predictions, seconds = run_predict(cache.records, response_kernel="rbf")
        print(f"  {label}: {len(cache.records)} responses, predict {seconds:.1f} s")
        tables.append(mae_columns(predictions, cache.truth[["model", "task", "true_score"]], label))
    return tables


def alpaca_tables(path: Path, seed: int = 0) -> list[pd.DataFrame]:
    records = pd.read_parquet(path)
    full = records.groupby(["model", "task"])["score"].mean().rename("true_score").reset_index()

    predictions, seconds = run_predict(records)
    print(f"  alpaca as stored: {len(records)} responses, predict {seconds:.1f} s")
    tables = [mae_columns(predictions, full, "alpaca as stored")]

    rng = np.random.default_rng(seed)
    families = records["model"].map(default_family)
    unique = np.sort(families.unique())
    target_families = rng.choice(unique, size=int(round(0.3 * len(unique))), replace=False)
    target_models = np.sort(records.loc[families.isin(target_families), "model"].unique())
    tasks = np.sort(records["task"].unique())
    keep = []
    for (model, task), cell in records.groupby(["model", "task"]):
        if model not in target_models:
            keep.append(cell)
            continue
        dropped_task = tasks[hash_index(model, len(tasks), seed)]
        if task == dropped_task:
            continue
        keep.append(cell.sample(n=min(16, len(cell)), random_state=int(rng.integers(1 << 31))))
    cache = pd.concat(keep, ignore_index=True).merge(
        full.rename(columns={"true_score": "reference_score"}), on=["model", "task"]
    )
    predictions, seconds = run_predict(cache, targets=list(target_models))
    print(
        f"  alpaca targets: {len(target_models)} target models of {len(target_families)} "
        f"families, {len(cache)} responses, predict {seconds:.1f} s"
    )
    on_targets = predictions[predictions["model"].isin(target_models)]
    tables.append(mae_columns(on_targets, full, "alpaca targets m=16"))
    return tables


def hash_index(model: str, n: int, seed: int) -> int:
    """A stable pseudo-random task index per model (independent of dict/hash seeds)."""
    return int(np.random.default_rng([seed, *model.encode()]).integers(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--skip-alpaca", action="store_true")
    args = parser.parse_args()
    pd.set_option("display.width", 200)

    started = time.perf_counter()
    print(f"(a) estimation gap, points, mean ± SEM over {args.seeds} seeds (2PL 80 × 500, n=50)")
    print(second_paper_table(args.seeds).to_string())
    print(f"  [{time.perf_counter() - started:.1f} s]\n")

    print("(b) MAE against the true full-task score, holdout=family; (cells predicted / cells)")
    tables = synthetic_tables()
    if ALPACA.exists() and not args.skip_alpaca:
        tables += alpaca_tables(ALPACA)
    else:
        print(f"  AlpacaEval skipped ({ALPACA} absent or --skip-alpaca)")
    table = pd.concat(tables, axis=1).reindex(METHODS).fillna("—")
    print(table.T.to_string())


if __name__ == "__main__":
    main()
