"""The HTML pieces without a browser: the flat rubric tree for deep rubrics, caps."""

from __future__ import annotations

from typing import Any

from paperbench.report._html import cap, tree_items
from paperbench.rubric import GradedTaskNode


def _chain(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": "leaf",
        "requirements": "the deepest leaf",
        "weight": 1,
        "sub_tasks": [],
        "task_category": "Code Development",
        "score": 1.0,
        "valid_score": True,
        "explanation": "found",
    }
    for level in range(depth):
        node = {
            "id": f"n{level}",
            "requirements": f"level {depth - level - 1}",
            "weight": 1,
            "sub_tasks": [node],
            "task_category": None,
            "score": 1.0,
            "valid_score": True,
            "explanation": "",
        }
    return node


def test_a_deep_tree_becomes_balanced_open_and_close_steps() -> None:
    tree = GradedTaskNode.model_validate(_chain(60))
    items = tree_items(tree, [])
    kinds = [item.kind for item in items]
    assert kinds == ["open"] * 60 + ["leaf"] + ["close"] * 60
    assert [item.depth for item in items[:3]] == [0, 1, 2]
    assert items[60].verdict == "pass" and items[60].depth == 60


def test_siblings_close_their_subtree_before_the_next_opens() -> None:
    data = _chain(1)
    data["sub_tasks"].append(_chain(2))
    data["sub_tasks"].append({**_chain(0), "score": 0.0, "requirements": "a failed leaf"})
    data["sub_tasks"][-1]["valid_score"] = False
    items = tree_items(GradedTaskNode.model_validate(data), [])
    assert [i.kind for i in items] == [
        "open", "leaf", "open", "open", "leaf", "close", "close", "leaf", "close"
    ]  # fmt: skip
    assert items[-2].verdict == "invalid"


def test_cap_says_how_much_was_cut() -> None:
    assert cap("abc", 5) == "abc"
    assert cap("x" * 12, 5) == "xxxxx\n… 7 more characters not shown"
