"""One flag, one meaning: every option that two commands share has the same type, unit
(metavar), bounds, parser and default on both. A repeatable option (``run --agent``) and a
single one (``rollout --agent``) of the same element type count as the same flag."""

from __future__ import annotations

import typing
from collections import defaultdict
from typing import Any

import typer

from paperbench.cli import app


def _element(annotation: Any) -> str:
    """The type an option's values have: ``list[str]`` and ``str`` both give ``str``."""
    if typing.get_origin(annotation) is list:
        annotation = typing.get_args(annotation)[0]
    return getattr(annotation, "__name__", None) or str(annotation)


def _one(default: Any) -> Any:
    """A repeatable option's default of one value compares as that value."""
    if isinstance(default, list | tuple) and len(default) == 1:
        return default[0]
    return default


def _options() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    root = typer.main.get_command(app)
    found: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    stack: list[tuple[str, Any]] = [("paperbench", root)]
    while stack:
        path, command = stack.pop()
        subs = getattr(command, "commands", None)
        if subs:
            stack.extend((f"{path} {name}", sub) for name, sub in subs.items())
            continue
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            described = param.type_descriptor
            info = described.parameter_info
            kind = _element(described.annotation)
            found[param.opts[0]].append(
                (
                    path,
                    {
                        "type": kind,
                        "parser": getattr(info, "parser", None),
                        "callback": getattr(info, "callback", None),
                        "bounds": (param.min, param.max),
                        "metavar": param.metavar,
                        "default": _one(param.default),
                        "is_flag": param.is_flag,
                        "envvar": param.envvar,
                        "secondary": tuple(param.secondary_opts),
                    },
                )
            )
    return found


def test_every_command_has_options_to_compare() -> None:
    options = _options()
    assert "--data-dir" in options and len(options["--data-dir"]) >= 5


def test_a_flag_means_the_same_on_every_command() -> None:
    problems: list[str] = []
    for flag, uses in sorted(_options().items()):
        first_path, first = uses[0]
        for path, seen in uses[1:]:
            for key, value in seen.items():
                if value != first[key]:
                    problems.append(
                        f"{flag}: {key} is {first[key]!r} on `{first_path}` but {value!r} "
                        f"on `{path}`"
                    )
    assert not problems, "\n".join(problems)
