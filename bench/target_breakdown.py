"""Overall-score accuracy of the new-model protocol split by which targets are in it.

Reads the long results that ``bench/new_model_table.py --out FILE`` writes and reports, per
mode, budget and method, the overall-score MAE (and its ratio to the ``mean`` baseline's) and
Spearman's rho over the targets: for all of them, for the targets whose name matches
``--split`` (a regular expression; default the FuseChat models, which no AlpacaEval reference
resembles) and for the rest. Shows where an overall number comes from, e.g.::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/new_model_table.py --seeds 8 \\
        --modes responses-only --methods mean,pkps --budgets 4 --no-intervals --out long.csv
    PYTHONPATH=. .venv/bin/python bench/target_breakdown.py long.csv
"""

from __future__ import annotations

import argparse

import pandas as pd

from pkps_core.protocols.reports import overall_scores, overall_table

LEVERS = ["budget", "mode"]


def breakdown(long: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """One row per (targets, mode, budget, method): overall MAE, its ratio to ``mean``'s,
    Spearman (each the mean over seeds), the mean number of targets per seed and the
    number of seeds with such targets."""
    overall = overall_scores(long, LEVERS)
    matches = overall["model"].str.contains(pattern, regex=True)
    parts = {
        "all targets": overall,
        f"matching {pattern!r}": overall[matches],
        f"not matching {pattern!r}": overall[~matches],
    }
    rows = []
    for name, part in parts.items():
        if part.empty:
            continue
        table = overall_table(part, LEVERS)
        floor = table[table["method"] == "mean"].set_index(LEVERS)["mae"]
        for _, row in table.iterrows():
            key = (row["budget"], row["mode"])
            rows.append(
                {
                    "targets": name,
                    "mode": row["mode"],
                    "m": row["budget"],
                    "method": row["method"],
                    "overall MAE": row["mae"],
                    "× mean": row["mae"] / floor[key] if key in floor.index else float("nan"),
                    "Spearman": row["spearman"],
                    "targets per seed": row["n_targets"],
                    "seeds": row["n_seeds"],
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("long", help="a long CSV from bench/new_model_table.py --out")
    parser.add_argument("--split", default="FuseChat", help="regular expression on model names")
    args = parser.parse_args()
    # Model names are data: keep "NA"/"None" as text.
    long = pd.read_csv(args.long, keep_default_na=False, na_values=[""])
    table = breakdown(long, args.split)
    print("| " + " | ".join(table.columns) + " |")
    print("|" + "---|" * len(table.columns))
    for _, row in table.iterrows():
        cells = [(f"{v:.3f}" if v == v else "—") if isinstance(v, float) else str(v) for v in row]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
