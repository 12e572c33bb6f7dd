"""What a protocol run returns: the long table, its summary, Wilcoxon tests, correlations.

The summary follows the PKPS appendix "Sweeps and reporting" (per seed the mean over tasks of
the per-task MAE, then mean ± SEM over seeds; :func:`mae_weights` writes that averaging out
per row), the tests its "Statistical tests" (signed-rank tests on per-task error
differences). The new-model protocol adds each target's overall score and the intervals'
coverage and width (:mod:`~pkps_core.protocols.new_model_reports`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pkps_core.protocols.new_model_reports import interval_table, overall_scores, overall_table

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
LONG_COLUMNS = ("method", "model", "task", "y_true", "y_pred", "abs_err", "note")
# How the summary's MAE averages, in words (the page's caption, the CLI's heading).
MAE_AVERAGING = (
    "per seed, the mean over tasks of each task's mean absolute error over its target "
    "cells; then mean ± SEM over seeds. Every task counts the same whatever its number of "
    "cells, so the plain mean of the rows' abs_err differs; the rows' mae_weight "
    "reproduces it: the sum of mae_weight × abs_err per method and setting"
)
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
        :data:`INTERVAL_COLUMNS` and ``task_queries`` for new-model), then
        ``mae_weight`` (:func:`mae_weights`). ``y_pred`` is NaN where a method does not
        apply (e.g. IRT on non-binary scores); ``note`` says why, and why ``abs_err`` is
        NaN where the cell has no true score.
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
    # a part may be a combined result's own rows: its weights were for its seeds only
    long = long.drop(columns="mae_weight", errors="ignore")
    long = long.sort_values(sort, kind="stable").reset_index(drop=True)
    long["mae_weight"] = mae_weights(long, levers)
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


def mae_weights(long: pd.DataFrame, levers: Sequence[str]) -> np.ndarray:
    """Each long row's weight in its :func:`summary_table` MAE.

    Per (levers, method) the summary MAE is ``sum(mae_weight * abs_err)`` over the rows
    with an ``abs_err`` (the weights sum to 1 there; rows without one weigh 0): a row
    weighs ``1 / (cells of its task with an error × tasks of its seed with an error ×
    seeds with an error)``, the per-task, per-seed averaging written out.
    """
    if not len(long):
        return np.zeros(0)
    keys = [*levers, "method"]
    by_task = [*keys, "seed", "task"]
    scored = long[by_task].assign(cells=long["abs_err"].notna().astype(int))
    tasks = scored.groupby(by_task, sort=False, dropna=False)["cells"].sum().reset_index()
    tasks["has"] = (tasks["cells"] > 0).astype(int)
    tasks["tasks"] = tasks.groupby([*keys, "seed"], dropna=False)["has"].transform("sum")
    seeds = tasks.groupby([*keys, "seed"], dropna=False)["has"].max().rename("seeds")
    n_seeds = seeds.groupby(level=keys, dropna=False).sum()
    tasks = tasks.join(n_seeds, on=keys)
    share = tasks["cells"] * tasks["tasks"] * tasks["seeds"]
    tasks["task_weight"] = np.where(share > 0, 1.0 / share.where(share > 0, 1), 0.0)
    rows = scored.merge(tasks[[*by_task, "task_weight"]], on=by_task, how="left")
    return np.where(scored["cells"].to_numpy() > 0, rows["task_weight"].to_numpy(), 0.0)


def blank_notes(long: pd.DataFrame) -> pd.DataFrame:
    """Why rows of ``long`` have no error, per method and reason (pooled over settings
    and seeds): columns ``method, blank_cells, cells, note``, most blanks first."""
    columns = ["method", "blank_cells", "cells", "note"]
    if not len(long):
        return pd.DataFrame(columns=columns)
    cells = long.groupby("method").size()
    blank = long[long["abs_err"].isna()]
    out = blank.groupby(["method", "note"]).size().rename("blank_cells").reset_index()
    out["cells"] = out["method"].map(cells).to_numpy()
    out = out.sort_values(["method", "blank_cells"], ascending=[True, False], kind="stable")
    return out[columns].reset_index(drop=True)


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
    from scipy.stats import wilcoxon  # here: scipy.stats takes 0.5 s to import

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
    from scipy.stats import pearsonr  # here: scipy.stats takes 0.5 s to import

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
