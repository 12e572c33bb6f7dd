"""A calibration profile's context: its shadows' levels across budgets, its modes, the
region check's copies.

:class:`~pkps_core.predictor.core.ReferencePredictor` draws each budget's shadows once
(:func:`~pkps_core.methods.shadows.shadow_records`); these helpers read what the draws
share: a budget's shadows are the first m of the next budget's (their *levels*, for the
one pass over every budget), the two modes of a budget differ only in the shadows'
scores, and each reference's first shadow is its budget copy for the region check.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from pkps_core.methods import PredictionContext
from pkps_core.predictor.shadow_sums import shadow_levels


def drawn_levels(largest: PredictionContext, smaller: list[pd.DataFrame]) -> np.ndarray | None:
    """:func:`~pkps_core.predictor.shadow_sums.shadow_levels` of ``largest``'s responses
    from the shadows' rows drawn for the smaller budgets (smallest first), before those
    are prepared; None where a row's model or query is not in ``largest``."""
    prepared = largest.prepared
    n_queries = prepared.layout.n_queries
    queries = pd.MultiIndex.from_frame(prepared.query_keys.astype(str))
    keys = prepared.layout.model_idx.astype(np.int64) * n_queries + prepared.layout.query_idx
    is_shadow = largest.shadows[prepared.layout.model_idx]
    drawn = []
    for rows in smaller:
        names = rows["model"].to_numpy(dtype=str)
        model = np.searchsorted(prepared.models, names)
        query = queries.get_indexer(
            pd.MultiIndex.from_frame(rows[["task", "query_id"]].astype(str))
        )
        inside = model < len(prepared.models)
        if not inside.all() or (prepared.models[model] != names).any() or (query < 0).any():
            return None
        drawn.append(model.astype(np.int64) * n_queries + query)
    return shadow_levels(keys, is_shadow, drawn)


def without_shadow_scores(context: PredictionContext) -> PredictionContext:
    """A scored profile's context with its shadows' scores dropped: the responses-only
    profile of the same budget (:func:`~pkps_core.methods.shadows.shadow_records` draws the
    same shadows for both modes; only the scores differ), without drawing and preparing
    the shadows again."""
    shadow_names = context.models[context.shadows]
    prepared = context.prepared

    def unscored(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        rows = frame["model"].isin(shadow_names).to_numpy()
        for column in ("score", "reference_score"):
            if column in frame.columns:
                frame[column] = frame[column].astype(float)
                frame.loc[rows, column] = np.nan
        return frame

    frame = unscored(prepared.frame)
    scores = prepared.scores.copy()
    scores[context.shadows[prepared.layout.model_idx]] = np.nan
    cells = prepared.cells.copy()
    shadow_cells = cells["model"].isin(shadow_names).to_numpy()
    cells.loc[shadow_cells, "n_scored"] = 0
    for column in ("sample_score", "reference_score", "reference"):
        cells.loc[shadow_cells, column] = np.nan
    return dataclasses.replace(  # a fresh context: its own caches, the same settings
        context,
        records=unscored(context.records),
        prepared=dataclasses.replace(prepared, frame=frame, scores=scores, cells=cells),
        shared={},
        cache={},
    )


def first_shadows(context: PredictionContext) -> np.ndarray:
    """Per model of a profile's context, the row of its first shadow in model order
    (−1: none; the repeats' names sort by repeat)."""
    first = np.full(len(context.models), -1)
    origin = np.asarray(context.origin)
    for row in np.flatnonzero(origin >= 0)[::-1]:
        first[origin[row]] = row
    return first
