"""The errors and warnings of the sandbox and the reproduction speak to a user: they never name
an internal function, class or module (the user cannot act on ``SandboxSpec.blacklist`` or
``paperbench.sandbox._egress_gateway``; they can on "the sandbox's blacklist")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import paperbench

PACKAGE = Path(paperbench.__file__).parent
CHECKED = ("sandbox", "reproduce")
_SAYING = {"warning", "warn", "error", "info", "exception", "critical", "print", "_note"}
_MODULE_PATH = re.compile(r"\bpaperbench(\.\w+)*\._\w+")


def _defined_names() -> set[str]:
    """Every class and function paperbench defines (as a message would name them)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    # Words a message may well use although something of that name exists.
    return {n for n in names if len(n) > 3 and (n[0].isupper() or "_" in n.strip("_"))}


def _message_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """The literal parts of what is raised or said: the arguments of ``raise X(...)`` and of
    warning/log/print calls."""
    calls: list[ast.Call] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            calls.append(node.exc)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _SAYING:
                calls.append(node)
    texts = []
    for call in calls:
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            for part in ast.walk(arg):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    texts.append((part.lineno, part.value))
    return texts


@pytest.mark.parametrize("package", CHECKED)
def test_no_message_names_an_internal_function_or_class(package: str) -> None:
    internal = _defined_names()
    word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    found = []
    for path in sorted((PACKAGE / package).glob("*.py")):
        for line, text in _message_texts(ast.parse(path.read_text())):
            named = sorted(set(word.findall(text)) & internal)
            if _MODULE_PATH.search(text):
                named.append(_MODULE_PATH.search(text).group(0))  # type: ignore[union-attr]
            if named:
                found.append(f"{path.relative_to(PACKAGE)}:{line}: {named} in {text!r}")
    assert not found, "\n".join(found)
