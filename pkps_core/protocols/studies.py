"""Small seeded study drivers shared by tests, benchmarks and the tables of docs/results/.

:func:`synthetic_query_efficiency` (PKPS Figure 2a–b on the synthetic generator) and
:func:`estimation_gap_study` (the second paper's estimation gap on a 2PL item bank,
:func:`pkps_core.itemsim.make_2pl`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pkps_core.methods.sampling import aipw_predict, rs_learn_predict
from pkps_core.predict import predict
from pkps_core.protocols.masks import SPLITS, split_models
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


def estimation_gap_study(
    scores: np.ndarray,
    splits: Sequence[str] = SPLITS,
    seeds: Sequence[int] = range(20),
    *,
    n_core: int = 50,
) -> pd.DataFrame:
    """Estimation gap of Random-Sampling, Random-Sampling-Learn and AIPW (second paper).

    For every split and seed: sources and targets by :func:`split_models`, a core set C of
    ``n_core`` items drawn at random (shared by all targets, as in the paper); the full
    scores s̄(f, D) are the item means over all N items. Sources are fully observed,
    targets only on C.

    Returns
    -------
    DataFrame
        Columns split, seed, method (``random-sampling``, ``rs-learn``, ``aipw``) and gap:
        the mean over targets of ``|h(f) − s̄(f, D)|`` (score units; ×100 for points).
    """
    scores = np.asarray(scores, dtype=float)
    full = scores.mean(axis=1)
    n_items = scores.shape[1]
    rows = []
    for split in splits:
        for seed in seeds:
            rng = np.random.default_rng(seed)
            sources, targets = split_models(full, split, rng)
            core = np.sort(rng.choice(n_items, size=n_core, replace=False))
            estimates = {
                "random-sampling": scores[np.ix_(targets, core)].mean(axis=1),
                "rs-learn": rs_learn_predict(
                    scores[np.ix_(sources, core)], full[sources], scores[np.ix_(targets, core)]
                ),
                "aipw": np.array(
                    [aipw_predict(scores[sources], scores[f, core], core) for f in targets]
                ),
            }
            for method, estimate in estimates.items():
                gap = float(np.abs(estimate - full[targets]).mean())
                rows.append({"split": split, "seed": seed, "method": method, "gap": gap})
    return pd.DataFrame(rows)
