"""The protocols as seeded sweeps: one driver over a lever grid and seeds, five protocols on it.

A sweep prepares the records once, then at every (lever point, seed) masks them
(:mod:`pkps_core.protocols.masks`), predicts the masked cache and scores the target cells
against their full-task scores; every run is seeded, so the same records, settings and seeds
give the same long table (:class:`~pkps_core.protocols.reports.ProtocolResult`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from pkps_core.predict import build_context, predict
from pkps_core.protocols.masks import (
    DEFAULT_BUDGETS,
    NEW_MODEL_MODES,
    SPLITS,
    cell_values,
    cells_of,
    full_scores,
    mask_completion,
    mask_new_model,
    mask_query_efficiency,
    mask_split,
    prepare_records,
)
from pkps_core.protocols.reports import (
    INTERVAL_COLUMNS,
    LONG_COLUMNS,
    PROTOCOLS,
    ProtocolResult,
    make_result,
)
from pkps_core.protocols.similarity import similarity_and_spread
from pkps_core.trust import task_query_counts

# The new-model ensemble through the fitted reference predictor (placed, not refitted);
# named in a sweep's methods like any method, for the new-model protocol.
PLACED = "ensemble-placed"
DEFAULT_METHODS = {
    "query-efficiency": ("sample", "irt", "dkps", "pkps", "ensemble"),
    "completion": ("lrmc", "pkps", "ensemble"),
    "interpolation": ("sample", "rs-learn", "aipw", "pkps", "ensemble"),
    "extrapolation": ("sample", "rs-learn", "aipw", "pkps", "ensemble"),
    "new-model": (
        "mean",
        "sample",
        "rs-learn",
        "aipw",
        "dkps",
        "pkps",
        "length",
        "pkps-length",
        "ensemble",
    ),
}
# The interval level of each protocol's predictions when SweepOptions.intervals is left at
# PROTOCOL_DEFAULT (absent: none). A protocol listed here always carries INTERVAL_COLUMNS.
DEFAULT_INTERVALS = {"new-model": 0.9}
PROTOCOL_DEFAULT = "default"

Progress = Callable[[float, str], None]
# evaluate(masked, cells, targets=None): the long rows of one fit at one seed (_evaluate).
Evaluate = Callable[..., pd.DataFrame]
# step(records, point, seed, evaluate) -> (long rows, or None when nothing is predicted,
# and the lever values to record for them)
Step = Callable[[pd.DataFrame, dict, int, Evaluate], tuple[pd.DataFrame | None, dict]]


@dataclass(frozen=True)
class SweepOptions:
    """The settings every protocol sweep takes besides its levers.

    Attributes
    ----------
    seeds : sequence of int
        One masked cache and one fit per (lever point, seed); the seed draws the masks and
        (plus ``draw_offset``) is the fits' ``random_state``.
    methods : sequence of str, optional
        The methods compared (default: the protocol's :data:`DEFAULT_METHODS`).
    holdout : str
        ``"family"`` or ``"model"``, as in :func:`pkps_core.predict.build_context`.
    space_params : mapping, optional
        Perspective-space parameters of every fit (``random_state`` is set to the seed).
    embedder : optional
        Embeds the texts of records without embeddings (:func:`prepare_records`).
    progress : callable (fraction, message), optional
        Called once before the first run and after every (lever point, seed).
    intervals : float or None
        Coverage level of the conformal intervals of every prediction
        (:func:`pkps_core.predict.predict`); None: no intervals (faster). The default,
        :data:`PROTOCOL_DEFAULT`, is the protocol's :data:`DEFAULT_INTERVALS` (0.9 for
        ``"new-model"``, None for the others). With intervals the long table carries
        ``lower``, ``upper`` and ``n_responses`` (:data:`INTERVAL_COLUMNS`).
    neighbours : {"embedding", "distances", "out-of-sample"}
        The space methods' KNN in the MDS coordinates or by D
        (:func:`pkps_core.predict.build_context`).
    draw_offset : int
        Added to the seed for the fits' draws, not the masks' (a method against itself).
    """

    seeds: Sequence[int] = range(4)
    methods: Sequence[str] | None = None
    holdout: str = "family"
    space_params: Mapping[str, Any] | None = None
    embedder: Any = None
    progress: Progress | None = None
    intervals: float | str | None = PROTOCOL_DEFAULT
    neighbours: str = "embedding"
    draw_offset: int = 0


def sweep_options(options: SweepOptions | None = None, **fields: Any) -> SweepOptions:
    """``options`` (default :class:`SweepOptions`) with ``fields`` replaced.

    This is how the protocols accept both ``options=SweepOptions(...)`` and the keywords
    ``seeds=``, ``methods=``, ... (a keyword overrides the same field of ``options``); a
    name that is not a field raises TypeError.
    """
    return replace(options if options is not None else SweepOptions(), **fields)


# --------------------------------------------------------------------------- the driver


def _label(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _grid(levers: Mapping[str, Sequence]) -> list[dict]:
    names = list(levers)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*levers.values())]


def _evaluate(
    masked: pd.DataFrame,
    cells: pd.DataFrame,
    targets: Sequence[str] | None = None,
    *,
    methods: Sequence[str],
    truth: pd.Series,
    holdout: str,
    space_params: Mapping[str, Any] | None,
    seed: int,
    intervals: float | None = None,
    keep_intervals: bool = False,
    neighbours: str = "embedding",
) -> pd.DataFrame:
    """Predict ``masked`` and keep the rows of ``cells`` with their truth and error.

    With ``keep_intervals`` the rows also carry :data:`INTERVAL_COLUMNS` (``lower`` and
    ``upper`` NaN unless ``intervals`` gives a level).
    """
    placed = PLACED in methods
    methods = [m for m in methods if m != PLACED]
    parts = []
    if methods:
        context = build_context(
            masked,
            holdout=holdout,
            targets=list(targets) if targets is not None else None,
            space_params={**(space_params or {}), "random_state": seed},
            neighbours=neighbours,
        )
        parts.append(predict(context, methods, intervals=intervals))
    if placed:
        parts.append(_placed_predictions(masked, targets, holdout, space_params, seed, intervals))
    predictions = pd.concat(parts, ignore_index=True)
    wanted = cells[["model", "task"]].assign(y_true=cell_values(truth, cells))
    extra = list(INTERVAL_COLUMNS) if keep_intervals else []
    kept = predictions[["model", "task", "method", "prediction", "note", *extra]]
    frame = wanted.merge(kept, how="inner").rename(columns={"prediction": "y_pred"})
    frame["abs_err"] = (frame["y_pred"] - frame["y_true"]).abs()
    frame["note"] = blank_reasons(frame)
    return frame[[*LONG_COLUMNS, *extra]]


def blank_reasons(frame: pd.DataFrame) -> np.ndarray:
    """The long rows' ``note``: the method's own note, and why ``abs_err`` is blank where
    it is (no prediction without a note from the method, or no true score)."""
    notes = frame["note"].fillna("").astype(str).to_numpy(dtype=object)
    unexplained = frame["y_pred"].isna().to_numpy() & (notes == "")
    notes[unexplained] = frame["method"].to_numpy(dtype=object)[unexplained] + (
        ": no prediction for this cell"
    )
    no_truth = frame["y_true"].isna().to_numpy()
    truth_note = "no true score: the cell has no scored response in the full cache"
    notes[no_truth] = np.where(
        notes[no_truth] == "", truth_note, notes[no_truth] + "; " + truth_note
    )
    return notes


def _placed_predictions(masked, targets, holdout, space_params, seed, intervals):
    """The fitted reference predictor's ensemble (:mod:`pkps_core.predictor`): fitted on
    the references (lazily, the targets' profile only) and placing the targets."""
    if targets is None or not len(targets):
        raise ValueError(f"{PLACED!r} predicts new models: the protocol must name targets")
    from pkps_core.predictor import ReferencePredictor

    targets = list(targets)
    references = masked[~masked["model"].isin(targets)]
    predictor = ReferencePredictor(
        holdout=holdout, space_params=dict(space_params or {}) or None, random_state=seed
    ).fit(references, lazy=True)
    out = predictor.predict(masked[masked["model"].isin(targets)], level=intervals)
    return out.drop(columns="profile").assign(method=PLACED)


def _with_levers(frame: pd.DataFrame, protocol: str, seed: int, values: dict) -> pd.DataFrame:
    head = pd.DataFrame({"seed": seed, "protocol": protocol, **values}, index=frame.index)
    return pd.concat([head, frame], axis=1)


def _report(progress: Progress | None, done: int, total: int, message: str) -> None:
    if progress is not None:
        progress(done / total, message)


def run_sweep(
    protocol: str,
    records: pd.DataFrame,
    levers: Mapping[str, Sequence],
    step: Step,
    options: SweepOptions,
    *,
    describe: Callable[[dict], str] = _label,
) -> ProtocolResult:
    """Run ``step`` at every (lever point, seed) and collect the rows into one result.

    Parameters
    ----------
    protocol : str
        One of :data:`~pkps_core.protocols.reports.PROTOCOLS`: the result's levers,
        comparator and default methods, and the head of every progress message.
    records : DataFrame
        Canonical records, prepared once (:func:`prepare_records`) before any masking; the
        truth of a cell is its full-task score there (:func:`full_scores`).
    levers : mapping of lever name to values
        The grid is their product (in this order), each point run at every seed of
        ``options.seeds``.
    step : callable (records, point, seed, evaluate) -> (frame or None, values)
        Masks the prepared records at one lever point and seed and returns the rows of
        ``evaluate(masked, cells, targets=None)`` (None: nothing to predict), and the lever
        values recorded with them (e.g. the number of models actually kept).
    options : SweepOptions
    describe : callable values -> str
        The lever part of the progress message after each run.

    Returns
    -------
    ProtocolResult
    """
    records = prepare_records(records, options.embedder)
    truth = full_scores(records)
    methods = list(options.methods or DEFAULT_METHODS[protocol])
    level = options.intervals
    if isinstance(level, str):
        if level != PROTOCOL_DEFAULT:
            raise ValueError(f"intervals must be a level in (0, 1) or None, got {level!r}")
        level = DEFAULT_INTERVALS.get(protocol)
    grid, seeds = _grid(levers), options.seeds
    total, parts = len(grid) * len(seeds), []
    _report(options.progress, 0, total, f"{protocol}: starting")
    for done, (point, seed) in enumerate(itertools.product(grid, seeds), start=1):
        evaluate = partial(
            _evaluate,
            methods=methods,
            truth=truth,
            holdout=options.holdout,
            space_params=options.space_params,
            seed=seed + int(options.draw_offset),
            intervals=level,
            keep_intervals=level is not None or protocol in DEFAULT_INTERVALS,
            neighbours=options.neighbours,
        )
        frame, values = step(records, point, seed, evaluate)
        if frame is not None:
            parts.append(_with_levers(frame, protocol, seed, values))
        _report(options.progress, done, total, f"{protocol} {describe(values)} seed {seed}")
    return make_result(protocol, parts)


# ------------------------------------------------------------------------ the protocols


def _query_efficiency_step(
    records: pd.DataFrame, point: dict, seed: int, evaluate: Evaluate
) -> tuple[pd.DataFrame, dict]:
    masked = mask_query_efficiency(records, seed=seed, **point)
    return evaluate(masked, cells_of(masked)), {**point, "cohort": masked["model"].nunique()}


def _completion_step(
    records: pd.DataFrame, point: dict, seed: int, evaluate: Evaluate
) -> tuple[pd.DataFrame | None, dict]:
    masked, hidden = mask_completion(records, seed=seed, **point)
    values = {
        **point,
        "cohort": pd.concat([masked["model"], hidden["model"]]).nunique(),
        "n_tasks": pd.concat([masked["task"], hidden["task"]]).nunique(),
    }
    return (evaluate(masked, hidden) if len(hidden) else None), values


def _split_step(
    split: str, records: pd.DataFrame, point: dict, seed: int, evaluate: Evaluate
) -> tuple[pd.DataFrame, dict]:
    masked, targets = mask_split(records, split, core_set=point["core_set"], seed=seed)
    frame = evaluate(masked, cells_of(masked[masked["model"].isin(targets)]), targets)
    sources = np.setdiff1d(masked["model"].unique(), targets)
    spread = similarity_and_spread(records, sources, targets)
    frame = frame.merge(spread, on=["model", "task"], how="left")
    sigma = frame.pop("sigma").where(lambda s: s > 0)
    frame["normalised_gap"] = frame["abs_err"] / sigma
    return frame, point


def _new_model_step(
    target_share: float, records: pd.DataFrame, point: dict, seed: int, evaluate: Evaluate
) -> tuple[pd.DataFrame, dict]:
    masked, targets = mask_new_model(records, target_share=target_share, seed=seed, **point)
    frame = evaluate(masked, cells_of(records[records["model"].isin(targets)]), targets)
    frame["task_queries"] = frame["task"].map(task_query_counts(records)).to_numpy()
    return frame, {**point, "n_targets": len(targets)}


def _core_set_label(values: dict) -> str:
    return f"core set {values['core_set']}"


def query_efficiency_protocol(
    records: pd.DataFrame,
    *,
    budgets: Sequence[int] = (1, 2, 4, 8),
    rhos: Sequence[float] = (0.0,),
    cohorts: Sequence[int | None] = (None,),
    p_tasks: Sequence[float] = (1.0,),
    options: SweepOptions | None = None,
    **sweep: Any,
) -> ProtocolResult:
    """Query efficiency (PKPS Figure 3a–c): MAE of every observed cell at budget m.

    The lever grid is the product of ``budgets``, ``rhos``, ``cohorts`` (None = every
    model) and ``p_tasks``; for each point and seed the records are masked by
    :func:`mask_query_efficiency` and every kept cell is predicted under the holdout. The
    truth is the cell's full-task score (:func:`full_scores`). The long table's ``cohort``
    is the number of models actually kept. ``options`` and ``**sweep``: the settings every
    sweep shares (:class:`SweepOptions`, or its fields as keywords: ``seeds=``, ...).
    """
    levers = {"budget": budgets, "rho": rhos, "cohort": cohorts, "p_task": p_tasks}
    options = sweep_options(options, **sweep)
    return run_sweep("query-efficiency", records, levers, _query_efficiency_step, options)


def completion_protocol(
    records: pd.DataFrame,
    *,
    p_tasks: Sequence[float] = (0.5,),
    p_queries: Sequence[float] = (0.5,),
    cohorts: Sequence[int | None] = (None,),
    n_tasks: Sequence[int | None] = (None,),
    options: SweepOptions | None = None,
    **sweep: Any,
) -> ProtocolResult:
    """Score completion (PKPS Figure 4): MAE on the hidden cells of :func:`mask_completion`.

    The truth of a hidden cell is its full-task score in the input; the long table's
    ``cohort`` and ``n_tasks`` are the numbers actually kept. ``options`` and ``**sweep``:
    as in :func:`query_efficiency_protocol`.
    """
    levers = {"cohort": cohorts, "n_tasks": n_tasks, "p_task": p_tasks, "p_query": p_queries}
    options = sweep_options(options, **sweep)
    return run_sweep("completion", records, levers, _completion_step, options)


def split_protocol(
    records: pd.DataFrame,
    split: str,
    *,
    core_sets: Sequence[int] = (50,),
    options: SweepOptions | None = None,
    **sweep: Any,
) -> ProtocolResult:
    """Interpolation or extrapolation (second paper): estimation gap on the targets.

    Targets are passed to the methods as new models (their cells never serve as
    references); the error ``abs_err`` is the estimation gap ``|h(f) − s̄(f, D)|`` per
    (target, task). Each row also carries the target's ``similarity`` to the sources
    (binary tasks) and the ``normalised_gap`` ``abs_err / sigma_f``. ``options`` and
    ``**sweep``: as in :func:`query_efficiency_protocol`.
    """
    options = sweep_options(options, **sweep)
    if split not in SPLITS:
        raise ValueError(f"split must be 'interpolation' or 'extrapolation', got {split!r}")
    step = partial(_split_step, split)
    levers = {"core_set": core_sets}
    return run_sweep(split, records, levers, step, options, describe=_core_set_label)


def new_model_protocol(
    records: pd.DataFrame,
    *,
    budgets: Sequence[int] = (1, 2, 4, 8, 16),
    modes: Sequence[str] = ("scored", "responses-only"),
    target_share: float = 0.25,
    options: SweepOptions | None = None,
    **sweep: Any,
) -> ProtocolResult:
    """New models against dense references: the users' situation, every method measured.

    At each (budget, mode) and seed, :func:`mask_new_model` draws ``target_share`` of the
    families as targets (the same targets at every budget and mode of a seed) and keeps
    ``budget`` responses per target cell, scored or responses-only; the references keep
    every response. The targets are passed to the prediction as new models (their cells
    never serve as references), under the holdout of ``options`` (family by default), and
    only the target cells are scored, against their full-task scores in the input
    (:func:`full_scores`). Predictions carry conformal intervals at
    ``options.intervals`` (0.9 by default). Unknown modes, a share outside (0, 1) or a
    budget below 1 raise ValueError before anything is prepared.

    The long table has the levers ``budget`` and ``mode``, the number of targets
    ``n_targets``, :data:`INTERVAL_COLUMNS` and ``task_queries`` (the task's distinct
    queries in the input, the weight of the overall score); the result's ``overall`` and
    ``intervals`` are :func:`~pkps_core.protocols.reports.overall_table` and
    :func:`~pkps_core.protocols.reports.interval_table`. ``options`` and ``**sweep``: as
    in :func:`query_efficiency_protocol`.
    """
    options = sweep_options(options, **sweep)
    unknown = [mode for mode in modes if mode not in NEW_MODEL_MODES]
    if unknown or not len(modes):
        raise ValueError(f"modes must be among {', '.join(NEW_MODEL_MODES)}, got {list(modes)}")
    if not 0.0 < target_share < 1.0:
        raise ValueError(f"target_share must be in (0, 1), got {target_share}")
    if not len(budgets) or min(budgets) < 1:
        raise ValueError(f"budgets must be at least 1, got {list(budgets)}")
    step = partial(_new_model_step, target_share)
    levers = {"budget": budgets, "mode": modes}
    return run_sweep("new-model", records, levers, step, options)


def run_protocol(
    records: pd.DataFrame,
    protocol: str,
    *,
    budgets: Sequence[int] | None = None,
    rhos: Sequence[float] = (0.0,),
    cohorts: Sequence[int | None] = (None,),
    p_tasks: Sequence[float] | None = None,
    p_queries: Sequence[float] = (0.5,),
    n_tasks: Sequence[int | None] = (None,),
    core_sets: Sequence[int] = (50,),
    modes: Sequence[str] = ("scored", "responses-only"),
    target_share: float = 0.25,
    options: SweepOptions | None = None,
    **sweep: Any,
) -> ProtocolResult:
    """Run ``protocol`` (one of :data:`PROTOCOLS`) with the levers that apply to it.

    ``budgets`` defaults to the protocol's :data:`DEFAULT_BUDGETS`, ``p_tasks`` to 1.0 for
    query efficiency and 0.5 for completion; levers that do not belong to the protocol are
    ignored. ``options`` and ``**sweep``: as in :func:`query_efficiency_protocol`.
    """
    options = sweep_options(options, **sweep)
    if protocol == "new-model":
        return new_model_protocol(
            records,
            budgets=budgets or DEFAULT_BUDGETS["new-model"],
            modes=modes,
            target_share=target_share,
            options=options,
        )
    if protocol == "query-efficiency":
        return query_efficiency_protocol(
            records,
            budgets=budgets or DEFAULT_BUDGETS["query-efficiency"],
            rhos=rhos,
            cohorts=cohorts,
            p_tasks=p_tasks or (1.0,),
            options=options,
        )
    if protocol == "completion":
        return completion_protocol(
            records,
            p_tasks=p_tasks or (0.5,),
            p_queries=p_queries,
            cohorts=cohorts,
            n_tasks=n_tasks,
            options=options,
        )
    if protocol in SPLITS:
        return split_protocol(records, protocol, core_sets=core_sets, options=options)
    raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
