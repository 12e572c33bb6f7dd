"""The Experiments page's tables beyond the per-cell summary (plain pandas, no streamlit)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pkps_core.protocols import (
    MAE_AVERAGING,
    ProtocolResult,
    blank_notes,
    format_intervals,
    format_summary,
)
from pkps_core.protocols.reports import COMPARATORS, wilcoxon_tests
from pkps_core.views.columns import BUDGET_HEADER

# Decimals of the page's "mean ± SEM" tables: three, as the charts' hovers (four made the
# new-model protocol's nine-method tables wider than the page); the CSV keeps every digit.
PAGE_DIGITS = 3


def new_model_tables(result: ProtocolResult) -> dict[str, tuple[str, pd.DataFrame]]:
    """The new-model report as ``{title: (caption, levers × methods table)}``, in page order.

    Empty for the other protocols (their results have no ``overall`` table).
    """
    if not len(result.overall):
        return {}
    levers = result.levers
    return {
        "Overall score of each target: MAE": (
            "Each target's overall score is the query-weighted mean of its task scores "
            "(weights: the task's queries in the full cache); MAE over the targets, mean ± "
            "SEM over seeds.",
            format_summary(result.overall, levers, PAGE_DIGITS),
        ),
        "Overall score of each target: Spearman rank correlation": (
            "Rank correlation of the targets' predicted and true overall scores (needs three "
            "targets; a constant prediction such as `mean` has none), mean ± SEM over seeds.",
            format_summary(
                result.overall, levers, PAGE_DIGITS, value="spearman", error="spearman_sem"
            ),
        ),
        "Intervals on the target cells": (
            "Coverage (share of cells with an interval whose true score lies inside) / mean "
            "width; in brackets the share of cells with an interval when below 100%.",
            format_intervals(result.intervals, levers),
        ),
    }


def methods_as_rows(table: pd.DataFrame) -> pd.DataFrame:
    """A levers × methods table (:func:`~pkps_core.protocols.format_summary`,
    :func:`~pkps_core.protocols.format_intervals`) turned as the papers' tables: a row per
    method under each setting of the other levers, a column per budget headed ``m = 4``
    (:data:`~pkps_core.views.columns.BUDGET_HEADER`); the same cells. Unchanged when
    ``table`` has no budget.

    The new-model protocol's nine methods across made its tables about 1,080 px wide,
    wider than the page's 940 px content column in Chromium at 1400 × 900; five budgets
    across take about 730 px.
    """
    if not len(table) or "budget" not in table.index.names:
        return table
    turned = table.stack(future_stack=True).unstack("budget")
    turned.columns = [BUDGET_HEADER.format(budget) for budget in turned.columns]
    return turned


# Each lever's label on the page and its help (the raw names stay in tables and exports).
LEVER_LABELS = {
    "budget": (
        "Queries per cell (budget m)",
        "How many responses each (model, task) cell keeps; the rest are hidden and the "
        "methods predict the cell's full-task score from the m that remain.",
    ),
    "rho": (
        "Shared queries ρ",
        "Fraction of each cell's m queries drawn from a pool shared by every model (0: each "
        "model answered its own queries, so DKPS has nothing to compare; 1: fully paired).",
    ),
    "cohort": (
        "Models in the cohort",
        "How many models are drawn into the cache (full: every model).",
    ),
    "n_tasks": (
        "Tasks kept",
        "How many tasks are drawn into the cache (full: every task).",
    ),
    "p_task": (
        "Share of cells observed",
        "Probability that a (model, task) cell is observed at all; the hidden cells are "
        "the ones predicted (completion) or simply absent (query efficiency).",
    ),
    "p_query": (
        "Share of queries kept in an observed cell",
        "Each observed cell keeps each of its queries with this probability (at least one).",
    ),
    "core_set": (
        "Core-set queries per task",
        "Queries per task every model answered; the split's held-out models are predicted "
        "from their responses to these.",
    ),
    "mode": (
        "Target scores",
        "scored: the new models' m responses are judged; responses-only: not yet judged, "
        "so only their texts place them among the references.",
    ),
}

# One fixed, well-separated colour per method (Okabe–Ito based), the same in every chart.
# One clearly different hue per method (the new-model protocol's nine defaults drew three
# similar oranges): Plotly's D3 palette, black for the sample score, grey for the mean.
METHOD_COLOURS = {
    "mean": "#7f7f7f",
    "sample": "#000000",
    "irt": "#bcbd22",
    "lrmc": "#17becf",
    "rs-learn": "#2ca02c",
    "aipw": "#8c564b",
    "dkps": "#1f77b4",
    "pkps": "#d62728",
    "ensemble": "#9467bd",
    "precision": "#393b79",
    "length": "#ff7f0e",
    "pkps-length": "#e377c2",
}


# A lever as a chart axis: its quantity and, in parentheses, its unit or scale.
LEVER_AXIS_TITLES = {
    "budget": "queries per cell m (responses)",
    "rho": "shared queries ρ (share, 0–1)",
    "cohort": "models in the cohort (count)",
    "n_tasks": "tasks kept (count)",
    "p_task": "share of cells observed (0–1)",
    "p_query": "share of queries kept per observed cell (0–1)",
    "core_set": "core-set queries per task (count)",
    "mode": "target scores",
}


def lever_label(lever: str) -> str:
    return LEVER_LABELS.get(lever, (lever, ""))[0]


def lever_axis_title(lever: str) -> str:
    """The lever's axis title (quantity and unit), never its raw name."""
    return LEVER_AXIS_TITLES.get(lever, lever_label(lever))


def hover_format(values: pd.Series) -> str:
    """The hover format of a column: none for text and whole numbers, else 3 decimals."""
    numbers = pd.to_numeric(values, errors="coerce")
    if numbers.isna().any() or (numbers.dropna() == numbers.dropna().round()).all():
        return ""
    return ":.3f"


def budget_check(cells: pd.DataFrame, budgets: Sequence[int]) -> tuple[list[int], list[str]]:
    """The budgets worth running on this cache, and what to tell the user about the rest.

    A budget above the largest cell (``cells``: :func:`pkps_core.records.cell_table`
    output) keeps every response of every cell, exactly as the largest budget at or below
    it: it is dropped rather than drawn as a repeat. Budgets above some cells are kept,
    with the share of cells that keep all their responses.
    """
    sizes = cells["n_responses"].to_numpy(dtype=int)
    largest = int(sizes.max()) if len(sizes) else 0
    kept = sorted({int(b) for b in budgets if int(b) <= largest})
    dropped = sorted({int(b) for b in budgets} - set(kept))
    notes = []
    if dropped:
        listed = ", ".join(map(str, dropped))
        notes.append(
            f"Budget {listed} is above the largest cell of this cache ({largest} responses): "
            f"every cell would keep all its responses, repeating budget {largest}, so "
            f"{'it was' if len(dropped) == 1 else 'they were'} left out."
        )
    for b in kept:
        short = float((sizes < b).mean())
        if short > 0:
            notes.append(
                f"At budget {b}, {short:.0%} of the cells have fewer than {b} responses and "
                "keep all of theirs."
            )
    return kept, notes


def all_point_tests(result: ProtocolResult) -> pd.DataFrame:
    """The Wilcoxon tests at every operating point (every budget, not only the smallest).

    :func:`pkps_core.protocols.run_protocol` tests query efficiency at the smallest budget
    only (the papers' table); the page shows every budget.
    """
    comparator, smallest = COMPARATORS[result.protocol]
    if result.protocol == "new-model" or smallest is None:
        return result.tests
    return wilcoxon_tests(result.long, result.levers, comparator=comparator)


def blank_cells_table(long: pd.DataFrame) -> pd.DataFrame:
    """Why cells have no error, for the page: method, how many of its cells, the reason
    (:func:`pkps_core.protocols.blank_notes`, pooled over settings and seeds)."""
    notes = blank_notes(long)
    return pd.DataFrame(
        {
            "method": notes["method"],
            "cells without an error": [
                f"{blank} of {cells}"
                for blank, cells in zip(notes["blank_cells"], notes["cells"], strict=True)
            ],
            "why": notes["note"],
        }
    )


def summary_export(result: ProtocolResult) -> pd.DataFrame:
    """The MAE table as a file: the summary's numbers unrounded, how they average, and
    why some or all of a row's cells have no error (its blank cells' most frequent note;
    ``coverage`` is the share with one)."""
    summary = result.summary.copy()
    keys = [*result.levers, "method"]
    blank = result.long[result.long["abs_err"].isna()]
    if len(blank):
        reasons = (
            blank.groupby([*keys, "note"], dropna=False)
            .size()
            .rename("n")
            .reset_index()
            .sort_values("n", ascending=False, kind="stable")
            .drop_duplicates(keys)
            .drop(columns="n")
        )
        summary = summary.merge(reasons, on=keys, how="left")
    else:
        summary["note"] = ""
    summary["note"] = summary["note"].where(summary["coverage"] < 1, "").fillna("")
    summary["averaging"] = MAE_AVERAGING
    return summary
