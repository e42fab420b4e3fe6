"""The published JSON Schemas, generated from the models (the one source of the formats).

``rubrics/schema/{rubric,graded}.schema.json`` are written by
``python -m paperbench.rubric._schema`` and pinned by a test: a change to the models that is
not regenerated fails the test suite. ``rubric validate`` uses the generated schemas.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal

from paperbench.rubric._model import Check, GradedTaskNode, TaskNode

TreeKind = Literal["rubric", "graded"]
"""A rubric tree, or a graded one (with scores and explanations)."""

_HEADERS: dict[TreeKind, dict[str, str]] = {
    "rubric": {
        "$id": "urn:paperbench:schema:rubric:1",
        "title": "paperbench rubric tree",
        "description": "A rubric tree, compatible with PaperBench's rubric.json. A leaf (no "
        "sub_tasks) has a task_category; an internal node has task_category null.",
    },
    "graded": {
        "$id": "urn:paperbench:schema:graded:1",
        "title": "paperbench graded tree",
        "description": "A graded rubric tree, compatible with PaperBench's grade files and "
        "expected_result.json. Leaves hold a grader's score; internal nodes hold the weighted "
        "mean of their children, where an invalid leaf counts as 0.",
    },
}
_CHECK_DESCRIPTION = (
    "paperbench extension (ignored by PaperBench's tools): an executable test run after "
    "reproduction in a reproducer sandbox whose working directory is the executed submission "
    "at /submission. Exit code 0 scores 1, any other exit code 0; exit 126, 127 or 137, its "
    "timeout, or a check that cannot start leaves the leaf invalid (check_error), not 0. "
    "'files' maps a sandbox path to a "
    "file relative to the folder holding the rubric file (it must stay inside that folder); "
    "they are copied in just before the check and never shown to the agent."
)


def _clean(value: Any) -> Any:
    """Drop pydantic's generated titles and Python docstrings; keep everything else."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _node_schema(model: type[TaskNode]) -> dict[str, Any]:
    ref = f"#/$defs/{model.__name__}"
    raw = model.model_json_schema(ref_template="#/$defs/{model}")
    defs = raw.pop("$defs", {})
    node = defs.pop(model.__name__, raw)
    node.pop("description", None)
    # ``check`` is optional but never null (TaskNode rejects an explicit null).
    node["properties"]["check"] = {"$ref": "#/$defs/Check"}
    text = (
        json.dumps(_clean(node))
        .replace(json.dumps(ref), json.dumps("#/$defs/node"))
        .replace(json.dumps("#/$defs/Check"), json.dumps("#/$defs/check"))
    )
    out: dict[str, Any] = json.loads(text)
    return out


@cache
def build_schema(kind: TreeKind) -> dict[str, Any]:
    """The JSON Schema of a rubric file or a graded-tree file, from the pydantic models."""
    model = GradedTaskNode if kind == "graded" else TaskNode
    check = _clean(Check.model_json_schema())
    check["description"] = _CHECK_DESCRIPTION
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **_HEADERS[kind],
        "$ref": "#/$defs/node",
        "$defs": {"node": _node_schema(model), "check": check},
    }


def dumps_schema(kind: TreeKind) -> str:
    return json.dumps(build_schema(kind), indent=2, ensure_ascii=False) + "\n"


def write_schemas(folder: Path) -> list[Path]:
    """Write both schemas into ``folder`` (e.g. ``rubrics/schema``)."""
    written = []
    for kind in ("rubric", "graded"):
        target = folder / f"{kind}.schema.json"
        target.write_text(dumps_schema(kind), encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":  # python -m paperbench.rubric._schema [FOLDER]
    for path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "rubrics/schema")):
        print(path)
