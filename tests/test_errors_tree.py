"""The exception tree drawn in ``paperbench/errors.py``'s docstring is the real one: every
subclass of :class:`PaperbenchError` in the package appears, under its real parent, with its
other base named, and marked with the module that defines it when that is not errors.py."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import paperbench
from paperbench import errors
from paperbench.errors import PaperbenchError

_LINE = re.compile(r"^(?P<indent>(?:[│ ] {3})*)(?:[├└]── )?(?P<name>\w+)(?P<rest>.*)$")


def _drawn() -> dict[str, tuple[str | None, set[str], str | None]]:
    """name -> (parent in the tree, other bases named ``(also X)``, ``[module]`` mark)."""
    doc = errors.__doc__ or ""
    lines = [line[4:] for line in doc.splitlines() if line.startswith("    ")]
    assert lines[0] == "PaperbenchError"
    drawn: dict[str, tuple[str | None, set[str], str | None]] = {}
    stack: list[str] = []
    for line in lines:
        m = _LINE.match(line)
        assert m, f"not a tree line: {line!r}"
        depth = len(m["indent"]) // 4 + (0 if line == "PaperbenchError" else 1)
        del stack[depth:]
        parent = stack[-1] if stack else None
        also = set(re.findall(r"\(also (\w+)\)", m["rest"]))
        module = re.search(r"\[([\w.]+)\]\s*$", m["rest"])
        assert m["name"] not in drawn, f"{m['name']} drawn twice"
        drawn[m["name"]] = (parent, also, module[1] if module else None)
        stack.append(m["name"])
    return drawn


def _real() -> dict[str, type[BaseException]]:
    for info in pkgutil.walk_packages(paperbench.__path__, "paperbench."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError:  # an optional dependency (the egress addon's mitmproxy)
            spec = importlib.util.find_spec(info.name)
            assert spec is not None and spec.origin is not None
            source = Path(spec.origin).read_text(encoding="utf-8")
            assert not re.search(r"^class \w+\(", source, re.M), info.name
    found: dict[str, type[BaseException]] = {}
    todo: list[type[BaseException]] = [PaperbenchError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("paperbench") and not cls.__module__.startswith(
            "paperbench.testing"
        ):
            assert cls.__name__ not in found or found[cls.__name__] is cls, cls
            found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def test_the_docstring_tree_is_the_class_hierarchy() -> None:
    drawn = _drawn()
    real = _real()
    assert set(drawn) == set(real)
    for name, cls in real.items():
        parent, also, module = drawn[name]
        bases = [b.__name__ for b in cls.__bases__]
        if cls is PaperbenchError:
            assert parent is None
            continue
        assert bases[0] == parent, f"{name}: drawn under {parent}, a subclass of {bases}"
        assert set(bases[1:]) == also, f"{name}: also {also}, bases {bases}"
        expected = None if cls.__module__ == "paperbench.errors" else cls.__module__
        assert (f"paperbench.{module}" if module else None) == expected, name


def test_every_class_of_errors_py_is_exported() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }
    assert defined == set(errors.__all__) - {"OUTSIDE_MODEL_ERRORS"}
