"""Rubric statistics: sizes, depth, leaves by category, effective weight share by category."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from paperbench.rubric._aggregate import effective_weights
from paperbench.rubric._model import LEAF_CATEGORIES, FinegrainedCategory, TaskNode, iter_nodes

UNSPECIFIED = "Unspecified"
"""Key for leaves without a finegrained_task_category."""


class RubricStats(BaseModel):
    """Counts and weights of a rubric: leaves by category, depth, weight shares."""

    model_config = ConfigDict(extra="forbid")

    nodes: int
    leaves: int
    max_depth: int
    leaves_by_category: dict[str, int]
    leaves_by_finegrained_category: dict[str, int]
    weight_share_by_category: dict[str, float]


def rubric_stats(root: TaskNode) -> RubricStats:
    """Sizes, depth, and each leaf category's share of the root (its effective weights)."""
    shares = effective_weights(root)
    by_category: Counter[str] = Counter()
    by_fine: Counter[str] = Counter()
    share: dict[str, float] = {c.value: 0.0 for c in LEAF_CATEGORIES}
    nodes = max_depth = 0
    for path, node in iter_nodes(root):
        nodes += 1
        max_depth = max(max_depth, len(path) + 1)
        if node.sub_tasks:
            continue
        category = node.task_category.value if node.task_category else UNSPECIFIED
        by_category[category] += 1
        fine = node.finegrained_task_category
        by_fine[fine.value if fine else UNSPECIFIED] += 1
        share[category] = share.get(category, 0.0) + shares[path]
    return RubricStats(
        nodes=nodes,
        leaves=sum(by_category.values()),
        max_depth=max_depth,
        leaves_by_category=_ordered(by_category, [c.value for c in LEAF_CATEGORIES]),
        leaves_by_finegrained_category=_ordered(by_fine, [c.value for c in FinegrainedCategory]),
        weight_share_by_category=share,
    )


def _ordered(counts: Counter[str], order: list[str]) -> dict[str, int]:
    out = {name: counts.get(name, 0) for name in order}
    out.update({k: v for k, v in sorted(counts.items()) if k not in out})
    return out


def total_stats(papers: Sequence[RubricStats]) -> RubricStats:
    """Sum sizes over papers; weight shares are the mean over papers (each paper counts once)."""
    by_category: Counter[str] = Counter()
    by_fine: Counter[str] = Counter()
    share: Counter[str] = Counter()
    for s in papers:
        by_category.update(s.leaves_by_category)
        by_fine.update(s.leaves_by_finegrained_category)
        share.update(s.weight_share_by_category)
    n = len(papers) or 1
    return RubricStats(
        nodes=sum(s.nodes for s in papers),
        leaves=sum(s.leaves for s in papers),
        max_depth=max((s.max_depth for s in papers), default=0),
        leaves_by_category=_ordered(by_category, [c.value for c in LEAF_CATEGORIES]),
        leaves_by_finegrained_category=_ordered(by_fine, [c.value for c in FinegrainedCategory]),
        weight_share_by_category={c.value: share.get(c.value, 0.0) / n for c in LEAF_CATEGORIES},
    )
