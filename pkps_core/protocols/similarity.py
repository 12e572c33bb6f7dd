"""Model similarity (the second paper): agreement beyond chance and the item-score spread."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def chance_agreement(p_a: float | np.ndarray, p_b: float | np.ndarray) -> np.ndarray:
    """``c_exp = p_a p_b + (1 − p_a)(1 − p_b)``: agreement of independent Bernoullis."""
    p_a, p_b = np.asarray(p_a, dtype=float), np.asarray(p_b, dtype=float)
    return p_a * p_b + (1.0 - p_a) * (1.0 - p_b)


def agreement_beyond_chance(a: np.ndarray, b: np.ndarray) -> float:
    """``(c_obs − c_exp) / (1 − c_exp)`` of two binary score vectors on the same items.

    ``c_obs`` is the share of items where the two agree, ``c_exp`` the chance agreement of
    their accuracies (:func:`chance_agreement`). NaN when ``c_exp = 1`` (both constant and
    equal: agreement carries no information beyond chance).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError("a and b must be non-empty 1-d vectors of the same length")
    observed = float(np.mean(a == b))
    expected = float(chance_agreement(a.mean(), b.mean()))
    if np.isclose(expected, 1.0):
        return float("nan")
    return (observed - expected) / (1.0 - expected)


def model_similarity(target: np.ndarray, sources: np.ndarray) -> float:
    """S(f): mean over sources f' of the agreement beyond chance of f and f'.

    Parameters
    ----------
    target : ndarray (n_items,) of 0/1
        The target's item scores s(f, z) on a task.
    sources : ndarray (n_sources, n_items) of 0/1, NaN where a source has no score
        Each source is compared on the items both answered.

    Notes
    -----
    The second paper (following Mania et al. 2019 and Goel et al. 2025) averages the
    chance-corrected agreement ``(c_obs − c_exp) / (1 − c_exp)`` over the source models,
    with ``c_obs`` the observed and ``c_exp`` the chance agreement rate.
    """
    target = np.asarray(target, dtype=float)
    values = []
    for source in np.atleast_2d(np.asarray(sources, dtype=float)):
        both = np.isfinite(source) & np.isfinite(target)
        if both.any():
            values.append(agreement_beyond_chance(target[both], source[both]))
    values = [v for v in values if np.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")


def _is_binary(scores: pd.Series) -> bool:
    values = scores.dropna().to_numpy()
    return len(values) > 0 and bool(np.isin(values, (0.0, 1.0)).all())


def similarity_and_spread(
    records: pd.DataFrame, sources: Sequence[str], targets: Sequence[str]
) -> pd.DataFrame:
    """Per (target, task): similarity to the sources and the item-score spread sigma_f.

    Computed on the full records (an analysis quantity, never seen by a method).
    ``similarity`` is NaN on non-binary tasks; ``sigma`` is the standard deviation of the
    target's item scores (``sqrt(p (1 − p))`` on a binary task).
    """
    rows = []
    for task, in_task in records.groupby("task", sort=True):
        table = in_task.pivot_table(index="model", columns="query_id", values="score")
        binary = _is_binary(in_task["score"])
        source_rows = table.reindex([s for s in sources if s in table.index]).to_numpy()
        for target in targets:
            if target not in table.index:
                continue
            scores = table.loc[target].to_numpy()
            finite = scores[np.isfinite(scores)]
            similarity = model_similarity(scores, source_rows) if binary else float("nan")
            rows.append(
                {
                    "model": target,
                    "task": task,
                    "similarity": similarity,
                    "sigma": float(finite.std()) if len(finite) else float("nan"),
                }
            )
    return pd.DataFrame(rows, columns=["model", "task", "similarity", "sigma"])
