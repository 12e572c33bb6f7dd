"""Small, seeded experiment drivers shared by tests, benchmarks and the CLI.

The full protocols (levers, long tables, tests) live in :mod:`pkps_core.protocols`;
:func:`subsample_cells` is re-exported from there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pkps_core.predict import predict
from pkps_core.protocols import subsample_cells
from pkps_core.synthetic import make_synthetic

__all__ = ["subsample_cells", "summarise", "synthetic_query_efficiency"]


def synthetic_query_efficiency(
    budgets: Sequence[int] = (1, 2, 4),
    rhos: Sequence[float] = (0.0, 1.0),
    seeds: Sequence[int] = range(10),
    methods: Sequence[str] = ("sample", "dkps", "pkps"),
    *,
    n_models: int = 60,
    n_tasks: int = 12,
    holdout: str = "family",
    space_params: dict | None = None,
) -> pd.DataFrame:
    """MAE of each method on observed cells of the synthetic cache (PKPS Figure 2a–b).

    For every (budget m, pairing rho, seed) a cache is generated, every observed cell is
    predicted under the holdout, and the MAE against the cell's true score is recorded.

    Returns
    -------
    DataFrame with columns budget, rho, seed, method, mae.
    """
    params = {"response_kernel": "rbf", **(space_params or {})}
    rows = []
    for budget in budgets:
        for rho in rhos:
            for seed in seeds:
                cache = make_synthetic(
                    n_models=n_models, n_tasks=n_tasks, budget=budget, rho=rho, random_state=seed
                )
                predictions = predict(cache.records, methods, holdout=holdout, space_params=params)
                observed = predictions.dropna(subset=["sample_score"])
                error = (observed["prediction"] - observed["reference_score"]).abs()
                for method, mae in error.groupby(observed["method"]).mean().items():
                    rows.append(
                        {"budget": budget, "rho": rho, "seed": seed, "method": method, "mae": mae}
                    )
    return pd.DataFrame(rows)


def summarise(results: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean ± SEM over seeds of the MAE, one column per method."""
    grouped = results.groupby([*by, "method"])["mae"]
    table = grouped.mean().unstack("method")
    sem = (grouped.std(ddof=1) / np.sqrt(grouped.count())).unstack("method")
    return table.round(4).astype(str) + " ± " + sem.round(4).astype(str)
