"""What to evaluate next, measured: where a new model's next queries should go.

Run from the repository root::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/next_queries.py --seeds 8

The new-model protocol's situation (:func:`pkps_core.protocols.masks.mask_new_model`, scored,
family holdout): per seed a quarter of the families of AlpacaEval 40 are new models that
answered ``--start`` queries per task. The stacked ensemble predicts them with 90 %
intervals, exactly as the New model page does. Each target then gets ``--extra`` more
queries, spread over its tasks by one of these rules, and is predicted again:

* ``uniform``: the same number per task (the larger tasks first for the remainder);
* ``task size``: one at a time to the task whose query-weighted share of the overall
  score's variance drops most if every task's item SD were the same
  (``w_t² (1/n_t − 1/(n_t + 1))``);
* ``cell gain``: one at a time to the cell whose interval one more query is expected to
  narrow most (:func:`pkps_core.views.new_model.expected_gain`, the width shrinking like
  a standard error), the New model page's ranking before this measurement;
* ``overall gain``: one at a time to the task whose next query is expected to narrow the
  overall score's interval most (:func:`overall_gain`).

``uniform`` is what the New model and Predictions pages now recommend
(:func:`pkps_core.trust.next_cells`: the fewest responses first).

The extra queries are the target's own unseen responses on that task, in one random order
per cell (the same order for every rule). Reported: the MAE of the targets' overall score
(query-weighted mean over tasks, against the full-task scores) for the ensemble and the
sample score, mean ± SEM over seeds, each rule's per-seed difference from ``uniform``, and
the overall score's interval width after (``sqrt(Σ w_t² width_t²) / Σ w_t``, the ensemble's
cell intervals taken as independent).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.new_model_table import ALPACA
from pkps_core.predict import build_context, predict
from pkps_core.protocols import prepare_records
from pkps_core.protocols.masks import full_scores, mask_new_model
from pkps_core.trust import task_query_counts
from pkps_core.views.new_model import LEVEL, METHOD, expected_gain

RULES = ("uniform", "task size", "cell gain", "overall gain")


def overall_gain(width: np.ndarray, n: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per task, how much one more query there is expected to narrow the overall score's
    interval, the cells' intervals taken as independent.

    With task weights ``w`` (queries per task) the overall width is
    ``W = sqrt(Σ w_t² width_t²) / Σ w_t``; one more query narrows task t's cell to
    ``width_t · sqrt(n_t / (n_t + 1))`` (a standard error's shrinkage), and the gain is
    ``W`` minus the overall width after that. Tasks without an interval (or without
    responses) add nothing to ``W`` and get NaN.
    """
    width = np.asarray(width, dtype=float)
    n = np.asarray(n, dtype=float)
    w = np.asarray(weights, dtype=float)
    usable = np.isfinite(width) & (n > 0)
    if not usable.any():
        return np.full(len(width), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        narrowed = width * np.sqrt(n / (n + 1.0))
    terms = np.where(usable, (w * width) ** 2, 0.0)
    total = float(terms.sum())
    after = total - terms + np.where(usable, (w * narrowed) ** 2, 0.0)
    gain = (np.sqrt(total) - np.sqrt(np.maximum(after, 0.0))) / w[usable].sum()
    return np.where(usable, gain, np.nan)


def allocate(
    rule: str, n: np.ndarray, width: np.ndarray, weights: np.ndarray, extra: int, room: np.ndarray
) -> np.ndarray:
    """Extra queries per task for one target under ``rule`` (at most ``room`` per task)."""
    n = n.astype(float).copy()
    width = width.astype(float).copy()
    added = np.zeros(len(n), dtype=int)
    size_rank = np.argsort(np.argsort(-weights, kind="stable"), kind="stable")  # 0: largest
    for _ in range(extra):
        open_ = added < room
        if not open_.any():
            break
        if rule == "uniform":
            fewest = np.where(open_, added, np.iinfo(int).max)
            t = int(np.lexsort((size_rank, fewest))[0])
        else:
            if rule == "task size":
                gain = weights**2 * (1.0 / n - 1.0 / (n + 1.0))
            elif rule == "cell gain":
                cells = pd.DataFrame({"lower": 0.0, "upper": width, "n_responses": n})
                gain = expected_gain(cells).to_numpy()
            elif rule == "overall gain":
                gain = overall_gain(width, n, weights)
            else:
                raise ValueError(rule)
            gain = np.where(open_ & np.isfinite(gain), gain, -np.inf)
            t = int(np.argmax(gain))
        added[t] += 1
        width[t] *= np.sqrt(n[t] / (n[t] + 1.0))
        n[t] += 1.0
    return added


def predict_targets(frame: pd.DataFrame, targets: np.ndarray) -> pd.DataFrame:
    """The New model page's prediction (the ensemble, 90 % intervals) of the targets."""
    context = build_context(frame.drop(columns="_row"), holdout="family", targets=list(targets))
    out = predict(context, [METHOD], intervals=LEVEL)
    return out[(out["method"] == METHOD) & out["model"].isin(targets)]


def overall(frame: pd.DataFrame, column: str, weights: pd.Series) -> pd.Series:
    w = frame["task"].map(weights).astype(float)
    value = frame[column].astype(float)
    ok = value.notna()
    return (value[ok] * w[ok]).groupby(frame.loc[ok, "model"]).sum() / w[ok].groupby(
        frame.loc[ok, "model"]
    ).sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--start", type=int, default=2, help="queries per task at the start")
    parser.add_argument("--extra", type=int, default=10, help="extra queries per target")
    parser.add_argument("--input", default=str(ALPACA))
    args = parser.parse_args()
    if not Path(args.input).exists():
        print(f"skipped: {args.input} is absent")
        return
    started = time.perf_counter()
    records = prepare_records(pd.read_parquet(args.input))
    records["_row"] = np.arange(len(records))
    weights = task_query_counts(records)
    truth = overall(full_scores(records).rename("y").reset_index(), "y", weights)
    tasks = np.asarray(sorted(weights.index))
    w = weights.reindex(tasks).to_numpy(dtype=float)
    rows = []
    for seed in range(args.seeds):
        masked, targets = mask_new_model(records, args.start, mode="scored", seed=seed)
        rng = np.random.default_rng([seed, 11])
        kept = set(masked["_row"])
        pool = records[records["model"].isin(targets) & ~records["_row"].isin(kept)]
        pool = pool.iloc[rng.permutation(len(pool))]
        unseen = dict(tuple(pool.groupby(["model", "task"])))  # each cell in its drawn order

        before = predict_targets(masked, targets)
        for rule in RULES:
            extra_rows = []
            for model in targets:
                own = before[before["model"] == model].set_index("task").reindex(tasks)
                n = own["n_responses"].to_numpy(dtype=float)
                width = (own["upper"] - own["lower"]).to_numpy(dtype=float)
                free = np.array([len(unseen.get((model, t), ())) for t in tasks])
                added = allocate(rule, n, width, w, args.extra, free)
                extra_rows += [
                    unseen[(model, t)].head(k) for t, k in zip(tasks, added, strict=True) if k
                ]
            after = predict_targets(pd.concat([masked, *extra_rows], ignore_index=True), targets)
            predicted = overall(after, "prediction", weights)
            sample = overall(after, "sample_score", weights)
            cell_width = (after["upper"] - after["lower"]).astype(float)
            ww = after["task"].map(weights).astype(float)
            spread = ((ww * cell_width) ** 2).groupby(after["model"]).sum() ** 0.5 / ww.groupby(
                after["model"]
            ).sum()
            for model in targets:
                rows.append(
                    {
                        "seed": seed,
                        "rule": rule,
                        "model": model,
                        "ensemble": abs(predicted.get(model, np.nan) - truth[model]),
                        "sample": abs(sample.get(model, np.nan) - truth[model]),
                        "width": spread.get(model, np.nan),
                    }
                )
        print(
            f"seed {seed}: {len(targets)} targets, {time.perf_counter() - started:.0f} s",
            flush=True,
        )
    long = pd.DataFrame(rows)
    per_seed = long.groupby(["seed", "rule"])[["ensemble", "sample", "width"]].mean()
    table = per_seed.groupby("rule").agg(["mean", "sem"]).reindex(list(RULES))
    diff = per_seed.sub(per_seed.xs("uniform", level="rule"), level="seed")
    diffs = diff.groupby("rule").agg(["mean", "sem"]).reindex(list(RULES))
    print(
        f"\n{args.seeds} seeds, {args.start} queries per task at the start, "
        f"{args.extra} extra per target; overall-score MAE (mean ± SEM over seeds):\n"
    )
    print("| rule | ensemble | sample | ensemble − uniform | sample − uniform | overall width |")
    print("|---|---|---|---|---|---|")
    for rule in RULES:
        cells = [
            f"{table.loc[rule, (c, 'mean')]:.4f} ± {table.loc[rule, (c, 'sem')]:.4f}"
            for c in ("ensemble", "sample")
        ]
        cells += [
            f"{diffs.loc[rule, (c, 'mean')]:+.4f} ± {diffs.loc[rule, (c, 'sem')]:.4f}"
            for c in ("ensemble", "sample")
        ]
        cells.append(f"{table.loc[rule, ('width', 'mean')]:.4f}")
        print(f"| {rule} | " + " | ".join(cells) + " |")
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
