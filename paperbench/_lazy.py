"""A package's public names, imported on first use (PEP 562).

Importing a package loads none of its modules: the first ``paperbench.x.Name`` (or ``from
paperbench.x import Name``) imports the one module that defines ``Name``. Each ``__init__``
says where its names live once, as the imports mypy and editors read, and lists them in
``__all__`` (``tests/test_layering.py`` checks that the two agree)::

    if TYPE_CHECKING:
        from paperbench.x._mod import Name

    __all__ = ["Name"]

    if not TYPE_CHECKING:  # hidden from mypy, so that a misspelt name stays an error
        __getattr__, __dir__ = _lazy.exports(__name__)

:func:`exports` reads those imports from the ``__init__``'s own source.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def origins(source: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` blocks of ``source`` import → its module."""
    where: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if not isinstance(imp, ast.ImportFrom) or not imp.module or imp.level:
                    raise TypeError(f"expected 'from paperbench.x import': {ast.unparse(imp)}")
                where |= {alias.asname or alias.name: imp.module for alias in imp.names}
    return where


def exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: a name its ``if
    TYPE_CHECKING:`` block imports is imported from there on first use, then kept on it."""
    init = sys.modules[package].__file__
    assert init is not None
    where = origins(Path(init).read_text(encoding="utf-8"))

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
