"""Reading and writing rubric and graded-tree files, with one-line errors naming the JSON path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from paperbench._io import atomic_write_text, read_text
from paperbench.errors import InputError, RubricError
from paperbench.rubric._model import GradedTaskNode, TaskNode, iter_nodes, path_to_json_path
from paperbench.rubric._schema import TreeKind
from paperbench.rubric._validate import MAX_DEPTH, detect_kind, inspect_text, parse_tree_json

N = TypeVar("N", bound=TaskNode)


def _load(path: str | Path, model: type[N], kind: TreeKind) -> N:
    """Fast path: pydantic parses and validates the JSON text in one step. Only when that
    fails is the text checked the way ``rubric validate`` checks it, to raise its first
    problem with the JSON path, in the same words."""
    text = read_text(path)
    try:
        tree = model.model_validate_json(text)
    except ValidationError:
        found, issues = inspect_text(text, file=path, kind=kind)
        if issues:
            raise RubricError(issues[0].message, file=path, path=issues[0].path) from None
        assert isinstance(found, model)
        return found
    too_deep = _first_path_deeper_than(tree, MAX_DEPTH)
    if too_deep is not None:
        raise RubricError(
            f"the tree is deeper than {MAX_DEPTH} levels; paperbench refuses deeper trees",
            file=path,
            path=too_deep,
        )
    return tree


def _first_path_deeper_than(root: TaskNode, limit: int) -> str | None:
    for path, _ in iter_nodes(root):
        if len(path) >= limit:
            return path_to_json_path(path)
    return None


def load_rubric(path: str | Path) -> TaskNode:
    """Load a rubric.json. Raises RubricError (one line: file, JSON path, problem)."""
    return _load(path, TaskNode, "rubric")


def load_graded(path: str | Path) -> GradedTaskNode:
    """Load a graded tree (a grade file or PaperBench's expected_result.json)."""
    return _load(path, GradedTaskNode, "graded")


def load_tree(path: str | Path) -> TaskNode:
    """Load a rubric or a graded tree, whichever the file holds (a root ``score`` makes a
    graded tree); its problems are reported as that kind's."""
    text = read_text(path)
    try:
        data = parse_tree_json(text, file=path)
    except InputError:  # the loader below words the problem
        data = None
    if detect_kind(data) == "graded":
        return load_graded(path)
    return load_rubric(path)


def dumps_tree(node: TaskNode, *, indent: int | None = 2) -> str:
    """A tree as PaperBench-compatible JSON text."""
    return json.dumps(node.to_dict(), indent=indent, ensure_ascii=False)


def write_tree(node: TaskNode, path: str | Path, *, indent: int | None = 2) -> None:
    """Write a rubric or graded tree atomically, fields in PaperBench's order."""
    atomic_write_text(path, dumps_tree(node, indent=indent) + "\n")
