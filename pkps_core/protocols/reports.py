"""What a protocol run returns: the long table, its summary, Wilcoxon tests, correlations.

The summary follows the PKPS appendix "Sweeps and reporting" (per seed the mean over tasks of
the per-task MAE, then mean ± SEM over seeds), the tests its "Statistical tests" (signed-rank
tests on per-task error differences). The new-model protocol adds each target's overall
score (:func:`overall_scores`, :func:`overall_table`) and the intervals' coverage and width
(:func:`interval_table`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import pearsonr, spearmanr, wilcoxon

PROTOCOLS = ("query-efficiency", "completion", "interpolation", "extrapolation", "new-model")
LEVERS = {
    "query-efficiency": ("budget", "rho", "cohort", "p_task"),
    "completion": ("cohort", "n_tasks", "p_task", "p_query"),
    "interpolation": ("core_set",),
    "extrapolation": ("core_set",),
    "new-model": ("budget", "mode"),
}
# The comparator of the Wilcoxon tests and the lever whose smallest value the tests use
# (None: every operating point is tested).
COMPARATORS = {
    "query-efficiency": ("sample", "budget"),
    "completion": ("lrmc", None),
    "interpolation": ("sample", None),
    "extrapolation": ("sample", None),
    "new-model": ("sample", None),
}
# New-model: the comparator of each mode. Without the target's scores the sample score does
# not exist; the references' task mean is the floor a method has to beat.
MODE_COMPARATORS = {"scored": "sample", "responses-only": "mean"}
LONG_COLUMNS = ("method", "model", "task", "y_true", "y_pred", "abs_err")
SPLIT_COLUMNS = ("similarity", "normalised_gap")
# Kept when the predictions carry intervals (always for new-model).
INTERVAL_COLUMNS = ("lower", "upper", "n_responses")


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
        ``normalised_gap`` for the split protocols; ``n_targets``,
        :data:`INTERVAL_COLUMNS` and ``task_queries`` for new-model). ``y_pred`` is NaN
        where a method does not apply (e.g. IRT on non-binary scores).
    summary : DataFrame
        :func:`summary_table` of ``long``.
    tests : DataFrame
        :func:`wilcoxon_tests` of ``long`` (new-model: per mode against its
        :data:`MODE_COMPARATORS`).
    correlations : DataFrame
        :func:`similarity_correlations` (split protocols; empty otherwise).
    overall : DataFrame
        :func:`overall_table` (new-model; empty otherwise).
    intervals : DataFrame
        :func:`interval_table` (new-model; empty otherwise).
    """

    protocol: str
    levers: tuple[str, ...]
    long: pd.DataFrame
    summary: pd.DataFrame
    tests: pd.DataFrame
    correlations: pd.DataFrame = field(default_factory=pd.DataFrame)
    overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    intervals: pd.DataFrame = field(default_factory=pd.DataFrame)


def make_result(protocol: str, parts: Sequence[pd.DataFrame]) -> ProtocolResult:
    """The :class:`ProtocolResult` of ``protocol`` from the long rows of its (point, seed) runs."""
    levers = LEVERS[protocol]
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    sort = ["seed", *levers, "method", "model", "task"]
    long = long.sort_values(sort, kind="stable").reset_index(drop=True)
    comparator, smallest = COMPARATORS[protocol]
    correlations = similarity_correlations(long) if "similarity" in long.columns else pd.DataFrame()
    extra = {}
    if protocol == "new-model":
        tests = mode_wilcoxon_tests(long, levers)
        extra = {
            "overall": overall_table(overall_scores(long, levers), levers),
            "intervals": interval_table(long, levers),
        }
    else:
        tests = wilcoxon_tests(long, levers, comparator=comparator, smallest=smallest)
    return ProtocolResult(
        protocol=protocol,
        levers=levers,
        long=long,
        summary=summary_table(long, levers),
        tests=tests,
        correlations=correlations,
        **extra,
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


def mode_wilcoxon_tests(
    long: pd.DataFrame,
    levers: Sequence[str],
    comparators: dict[str, str] | None = None,
) -> pd.DataFrame:
    """:func:`wilcoxon_tests` per ``mode`` (new-model), each against its own comparator.

    ``comparators`` maps a mode to its comparator (default :data:`MODE_COMPARATORS`:
    ``sample`` when the target is scored, ``mean`` when it is not); every operating point
    is tested. Same columns as :func:`wilcoxon_tests`.
    """
    comparators = MODE_COMPARATORS if comparators is None else comparators
    empty = wilcoxon_tests(long.iloc[:0], levers, comparator="")
    if not len(long):
        return empty
    parts = [
        wilcoxon_tests(long[long["mode"] == mode], levers, comparator=comparators[mode])
        for mode in sorted(long["mode"].unique())
        if mode in comparators
    ]
    parts = [part for part in parts if len(part)]
    return pd.concat(parts, ignore_index=True) if parts else empty


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


def format_summary(
    summary: pd.DataFrame,
    levers: Sequence[str],
    digits: int = 4,
    *,
    value: str = "mae",
    error: str = "sem",
) -> pd.DataFrame:
    """The summary as a levers × methods table of ``"mae ± sem"`` strings ("—": no value).

    ``value`` and ``error`` name the columns shown (e.g. ``"spearman"`` and
    ``"spearman_sem"`` of :func:`overall_table`).
    """
    if not len(summary):
        return pd.DataFrame()
    text = [
        "—"
        if not np.isfinite(mae)
        else f"{mae:.{digits}f} ± {0.0 if np.isnan(sem) else sem:.{digits}f}"
        for mae, sem in zip(summary[value], summary[error], strict=True)
    ]
    frame = summary.assign(text=text)
    return frame.pivot_table(
        index=list(levers), columns="method", values="text", aggfunc="first", dropna=False
    )


# ------------------------------------------------------------------ new-model reporting


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
