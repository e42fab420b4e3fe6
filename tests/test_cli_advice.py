"""Every piece of advice a message gives names a flag that exists: a walk over the strings of
the package for "pass --x", "give --x", "raise --x" and the like.

The model layer (paperbench/llm/ but its own command) serves every command, so its messages
name no flag at all (a missing key said to a ``run`` user as "pass --key", which only
``models check`` has, was such a message); ``models check`` adds its own advice.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

import typer.main

import paperbench
from paperbench.cli import app

_ADVICE = re.compile(r"\b(?:pass|give|add|use|set|raise|with|drop|or)\s+(--[a-z][a-z0-9-]*)")
_ROOT = Path(paperbench.__file__).parent

_SHARED_BY_EVERY_COMMAND = ("llm",)
_SAID_ONLY_WHEN_GIVEN = {"--budget-dollars"}
"""Advice the model layer may give: said only to a command that was given that flag."""


def _strings(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            found.append("".join(str(p) for p in parts))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
    return found


@functools.cache
def _advice() -> dict[str, set[str]]:
    """Flag -> the modules (relative paths) whose strings advise it."""
    found: dict[str, set[str]] = {}
    for path in sorted(_ROOT.rglob("*.py")):
        module = str(path.relative_to(_ROOT))
        for text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            for match in _ADVICE.finditer(text):
                found.setdefault(match.group(1), set()).add(module)
    return found


def _command_flags() -> set[str]:
    flags: set[str] = set()
    stack: list[Any] = [typer.main.get_command(app)]
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        for param in command.params:
            flags.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
    return flags


def test_every_flag_a_message_advises_exists() -> None:
    advice = _advice()
    assert "--resume" in advice  # the walk finds advice
    flags = _command_flags()
    unknown = {flag: sorted(where) for flag, where in advice.items() if flag not in flags}
    assert not unknown, unknown


def test_the_model_layer_advises_no_flag_of_a_command() -> None:
    for flag, where in _advice().items():
        shared = sorted(
            m
            for m in where
            if m.split("/")[0] in _SHARED_BY_EVERY_COMMAND and not m.endswith("_cli.py")
        )
        if flag not in _SAID_ONLY_WHEN_GIVEN:
            assert not shared, (flag, shared)
