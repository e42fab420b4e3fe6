"""The HTML pieces without a browser: the flat rubric tree for deep rubrics, caps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paperbench.report import read_group_files, summarize_group
from paperbench.report._html import cap, tree_items, write_html
from paperbench.rubric import GradedTaskNode
from tests.report.group import build_group


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


def _reproduction_row(tmp_path: Path, reason: str) -> str:
    group = build_group(tmp_path)
    meta = group / "p-alpha" / "agent-a" / "seed-0" / "reproduction" / "metadata.json"
    data = json.loads(meta.read_text())
    data.update(sandbox_backend="docker", isolation="docker", isolation_reason=reason)
    meta.write_text(json.dumps(data))
    files = read_group_files(group)
    write_html(summarize_group(files), files, tmp_path / "html")
    page = (tmp_path / "html" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    return next(line for line in page.splitlines() if 'id="sandbox"' in line)


def test_a_sandbox_chosen_by_auto_says_so_and_no_row_claims_what_was_asked(
    tmp_path: Path,
) -> None:
    row = _reproduction_row(tmp_path / "a", "auto: a Docker engine answers at unix:///d.sock")
    assert "auto, resolved to docker: a Docker engine answers at unix:///d.sock" in row
    # the backend's own words when built by name: whether docker or auto was asked for is
    # not in the run's files, so the row claims neither
    row = _reproduction_row(tmp_path / "b", "Docker backend asked for")
    assert "asked for" not in row and "docker" in row and "isolation docker" in row


def test_a_leaf_shows_why_each_file_was_chosen_and_its_notes(tmp_path: Path) -> None:
    """The run page's leaf view: each file shown with why it was chosen (the default mode's
    shortlist, import hop, lexical, run wrote), and the leaf's notes (a failed shortlist)."""
    group = build_group(tmp_path)
    leaves = group / "p-alpha" / "agent-a" / "seed-0" / "grading" / "leaves.jsonl"
    lines = leaves.read_text().splitlines()
    first = json.loads(lines[0])
    first["files_why"] = {"train.py": "shortlist", "calibrate.py": "import hop"}
    first["selection_notes"] = ["the file shortlist call failed (refused): files chosen by BM25"]
    leaves.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    files = read_group_files(group)
    write_html(summarize_group(files), files, tmp_path / "html")
    page = (tmp_path / "html" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert "train.py [shortlist], calibrate.py [import hop]" in page
    assert "note: the file shortlist call failed (refused): files chosen by BM25" in page
