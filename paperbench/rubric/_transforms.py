"""Tree transforms: Code-Dev, resources provided, cutting at a depth, a leaf's prior criteria."""

from __future__ import annotations

from typing import TypeVar

from paperbench.rubric._aggregate import aggregate
from paperbench.rubric._model import (
    FinegrainedCategory,
    GradedTaskNode,
    NodePath,
    TaskCategory,
    TaskNode,
    iter_nodes,
    node_at,
    rebuild,
)

N = TypeVar("N", bound=TaskNode)

NO_CODE_DEVELOPMENT = (
    "Not graded: the rubric has no Code Development leaf, so Code-Dev grades the whole "
    "rubric as one Code Development leaf."
)


def _finish(tree: N) -> N:
    """Re-aggregate a graded tree after a transform; a rubric is returned as it is."""
    if isinstance(tree, GradedTaskNode):
        return aggregate(tree)  # type: ignore[return-value]
    return tree


def code_dev(root: N) -> N:
    """Keep only Code Development leaves; drop internal nodes left empty (PaperBench's
    ``code_only``). A graded tree is re-aggregated, so the weighted mean renormalises.

    Like PaperBench, a tree without any Code Development leaf becomes its root alone, as one
    Code Development leaf (the judge then grades the whole rubric as one unit). For a graded
    tree that leaf was never graded that way: it is returned invalid, scoring 0.
    """

    def step(_: NodePath, node: N, kids: list[N]) -> N | None:
        if not node.sub_tasks:
            return node if node.task_category == TaskCategory.CODE_DEVELOPMENT else None
        return node.model_copy(update={"sub_tasks": kids}) if kids else None

    kept = rebuild(root, step)
    if kept is not None:
        return _finish(kept)
    update: dict[str, object] = {
        "sub_tasks": [],
        "task_category": TaskCategory.CODE_DEVELOPMENT,
    }
    if isinstance(root, GradedTaskNode):
        update |= {"score": 0.0, "valid_score": False, "explanation": NO_CODE_DEVELOPMENT}
    return root.model_copy(update=update)


def resources_provided(root: N) -> N:
    """PaperBench's ``resources_provided``: every leaf whose finegrained category is
    'Dataset and Model Acquisition' gets weight 0 (the datasets and models were given to the
    agent). A graded tree is re-aggregated."""

    def step(_: NodePath, node: N, kids: list[N]) -> N:
        if not node.sub_tasks:
            if node.finegrained_task_category == FinegrainedCategory.DATASET_AND_MODEL:
                return node.model_copy(update={"weight": 0})
            return node
        return node.model_copy(update={"sub_tasks": kids})

    result = rebuild(root, step)
    assert result is not None
    return _finish(result)


def outline(root: TaskNode) -> str:
    """The requirements of a subtree as an indented outline, with weights and categories."""
    lines: list[str] = []
    for path, node in iter_nodes(root):
        indent = "  " * len(path)
        tag = f" [{node.task_category.value}]" if node.task_category else ""
        lines.append(f"{indent}- (weight {node.weight}){tag} {node.requirements}")
    return "\n".join(lines)


def cut_at_depth(root: TaskNode, max_depth: int) -> TaskNode:
    """Grade no deeper than ``max_depth`` levels (the root is level 1, as in PaperBench).

    Every internal node at level ``max_depth`` becomes one leaf of category ``Subtree`` whose
    requirements are the outline of the subtree it replaces.
    """
    if max_depth < 1:
        raise ValueError("max_depth must be at least 1")

    def step(path: NodePath, node: TaskNode, kids: list[TaskNode]) -> TaskNode | None:
        level = len(path) + 1
        if level > max_depth:
            return None  # folded into an ancestor's outline
        if node.sub_tasks and level == max_depth:
            return TaskNode(
                id=node.id,
                requirements=outline(node),
                weight=node.weight,
                sub_tasks=[],
                task_category=TaskCategory.SUBTREE,
                finegrained_task_category=None,
            )
        if not node.sub_tasks:
            return node
        return node.model_copy(update={"sub_tasks": kids})

    result = rebuild(root, step)
    assert result is not None
    return result


def prior_criteria(root: N, leaf: NodePath) -> list[tuple[NodePath, N]]:
    """The criteria a judge sees before ``leaf``: its ancestors and, at every level, the
    siblings that come before it or before its ancestor, from the root down."""
    out: list[tuple[NodePath, N]] = [((), root)]
    node = root
    for depth, index in enumerate(leaf):
        parent_path = leaf[:depth]
        for j in range(index):
            out.append(((*parent_path, j), node.sub_tasks[j]))  # type: ignore[arg-type]
        node = node.sub_tasks[index]  # type: ignore[assignment]
        if depth < len(leaf) - 1:
            out.append((leaf[: depth + 1], node))
    node_at(root, leaf)  # raises IndexError for a path that is not in the tree
    return out
