"""The engine does not import the command line: a config built from Python loads neither typer
nor click nor any CLI module, and no engine module imports one (DESIGN.md §1). A package
imports its modules only when one of its names is first used."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import paperbench
from paperbench import _lazy

PACKAGE = Path(paperbench.__file__).parent


def _is_cli(module: str) -> bool:
    """``paperbench.cli``, every ``paperbench.<stage>._cli``, the typer options and the entry
    script ``paperbench.__main__``."""
    return (
        module in {"paperbench.cli", "paperbench.__main__"}
        or module in {"paperbench._options", "paperbench._model_options"}
        or (module.startswith("paperbench.") and module.endswith("._cli"))
    )


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import names (also inside functions), with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_no_engine_module_imports_a_cli_module() -> None:
    offending: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        if _is_cli(module):
            continue
        for line, name in _imported(ast.parse(path.read_text(), str(path))):
            if _is_cli(name):
                offending.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert offending == []


def test_a_config_from_python_loads_no_command_line() -> None:
    script = (
        "import json, sys, paperbench\n"
        "paperbench.EvalConfig(papers='calibration-binning', seeds=2)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    assert "paperbench.runs._config" in loaded  # the config was built
    cli = [m for m in loaded if m.split(".")[0] in {"typer", "click"} or _is_cli(m)]
    assert cli == []


HEAVY = ("docker", "openai", "anthropic", "ray", "bm25s", "playwright", "typer", "click")
CONFIG_MODULES = 24
"""paperbench modules that ``paperbench.EvalConfig`` may load (20 when this was written)."""


def test_a_config_loads_only_what_it_needs() -> None:
    """``paperbench.EvalConfig`` loads the config's own modules, not every package whose module
    it names (each ``__init__`` imports on first use), nor any heavy SDK."""
    script = (
        "import json, sys, paperbench\n"
        "paperbench.EvalConfig\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(done.stdout)
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    ours = [m for m in loaded if m.split(".")[0] == "paperbench"]
    assert "paperbench.runs._config" in ours
    assert len(ours) <= CONFIG_MODULES, ours


def _lazy_init(path: Path) -> tuple[dict[str, str], list[str], list[str], list[str]]:
    """What an ``__init__`` imports for the type checker (name → module, as ``_lazy`` reads
    it), its ``__all__``, the calls of its ``if not TYPE_CHECKING:`` block, and any other
    import."""
    exported: list[str] = []
    calls: list[str] = []
    eager: list[str] = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "not TYPE_CHECKING":
            calls += [ast.unparse(n) for n in node.body]
        elif isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            exported = ast.literal_eval(node.value)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            eager += [name for _, name in _imported(node)]
    return _lazy.origins(path.read_text()), exported, calls, eager


def test_every_package_imports_its_names_on_first_use() -> None:
    """Each package's ``__init__`` imports none of its modules: the names the type checker
    reads, the names imported on first use and ``__all__`` are the same, from the same modules."""
    for path in sorted(PACKAGE.rglob("__init__.py")):
        typed, exported, calls, eager = _lazy_init(path)
        where = path.relative_to(PACKAGE.parent)
        assert calls == ["__getattr__, __dir__ = _lazy.exports(__name__)"], where
        assert sorted(typed) == sorted(exported), where
        assert all(m.startswith(f"{_module_of(path)}.") for m in typed.values()), where
        allowed = {"typing", "typing.TYPE_CHECKING", "paperbench", "paperbench._lazy"}
        assert set(eager) <= allowed, where
