"""Each ensemble member of the new-model prediction, refit path against the fitted predictor.

Run from the repository root (about 10 minutes on 2 cores for the defaults)::

    PYTHONPATH=. .venv/bin/python bench/predictor_members.py --budget 4 --mode responses-only

One point of the new-model protocol of ``bench/new_model_table.py`` (AlpacaEval-40, a quarter
of the families as new models, family holdout), seed by seed: the refit path (one context
with every target, their shadows and the references in a joint MDS, Eq. 2) and the fitted
predictor under each ``neighbours`` given (``--placements``: "out-of-sample", the default —
the references' MDS with shadows and new models placed out of sample —, and "embedding" —
the joint MDS of references and shadows, new models placed into it). For every member the
cell MAE and the Spearman correlation of the targets' overall scores (the tasks weighted by
their queries, as the protocol's overall score) with the truth; then each placement's
difference from the refit path, seed by seed (mean ± SEM). The stack's weights say which
members a difference reaches.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
REFIT = "refit"


def _members(context, rows: np.ndarray) -> dict[str, pd.DataFrame]:
    """Every member's (and the ensemble's) predictions of the ``rows`` models."""
    from pkps_core.methods.stacking import STACK_MEMBERS

    out = {}
    for name in [*STACK_MEMBERS, "ensemble"]:
        kept = context.cache.get(("method", name))
        if kept is not None:
            grid = np.asarray(kept[0])[rows]
            out[name] = pd.DataFrame(grid, index=context.models[rows], columns=context.tasks)
    return out


def one_seed(path: str, budget: int, mode: str, seed: int, placements: list[str]) -> pd.DataFrame:
    """The long rows (seed, path, member, spearman, cell_mae) of one seed."""
    from threadpoolctl import threadpool_limits

    from pkps_core.predict import build_context, predict
    from pkps_core.predictor import ReferencePredictor
    from pkps_core.protocols import prepare_records
    from pkps_core.protocols.masks import full_scores, mask_new_model
    from pkps_core.protocols.new_model_reports import _spearman
    from pkps_core.trust.cells import task_query_counts

    threadpool_limits(1)
    records = prepare_records(pd.read_parquet(path))
    masked, targets = mask_new_model(records, budget, mode=mode, target_share=0.25, seed=seed)
    targets = list(targets)
    truth = full_scores(records).unstack("task")
    queries = task_query_counts(records)
    grids = {}
    context = build_context(
        masked, holdout="family", targets=targets, space_params={"random_state": seed}
    )
    predict(context, ["ensemble"], intervals=0.9)
    grids[REFIT] = _members(context, np.isin(context.models, targets))
    references = masked[~masked["model"].isin(targets)]
    for placement in placements:
        predictor = ReferencePredictor(
            holdout="family", random_state=seed, neighbours=placement
        ).fit(references, lazy=True)
        _, contexts = predictor.predict_contexts(masked[masked["model"].isin(targets)])
        placed = {}
        for placed_context, _ in contexts:
            for name, frame in _members(placed_context, np.asarray(placed_context.rows)).items():
                placed[name] = pd.concat([placed.get(name), frame])
        grids[placement] = placed
    rows = []
    for label, members in grids.items():
        for name, frame in members.items():
            true = truth.reindex(index=frame.index, columns=frame.columns).to_numpy(float)
            weight = queries.reindex(frame.columns).to_numpy(float)
            predicted = frame.to_numpy(float)
            overall = (predicted * weight).sum(axis=1) / weight.sum()
            true_overall = (true * weight).sum(axis=1) / weight.sum()
            errors = np.abs(predicted - true)
            rows.append(
                {
                    "seed": seed,
                    "path": label,
                    "member": name,
                    "spearman": _spearman(pd.Series(true_overall), pd.Series(overall)),
                    "cell_mae": float(np.nanmean(errors)) if np.isfinite(errors).any() else np.nan,
                }
            )
    return pd.DataFrame(rows)


def tables(long: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per member and path: mean Spearman and cell MAE over seeds; and per member and
    placement: its Spearman minus the refit path's, seed by seed (mean ± SEM). Members
    that predicted no target cell (the own-score ones, responses-only) are left out."""
    long = long[long.groupby("member")["cell_mae"].transform("count") > 0]
    paths = [REFIT, *[p for p in dict.fromkeys(long["path"]) if p != REFIT]]
    grouped = long.groupby(["member", "path"])[["spearman", "cell_mae"]].mean()
    means = pd.DataFrame({"member": sorted(long["member"].unique())})
    for value in ("spearman", "cell_mae"):
        for path in paths:
            column = grouped[value].xs(path, level="path")
            means[f"{value} {path}"] = means["member"].map(column).round(4).to_numpy()
    wide = long.pivot_table(index=["seed", "member"], columns="path", values="spearman")
    rows = []
    for placement in [c for c in wide.columns if c != REFIT]:
        difference = (wide[placement] - wide[REFIT]).dropna().groupby(level="member")
        for member, values in difference:
            rows.append(
                {
                    "member": member,
                    "placement": placement,
                    "spearman_difference": values.mean(),
                    "sem": values.std(ddof=1) / np.sqrt(len(values)),
                    "n_seeds": len(values),
                }
            )
    return means, pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--mode", default="responses-only")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--placements", default="out-of-sample,embedding")
    parser.add_argument("--input", default=str(ALPACA))
    args = parser.parse_args()
    if not Path(args.input).exists():
        print(f"skipped: {args.input} is absent")
        return
    placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    started = time.perf_counter()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=spawn) as pool:
        parts = [
            pool.submit(one_seed, args.input, args.budget, args.mode, seed, placements)
            for seed in range(args.seeds)
        ]
        long = pd.concat([part.result() for part in parts], ignore_index=True)
    means, differences = tables(long)
    print(
        f"{args.mode}, m = {args.budget}, {args.seeds} seeds; "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    from bench.new_model_table import _plain_markdown

    print(_plain_markdown(means))
    print()
    print(_plain_markdown(differences.round(4)))


if __name__ == "__main__":
    main()
