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


def catalog_entries(folder: Path) -> list[str]:
    """The names of the YAML configs in a catalog folder (file stems, sorted)."""
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml"))


def resolve_catalog_ref(ref: str | Path, folder: Path, *, kind: str, flag: str) -> Path:
    """A catalog name (``simple``, ``basic``) or a path to a YAML file.

    Raises:
        ConfigError: no config of that name in the catalog (naming ``flag``).
    """
    text = str(ref)
    if text.endswith((".yaml", ".yml")) or "/" in text or Path(text).exists():
        return Path(text)
    candidate = folder / f"{text}.yaml"
    if not candidate.is_file():
        names = ", ".join(catalog_entries(folder)) or "none"
        raise ConfigError(
            f"no {kind} config named {text!r} in the catalog (have: {names}); "
            "or give a path to a YAML file",
            path=flag,
        )
    return candidate
