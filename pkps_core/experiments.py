"""Small, seeded experiment drivers shared by tests, benchmarks and the CLI."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pkps_core.predict import predict
from pkps_core.synthetic import make_synthetic


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


def subsample_cells(
    records: pd.DataFrame, budget: int, *, rho: float = 0.0, random_state: int = 0
) -> pd.DataFrame:
    """Mask every (model, task) cell to ``budget`` queries: the query-efficiency protocol.

    A fraction ``rho`` of each cell's queries comes from a pool shared by all models of the
    task; the rest is sampled independently per model (so pairing is controlled). Each
    cell's ``reference_score`` is its full-cache mean score (the trusted full-task score),
    unless the input already carries one.
    """
    rng = np.random.default_rng(random_state)
    frame = records.copy()
    if "reference_score" not in frame.columns:
        frame["reference_score"] = frame.groupby(["model", "task"])["score"].transform("mean")
    n_shared = int(round(rho * budget))
    keep = np.zeros(len(frame), dtype=bool)
    for _, task_rows in frame.groupby("task").groups.items():
        task_frame = frame.loc[task_rows]
        queries = task_frame["query_id"].unique()
        shared = set(rng.choice(queries, size=min(n_shared, len(queries)), replace=False))
        for _, cell_rows in task_frame.groupby("model").groups.items():
            cell = frame.loc[cell_rows, "query_id"]
            in_shared = cell.isin(shared).to_numpy()
            chosen = list(np.flatnonzero(in_shared))
            private = np.flatnonzero(~in_shared)
            take = max(0, budget - len(chosen))
            chosen += list(rng.choice(private, size=min(take, len(private)), replace=False))
            keep[frame.index.get_indexer(cell.index[chosen])] = True
    return frame[keep].reset_index(drop=True)


def query_efficiency(
    records: pd.DataFrame,
    budgets: Sequence[int] = (1, 4),
    seeds: Sequence[int] = range(4),
    methods: Sequence[str] = ("sample", "dkps", "pkps"),
    *,
    rho: float = 0.0,
    holdout: str = "family",
    space_params: dict | None = None,
) -> pd.DataFrame:
    """MAE per method of the query-efficiency protocol on a (dense) real cache.

    Returns a long frame: budget, seed, method, mae (mean absolute error over all cells
    against the full-cache reference).
    """
    rows = []
    for budget in budgets:
        for seed in seeds:
            masked = subsample_cells(records, budget, rho=rho, random_state=seed)
            predictions = predict(masked, methods, holdout=holdout, space_params=space_params)
            error = (predictions["prediction"] - predictions["reference_score"]).abs()
            for method, mae in error.groupby(predictions["method"]).mean().items():
                rows.append({"budget": budget, "seed": seed, "method": method, "mae": mae})
    return pd.DataFrame(rows)
