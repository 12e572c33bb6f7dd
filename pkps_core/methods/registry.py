"""The prediction methods by name, with the facts the callers need about each.

``METHODS[name](context)`` runs a method on a :class:`~pkps_core.methods.context.
PredictionContext` and returns a :class:`~pkps_core.methods.context.MethodResult` (NaN
where it does not apply, with a note saying why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from pkps_core.methods.context import MethodResult, PredictionContext
from pkps_core.methods.ensemble import ensemble_predictions
from pkps_core.methods.irt import irt_predictions
from pkps_core.methods.length import length_adjusted_predictions, length_predictions
from pkps_core.methods.lrmc import lrmc_predictions
from pkps_core.methods.sampling import (
    aipw_predictions,
    mean_predictions,
    rs_learn_predictions,
    sample_predictions,
)
from pkps_core.methods.space_methods import space_predictions
from pkps_core.methods.stacking import precision_predictions


@dataclass(frozen=True)
class Method:
    """A prediction method and what it reads.

    Attributes
    ----------
    name : str
    compute : callable
        ``compute(context) -> (prediction, notes)``, models × tasks grids.
    reads_own_scores : bool
        The prediction of a cell reads the cell's own scores, so its residual against a
        reference that *is* the sample score says nothing (see :mod:`pkps_core.trust`).
    space : str or None
        The perspective space ("pkps" / "dkps") whose coordinates it predicts from.
    summary : str
        One line for menus and help texts.
    """

    name: str
    compute: Callable[[PredictionContext], tuple[np.ndarray, np.ndarray]]
    reads_own_scores: bool
    space: str | None = None
    summary: str = ""

    def __call__(self, context: PredictionContext) -> MethodResult:
        prediction, notes = context.cached(("method", self.name), lambda: self.compute(context))
        return MethodResult(prediction.copy(), notes.copy())


METHODS: dict[str, Method] = {
    method.name: method
    for method in (
        Method("mean", mean_predictions, False, summary="the references' mean score on the task"),
        Method("sample", sample_predictions, True, summary="mean of the cell's observed scores"),
        Method("irt", irt_predictions, True, summary="1PL (Rasch) IRT, binary tasks"),
        Method("lrmc", lrmc_predictions, False, summary="BenchPress low-rank completion"),
        Method("rs-learn", rs_learn_predictions, True, summary="Random-Sampling-Learn ridge"),
        Method("aipw", aipw_predictions, True, summary="augmented inverse-propensity weighting"),
        Method(
            "dkps",
            partial(space_predictions, space="dkps"),
            False,
            space="dkps",
            summary="KNN in the data kernel perspective space (delta query kernel)",
        ),
        Method(
            "pkps",
            partial(space_predictions, space="pkps"),
            False,
            space="pkps",
            summary="KNN in the product kernel perspective space",
        ),
        Method(
            "length",
            length_predictions,
            False,
            summary="the references' scores against how long the model answers, per query",
        ),
        Method(
            "pkps-length",
            length_adjusted_predictions,
            False,
            space="pkps",
            summary="PKPS corrected for how much longer the model answers than its neighbours",
        ),
        Method("ensemble", ensemble_predictions, True, summary="PKPS blended with sample / LRMC"),
        Method(
            "precision",
            precision_predictions,
            True,
            summary="sample and PKPS weighted by their precisions at the targets' budget",
        ),
    )
}
