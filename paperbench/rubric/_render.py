"""Rubric and graded trees as rich trees (file text shown as written, never as markup)."""

from __future__ import annotations

from rich.text import Text
from rich.tree import Tree

from paperbench._console import plural, printable
from paperbench.rubric._model import GradedTaskNode, NodePath, TaskNode, iter_nodes

_CATEGORY_STYLE = {
    "Code Development": "cyan",
    "Code Execution": "magenta",
    "Result Analysis": "blue",
    "Subtree": "white",
}


def score_style(score: float) -> str:
    if score >= 0.75:
        return "green"
    if score >= 0.4:
        return "yellow"
    return "red"


def _label(node: TaskNode, width: int | None) -> Text:
    text = Text()
    if isinstance(node, GradedTaskNode):
        if node.sub_tasks or node.valid_score:
            text.append(f"{node.score:.2f} ", style=f"bold {score_style(node.score)}")
            if not node.valid_score:
                text.append("(invalid below) ", style="bold red")
        else:
            text.append("INVALID ", style="bold white on red")
    text.append(f"w={node.weight} ", style="dim")
    if node.task_category is not None:
        category = node.task_category.value
        text.append(f"[{category}] ", style=_CATEGORY_STYLE.get(category, ""))
    if node.check is not None:
        text.append("[check] ", style="bold green")
    requirements = printable(" ".join(node.requirements.split()))
    if width is not None and len(requirements) > width:
        requirements = requirements[: width - 1] + "…"
    text.append(requirements)  # a Text is never read as markup: brackets stay as written
    return text


def render_tree(root: TaskNode, *, max_depth: int | None = None, width: int | None = None) -> Tree:
    """A rich tree of ``root``; below ``max_depth`` levels a line counts what is hidden.
    Requirement texts are whole, or cut to ``width`` characters with an ellipsis."""
    tree = Tree(_label(root, width))
    branches: dict[NodePath, Tree] = {(): tree}
    hidden: dict[NodePath, int] = {}
    for path, node in iter_nodes(root):
        if not path:
            continue
        parent = path[:-1]
        if max_depth is not None and len(path) >= max_depth:
            cut = path[: max_depth - 1]
            hidden[cut] = hidden.get(cut, 0) + 1
            continue
        branches[path] = branches[parent].add(_label(node, width))
    for path, count in hidden.items():
        branches[path].add(Text(f"… {plural(count, 'more node')} (raise --depth)", style="dim"))
    return tree
