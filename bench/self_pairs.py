"""Eq. (1) as written (self pairs included) vs the U-statistic (excluded), measured.

Synthetic (the paper's generator, rho = 0) and, when present, AlpacaEval 40 under the
query-efficiency protocol (cells masked to m queries, sampled independently per model;
references = full-cache means; family holdout). Usage: ``python -m bench.self_pairs``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from pkps_core.embed import embed_records
from pkps_core.protocols import query_efficiency_protocol, summarise, synthetic_query_efficiency
from pkps_core.records import validate_records

ALPACA = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "alpaca_eval"
    / "alpaca_eval_40.parquet"
)


def main() -> None:
    frames = []
    for self_pairs in ("include", "exclude"):
        result = synthetic_query_efficiency(
            budgets=(1, 2, 4),
            rhos=(0.0,),
            seeds=range(10),
            methods=("pkps",),
            space_params={"self_pairs": self_pairs},
        )
        result["method"] = f"pkps-{self_pairs}"
        frames.append(result)
    print("Synthetic (n=60, T=12, rho=0, 10 seeds), MAE vs true score, family holdout")
    print(summarise(pd.concat(frames), by=["budget"]).to_string())
    if not ALPACA.exists():
        print(f"{ALPACA} absent: skipping the real-data comparison")
        return
    started = time.perf_counter()
    records = embed_records(validate_records(pd.read_parquet(ALPACA)))
    print(
        f"\nembedded AlpacaEval ({len(records)} responses) in {time.perf_counter() - started:.1f} s"
    )
    rows = []
    for self_pairs in ("include", "exclude"):
        params = {"self_pairs": self_pairs, "query_components": 64, "response_components": "elbow"}
        result = query_efficiency_protocol(
            records,
            budgets=(1, 4, 16),
            seeds=range(4),
            methods=("sample", "dkps", "pkps"),
            space_params=params,
        )
        summary = result.summary.copy()
        spaces = summary.method != "sample"
        summary.loc[spaces, "method"] += f"-{self_pairs}"
        rows.append(summary if self_pairs == "include" else summary[spaces])
    table = pd.concat(rows)
    table["mae"] = table["mae"].round(4).astype(str) + " ± " + table["sem"].round(4).astype(str)
    print("AlpacaEval 40 (rho=0, 4 seeds), MAE vs full-cache mean, family holdout")
    print(table.pivot(index="budget", columns="method", values="mae").to_string())


if __name__ == "__main__":
    main()
