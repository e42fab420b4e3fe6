"""Rubric and graded-tree nodes, compatible with PaperBench's rubric.json and grade files.

Node ids are opaque and may repeat, so nodes are addressed by their *path*: the tuple of
child indices from the root (``()`` is the root, ``(0, 3)`` the root's first child's fourth
child). Every walk over a tree here is iterative, so deep trees never meet Python's
recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    model_validator,
)

NodePath = tuple[int, ...]
"""Where a node sits: the child indices from the root."""


class TaskCategory(StrEnum):
    """What a leaf asks: Code Development, Code Execution or Result Analysis."""

    CODE_DEVELOPMENT = "Code Development"
    CODE_EXECUTION = "Code Execution"
    RESULT_ANALYSIS = "Result Analysis"
    SUBTREE = "Subtree"
    """Internal only: a whole subtree graded as one unit at a depth limit."""


LEAF_CATEGORIES: tuple[TaskCategory, ...] = (
    TaskCategory.CODE_DEVELOPMENT,
    TaskCategory.CODE_EXECUTION,
    TaskCategory.RESULT_ANALYSIS,
)
"""The task categories a leaf may have, in the order PaperBench lists them."""


class FinegrainedCategory(StrEnum):
    """A leaf's finer category (e.g. Dataset and Model Acquisition, which
    ``--resources-provided`` weighs 0)."""

    ENVIRONMENT = "Environment & Infrastructure Setup"
    DATASET_AND_MODEL = "Dataset and Model Acquisition"
    DATA_PROCESSING = "Data Processing & Preparation"
    METHOD = "Method Implementation"
    EXPERIMENTAL_SETUP = "Experimental Setup"
    EVALUATION = "Evaluation, Metrics & Benchmarking"
    LOGGING_ANALYSIS = "Logging, Analysis & Presentation"


MAX_WEIGHT = 10**15
"""Largest weight accepted: sums of weights stay finite and exact, so scores are never
silently wrong (PaperBench's rubrics use small integers)."""


def _number_schema(description: str, **bounds: float) -> WithJsonSchema:
    """The JSON Schema of a number field: the same bounds as its pydantic constraints."""
    names = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum"}
    schema: dict[str, Any] = {"type": "number", **{names[k]: v for k, v in bounds.items()}}
    return WithJsonSchema({**schema, "description": description})


# A JSON number keeps its type (int or float) as in the file. Each member of the union carries
# the bounds, so an integer with hundreds of digits is refused by comparison, never converted.
Weight = Annotated[
    Annotated[StrictInt, Field(ge=0, le=MAX_WEIGHT)]
    | Annotated[StrictFloat, Field(ge=0, le=MAX_WEIGHT, allow_inf_nan=False)],
    _number_schema(
        "Relative weight among siblings (the official data uses small integers).",
        ge=0,
        le=MAX_WEIGHT,
    ),
]
Score = Annotated[
    Annotated[StrictInt, Field(ge=0, le=1)]
    | Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)],
    _number_schema(
        "Leaf: the grader's score. Internal: sum(w*s)/sum(w) over the children (0 if the "
        "weights sum to 0), where an invalid leaf counts as 0.",
        ge=0,
        le=1,
    ),
]
Timeout = Annotated[
    Annotated[StrictInt, Field(gt=0, le=MAX_WEIGHT)]
    | Annotated[StrictFloat, Field(gt=0, le=MAX_WEIGHT, allow_inf_nan=False)],
    _number_schema("Seconds before the check is killed and fails.", gt=0, le=MAX_WEIGHT),
]


def _nullable_enum(values: type[StrEnum], description: str) -> Any:
    return WithJsonSchema({"enum": [None, *(v.value for v in values)], "description": description})


class Check(BaseModel):
    """An executable test on a leaf (paperbench's extension, in the spirit of ResearchCodeBench).

    The check runs after reproduction in a reproducer sandbox on the executed submission
    (working directory ``/submission``); exit code 0 scores 1, any other exit code 0, except
    126, 127, 137 and a timeout, which leave the leaf invalid (``check_error``, as a check that
    cannot start). ``files`` maps a sandbox path to a file relative to the folder holding the
    rubric file; they are copied in just before the check and never shown to the agent.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(min_length=1, description="Shell command, run with bash in /submission.")
    timeout_s: Timeout = 300
    files: dict[str, str] = Field(
        default_factory=dict,
        description="Sandbox path -> path relative to the rubric file's folder.",
    )

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("expected an object, found null (leave the field out instead)")
    return value


def _shape_rules(schema: dict[str, Any]) -> None:
    """The JSON Schema form of ``TaskNode._category_fits_shape``."""
    schema["if"] = {"required": ["sub_tasks"], "properties": {"sub_tasks": {"minItems": 1}}}
    schema["then"] = {
        "properties": {"task_category": {"const": None}},
        "not": {"required": ["check"]},
    }
    schema["else"] = {
        "required": ["task_category"],
        "properties": {"task_category": {"enum": [c.value for c in TaskCategory]}},
    }


class TaskNode(BaseModel):
    """One rubric node. A leaf has a ``task_category``; an internal node has ``None``."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_shape_rules)

    id: str = Field(description="Opaque identifier; not always a UUID, not always unique.")
    requirements: str = Field(description="What the submission must do for this node.")
    weight: Weight
    sub_tasks: list[TaskNode] = Field(default_factory=list)
    task_category: Annotated[
        TaskCategory | None,
        _nullable_enum(
            TaskCategory,
            "Leaves: the category ('Subtree' only where a whole subtree was graded as one "
            "unit at a depth limit). Internal nodes: null.",
        ),
    ] = None
    finegrained_task_category: Annotated[
        FinegrainedCategory | None, _nullable_enum(FinegrainedCategory, "Leaves, optional.")
    ] = None
    check: Annotated[Check | None, BeforeValidator(_not_null)] = None
    """Absent on most leaves; never null in a file."""

    @model_validator(mode="after")
    def _category_fits_shape(self) -> Self:
        if self.sub_tasks:
            if self.task_category is not None:
                raise ValueError(
                    f"an internal node (one with sub_tasks) must have task_category null, "
                    f"found {self.task_category.value!r}"
                )
            if self.check is not None:
                raise ValueError("a check belongs on a leaf, not on a node with sub_tasks")
        elif self.task_category is None:
            raise ValueError(
                "a leaf (no sub_tasks) needs a task_category: one of "
                + ", ".join(repr(c.value) for c in LEAF_CATEGORIES)
            )
        return self

    @property
    def is_leaf(self) -> bool:
        return not self.sub_tasks

    def to_dict(self) -> dict[str, Any]:
        """The node as PaperBench writes it (field order as in rubric.json)."""
        return _to_dict(self)


def _tolerant_bool(value: Any) -> Any:
    # Real PaperBench grade files sometimes hold 1.0 / 0.0 here.
    if isinstance(value, int | float) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    return value


def _tolerant_metadata(value: Any) -> Any:
    # Real PaperBench grade files sometimes hold "" for "no metadata".
    return None if value == "" else value


class GradedTaskNode(TaskNode):
    """A rubric node with its grade: leaves hold the grader's score, internal nodes the mean."""

    sub_tasks: list[GradedTaskNode] = Field(default_factory=list)  # type: ignore[assignment]
    score: Score
    valid_score: Annotated[
        StrictBool,
        BeforeValidator(_tolerant_bool),
        WithJsonSchema(
            {
                "anyOf": [{"type": "boolean"}, {"enum": [0, 1]}],
                "description": "False when the judge failed after its retries (such a leaf "
                "counts as 0); 1.0/0.0 tolerated as found in real files.",
            }
        ),
    ]
    explanation: str
    judge_metadata: Annotated[
        dict[str, Any] | None,
        BeforeValidator(_tolerant_metadata),
        WithJsonSchema(
            {
                "anyOf": [{"type": "object"}, {"type": "null"}, {"const": ""}],
                "description": "Judge-specific data; an empty string is tolerated as 'none'.",
            }
        ),
    ] = None

    def to_dict(self) -> dict[str, Any]:
        """The node as PaperBench writes grade files (field order as in expected_result.json)."""
        return _to_dict(self)

    def to_rubric(self) -> TaskNode:
        """The rubric this tree grades: the same nodes without their grades."""
        data = self.to_dict()
        stack = [data]
        while stack:
            node = stack.pop()
            for key in _GRADE_FIELDS:
                node.pop(key, None)
            stack.extend(node["sub_tasks"])
        return TaskNode.model_validate(data)


N = TypeVar("N", bound=TaskNode)

_RUBRIC_ORDER = (
    "id",
    "requirements",
    "weight",
    "sub_tasks",
    "task_category",
    "finegrained_task_category",
    "check",
)
_GRADED_ORDER = (
    "id",
    "requirements",
    "weight",
    "score",
    "valid_score",
    "task_category",
    "finegrained_task_category",
    "explanation",
    "judge_metadata",
    "sub_tasks",
    "check",
)
_GRADE_FIELDS = ("score", "valid_score", "explanation", "judge_metadata")
_ALWAYS = frozenset({"id", "requirements", "weight", "sub_tasks", "task_category", "score"})


def _fields_of(node: TaskNode) -> dict[str, Any]:
    """A node's own fields (not its children), in file order; optional ones only when set."""
    order = _GRADED_ORDER if isinstance(node, GradedTaskNode) else _RUBRIC_ORDER
    out: dict[str, Any] = {}
    for name in order:
        if name == "sub_tasks":
            out[name] = []
            continue
        if name not in _ALWAYS and name not in node.model_fields_set:
            continue
        value = getattr(node, name)
        if isinstance(value, StrEnum):
            value = value.value
        elif isinstance(value, Check):
            value = value.to_dict()
        out[name] = value
    return out


def _to_dict(root: TaskNode) -> dict[str, Any]:
    top = _fields_of(root)
    stack: list[tuple[TaskNode, dict[str, Any]]] = [(root, top)]
    while stack:
        node, out = stack.pop()
        for child in node.sub_tasks:
            child_out = _fields_of(child)
            out["sub_tasks"].append(child_out)
            stack.append((child, child_out))
    return top


def iter_nodes(root: N) -> Iterator[tuple[NodePath, N]]:
    """Every node with its path, in pre-order (parents before children, children in order)."""
    stack: list[tuple[NodePath, N]] = [((), root)]
    while stack:
        path, node = stack.pop()
        yield path, node
        children: list[N] = node.sub_tasks  # type: ignore[assignment]
        for index in range(len(children) - 1, -1, -1):
            stack.append(((*path, index), children[index]))


def iter_leaves(root: N) -> Iterator[tuple[NodePath, N]]:
    """Every leaf of ``root`` with its path, depth first."""
    for path, node in iter_nodes(root):
        if not node.sub_tasks:
            yield path, node


def node_at(root: N, path: NodePath) -> N:
    """The node of ``root`` at ``path`` (indices into ``sub_tasks``)."""
    node = root
    for index in path:
        node = node.sub_tasks[index]  # type: ignore[assignment]
    return node


def tree_depth(root: TaskNode) -> int:
    """Levels in the tree: a lone root is 1."""
    return max(len(path) for path, _ in iter_nodes(root)) + 1


def path_to_json_path(path: NodePath) -> str:
    """A node path as a JSON path, e.g. ``$.sub_tasks[0].sub_tasks[2]``."""
    return "$" + "".join(f".sub_tasks[{i}]" for i in path)


R = TypeVar("R")


def rebuild(root: N, fn: Callable[[NodePath, N, list[R]], R | None]) -> R | None:
    """Rebuild a tree bottom-up without recursion.

    ``fn(path, node, children)`` is called for every node after its children, with the
    results for its children (those for which ``fn`` returned ``None`` left out); what it
    returns replaces the node, ``None`` drops it. Returns the result for the root.
    """
    results: dict[NodePath, R | None] = {}
    for path, node in reversed(list(iter_nodes(root))):
        kids = [results.pop((*path, i)) for i in range(len(node.sub_tasks))]
        results[path] = fn(path, node, [k for k in kids if k is not None])
    return results[()]
