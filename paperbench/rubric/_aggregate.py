"""Aggregation, validity and coverage of graded trees.

score(node) = Σ wᵢ·sᵢ / Σ wᵢ over its children (0 when the weights sum to 0), computed in the
same order and arithmetic as PaperBench so stored root scores are reproduced exactly. Where
paperbench is stricter: an invalid leaf (the judge failed after its retries) counts as 0,
whatever score it stores, and an internal node is valid only if all its children are;
``coverage`` is the share of the root's weight that was validly graded.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from paperbench.rubric._model import (
    GradedTaskNode,
    NodePath,
    TaskNode,
    iter_leaves,
    iter_nodes,
    path_to_json_path,
    rebuild,
)

CONSISTENCY_TOLERANCE = 1e-9
DISQUALIFIED_KEY = "disqualified"
"""Key in the root's ``judge_metadata`` holding why a run was disqualified."""


def counted_score(node: GradedTaskNode) -> float:
    """The score a node contributes to its parent: an invalid leaf counts as 0."""
    if not node.sub_tasks and not node.valid_score:
        return 0.0
    return node.score


def score_from_children(children: Sequence[GradedTaskNode]) -> float:
    """Σ wᵢ·sᵢ / Σ wᵢ (0 when the weights sum to 0), with invalid leaves counted as 0."""
    total_weight = sum(child.weight for child in children)
    if total_weight == 0:
        return 0.0
    return sum(counted_score(child) * child.weight for child in children) / total_weight


def aggregate(root: GradedTaskNode) -> GradedTaskNode:
    """Recompute every internal node's score and validity from the leaves (no recursion).

    Leaves are kept as stored (an invalid leaf keeps its stored score, which counts as 0)."""

    def step(_: NodePath, node: GradedTaskNode, kids: list[GradedTaskNode]) -> GradedTaskNode:
        if not node.sub_tasks:
            return node
        return node.model_copy(
            update={
                "sub_tasks": kids,
                "score": score_from_children(kids),
                "valid_score": all(k.valid_score for k in kids),
            }
        )

    result = rebuild(root, step)
    assert result is not None
    return result


def effective_weights(root: TaskNode) -> dict[NodePath, float]:
    """Each node's share of the root: the product of normalised weights along its path."""
    shares: dict[NodePath, float] = {(): 1.0}
    for path, node in iter_nodes(root):
        total = sum(child.weight for child in node.sub_tasks)
        for i, child in enumerate(node.sub_tasks):
            shares[(*path, i)] = shares[path] * child.weight / total if total else 0.0
    return shares


def coverage(root: GradedTaskNode) -> float:
    """Share of the root's weight whose leaves were validly graded (1.0 when all were)."""
    shares = effective_weights(root)
    leaves = list(iter_leaves(root))
    total = sum(shares[path] for path, _ in leaves)
    if total == 0:
        return sum(leaf.valid_score for _, leaf in leaves) / len(leaves)
    return sum(shares[path] for path, leaf in leaves if leaf.valid_score) / total


def disqualify(root: TaskNode, reason: str) -> GradedTaskNode:
    """A run scored 0 with its reason, as PaperBench's ``disqualify``: every leaf scores 0
    with the reason as its explanation; the root's ``judge_metadata`` records the reason, so
    ``summarize`` reports it. ``root`` may be a rubric (a run disqualified before grading) or
    a graded tree (leaves keep their validity, as in PaperBench)."""
    if not reason.strip():
        raise ValueError("disqualify needs a reason")
    data = root.to_dict()
    stack = [data]
    while stack:
        node = stack.pop()
        node["score"] = 0.0
        node["explanation"] = f"Disqualified: {reason}"
        node.setdefault("valid_score", True)
        node.setdefault("judge_metadata", None)
        stack.extend(node["sub_tasks"])
    data["judge_metadata"] = {**(data["judge_metadata"] or {}), DISQUALIFIED_KEY: reason}
    return aggregate(GradedTaskNode.model_validate(data))


class TreeSummary(BaseModel):
    """What a graded tree says at the top, recomputed from its leaves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root_score: float
    """Recomputed, invalid leaves counted as 0."""
    stored_root_score: float
    coverage: float
    invalid_leaves: int
    invalid_leaves_scored: list[str]
    """JSON paths of invalid leaves that store a score above 0 (counted as 0 anyway)."""
    leaves: int
    consistent: bool
    """Every stored internal score equals the recomputed one (to 1e-9)."""
    inconsistent_paths: list[str]
    disqualified: str | None = None
    """Why the run was disqualified (then it scores 0), or None."""


def inconsistent_nodes(
    stored: GradedTaskNode, recomputed: GradedTaskNode, tol: float = CONSISTENCY_TOLERANCE
) -> list[NodePath]:
    out: list[NodePath] = []
    for (path, a), (_, b) in zip(iter_nodes(stored), iter_nodes(recomputed), strict=True):
        if a.sub_tasks and abs(a.score - b.score) > tol:
            out.append(path)
    return out


def summarize(root: GradedTaskNode) -> TreeSummary:
    """Score, coverage and counts of a graded tree."""
    recomputed = aggregate(root)
    leaves = list(iter_leaves(root))
    bad = inconsistent_nodes(root, recomputed)
    reason = (root.judge_metadata or {}).get(DISQUALIFIED_KEY)
    return TreeSummary(
        root_score=counted_score(recomputed),
        stored_root_score=root.score,
        coverage=coverage(root),
        invalid_leaves=sum(not leaf.valid_score for _, leaf in leaves),
        invalid_leaves_scored=[
            path_to_json_path(p) for p, leaf in leaves if not leaf.valid_score and leaf.score > 0
        ],
        leaves=len(leaves),
        consistent=not bad,
        inconsistent_paths=[path_to_json_path(p) for p in bad],
        disqualified=str(reason) if reason is not None else None,
    )
