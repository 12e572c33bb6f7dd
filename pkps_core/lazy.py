"""Names a package imports on first use (PEP 562), so importing it stays cheap."""

from __future__ import annotations

import importlib
import sys


def lazy_attributes(package: str, names: dict[str, str]):
    """``__getattr__`` and ``__dir__`` for ``package`` whose ``names`` (name -> the module
    that defines it) are imported when first read, then kept on the package."""

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *names])

    return __getattr__, __dir__
