"""Predict every (model, task) cell: the methods, then the trust columns, as one frame.

The composition root of the library: :mod:`pkps_core.methods` computes each method's
models × tasks grid, :mod:`pkps_core.trust` its intervals and warnings, and :func:`predict`
lays them out as one row per (model, task, method).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pkps_core.methods import HOLDOUTS, METHODS, MethodResult, PredictionContext
from pkps_core.methods.context import NEIGHBOURS
from pkps_core.methods.length import length_scores
from pkps_core.methods.shadows import SHADOW_REPEATS, shadow_records, with_shadows_added
from pkps_core.methods.stacking import ensemble_weights
from pkps_core.records import RecordsError, validate_records
from pkps_core.space import prepare_cache
from pkps_core.space.kernels import BANDWIDTH_GRID
from pkps_core.space.knn import cell_matrix
from pkps_core.trust import trust_columns

__all__ = [
    "METHODS",
    "OUTPUT_COLUMNS",
    "MethodResult",
    "PredictionContext",
    "TargetRun",
    "build_context",
    "mean_absolute_error",
    "predict",
]

TARGET_BANDWIDTH_GRID = (*BANDWIDTH_GRID, 10.0, 30.0)
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


def self_pairs_setting(space_params: dict | None, targets: bool) -> str:
    """The spaces' ``self_pairs`` of a run: the caller's choice, else ``"exclude"`` when
    the run has targets (their budgets differ from the references') and ``"include"``
    (Eq. 1 as written) when not — what an export records as the run's setting."""
    chosen = (space_params or {}).get("self_pairs")
    if chosen is not None:
        return str(chosen)
    return "exclude" if targets else "include"


def build_context(
    records: pd.DataFrame,
    *,
    holdout: str = "model",
    targets: Sequence[str] | None = None,
    space_params: dict | None = None,
    n_neighbors: int = 5,
    embedder=None,
    shadow_repeats: int = SHADOW_REPEATS,
    neighbours: str = "embedding",
) -> PredictionContext:
    """Validate records and assemble the shared :class:`PredictionContext`.

    With ``targets``, every reference model also gets ``shadow_repeats`` shadows
    (:mod:`pkps_core.methods.shadows`): copies observed like the targets, on which the
    bandwidth, the ensemble and the intervals are calibrated, the space's ``self_pairs``
    defaults to ``"exclude"`` (the U-statistic: budgets differ) and its ``bandwidth_grid``
    to :data:`TARGET_BANDWIDTH_GRID` (the default grid and 10 and 30 × the median).
    ``shadow_repeats=0`` turns the shadows off (calibration then reads the references at
    their own budget). ``neighbours``: see :class:`PredictionContext`.
    """
    if neighbours not in NEIGHBOURS:
        raise ValueError(f"neighbours must be one of {', '.join(NEIGHBOURS)}, got {neighbours!r}")
    if holdout not in HOLDOUTS:
        raise ValueError(f"holdout must be 'model' or 'family', got {holdout!r}")
    frame = validate_records(records)
    prepared = prepare_cache(frame, embedder, validated=True)
    target_mask = None
    if targets is not None and len(targets):
        unknown = sorted(set(targets) - set(prepared.models))
        if unknown:
            raise RecordsError(
                f"unknown target model(s) {', '.join(map(repr, unknown[:5]))}; targets must be "
                "model ids present in the input"
            )
        target_mask = np.isin(prepared.models, list(targets))
    space_params = dict(space_params or {})
    if target_mask is not None and target_mask.any():
        # unequal budgets (dense references, thin targets): the U-statistic, unbiased at
        # any budget, unless the caller chose (docs/results/self-pairs.md: the measurement)
        space_params["self_pairs"] = self_pairs_setting(space_params, targets=True)
        # the shadows choose the bandwidth for the targets' budget; thin targets may need
        # a wider query kernel than the references' own cross-validation ever picks
        space_params.setdefault("bandwidth_grid", TARGET_BANDWIDTH_GRID)
    origin = None
    if target_mask is not None and shadow_repeats > 0:
        frame, prepared, target_mask, origin = _with_shadows(
            frame, prepared, target_mask, shadow_repeats, space_params.get("random_state")
        )
    return PredictionContext(
        records=frame,
        prepared=prepared,
        holdout=holdout,
        targets=target_mask,
        space_params=space_params,
        n_neighbors=n_neighbors,
        origin=origin,
        neighbours=neighbours,
    )


def _with_shadows(frame, prepared, targets, repeats, seed):
    """The records and prepared cache with the references' shadows added; the targets
    mask (shadows included) and each model's original (-1: not a shadow)."""
    cells = prepared.cells
    models, tasks = prepared.models, prepared.tasks
    n = np.nan_to_num(cell_matrix(cells, models, tasks, "n_responses")).astype(int)
    scored = np.isfinite(cell_matrix(cells, models, tasks, "sample_score"))
    references = cell_matrix(cells, models, tasks, "reference")
    references[targets] = np.nan
    rows, origin_of = shadow_records(
        prepared.frame,
        models,
        tasks,
        n,
        scored,
        targets,
        references,
        repeats=repeats,
        seed=0 if seed is None else int(seed),
    )
    if rows is None:
        return frame, prepared, targets, None
    records, augmented, origin = with_shadows_added(frame, prepared, rows, origin_of)
    real_targets = set(models[targets])
    mask = np.array([m in real_targets for m in augmented.models]) | (origin >= 0)
    return records, augmented, mask, origin


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
    reference = _output_reference(context)
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
                    "reference_score": reference.ravel(),
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
    out = pd.concat(frames, ignore_index=True)[list(OUTPUT_COLUMNS)]
    if context.has_shadows:  # calibration copies, not models of the input
        out = out[~out["model"].isin(context.models[context.shadows])].reset_index(drop=True)
    return out


def _output_reference(context: PredictionContext) -> np.ndarray:
    """The ``reference_score`` column: the input's, or where the input has none at all
    (docs/reference/input-schema.md), each reference model's sample score (targets: NaN —
    a new model's few responses are not a reference)."""
    given = context.reference_score
    if np.isfinite(given).any():
        return given
    reference = context.sample.copy()
    if context.targets is not None:
        reference[context.targets] = np.nan
    return reference


def reference_is_sample(predictions: pd.DataFrame, records: pd.DataFrame) -> bool:
    """True when ``predictions``' references are sample scores (the input had no
    ``reference_score``): methods that read a cell's own scores (sample, ensemble, aipw,
    rs-learn) are then not held out from their reference."""
    has_column = "reference_score" in records.columns
    return not (has_column and records["reference_score"].notna().any()) and bool(
        predictions["reference_score"].notna().any()
    )


def mean_absolute_error(predictions: pd.DataFrame, truth: pd.DataFrame | None = None) -> pd.Series:
    """MAE per method against ``reference_score`` (or ``truth``'s ``true_score``)."""
    frame = predictions
    target = "reference_score"
    if truth is not None:
        frame = predictions.merge(truth[["model", "task", "true_score"]], on=["model", "task"])
        target = "true_score"
    frame = frame.dropna(subset=["prediction", target])
    return (frame["prediction"] - frame[target]).abs().groupby(frame["method"]).mean()


@dataclass(frozen=True)
class TargetRun:
    """What a run with targets gives the views beyond its predictions, computed here so
    that a view only shapes it (the New model report: :mod:`pkps_core.views.new_model`).

    Attributes
    ----------
    predictions : DataFrame
        The run's rows (:data:`OUTPUT_COLUMNS`).
    records : DataFrame
        The run's records (the tasks' query counts come from them).
    models, families : ndarray of str
        Every model of the run, shadows included, in the space's order.
    tasks : ndarray of str
    targets, shadows : ndarray of bool, per model
    cells : DataFrame
        The per-cell table (:func:`pkps_core.records.cell_table`: ``reference`` per
        (model, task)).
    responses : DataFrame
        The prepared responses (``query``, ``response`` texts where the cache has them).
    distances, coordinates : ndarray
        The PKPS space of the run: D (Eq. 1) and the MDS coordinates (Eq. 2), per model.
    weights : DataFrame
        The ensemble's stacking weights of the final fit (one row per pattern of the
        members that apply), :func:`pkps_core.methods.stacking.ensemble_weights`.
    length_scores : ndarray
        Per model, how many SDs longer it answers than the references on the same queries
        (:func:`pkps_core.methods.length.length_scores`; NaN without texts).
    """

    predictions: pd.DataFrame
    records: pd.DataFrame
    models: np.ndarray
    families: np.ndarray
    tasks: np.ndarray
    targets: np.ndarray
    shadows: np.ndarray
    cells: pd.DataFrame
    responses: pd.DataFrame
    distances: np.ndarray
    coordinates: np.ndarray
    weights: pd.DataFrame
    length_scores: np.ndarray

    @classmethod
    def of(cls, context: PredictionContext, predictions: pd.DataFrame) -> TargetRun:
        """The run of ``context`` whose rows are ``predictions``."""
        weights = ensemble_weights(context)
        if "fold" in weights.columns:
            weights = weights[weights["fold"] == -1].drop(columns="fold")
        space = context.pkps
        return cls(
            predictions=predictions,
            records=context.records,
            models=context.models,
            families=context.families,
            tasks=context.tasks,
            targets=np.asarray(context.targets, dtype=bool),
            shadows=np.asarray(context.shadows, dtype=bool),
            cells=context.prepared.cells,
            responses=context.prepared.frame,
            distances=space.distance_matrix_,
            coordinates=space.embedding_,
            weights=weights.reset_index(drop=True),
            length_scores=length_scores(context),
        )
