"""Builders for rubric and graded trees used across the rubric tests."""

from __future__ import annotations

import itertools
import random
from typing import Any

_ids = itertools.count()
CATEGORIES = ["Code Development", "Code Execution", "Result Analysis"]


def leaf(weight: float = 1, category: str = "Code Development", **extra: Any) -> dict[str, Any]:
    return {
        "id": f"n{next(_ids)}",
        "requirements": f"requirement {weight}",
        "weight": weight,
        "sub_tasks": [],
        "task_category": category,
        "finegrained_task_category": None,
        **extra,
    }


def node(*children: dict[str, Any], weight: float = 1) -> dict[str, Any]:
    return {
        "id": f"n{next(_ids)}",
        "requirements": "group",
        "weight": weight,
        "sub_tasks": list(children),
        "task_category": None,
        "finegrained_task_category": None,
    }


def graded_leaf(score: float, weight: float = 1, valid: bool = True, **kw: Any) -> dict[str, Any]:
    base = leaf(weight, **kw)
    return _graded(base, score, valid, "leaf grade")


def graded_node(*children: dict[str, Any], weight: float = 1) -> dict[str, Any]:
    base = node(weight=weight)
    out = _graded(base, 0.0, True, "Aggregated score from sub-tasks.")
    out["sub_tasks"] = list(children)
    total = sum(c["weight"] for c in children)
    counted = [0.0 if not c["sub_tasks"] and not c["valid_score"] else c["score"] for c in children]
    weighted = sum(s * c["weight"] for s, c in zip(counted, children, strict=True))
    out["score"] = weighted / total if total else 0.0  # an invalid leaf counts as 0
    return out


def _graded(base: dict[str, Any], score: float, valid: bool, why: str) -> dict[str, Any]:
    return {
        "id": base["id"],
        "requirements": base["requirements"],
        "weight": base["weight"],
        "score": score,
        "valid_score": valid,
        "task_category": base["task_category"],
        "finegrained_task_category": base["finegrained_task_category"],
        "explanation": why,
        "judge_metadata": None,
        "sub_tasks": [],
    }


def random_rubric(rng: random.Random, leaves: int, max_depth: int = 9) -> dict[str, Any]:
    """A rubric of about ``leaves`` leaves, depth up to ``max_depth`` (PaperBench-like)."""
    root = node()
    frontier = [(root, 1)]
    made = 0
    while made < leaves:
        parent, depth = rng.choice(frontier)
        if depth < max_depth - 1 and rng.random() < 0.3:
            child = node(weight=rng.randint(1, 5))
            parent["sub_tasks"].append(child)
            frontier.append((child, depth + 1))
        else:
            parent["sub_tasks"].append(leaf(rng.randint(1, 5), rng.choice(CATEGORIES)))
            made += 1
    # an internal node left without children would be a leaf without a category: fill it
    stack = [root]
    while stack:
        n = stack.pop()
        if n["task_category"] is None and not n["sub_tasks"]:
            n["sub_tasks"].append(leaf(1, rng.choice(CATEGORIES)))
        stack.extend(n["sub_tasks"])
    return root
