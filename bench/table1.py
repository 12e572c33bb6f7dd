"""Our "Table 1" (PKPS paper, Table 1) on AlpacaEval: query efficiency and completion.

Run from the repository root::

    PYTHONPATH=. .venv/bin/python bench/table1.py --seeds 8

On ``../shared/data/alpaca_eval/alpaca_eval_40.parquet`` (40 models, 5 tasks, every model
answered every item; scores are judge preferences in [0, 1], so IRT does not apply):

* query efficiency (:func:`pkps_core.protocols.query_efficiency_protocol`): every cell
  masked to m ∈ {1, 8} queries, drawn independently per model (rho = 0), full cohort and
  coverage; every model a target in turn under family holdout; truth = full-task score.
* completion (:func:`pkps_core.protocols.completion_protocol`): p_task = p_query = 0.5 at
  cohort n ∈ {10, 40}, and the sparse column p_task = 0.2 at n = 10; MAE on hidden cells.

Entries are the mean ± SEM over seeds of the per-seed mean over tasks of the MAE; "—"
where a method does not apply. The texts are embedded once (TF-IDF + SVD, the default
embedder) before any masking. ``--space pca`` adds the paper's PCA of the embeddings
(queries ≤ 64 components, responses at the Zhu–Ghodsi elbow). Wilcoxon signed-rank tests
follow the paper: ensemble (and every other method) vs the sample score at m = 1, and vs
LRMC at each completion point, on per-task mean error differences (5 tasks, so the
smallest two-sided p-value possible is 0.0625).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from pkps_core.protocols import completion_protocol, prepare_records, query_efficiency_protocol

ALPACA = Path(__file__).resolve().parents[2] / "shared/data/alpaca_eval/alpaca_eval_40.parquet"
METHODS = ["sample", "irt", "lrmc", "dkps", "pkps", "ensemble"]
SPACES = {
    "default": {},
    "pca": {"query_components": 64, "response_components": "elbow"},
    "include": {"self_pairs": "include"},
    "exclude": {"self_pairs": "exclude"},
}


def _cell(mae: float, sem: float) -> str:
    return "—" if pd.isna(mae) else f"{mae:.4f} ± {sem:.4f}"


def _column(summary: pd.DataFrame, where: dict) -> dict[str, str]:
    rows = summary
    for lever, value in where.items():
        rows = rows[rows[lever] == value]
    return {row.method: _cell(row.mae, row.sem) for row in rows.itertuples()}


def _progress(fraction: float, message: str) -> None:
    print(f"  [{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--space", choices=sorted(SPACES), default="default")
    parser.add_argument("--input", default=str(ALPACA))
    parser.add_argument("--out", help="also write the long results here (.csv)")
    args = parser.parse_args()
    if not Path(args.input).exists():
        print(f"skipped: {args.input} is absent")
        return
    pd.set_option("display.width", 220)
    pd.set_option("display.max_columns", 30)
    space_params = SPACES[args.space]
    seeds = range(args.seeds)

    started = time.perf_counter()
    records = prepare_records(pd.read_parquet(args.input))
    n_models = records["model"].nunique()
    print(
        f"{len(records)} responses, {n_models} models, {records['task'].nunique()} tasks; "
        f"embedded once in {time.perf_counter() - started:.1f} s"
    )

    clock = time.perf_counter()
    efficiency = query_efficiency_protocol(
        records,
        budgets=(1, 8),
        rhos=(0.0,),
        seeds=seeds,
        methods=("sample", "irt", "dkps", "pkps", "ensemble"),
        space_params=space_params,
        progress=_progress,
    )
    print(f"query efficiency: {time.perf_counter() - clock:.1f} s")
    clock = time.perf_counter()
    dense = completion_protocol(
        records,
        p_tasks=(0.5,),
        p_queries=(0.5,),
        cohorts=(10, None),
        seeds=seeds,
        space_params=space_params,
        progress=_progress,
    )
    sparse = completion_protocol(
        records,
        p_tasks=(0.2,),
        p_queries=(0.5,),
        cohorts=(10,),
        seeds=seeds,
        space_params=space_params,
        progress=_progress,
    )
    print(f"completion: {time.perf_counter() - clock:.1f} s")

    columns = {
        "QE m=1": _column(efficiency.summary, {"budget": 1}),
        "QE m=8": _column(efficiency.summary, {"budget": 8}),
        "compl n=10": _column(dense.summary, {"cohort": 10}),
        f"compl n={n_models}": _column(dense.summary, {"cohort": n_models}),
        "compl n=10 p_task=0.2": _column(sparse.summary, {"cohort": 10}),
    }
    table = pd.DataFrame(columns).reindex(METHODS).fillna("—")
    print(
        f"\nTable 1 (AlpacaEval, {args.seeds} seeds, space={args.space}): MAE, mean ± SEM over "
        "seeds of the per-seed mean over tasks"
    )
    print(table.to_string())

    tests = pd.concat(
        [
            efficiency.tests.assign(point=lambda t: "QE m=" + t["budget"].astype(str)),
            dense.tests.assign(point=lambda t: "compl n=" + t["cohort"].astype(str)),
            sparse.tests.assign(point="compl n=10 p_task=0.2"),
        ],
        ignore_index=True,
    )
    shown = [
        "point",
        "method",
        "comparator",
        "mean_diff",
        "tasks_better",
        "tasks_tested",
        "p_value",
        "frac_cells_better",
        "n_cells",
    ]
    print("\nWilcoxon signed-rank tests (two-sided) on per-task mean error differences:")
    print(tests[shown].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(f"\ntotal {time.perf_counter() - started:.1f} s")
    if args.out:
        long = pd.concat([efficiency.long, dense.long, sparse.long], ignore_index=True)
        long.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
