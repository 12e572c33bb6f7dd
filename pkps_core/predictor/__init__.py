"""The fitted reference predictor: fit once on the references, place every new model fast.

:mod:`~pkps_core.predictor.core` fits and places (:class:`ReferencePredictor`);
:mod:`~pkps_core.predictor.state` keeps the fit in the store (:func:`stored_predictor`).
The names below are imported on first use, so that importing a light submodule (the
calibration grid of :mod:`~pkps_core.predictor.grid`, which the CLI's parser reads) does
not load the numerics.
"""

from pkps_core.lazy import lazy_attributes

_LAZY = {
    "FIT_KIND": "pkps_core.predictor.state",
    "MODES": "pkps_core.predictor.grid",
    "PROFILE_BUDGETS": "pkps_core.predictor.grid",
    "PlacedSpace": "pkps_core.predictor.core",
    "Profile": "pkps_core.predictor.core",
    "ReferencePredictor": "pkps_core.predictor.core",
    "StaleFit": "pkps_core.predictor.state",
    "from_state": "pkps_core.predictor.state",
    "get_state": "pkps_core.predictor.state",
    "profile_of": "pkps_core.predictor.core",
    "stored_predictor": "pkps_core.predictor.state",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
