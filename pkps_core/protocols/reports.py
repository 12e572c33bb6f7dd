"""What a protocol run returns: the long table, its summary, Wilcoxon tests, correlations.

The summary follows the PKPS appendix "Sweeps and reporting" (per seed the mean over tasks of
the per-task MAE, then mean ± SEM over seeds), the tests its "Statistical tests" (signed-rank
tests on per-task error differences).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, wilcoxon

PROTOCOLS = ("query-efficiency", "completion", "interpolation", "extrapolation")
LEVERS = {
    "query-efficiency": ("budget", "rho", "cohort", "p_task"),
    "completion": ("cohort", "n_tasks", "p_task", "p_query"),
    "interpolation": ("core_set",),
    "extrapolation": ("core_set",),
}
# The comparator of the Wilcoxon tests and the lever whose smallest value the tests use
# (None: every operating point is tested).
COMPARATORS = {
    "query-efficiency": ("sample", "budget"),
    "completion": ("lrmc", None),
    "interpolation": ("sample", None),
    "extrapolation": ("sample", None),
}
LONG_COLUMNS = ("method", "model", "task", "y_true", "y_pred", "abs_err")
SPLIT_COLUMNS = ("similarity", "normalised_gap")


@dataclass
class ProtocolResult:
    """What a protocol run returns.

    Attributes
    ----------
    protocol : str
    levers : tuple of str
        The lever columns of ``long`` (in sweep order).
    long : DataFrame
        One row per (seed, lever values, method, target cell): ``seed, protocol, *levers,
        method, model, task, y_true, y_pred, abs_err`` (plus ``similarity`` and
        ``normalised_gap`` for the split protocols). ``y_pred`` is NaN where a method does
        not apply (e.g. IRT on non-binary scores).
    summary : DataFrame
        :func:`summary_table` of ``long``.
    tests : DataFrame
        :func:`wilcoxon_tests` of ``long``.
    correlations : DataFrame
        :func:`similarity_correlations` (split protocols; empty otherwise).
    """

    protocol: str
    levers: tuple[str, ...]
    long: pd.DataFrame
    summary: pd.DataFrame
    tests: pd.DataFrame
    correlations: pd.DataFrame = field(default_factory=pd.DataFrame)


def make_result(protocol: str, parts: Sequence[pd.DataFrame]) -> ProtocolResult:
    """The :class:`ProtocolResult` of ``protocol`` from the long rows of its (point, seed) runs."""
    levers = LEVERS[protocol]
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    sort = ["seed", *levers, "method", "model", "task"]
    long = long.sort_values(sort, kind="stable").reset_index(drop=True)
    comparator, smallest = COMPARATORS[protocol]
    correlations = similarity_correlations(long) if "similarity" in long.columns else pd.DataFrame()
    return ProtocolResult(
        protocol=protocol,
        levers=levers,
        long=long,
        summary=summary_table(long, levers),
        tests=wilcoxon_tests(long, levers, comparator=comparator, smallest=smallest),
        correlations=correlations,
    )


def combine_results(protocol: str, longs: Sequence[pd.DataFrame]) -> ProtocolResult:
    """One :class:`ProtocolResult` from the long tables of separate runs (e.g. one per seed).

    Each seed's masks and fits depend only on that seed, so running seeds one at a time
    and combining gives the same result as one run over all of them.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return make_result(protocol, [frame for frame in longs if len(frame)])


# ---------------------------------------------------------------------------- reporting


def summary_table(long: pd.DataFrame, levers: Sequence[str]) -> pd.DataFrame:
    """Mean ± SEM over seeds of the per-seed mean over tasks (PKPS "Sweeps and reporting").

    Per (lever values, method, seed, task) the absolute errors are averaged over the
    target cells with a prediction; per seed those task means are averaged; the summary
    is their mean and standard error (``std(ddof=1) / sqrt(n_seeds)``) over seeds.

    Returns
    -------
    DataFrame
        Columns ``*levers, method, mae, sem, n_seeds, n_cells, coverage`` (``coverage``:
        share of target cells the method predicted). ``mae`` is NaN where a method never
        applied.
    """
    columns = [*levers, "method", "mae", "sem", "n_seeds", "n_cells", "coverage"]
    if not len(long):
        return pd.DataFrame(columns=columns)
    keys = [*levers, "method"]
    per_task = long.groupby([*keys, "seed", "task"], dropna=False)["abs_err"].mean()
    per_seed = per_task.groupby(level=[*keys, "seed"], dropna=False).mean()
    grouped = per_seed.groupby(level=keys, dropna=False)
    summary = pd.DataFrame(
        {
            "mae": grouped.mean(),
            "sem": grouped.std(ddof=1) / np.sqrt(grouped.count()),
            "n_seeds": grouped.count(),
        }
    )
    cells = long.groupby(keys, dropna=False)["abs_err"]
    summary["n_cells"] = cells.count()
    summary["coverage"] = cells.count() / cells.size()
    return summary.reset_index()[columns]


def wilcoxon_tests(
    long: pd.DataFrame,
    levers: Sequence[str],
    *,
    comparator: str,
    smallest: str | None = None,
) -> pd.DataFrame:
    """Two-sided Wilcoxon signed-rank tests of each method against ``comparator``.

    At each operating point (each combination of lever values; only the smallest value of
    the lever ``smallest`` when given, e.g. the smallest budget), the per-cell difference
    ``abs_err(method) − abs_err(comparator)`` is averaged per task over models and seeds,
    and the per-task means are tested against zero (:func:`scipy.stats.wilcoxon`). Cells
    where either method has no prediction are left out.

    Returns
    -------
    DataFrame
        Columns ``*levers, method, comparator, tasks_tested, tasks_better, mean_diff,
        statistic, p_value, frac_cells_better, n_cells``; ``mean_diff`` < 0 and
        ``frac_cells_better`` > 0.5 favour the method.
    """
    columns = [
        *levers,
        "method",
        "comparator",
        "tasks_tested",
        "tasks_better",
        "mean_diff",
        "statistic",
        "p_value",
        "frac_cells_better",
        "n_cells",
    ]
    if not len(long) or comparator not in set(long["method"]):
        return pd.DataFrame(columns=columns)
    frame = long
    if smallest is not None:
        frame = frame[frame[smallest] == frame[smallest].min()]
    cell = ["seed", *levers, "model", "task"]
    errors = frame.pivot_table(index=cell, columns="method", values="abs_err", dropna=False)
    rows = []
    for point, at_point in errors.groupby(level=list(levers), dropna=False):
        point = point if isinstance(point, tuple) else (point,)
        for method in errors.columns:
            if method == comparator:
                continue
            paired = at_point[[method, comparator]].dropna()
            if not len(paired):
                continue
            diff = paired[method] - paired[comparator]
            per_task = diff.groupby(level="task").mean()
            statistic, p_value = _wilcoxon(per_task.to_numpy())
            rows.append(
                {
                    **dict(zip(levers, point, strict=True)),
                    "method": method,
                    "comparator": comparator,
                    "tasks_tested": len(per_task),
                    "tasks_better": int((per_task < 0).sum()),
                    "mean_diff": float(diff.mean()),
                    "statistic": float(statistic),
                    "p_value": float(p_value),
                    "frac_cells_better": float((diff < 0).mean()),
                    "n_cells": len(diff),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def _wilcoxon(differences: np.ndarray) -> tuple[float, float]:
    """Two-sided signed-rank test of ``differences`` against 0; NaN when undefined."""
    if not len(differences) or np.allclose(differences, 0.0):
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        # Ties or zeros send scipy to the normal approximation, which warns on tiny n.
        warnings.simplefilter("ignore", RuntimeWarning)
        statistic, p_value = wilcoxon(differences)
    return float(statistic), float(p_value)


def similarity_correlations(long: pd.DataFrame) -> pd.DataFrame:
    """Pearson r between model similarity and normalised gap, per method (second paper).

    Pooled over seeds, targets and tasks where both are finite. Columns ``method, r,
    p_value, n``; r is NaN with fewer than three points or a constant input.
    """
    rows = []
    for method, part in long.groupby("method", sort=True):
        finite = part[["similarity", "normalised_gap"]].dropna()
        finite = finite[np.isfinite(finite).all(axis=1)]
        r = p_value = float("nan")
        if len(finite) >= 3 and finite.nunique().min() > 1:
            r, p_value = pearsonr(finite["similarity"], finite["normalised_gap"])
        rows.append({"method": method, "r": float(r), "p_value": float(p_value), "n": len(finite)})
    return pd.DataFrame(rows, columns=["method", "r", "p_value", "n"])


def format_summary(summary: pd.DataFrame, levers: Sequence[str], digits: int = 4) -> pd.DataFrame:
    """The summary as a levers × methods table of ``"mae ± sem"`` strings ("—": no value)."""
    if not len(summary):
        return pd.DataFrame()
    text = [
        "—"
        if not np.isfinite(mae)
        else f"{mae:.{digits}f} ± {0.0 if np.isnan(sem) else sem:.{digits}f}"
        for mae, sem in zip(summary["mae"], summary["sem"], strict=True)
    ]
    frame = summary.assign(text=text)
    return frame.pivot_table(
        index=list(levers), columns="method", values="text", aggfunc="first", dropna=False
    )
