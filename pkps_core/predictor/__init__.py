"""The fitted reference predictor: fit once on the references, place every new model fast.

:mod:`~pkps_core.predictor.core` fits and places (:class:`ReferencePredictor`);
:mod:`~pkps_core.predictor.state` keeps the fit in the store (:func:`stored_predictor`).
"""

from pkps_core.predictor.core import (
    MODES,
    PROFILE_BUDGETS,
    PlacedSpace,
    Profile,
    ReferencePredictor,
    profile_of,
)
from pkps_core.predictor.state import (
    FIT_KIND,
    StaleFit,
    from_state,
    get_state,
    stored_predictor,
)

__all__ = [
    "FIT_KIND",
    "MODES",
    "PROFILE_BUDGETS",
    "PlacedSpace",
    "Profile",
    "ReferencePredictor",
    "StaleFit",
    "from_state",
    "get_state",
    "profile_of",
    "stored_predictor",
]
