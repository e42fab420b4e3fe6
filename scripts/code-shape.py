"""The code's shape, as issue numbers count it: lines of the package and of the tests,
functions over 80 lines, signatures of 12 or more parameters (outside config models), imports
from an engine module to a command-line module, and the README's lines.

    python scripts/code-shape.py [TREE] [--list]

TREE: another checkout to count (default: this one), e.g. a worktree of an older commit.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

_TREES = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = Path(_TREES[0]).resolve() if _TREES else Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "paperbench"
CLI_MODULES = {
    "paperbench.cli",
    "paperbench.__main__",
    "paperbench._options",
    "paperbench._model_options",
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_cli(module: str) -> bool:
    return module in CLI_MODULES or module.rsplit(".", 1)[-1] == "_cli"


def _lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def main() -> None:
    show = "--list" in sys.argv
    long_functions: list[str] = []
    wide: list[str] = []
    to_cli: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    long_functions.append(f"{where} ({length} lines)")
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                count -= bool(a.args and a.args[0].arg in ("self", "cls"))
                if count >= 12:
                    wide.append(f"{where} ({count} parameters)")
            if _is_cli(module):
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            hits = [n for n in names if n.startswith("paperbench") and _is_cli(n)]
            if hits:
                to_cli.append(f"{path.relative_to(ROOT)}:{node.lineno} {hits[0]}")
    rows = [
        ("lines in paperbench/", _lines(PACKAGE)),
        ("lines in tests/", _lines(ROOT / "tests")),
        ("functions over 80 lines", len(long_functions)),
        ("signatures with 12+ parameters", len(wide)),
        ("imports from an engine module to a CLI module", len(to_cli)),
        ("README.md lines", len((ROOT / "README.md").read_text().splitlines())),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>7,}")
    if show:
        for title, items in (("long", long_functions), ("wide", wide), ("to CLI", to_cli)):
            print(f"\n{title}:")
            print("\n".join(f"  {item}" for item in items))


if __name__ == "__main__":
    main()
