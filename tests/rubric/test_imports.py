"""The rubric package sits below papers (papers read rubrics): no module under
paperbench/rubric/ may import paperbench.papers, at any depth of the module (a function-level
import counts too), so the two packages never form a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import paperbench.rubric

RUBRIC = Path(paperbench.rubric.__file__).parent
FORBIDDEN = "paperbench.papers"


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``; relative imports resolved against
    ``package`` (the importing module's package)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _offending(source: str, package: str) -> list[str]:
    tree = ast.parse(source)
    return [
        f"line {line}: {module}"
        for line, module in _imported(tree, package)
        if module == FORBIDDEN or module.startswith(FORBIDDEN + ".")
    ]


def test_no_module_of_the_rubric_package_imports_papers() -> None:
    modules = sorted(RUBRIC.rglob("*.py"))
    assert len(modules) >= 5
    problems = [
        f"{path.relative_to(RUBRIC.parent.parent)}: {what}"
        for path in modules
        for what in _offending(path.read_text(encoding="utf-8"), "paperbench.rubric")
    ]
    assert not problems, "paperbench/rubric must not import paperbench.papers:\n" + "\n".join(
        problems
    )


def test_the_check_sees_every_way_of_importing_papers() -> None:
    """The walk would catch the import if one came back (so the test above can fail)."""
    for source in [
        "from paperbench.papers import PaperSource",
        "import paperbench.papers",
        "from paperbench import papers",
        "def f():\n    from paperbench.papers._bundle import Paper",
        "from .. import papers",
        "from ..papers import Paper",
    ]:
        assert _offending(source, "paperbench.rubric"), source
    assert not _offending("from paperbench.rubric._model import TaskNode", "paperbench.rubric")
    assert not _offending("from paperbench.papersmith import x", "paperbench.rubric")
