"""Tables for the trust tools (issue 9): interval coverage and extrapolation warnings.

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/trust_table.py [--seeds 8]

(a) Coverage and mean width of the 90 % conformal intervals (:mod:`pkps_core.trust`) under
    the query-efficiency protocol (budgets m = 1 and 4, family holdout, every observed cell
    a target in turn) against each cell's full-task score, per data set, budget and method,
    pooled over seeds — on the synthetic generator (60 models × 12 tasks, 3 models per
    family, the same 24 queries per task answered by every model) and on AlpacaEval
    (``../shared/data/alpaca_eval/alpaca_eval_40.parquet``; skipped if absent).
(b) The extrapolation warning against large errors: under the second paper's splits
    (``extrapolation``: bottom 50 % of models by full score are the references, top 30 %
    the targets; ``interpolation``: a random 75/25 split), every target cell (core set of
    ``--core-set`` queries per task) is "large error" when its absolute error exceeds the
    median target-cell error of the same method in the interpolation split; the confusion
    table counts warned / not warned against large / not large, pooled over seeds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from pkps_core.predict import build_context, predict
from pkps_core.protocols import full_scores, mask_query_efficiency, mask_split, prepare_records
from pkps_core.synthetic import make_synthetic
from pkps_core.trust import coverage_table, reason_words

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
COVERAGE_METHODS = ["sample", "pkps", "ensemble"]
# lrmc is left out by default: its cross-conformal calibration costs ~30 s per split and seed.
SPLIT_METHODS = ["sample", "rs-learn", "aipw", "irt", "dkps", "pkps", "ensemble"]


def datasets() -> dict[str, pd.DataFrame]:
    out = {
        "synthetic": make_synthetic(
            n_models=60, n_tasks=12, budget=24, rho=1.0, pool_size=24, random_state=0
        ).records
    }
    if ALPACA.exists():
        out["alpaca_eval"] = pd.read_parquet(ALPACA)
    else:
        print(f"(skipping AlpacaEval: {ALPACA} not found)")
    return out


def _with_truth(predictions: pd.DataFrame, truth: pd.Series) -> pd.DataFrame:
    index = pd.MultiIndex.from_frame(predictions[["model", "task"]])
    return predictions.assign(true_score=truth.reindex(index).to_numpy())


def coverage_rows(records: pd.DataFrame, budgets, seeds, level: float) -> pd.DataFrame:
    truth = full_scores(records)
    parts = []
    for budget in budgets:
        for seed in seeds:
            masked = mask_query_efficiency(records, budget=budget, seed=seed)
            context = build_context(masked, holdout="family", space_params={"random_state": seed})
            frame = predict(context, COVERAGE_METHODS, intervals=level)
            parts.append(_with_truth(frame, truth).assign(budget=budget, seed=seed))
    return pd.concat(parts, ignore_index=True)


def split_rows(
    records: pd.DataFrame, split: str, seeds, core_set: int, level: float, methods=SPLIT_METHODS
):
    truth = full_scores(records)
    parts = []
    for seed in seeds:
        masked, targets = mask_split(records, split, core_set=core_set, seed=seed)
        context = build_context(
            masked, holdout="family", targets=list(targets), space_params={"random_state": seed}
        )
        frame = predict(context, methods, intervals=level)
        frame = frame[frame["model"].isin(targets)]
        parts.append(_with_truth(frame, truth).assign(split=split, seed=seed))
    frame = pd.concat(parts, ignore_index=True).dropna(subset=["prediction", "true_score"])
    frame["abs_err"] = (frame["prediction"] - frame["true_score"]).abs()
    return frame


def confusion(extrapolation: pd.DataFrame, interpolation: pd.DataFrame) -> pd.DataFrame:
    median = interpolation.groupby("method")["abs_err"].median()
    rows = []
    for split, frame in (("extrapolation", extrapolation), ("interpolation", interpolation)):
        for method, part in frame.groupby("method", sort=False):
            large = part["abs_err"] > median[method]
            warned = part["extrapolation"].astype(bool)
            inside = (part["lower"] <= part["true_score"]) & (part["true_score"] <= part["upper"])
            rows.append(
                {
                    "split": split,
                    "method": method,
                    "interp_median_err": median[method],
                    "cells": len(part),
                    "large_err": int(large.sum()),
                    "warned&large": int((warned & large).sum()),
                    "warned&small": int((warned & ~large).sum()),
                    "quiet&large": int((~warned & large).sum()),
                    "quiet&small": int((~warned & ~large).sum()),
                    "recall": (warned & large).sum() / max(large.sum(), 1),
                    "warn_rate": warned.mean(),
                    "mae": part["abs_err"].mean(),
                    "coverage": inside[part["lower"].notna()].mean(),
                    "warned_coverage": inside[part["lower"].notna() & warned].mean(),
                    "quiet_coverage": inside[part["lower"].notna() & ~warned].mean(),
                    "mean_width": (part["upper"] - part["lower"]).mean(),
                }
            )
    return pd.DataFrame(rows)


def seed_table(extrapolation: pd.DataFrame, interpolation: pd.DataFrame) -> pd.DataFrame:
    """Recall (extrapolation split) and warn rate (random split) per method and seed."""
    median = interpolation.groupby("method")["abs_err"].median()
    large = extrapolation["abs_err"] > extrapolation["method"].map(median)
    warned = extrapolation["extrapolation"].astype(bool)
    recall = (warned & large).groupby([extrapolation["method"], extrapolation["seed"]]).sum() / (
        large.groupby([extrapolation["method"], extrapolation["seed"]]).sum().clip(lower=1)
    )
    rate = interpolation.groupby(["method", "seed"])["extrapolation"].mean()
    table = pd.concat({"recall": recall, "warn_rate": rate}, axis=1)
    table = table.drop(index="sample", level="method", errors="ignore")
    return table.unstack("seed").swaplevel(axis=1).sort_index(axis=1, level=0, sort_remaining=False)


def reason_kind(reason: str) -> str:
    """The check a reason clause comes from, without its numbers
    (:func:`pkps_core.trust.reason_words`' short label)."""
    return reason_words(reason, short=True)[0]


def reason_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells per check that fired (a cell counts once per check) and split."""
    frame = frame[frame["method"] != "sample"]
    warned = frame[frame["extrapolation"].astype(bool)]
    clauses = warned.assign(reason=warned["extrapolation_reason"].str.split("; ")).explode("reason")
    clauses["reason"] = clauses["reason"].map(reason_kind)
    splits = list(dict.fromkeys(frame["split"]))
    counts = clauses.groupby(["reason", "split"]).size().unstack("split", fill_value=0)
    counts = counts.reindex(columns=splits)
    cells = frame.groupby("split").size()
    counts.loc["(warned cells)"] = warned.groupby("split").size()
    counts.loc["(all cells)"] = cells
    return counts.fillna(0).astype(int)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+seeds-1")
    parser.add_argument("--budgets", default="1,4")
    parser.add_argument("--core-set", type=int, default=16)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--skip", default="", help="comma-separated: coverage,splits")
    parser.add_argument(
        "--split-methods", default=",".join(SPLIT_METHODS), help="methods of table (b)"
    )
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    skip = set(filter(None, args.skip.split(",")))
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    for name, raw in datasets().items():
        started = time.perf_counter()
        records = prepare_records(raw)
        print(
            f"\n=== {name}: {records['model'].nunique()} models, {records['task'].nunique()} "
            f"tasks, {len(records)} responses (prepared in {time.perf_counter() - started:.1f} s)"
        )
        if "coverage" not in skip:
            started = time.perf_counter()
            rows = coverage_rows(records, budgets, seeds, args.level)
            table = coverage_table(rows, by=["budget", "method"]).reset_index()
            per_seed = rows.dropna(subset=["lower", "true_score"]).assign(
                inside=lambda f: (f["lower"] <= f["true_score"]) & (f["true_score"] <= f["upper"])
            )
            spread = per_seed.groupby(["budget", "method", "seed"])["inside"].mean()
            spread = spread.groupby(level=["budget", "method"]).agg(["min", "max"])
            table = table.join(spread.add_prefix("seed_").reset_index(drop=True))
            print(
                f"\n(a) {name}: coverage of the {args.level:.0%} intervals, query-efficiency, "
                f"seeds {seeds.start}-{seeds.stop - 1} ({time.perf_counter() - started:.0f} s)"
            )
            print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        if "splits" not in skip:
            started = time.perf_counter()
            methods = args.split_methods.split(",")
            extrapolation, interpolation = (
                split_rows(records, split, seeds, args.core_set, args.level, methods)
                for split in ("extrapolation", "interpolation")
            )
            print(
                f"\n(b) {name}: extrapolation warnings vs error > interpolation median, core "
                f"set {args.core_set}, seeds {seeds.start}-{seeds.stop - 1} "
                f"({time.perf_counter() - started:.0f} s)"
            )
            print(
                confusion(extrapolation, interpolation).to_string(
                    index=False, float_format=lambda x: f"{x:.3f}"
                )
            )
            both = pd.concat([extrapolation, interpolation])
            print("\nper seed (recall in the extrapolation split / warn rate in the random split):")
            spread = seed_table(extrapolation, interpolation)
            print(spread.to_string(float_format=lambda x: f"{x:.2f}"))
            print("\nwhy the warning fired (cells, all methods but sample, by split):")
            print(reason_counts(both).to_string())


if __name__ == "__main__":
    main()
