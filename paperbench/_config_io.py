"""Reading YAML configuration files into one-line errors: shared by the judge and agent
catalogs.

:func:`read_yaml_mapping` reads a file and insists on a mapping; :func:`validation_error_line`
turns a pydantic :class:`~pydantic.ValidationError` into the JSON path and message of its
first error, so the caller can raise one :class:`~paperbench.errors.ConfigError` line.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from paperbench.errors import ConfigError


def json_path(loc: tuple[int | str, ...]) -> str:
    """``("roles", "grading", 0)`` → ``$.roles.grading[0]``."""
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def read_yaml_mapping(path: Path, *, expected: str) -> dict[str, Any]:
    """The YAML mapping in ``path``.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or is not a mapping (``expected``
            names the keys a mapping should have, for the message).
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", file=path) from exc
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"not valid YAML: {problem}", file=path, path=where) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping of keys ({expected})", file=path, path="$")
    return data


def validation_error_line(
    exc: ValidationError,
    *,
    tag: str,
    tags: Collection[str],
    readme: str,
) -> tuple[str, str]:
    """The JSON path and message of ``exc``'s first error, for a model discriminated by the
    key ``tag`` whose values are ``tags``; ``readme`` is where the fields are documented."""
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    if loc and loc[0] in tags:
        loc = loc[1:]  # the discriminator value pydantic puts first
    kind = error["type"]
    choices = ", ".join(tags)
    if kind == "extra_forbidden":
        return json_path(loc), f"unknown key (a typo?); see {readme} for the fields"
    if kind == "union_tag_invalid":
        return f"$.{tag}", f"expected one of {choices}"
    if kind == "union_tag_not_found":
        return f"$.{tag}", f"missing: set {tag} to one of {choices}"
    return json_path(loc), str(error["msg"]).removeprefix("Value error, ")
