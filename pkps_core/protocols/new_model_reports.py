"""The new-model protocol's reports: each target's overall score, and the intervals.

:func:`overall_scores` weighs a target's task scores by the task's queries (its
leaderboard number), :func:`overall_table` gives their MAE and Spearman rank correlation
over targets then seeds, :func:`interval_table` the coverage and width of the intervals
on the target cells (:func:`format_intervals` for the page).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def overall_scores(
    long: pd.DataFrame, levers: Sequence[str], weights: pd.Series | None = None
) -> pd.DataFrame:
    """Each target's overall score per (seed, levers, method): the weighted mean over tasks.

    The weight of a task is its number of distinct queries in the full records, so the
    overall score is the score over all the benchmark's queries (a model's "leaderboard"
    number). The same weights average the predictions and the truths.

    Parameters
    ----------
    long : DataFrame
        A long table (new-model: one row per seed, levers, method, target, task).
    levers : sequence of str
    weights : Series, optional
        Indexed by task; default the long table's ``task_queries`` column.

    Returns
    -------
    DataFrame
        Columns ``seed, *levers, method, model, y_true, y_pred, abs_err, n_tasks``;
        ``y_pred`` is NaN when the method did not predict every task of the model.
    """
    keys = ["seed", *levers, "method", "model"]
    columns = [*keys, "y_true", "y_pred", "abs_err", "n_tasks"]
    if not len(long):
        return pd.DataFrame(columns=columns)
    w = long["task_queries"] if weights is None else long["task"].map(weights)
    w = w.to_numpy(dtype=float)
    if not (np.isfinite(w) & (w > 0)).all():
        raise ValueError("every task needs a positive weight (its number of queries)")
    frame = long[keys].assign(
        w=w,
        wt=w * long["y_true"].to_numpy(dtype=float),
        wp=w * long["y_pred"].to_numpy(dtype=float),
        missing=long["y_pred"].isna().to_numpy(),
    )
    grouped = frame.groupby(keys, sort=True, dropna=False)
    sums = grouped[["w", "wt", "wp", "missing"]].sum()
    out = pd.DataFrame(
        {
            "y_true": sums["wt"] / sums["w"],
            "y_pred": (sums["wp"] / sums["w"]).where(sums["missing"] == 0),
            "n_tasks": grouped.size(),
        }
    )
    out["abs_err"] = (out["y_pred"] - out["y_true"]).abs()
    return out.reset_index()[columns]


def _spearman(truth: pd.Series, prediction: pd.Series) -> float:
    """Spearman's rho over the finite pairs; NaN with fewer than three or a constant side."""
    pairs = pd.DataFrame({"t": truth, "p": prediction}).dropna()
    if len(pairs) < 3 or pairs.nunique().min() < 2:
        return float("nan")
    from scipy.stats import spearmanr  # here: scipy.stats takes 0.5 s to import

    return float(spearmanr(pairs["t"], pairs["p"]).statistic)


def overall_table(overall: pd.DataFrame, levers: Sequence[str]) -> pd.DataFrame:
    """MAE and Spearman rank correlation of the overall scores over targets, then over seeds.

    Per (seed, levers, method): the MAE over the targets with a prediction and Spearman's
    rho between the targets' true and predicted overall scores (NaN with fewer than three
    targets); then their mean and standard error over seeds (``std(ddof=1) / sqrt(n)``,
    over the seeds where the value is finite).

    Returns
    -------
    DataFrame
        Columns ``*levers, method, mae, sem, spearman, spearman_sem, n_seeds, n_targets,
        coverage`` (``n_targets``: mean per seed; ``coverage``: share of targets predicted).
    """
    keys = [*levers, "method"]
    columns = [*keys, "mae", "sem", "spearman", "spearman_sem", "n_seeds", "n_targets"]
    columns.append("coverage")
    if not len(overall):
        return pd.DataFrame(columns=columns)
    rows = []
    for key, part in overall.groupby(["seed", *keys], sort=True, dropna=False):
        predicted = part["y_pred"].notna()
        rows.append(
            {
                **dict(zip(["seed", *keys], key, strict=True)),
                "mae": part.loc[predicted, "abs_err"].mean() if predicted.any() else np.nan,
                "spearman": _spearman(part["y_true"], part["y_pred"]),
                "n_targets": len(part),
                "coverage": predicted.mean(),
            }
        )
    grouped = pd.DataFrame(rows).groupby(keys, sort=True, dropna=False)
    table = pd.DataFrame(
        {
            "mae": grouped["mae"].mean(),
            "sem": grouped["mae"].std(ddof=1) / np.sqrt(grouped["mae"].count()),
            "spearman": grouped["spearman"].mean(),
            "spearman_sem": grouped["spearman"].std(ddof=1) / np.sqrt(grouped["spearman"].count()),
            "n_seeds": grouped.size(),
            "n_targets": grouped["n_targets"].mean(),
            "coverage": grouped["coverage"].mean(),
        }
    )
    return table.reset_index()[columns]


def interval_table(long: pd.DataFrame, levers: Sequence[str]) -> pd.DataFrame:
    """Coverage and width of the intervals on the target cells, per (levers, method).

    Pooled over seeds and cells: ``coverage`` is the share of the cells with a finite
    interval whose truth lies in it (``lower <= y_true <= upper``), ``mean_width`` their
    mean ``upper - lower``, ``with_interval`` the share of all cells that have a finite
    interval, ``n_cells`` the number of cells.

    Returns
    -------
    DataFrame
        Columns ``*levers, method, coverage, mean_width, with_interval, n_cells`` (empty
        when ``long`` has no ``lower`` / ``upper``).
    """
    keys = [*levers, "method"]
    columns = [*keys, "coverage", "mean_width", "with_interval", "n_cells"]
    if not len(long) or not {"lower", "upper"} <= set(long.columns):
        return pd.DataFrame(columns=columns)
    lower = long["lower"].to_numpy(dtype=float)
    upper = long["upper"].to_numpy(dtype=float)
    truth = long["y_true"].to_numpy(dtype=float)
    finite = np.isfinite(lower) & np.isfinite(upper)
    inside = np.where(finite, (lower <= truth) & (truth <= upper), np.nan)
    frame = long[keys].assign(
        inside=inside, width=np.where(finite, upper - lower, np.nan), finite=finite
    )
    grouped = frame.groupby(keys, sort=True, dropna=False)
    table = pd.DataFrame(
        {
            "coverage": grouped["inside"].mean(),
            "mean_width": grouped["width"].mean(),
            "with_interval": grouped["finite"].mean(),
            "n_cells": grouped.size(),
        }
    )
    return table.reset_index()[columns]


def format_intervals(
    intervals: pd.DataFrame, levers: Sequence[str], digits: int = 2
) -> pd.DataFrame:
    """:func:`interval_table` as a levers × methods table of ``"coverage / width"`` strings.

    ``"—"`` where a method has no interval on any cell; a share of cells with an interval
    below 1 is appended in brackets (e.g. ``"0.88 / 0.31 (50%)"``).
    """
    if not len(intervals):
        return pd.DataFrame()
    text = []
    for row in intervals.itertuples():
        if not np.isfinite(row.coverage):
            text.append("—")
            continue
        entry = f"{row.coverage:.{digits}f} / {row.mean_width:.{digits}f}"
        text.append(entry if row.with_interval >= 1 else f"{entry} ({row.with_interval:.0%})")
    frame = intervals.assign(text=text)
    return frame.pivot_table(
        index=list(levers), columns="method", values="text", aggfunc="first", dropna=False
    )
