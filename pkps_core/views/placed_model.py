"""The New model report from a fitted reference predictor: placed, not refitted.

:func:`placed_model_report` is :func:`pkps_core.views.new_model.new_model_report`'s
content for a model placed by a :class:`~pkps_core.predictor.ReferencePredictor`.
"""

from __future__ import annotations

import dataclasses
import time

import pandas as pd

from pkps_core.predict import TargetRun
from pkps_core.records import RecordsError
from pkps_core.views.new_model import LEVEL, NewModelReport, _assemble


def placed_model_report(
    predictor,
    records: pd.DataFrame,
    *,
    level: float = LEVEL,
    n_neighbours: int = 5,
) -> NewModelReport:
    """:func:`new_model_report` from a fitted :class:`~pkps_core.predictor.ReferencePredictor`:
    ``records`` (one model's, embedded like the references) are placed, not refitted.

    A model that is one of the predictor's references is predicted from the others (its
    stored row is hidden from the run), and its full score is the truth shown beside it.
    """
    started = time.perf_counter()
    models = sorted(records["model"].astype(str).unique())
    if len(models) != 1:
        raise RecordsError(f"a report is about one model; the records hold {len(models)}")
    predictions, runs = predictor.predict_contexts(records, level=level)
    context, _ = runs[0]
    name = models[0]
    inside = next(m for m in context.models[context.rows] if m in (name, f"{name} [new]"))
    frame = predictions.assign(model=inside).drop(columns="profile")
    frame = frame.assign(note=frame["note"].astype(str))
    run = TargetRun.of(context, frame)
    report = _assemble(run, inside, predictor.holdout, level, n_neighbours, started, hide=name)
    if inside != name:
        report = _renamed(report, inside, name)
    return report


def _renamed(report: NewModelReport, inside: str, name: str) -> NewModelReport:
    """The report of a model that ran under another name, under its own."""

    def fix(frame: pd.DataFrame, column: str) -> pd.DataFrame:
        return frame.assign(**{column: frame[column].replace(inside, name)})

    return dataclasses.replace(
        report,
        model=name,
        standings=fix(report.standings, "model"),
        scatter=fix(report.scatter, "model"),
        responses=fix(report.responses, "model")
        if "model" in report.responses
        else report.responses,
    )


def embed_like_store(records: pd.DataFrame, store) -> pd.DataFrame:
    """``records`` (a new model's texts) with vectors from ``store``'s fitted embedders, the
    space its references' vectors are in (unchanged where they have vectors already)."""
    from pkps_core.views.uploaded_model import embedded_like_the_store

    embedders = {kind: store.fitted_embedder(kind) for kind in ("query", "response")}
    return embedded_like_the_store(records, embedders)
