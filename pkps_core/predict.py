"""Predict every (model, task) cell with the sample score, DKPS and PKPS.

Each method is a function of a :class:`PredictionContext` returning a models × tasks array
of predictions (NaN where it does not apply, with a reason). Methods register in
:data:`METHODS`, so baselines plug in without touching the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from pkps_core.baselines import BASELINE_METHODS, whitened_knn_completion
from pkps_core.knn import _cell_matrix, knn_grid_predictions
from pkps_core.records import RecordsError, validate_records
from pkps_core.space import PerspectiveSpace, PreparedCache, prepare_cache

OUTPUT_COLUMNS = (
    "model",
    "task",
    "method",
    "prediction",
    "sample_score",
    "n_responses",
    "reference_score",
    "note",
    "lower",
    "upper",
    "extrapolation",
    "extrapolation_reason",
)


@dataclass
class MethodResult:
    """A method's predictions on the models × tasks grid, with per-cell notes."""

    prediction: np.ndarray
    notes: np.ndarray | None = None


@dataclass
class PredictionContext:
    """Everything a prediction method may use, computed once and shared.

    Attributes
    ----------
    records : DataFrame
        The validated canonical records.
    prepared : PreparedCache
    holdout : {"model", "family"}
    targets : ndarray of bool (n_models,)
        Models treated as new: their cells never serve as references.
    space_params : dict
        Parameters of the PKPS estimator (DKPS uses the same with the delta kernel).
    n_neighbors : int
        K of the per-task KNN regression.
    """

    records: pd.DataFrame
    prepared: PreparedCache
    holdout: str = "model"
    targets: np.ndarray | None = None
    space_params: dict = field(default_factory=dict)
    n_neighbors: int = 5

    @property
    def models(self) -> np.ndarray:
        return self.prepared.models

    @property
    def families(self) -> np.ndarray:
        return self.prepared.families

    @property
    def tasks(self) -> np.ndarray:
        return self.prepared.tasks

    @cached_property
    def sample(self) -> np.ndarray:
        """Sample score per cell (NaN: no scored response)."""
        return _cell_matrix(self.prepared.cells, self.models, self.tasks, "sample_score")

    @cached_property
    def n_responses(self) -> np.ndarray:
        counts = _cell_matrix(self.prepared.cells, self.models, self.tasks, "n_responses")
        return np.nan_to_num(counts).astype(int)

    @cached_property
    def reference_score(self) -> np.ndarray:
        return _cell_matrix(self.prepared.cells, self.models, self.tasks, "reference_score")

    @cached_property
    def training_references(self) -> np.ndarray:
        """References usable for training: target models' cells removed."""
        references = _cell_matrix(self.prepared.cells, self.models, self.tasks, "reference")
        if self.targets is not None:
            references[self.targets] = np.nan
        return references

    @cached_property
    def pkps(self) -> PerspectiveSpace:
        params = {**self.space_params, "query_kernel": "rbf"}
        return PerspectiveSpace(**params).fit(None, prepared=self.prepared)

    @cached_property
    def dkps(self) -> PerspectiveSpace:
        params = {**self.space_params, "query_kernel": "delta"}
        return PerspectiveSpace(**params).fit(None, prepared=self.prepared)

    def knn(self, space: PerspectiveSpace) -> np.ndarray:
        return knn_grid_predictions(
            space.embedding_,
            self.models,
            self.families,
            self.tasks,
            self.training_references,
            holdout=self.holdout,
            targets=self.targets,
            k=self.n_neighbors,
        )


def _sample(context: PredictionContext) -> MethodResult:
    notes = np.where(np.isnan(context.sample), "no scored responses in this cell", "")
    return MethodResult(context.sample.copy(), notes)


def _space_method(name: str) -> Callable[[PredictionContext], MethodResult]:
    def run(context: PredictionContext) -> MethodResult:
        space = getattr(context, name)
        prediction = context.knn(space)
        # Cells with no responses: KNN on whitened residuals (PKPS appendix "Regressor").
        missing = context.n_responses == 0
        if missing.any():
            completed = whitened_knn_completion(context, space.embedding_)
            prediction = np.where(missing, completed, prediction)
        notes = np.where(np.isnan(prediction), "no reference model for this task", "")
        return MethodResult(prediction, notes)

    run.__name__ = name
    return run


METHODS: dict[str, Callable[[PredictionContext], MethodResult]] = {
    "sample": _sample,
    "dkps": _space_method("dkps"),
    "pkps": _space_method("pkps"),
}
METHODS.update(BASELINE_METHODS)


def build_context(
    records: pd.DataFrame,
    *,
    holdout: str = "model",
    targets: Sequence[str] | None = None,
    space_params: dict | None = None,
    n_neighbors: int = 5,
    embedder=None,
) -> PredictionContext:
    """Validate records and assemble the shared :class:`PredictionContext`."""
    if holdout not in ("model", "family"):
        raise ValueError(f"holdout must be 'model' or 'family', got {holdout!r}")
    frame = validate_records(records)
    prepared = prepare_cache(frame, embedder, validated=True)
    target_mask = None
    if targets:
        unknown = sorted(set(targets) - set(prepared.models))
        if unknown:
            raise RecordsError(
                f"unknown target model(s) {', '.join(map(repr, unknown[:5]))}; targets must be "
                "model ids present in the input"
            )
        target_mask = np.isin(prepared.models, list(targets))
    return PredictionContext(
        records=frame,
        prepared=prepared,
        holdout=holdout,
        targets=target_mask,
        space_params=dict(space_params or {}),
        n_neighbors=n_neighbors,
    )


def predict(
    records: pd.DataFrame | PredictionContext,
    methods: Sequence[str] = ("sample", "dkps", "pkps"),
    *,
    holdout: str = "model",
    targets: Sequence[str] | None = None,
    space_params: dict | None = None,
    n_neighbors: int = 5,
    embedder=None,
    intervals: float | None = None,
) -> pd.DataFrame:
    """Predict every (model, task) cell with each method.

    Parameters
    ----------
    records : DataFrame or PredictionContext
        Canonical records, or a context from :func:`build_context`.
    methods : sequence of str
        Names in :data:`METHODS`.
    holdout : {"model", "family"}
        Which references a cell's KNN may not use: its own model, or its whole family
        (the papers' protocol).
    targets : sequence of str, optional
        Models to treat as new: their cells never serve as references.
    space_params : dict, optional
        :class:`~pkps_core.space.PerspectiveSpace` parameters (e.g. ``query_bandwidth``).
    n_neighbors : int, default=5
        K of the distance-weighted KNN regression.
    intervals : float, optional
        Coverage level of the per-cell conformal intervals (e.g. 0.9) and compute the
        extrapolation warnings (:mod:`pkps_core.trust`); None (default, the protocols'
        sweeps) leaves ``lower``/``upper`` NaN and ``extrapolation`` False. Calibration
        re-runs each method once per family fold, so it costs several predictions.

    Returns
    -------
    DataFrame
        One row per (model, task, method) with :data:`OUTPUT_COLUMNS`; ``sample_score`` is
        NaN for a missing cell, ``reference_score`` NaN where unknown, ``note`` says why a
        prediction is missing; ``lower``/``upper`` bound the prediction at the
        ``intervals`` level, ``extrapolation`` flags cells beyond the references and
        ``extrapolation_reason`` says why.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}"
        )
    context = (
        records
        if isinstance(records, PredictionContext)
        else build_context(
            records,
            holdout=holdout,
            targets=targets,
            space_params=space_params,
            n_neighbors=n_neighbors,
            embedder=embedder,
        )
    )
    n_models, n_tasks = len(context.models), len(context.tasks)
    results = {name: METHODS[name](context) for name in methods}
    frames = []
    for name in methods:
        result = results[name]
        notes = result.notes if result.notes is not None else np.full((n_models, n_tasks), "")
        if intervals is None:
            trust = {
                "lower": np.full((n_models, n_tasks), np.nan),
                "upper": np.full((n_models, n_tasks), np.nan),
                "extrapolation": np.zeros((n_models, n_tasks), dtype=bool),
                "extrapolation_reason": np.full((n_models, n_tasks), "", dtype=object),
            }
        else:
            from pkps_core.trust import trust_columns

            trust = trust_columns(context, name, result.prediction, intervals)
        frames.append(
            pd.DataFrame(
                {
                    "model": np.repeat(context.models, n_tasks),
                    "task": np.tile(context.tasks, n_models),
                    "method": name,
                    "prediction": result.prediction.ravel(),
                    "sample_score": context.sample.ravel(),
                    "n_responses": context.n_responses.ravel(),
                    "reference_score": context.reference_score.ravel(),
                    "note": np.asarray(notes, dtype=object).ravel(),
                    "lower": trust["lower"].ravel(),
                    "upper": trust["upper"].ravel(),
                    "extrapolation": trust["extrapolation"].ravel(),
                    "extrapolation_reason": np.asarray(
                        trust["extrapolation_reason"], dtype=object
                    ).ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[list(OUTPUT_COLUMNS)]


def mean_absolute_error(predictions: pd.DataFrame, truth: pd.DataFrame | None = None) -> pd.Series:
    """MAE per method against ``reference_score`` (or ``truth``'s ``true_score``)."""
    frame = predictions
    target = "reference_score"
    if truth is not None:
        frame = predictions.merge(truth[["model", "task", "true_score"]], on=["model", "task"])
        target = "true_score"
    frame = frame.dropna(subset=["prediction", target])
    return (frame["prediction"] - frame[target]).abs().groupby(frame["method"]).mean()
