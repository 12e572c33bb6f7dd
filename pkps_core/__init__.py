"""pkps_core: Product Kernel Perspective Space (PKPS) and DKPS for benchmark prediction.

The numerics and data library behind Perspective Explorer; it never imports streamlit.
The names below are loaded on first use, so ``import pkps_core`` stays cheap:

>>> from pkps_core import PerspectiveSpace, build_context, validate_records  # doctest: +SKIP

``pkps_core.predict`` is the module of that name (its function is
``pkps_core.predict.predict``): a package attribute cannot be both.
"""

from __future__ import annotations

from pkps_core.lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {
    "PerspectiveSpace": "pkps_core.space",
    "PreparedCache": "pkps_core.space",
    "prepare_cache": "pkps_core.space",
    "METHODS": "pkps_core.methods",
    "PredictionContext": "pkps_core.methods",
    "build_context": "pkps_core.predict",
    "mean_absolute_error": "pkps_core.predict",
    "RecordsError": "pkps_core.records",
    "read_records": "pkps_core.reading",
    "validate_records": "pkps_core.records",
    "make_synthetic": "pkps_core.synthetic",
    "Store": "pkps_core.store",
    "load": "pkps_core.importers",
}
__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
