"""A package's public names, imported on first use (PEP 562).

Importing a package loads none of its modules: the first ``paperbench.x.Name`` (or ``from
paperbench.x import Name``) imports the one module that defines ``Name``. Each ``__init__``
says the same thing three times, checked to agree by ``tests/test_layering.py``::

    if TYPE_CHECKING:  # what mypy and editors read
        from paperbench.x._mod import Name

    __all__ = ["Name"]

    if not TYPE_CHECKING:  # hidden from mypy, so that a misspelt name stays an error
        __getattr__, __dir__ = _lazy.exports(__name__, {"paperbench.x._mod": ("Name",)})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, origins: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose names are defined in
    the modules ``origins`` maps to them. A name, once imported, is kept on the package."""
    where = {name: module for module, names in origins.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
