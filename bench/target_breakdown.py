"""Overall-score accuracy of the new-model protocol split by which targets are in it.

Reads the long results that ``bench/new_model_table.py --out FILE`` writes and reports, per
mode, budget and method, the overall-score MAE (and its ratio to the ``mean`` baseline's:
both the ratio of the means over seeds and, with its standard error, the mean over seeds of
each seed's ratio) and Spearman's rho over the targets: for all of them, for the targets whose
name matches ``--split`` (a regular expression; default the FuseChat models, which no
AlpacaEval reference resembles) and for the rest. Shows where an overall number comes from, e.g.::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/new_model_table.py --seeds 8 \\
        --modes responses-only --methods mean,pkps --budgets 4 --no-intervals --out long.csv
    PYTHONPATH=. .venv/bin/python bench/target_breakdown.py long.csv
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from pkps_core.protocols.reports import overall_scores, overall_table

LEVERS = ["budget", "mode"]


def per_seed_ratio(overall: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over seeds of each seed's overall MAE ÷ the ``mean``
    baseline's in the same seed, per (budget, mode, method); NaN where the baseline is
    missing, and seeds where its MAE is 0 are left out."""
    predicted = overall[overall["y_pred"].notna()]
    mae = predicted.groupby(["seed", *LEVERS, "method"])["abs_err"].mean().unstack("method")
    floor = mae["mean"].where(mae["mean"] > 0) if "mean" in mae.columns else np.nan
    ratios = (
        mae.div(floor, axis=0)
        .reset_index()
        .melt(id_vars=["seed", *LEVERS], var_name="method", value_name="ratio")
    )
    grouped = ratios.groupby([*LEVERS, "method"])["ratio"]
    out = grouped.mean().to_frame("ratio")
    out["ratio_sem"] = grouped.std(ddof=1) / np.sqrt(grouped.count())
    return out.reset_index()


def breakdown(long: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """One row per (targets, mode, budget, method): overall MAE, its ratio to ``mean``'s
    (of the means over seeds, and the mean ± SEM of the per-seed ratios), Spearman (the
    mean over seeds), the mean number of targets per seed and the number of seeds with such
    targets."""
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
        table = overall_table(part, LEVERS).merge(
            per_seed_ratio(part), on=[*LEVERS, "method"], how="left"
        )
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
                    "× mean per seed": row["ratio"],
                    "± SEM": row["ratio_sem"],
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
