"""Extrapolation in the responses themselves: a new model that answers unlike every reference.

The checks of :func:`pkps_core.trust.extrapolation.extrapolation_warnings` read the
model's scores (checks 1 and 2) or its place in the perspective space (check 3). A model
observed by its responses only has no scores, and its place in a TF-IDF space can look
ordinary while its answers are not: on AlpacaEval the three FuseChat models answer with a
median of 2,040–2,265 characters where every reference's median is at most 1,218, and
their win rates (0.30–0.65) lie far above every other model's (0.02–0.17) — judges
favour long answers. No reference resembles them, so every method predicts them inside
the references' range and their intervals miss (coverage 0.10–0.14 on their cells,
0.93–0.95 on every other target's).

The check (:func:`response_length_outliers`): each model's *length feature* is the mean
over its responses of ``log(1 + characters)``. Its nonconformity is how far the feature
lies beyond the range of the features of the references allowed to inform it,
``s_i = max(f_i − max_R f, min_R f − f_i)`` (negative inside the range). The threshold is
the conformal ``1 − α`` quantile (:data:`LENGTH_ALPHA`, 5 %, the region check's level) of
the same score for the shadows — the references re-observed at the targets' budget
(:mod:`pkps_core.methods.shadows`), each against the references of other families — so a
target exchangeable with the references fires with probability at most α, and
its thinness (a mean over few responses is noisier) is part of the calibration. A model
fires when its score exceeds both the threshold and 0 (it lies outside the range).

It runs only when the run has shadows (new models) and the records carry response texts;
with fewer shadows than a 5 % test needs (19) it cannot fire.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pkps_core.methods import PredictionContext
from pkps_core.trust.intervals import OUTLIER_ALPHA, conformal_outlier_threshold

LENGTH_ALPHA = OUTLIER_ALPHA  # the same level as the region check's


def length_features(context: PredictionContext) -> np.ndarray:
    """Per model, the mean of ``log(1 + characters)`` over its response texts (NaN: a
    model without any)."""

    def compute() -> np.ndarray:
        means = mean_log_lengths(context.records)
        return means.reindex(context.models).to_numpy(dtype=float)

    return context.cached_shared("length_features", compute)


def mean_log_lengths(records: pd.DataFrame) -> pd.Series:
    """Per model (the index), the mean ``log(1 + characters)`` of its response texts
    (models without any are absent)."""
    if "response" not in records.columns:
        return pd.Series(dtype=float)
    texts = records["response"]
    has_text = texts.notna()
    # characters per text by len(): astype(str) would copy every text into Arrow first
    # (0.1 s on AlpacaEval-40's 28k responses; this is a fortieth of that)
    values = texts[has_text].to_numpy(dtype=object)
    length = np.log1p(
        np.fromiter(
            (len(v) if isinstance(v, str) else len(str(v)) for v in values),
            dtype=float,
            count=len(values),
        )
    )
    return pd.Series(length).groupby(records.loc[has_text, "model"].to_numpy()).mean()


def _beyond_range(features: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Per model, how far its feature lies beyond the allowed models' range (negative
    inside it; NaN with fewer than two allowed models with a feature)."""
    usable = allowed & np.isfinite(features)[None, :]
    with np.errstate(all="ignore"):
        high = np.where(usable, features[None, :], -np.inf).max(axis=1)
        low = np.where(usable, features[None, :], np.inf).min(axis=1)
    score = np.maximum(features - high, low - features)
    return np.where(usable.sum(axis=1) >= 2, score, np.nan)


def response_length_outliers(
    context: PredictionContext, alpha: float = LENGTH_ALPHA
) -> tuple[np.ndarray, np.ndarray, float]:
    """Which targets answer at lengths unlike every reference's (see the module docstring).

    Returns
    -------
    flags : ndarray of bool (n_models,)
        True for a target (shadows included) whose length feature is a conformal outlier.
    features : ndarray (n_models,)
        The length features (mean log(1 + characters)).
    threshold : float
        The shadows' conformal threshold on the score (inf when it cannot be set).
    """
    features = length_features(context)
    if not context.has_shadows or not np.isfinite(features).any():
        return np.zeros(len(context.models), dtype=bool), features, float("inf")

    def compute() -> tuple[np.ndarray, float]:
        score = _beyond_range(features, context.allowed())
        return score, conformal_outlier_threshold(score[context.shadows], alpha)

    score, threshold = context.cached(("length_outliers", alpha), compute)
    with np.errstate(invalid="ignore"):  # shadows exist, so targets are named
        flags = np.asarray(context.targets, dtype=bool) & (score > max(threshold, 0.0))
    return flags, features, threshold


def length_reason(context: PredictionContext, i: int, features: np.ndarray) -> str:
    """The reason of a flagged model ``i``: its typical length against the references'."""
    allowed = context.allowed()[i] & np.isfinite(features)
    typical = float(np.expm1(features[i]))
    low, high = (float(np.expm1(f)) for f in (features[allowed].min(), features[allowed].max()))
    side = "longer" if typical > high else "shorter"
    return (
        f"responses {side} than every reference's (geometric mean {typical:,.0f} "
        f"characters, references {low:,.0f}–{high:,.0f}), a conformal outlier at "
        f"p ≤ {LENGTH_ALPHA:g} against references at the same budget"
    )
