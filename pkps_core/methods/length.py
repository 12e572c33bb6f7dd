"""Answer length against the references' answers to the same queries: a responses-only
predictor, and a member of the stacked ensemble.

LLM judges prefer long answers (AlpacaEval's GPT-4 judge among them), so how much longer a
model answers than the references do, query by query, carries information about its
judged score even before any judge has run. Per response r of model i to query q,

    z_r = (log(1 + len r) − μ_q) / σ_q,

with μ_q and σ_q the mean and standard deviation of the log lengths of the references'
responses to q, leaving out i's own family (a query answered by fewer than
:data:`MIN_QUERY_ANSWERS` such references is skipped). The model's length score ``Z_i`` is
the mean of its z over all its responses (every task: answer length is a trait of the
model, and pooling over tasks steadies it at a thin budget). Task t's cell is then a
least-squares line through (Z_j, reference_jt) over the units allowed to inform i, clipped
to the range of their references on t.

The units are the references themselves without targets; with targets they are the
shadows (:mod:`pkps_core.methods.shadows`) — references re-observed at the targets' budget,
whose ``Z`` is as noisy as a target's — so the line's slope is the one at the targets'
budget (a line fitted on dense references would over-trust a thin target's length score:
regression dilution). A shadow's line never reads its own original or family.

Needs response text; reads no score of the cell itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pkps_core.methods.context import PredictionContext
from pkps_core.methods.space_methods import space_predictions
from pkps_core.space.knn import knn_grid_predictions

MIN_QUERY_ANSWERS = 3  # references answering a query needed to standardise against it
MIN_UNITS = 5  # (Z, reference) pairs needed for a line
NO_TEXT = "length: needs response text"


def response_log_lengths(texts: np.ndarray) -> np.ndarray:
    """``log(1 + number of characters)`` per text; NaN where the text is missing."""
    counts = pd.Series(texts, dtype=object).str.len().to_numpy(dtype=float)  # NaN: no text
    return np.log1p(counts)


def holdout_units(context: PredictionContext) -> np.ndarray:
    """Each model's holdout unit, a shadow counting as its original: its family under
    ``holdout="family"``, else the model itself. A line never reads a unit's own."""
    index = np.arange(len(context.models))
    if context.has_shadows:
        index = np.where(context.shadows, np.asarray(context.origin), index)
    if context.holdout == "family":
        return context.families[index]
    return context.models[index]


def length_scores(context: PredictionContext) -> np.ndarray:
    """``Z_i`` per model (NaN: no response text standardisable against the references).

    Computed with per-(query, family) sums, so leaving a family out costs nothing extra.
    """

    def compute() -> np.ndarray:
        # the prepared rows: the records sorted by model, with the layout's model and
        # query indices (no string keys to build)
        frame = context.prepared.frame
        layout = context.prepared.layout
        models, families = context.models, context.families
        if context.has_shadows:  # a shadow is its original's family
            families = families[np.where(context.shadows, np.asarray(context.origin), 0)]
            families = np.where(context.shadows, families, context.families)
        z_sum = np.zeros(len(models))
        z_count = np.zeros(len(models))
        if "response" not in frame.columns:
            return np.full(len(models), np.nan)
        lengths = response_log_lengths(frame["response"].to_numpy(dtype=object))
        model_pos = layout.model_idx
        has = np.isfinite(lengths)
        if not has.any():
            return np.full(len(models), np.nan)
        query_pos = layout.query_idx
        family_names, family_pos = np.unique(families, return_inverse=True)
        row_family = family_pos[model_pos]
        reference = (
            ~context.targets[model_pos]
            if context.targets is not None
            else np.ones(len(frame), dtype=bool)
        )
        use = has & reference
        n_q, n_f = query_pos.max() + 1, len(family_names)
        shape = (n_q, n_f)
        count = np.zeros(shape)
        total = np.zeros(shape)
        squares = np.zeros(shape)
        np.add.at(count, (query_pos[use], row_family[use]), 1.0)
        np.add.at(total, (query_pos[use], row_family[use]), lengths[use])
        np.add.at(squares, (query_pos[use], row_family[use]), lengths[use] ** 2)
        q, f = query_pos[has], row_family[has]
        n = count.sum(axis=1)[q] - count[q, f]
        s = total.sum(axis=1)[q] - total[q, f]
        ss = squares.sum(axis=1)[q] - squares[q, f]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = s / n
            sd = np.sqrt(np.maximum(ss / n - mean**2, 0.0) * n / np.maximum(n - 1, 1))
            z = (lengths[has] - mean) / sd
        ok = (n >= MIN_QUERY_ANSWERS) & np.isfinite(z) & (sd > 1e-9)
        np.add.at(z_sum, model_pos[has][ok], z[ok])
        np.add.at(z_count, model_pos[has][ok], 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(z_count > 0, z_sum / z_count, np.nan)

    return context.cached(("length", "scores"), compute)


def length_predictions(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """Every cell with responses from the line through its allowed units'
    (length score, reference) pairs on the task (see the module docstring)."""
    prediction, notes = context.empty_grid()
    if "response" not in context.records.columns:
        notes[:] = NO_TEXT
        return prediction, notes
    z = length_scores(context)
    units, truth = _calibration_units(context)
    unit = holdout_units(context)
    informs = units[None, :] & (unit[:, None] != unit[None, :])
    observed = context.n_responses > 0
    for i in context.prediction_rows():
        if not np.isfinite(z[i]):
            notes[i] = (
                "length: no answer comparable with the references' answers to its query "
                f"(fewer than {MIN_QUERY_ANSWERS} of them, or all of one length)"
            )
            continue
        for t in range(len(context.tasks)):
            if not observed[i, t]:
                notes[i, t] = "length: no responses in this cell"
                continue
            use = informs[i] & np.isfinite(z) & np.isfinite(truth[:, t])
            if use.sum() < MIN_UNITS:
                notes[i, t] = f"length: fewer than {MIN_UNITS} references to fit a line on"
                continue
            x, y = z[use], truth[use, t]
            slope, intercept = _line(x, y)
            prediction[i, t] = np.clip(intercept + slope * z[i], y.min(), y.max())
    return prediction, notes


def _calibration_units(context: PredictionContext) -> tuple[np.ndarray, np.ndarray]:
    """The models a line is fitted on, and their truth per cell: the shadows and their
    originals' references (targets' budget), else the references themselves."""
    if context.has_shadows:
        return context.shadows, context.calibration_truth
    targets = context.targets if context.targets is not None else np.zeros(len(context.models))
    return ~np.asarray(targets, dtype=bool), context.training_references


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope and intercept (slope 0 where x does not vary)."""
    dx = x - x.mean()
    spread = float(dx @ dx)
    slope = float(dx @ (y - y.mean())) / spread if spread > 0 else 0.0
    return slope, float(y.mean() - slope * x.mean())


def length_adjusted_predictions(
    context: PredictionContext, space: str = "pkps"
) -> tuple[np.ndarray, np.ndarray]:
    """PKPS's KNN with the answer length as a covariate: ``ŷ_it = KNN_it + β_t (Z_i − Ẑ_i)``.

    ``Ẑ_i`` is the same KNN (same neighbours, same weights) applied to the length scores, so
    the term corrects the neighbours' scores for how much longer or shorter model i answers
    than they do. ``β_t`` is the least-squares slope, through the origin, of the KNN's
    residual on that length difference over the calibration units (the shadows, at the
    targets' budget; else the references), never reading i's own family or original.
    Cells where the length score is unavailable keep the KNN's prediction.
    """
    base, notes = context.cached(("method", space), lambda: space_predictions(context, space))
    base = base.copy()
    if context.space_unavailable(space) is not None or "response" not in context.records.columns:
        return base, notes.copy()
    z = length_scores(context)
    fitted = context.space(space)
    references = context.training_references
    z_grid = np.where(np.isfinite(references), z[:, None], np.nan)
    z_hat = knn_grid_predictions(
        context.coordinates(fitted),
        z_grid,
        context.allowed(),
        context.n_neighbors,
        distances=fitted.distance_matrix_ if context.neighbours == "distances" else None,
    )
    gap = z[:, None] - z_hat
    units, truth = _calibration_units(context)
    residual = truth - base
    usable = units[:, None] & np.isfinite(residual) & np.isfinite(gap)
    unit = holdout_units(context)
    scores = context.records["score"] if "score" in context.records.columns else None
    low, high = (0.0, 1.0)
    if scores is not None and scores.notna().any():
        low, high = float(np.nanmin(scores)), float(np.nanmax(scores))
    out = base.copy()
    slopes = {}
    for i in context.prediction_rows():
        own = unit[i]
        if own not in slopes:  # never reads its own family (or model) nor its original
            keep = usable & (unit != own)[:, None]
            num = np.where(keep, residual * gap, 0.0).sum(axis=0)
            den = np.where(keep, gap**2, 0.0).sum(axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                slopes[own] = np.where(keep.sum(axis=0) >= MIN_UNITS, num / den, 0.0)
        adjusted = base[i] + slopes[own] * gap[i]
        ok = np.isfinite(adjusted)
        out[i, ok] = np.clip(adjusted[ok], low, high)
    return out, notes.copy()
