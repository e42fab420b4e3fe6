"""Structured-output schemas as each provider accepts them, made at the provider boundary.

A caller asks for a plain JSON Schema (a pydantic model's ``model_json_schema()`` or a dict);
each provider turns it into the form its API takes with its SDK's own helper:

- OpenAI strict mode: ``openai.lib._pydantic._ensure_strict_json_schema`` (every object
  closed, every property required, a ``$ref`` with siblings inlined), then the keywords strict
  mode refuses are moved into the description. A schema that cannot be strict without changing
  its meaning (an object with open ``additionalProperties``, e.g. ``dict[str, float]``) is sent
  unchanged and not strict, with a warning.
- Anthropic: ``anthropic.lib._parse._transform.transform_schema`` (objects closed, numeric
  and string bounds and unsupported formats moved into the description).

The answer is always validated against the caller's original schema, so a bound moved into a
description is still enforced (a bad answer is re-asked).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from paperbench.errors import ModelRequestError

log = logging.getLogger("paperbench.llm")

OPENAI_STRICT_UNSUPPORTED = frozenset(
    {
        "minLength",
        "maxLength",
        "unevaluatedProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedItems",
        "contains",
        "minContains",
        "maxContains",
        "uniqueItems",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
    }
)
"""Keywords OpenAI's strict mode refuses (its documented list of unsupported keywords)."""

_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")


def openai_schema(
    schema: dict[str, Any], *, strict: bool, model: str
) -> tuple[dict[str, Any], bool]:
    """The schema to send to OpenAI, and whether to ask for strict mode."""
    if not strict:
        return schema, False
    from openai.lib._pydantic import _ensure_strict_json_schema

    work = copy.deepcopy(schema)
    try:
        result = _ensure_strict_json_schema(work, path=(), root=work)
    except (TypeError, ValueError, KeyError, AssertionError) as exc:
        raise ModelRequestError(f"{model}: the output schema cannot be sent: {exc}") from None
    open_at = _open_object(result, "$")
    if open_at is not None:
        log.warning(
            "%s: the output schema has an open object at %s (additionalProperties or "
            "patternProperties), which OpenAI's strict mode refuses: sent without strict "
            "mode; answers are still validated against the schema",
            model,
            open_at,
        )
        return schema, False
    _describe_unsupported(result, OPENAI_STRICT_UNSUPPORTED)
    return result, True


def anthropic_schema(schema: dict[str, Any], *, model: str) -> dict[str, Any]:
    """The schema to send to Anthropic's ``output_config.format``."""
    from anthropic.lib._parse._transform import transform_schema

    try:
        result: dict[str, Any] = transform_schema(copy.deepcopy(schema))
    except (TypeError, ValueError, KeyError) as exc:
        raise ModelRequestError(f"{model}: the output schema cannot be sent: {exc}") from None
    return result


def _open_object(node: Any, where: str) -> str | None:
    """The JSON path of the first object that admits undeclared properties, if any."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            found = _open_object(item, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    if not isinstance(node, dict):
        return None
    if "patternProperties" in node or node.get("additionalProperties") not in (None, False):
        return where
    for key in _SUBSCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                found = _open_object(sub, f"{where}.{key}.{name}")
                if found is not None:
                    return found
    for key in (*_SUBSCHEMA_LISTS, "items"):
        if key in node:
            found = _open_object(node[key], f"{where}.{key}")
            if found is not None:
                return found
    return None


def _describe_unsupported(node: Any, unsupported: frozenset[str]) -> None:
    """Move ``unsupported`` keywords of every subschema into its description, in place."""
    if isinstance(node, list):
        for item in node:
            _describe_unsupported(item, unsupported)
        return
    if not isinstance(node, dict):
        return
    moved = {key: node.pop(key) for key in list(node) if key in unsupported}
    if moved:
        note = "{" + ", ".join(f"{key}: {value}" for key, value in moved.items()) + "}"
        description = node.get("description")
        node["description"] = f"{description}\n\n{note}" if description else note
    for key in _SUBSCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            for sub in value.values():
                _describe_unsupported(sub, unsupported)
    for key in (*_SUBSCHEMA_LISTS, "items"):
        if key in node:
            _describe_unsupported(node[key], unsupported)
