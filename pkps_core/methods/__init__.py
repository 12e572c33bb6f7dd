"""Prediction methods on the models × tasks grid.

``context`` (what a method reads; the one rule of which models may inform which) →
one module per family of methods (``space_methods`` PKPS/DKPS, ``lrmc``, ``irt``,
``sampling`` sample/RS-Learn/AIPW, ``ensemble``) → ``registry`` (:data:`METHODS`).
Nothing here imports :mod:`pkps_core.predict` or :mod:`pkps_core.trust`.
"""

from pkps_core.methods.context import (
    HOLDOUTS,
    MethodResult,
    PredictionContext,
    allowed_references,
)
from pkps_core.methods.registry import METHODS, Method

__all__ = [
    "HOLDOUTS",
    "METHODS",
    "Method",
    "MethodResult",
    "PredictionContext",
    "allowed_references",
]
