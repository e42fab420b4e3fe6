"""A compact map of one submission, built once per view without a model call.

One line per file: its path, its kind, whether the reproduction created or changed it, and
what it holds in a few words (Python via ``ast``: top-level classes and functions and the
first line of the module's docstring; other code: definitions found by a pattern; docs: the
first heading; CSV: the header; JSON: the top-level keys). Python files also give an import
graph (``imports``: path → the submission's files it imports).

The map is capped at ``max_tokens``: past the cap, fewer symbols are listed per file, then
none; paths are dropped only when even bare paths do not fit, and then ``notes`` says how
many (the files kept first: those the run wrote, then code, then the rest).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from paperbench.judge._view import SubmissionView, ViewFile
from paperbench.llm import count_tokens

_CODE_DEF = re.compile(
    r"^\s*(?:export\s+)?(?:pub\s+)?(?:async\s+)?"
    r"(?:def|class|function|func|fn|sub|struct|interface|module|procedure)\s+([A-Za-z_]\w*)",
    re.MULTILINE,
)
_SHELL_DEF = re.compile(r"^\s*([A-Za-z_]\w*)\s*\(\)\s*\{", re.MULTILINE)
_HEADING = re.compile(r"^\s*#+\s+(.+?)\s*$", re.MULTILINE)
_SYMBOL_STEPS = (None, 12, 6, 3, 1, 0)
"""Symbols listed per file, tried in turn until the map fits (None: all)."""
_SUMMARY_CHARS = 100


@dataclass
class MapEntry:
    path: str
    kind: str
    changed: str | None
    summary: str = ""
    symbols: list[str] = field(default_factory=list)


@dataclass
class SubmissionMap:
    """The rendered map, its token count, and the import graph."""

    text: str
    tokens: int
    entries: list[MapEntry]
    imports: dict[str, list[str]]
    notes: list[str] = field(default_factory=list)
    paths: frozenset[str] = frozenset()
    """Every path the view holds (what an answer naming a path may name)."""


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:_SUMMARY_CHARS]
    return ""


def _python(text: str) -> tuple[str, list[str], list[tuple[str, int]]] | None:
    """Docstring's first line, top-level symbols, and imports (module, level); None when
    the file does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    doc = _first_line(ast.get_docstring(tree) or "")
    symbols: list[str] = []
    imports: list[tuple[str, int]] = []
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            symbols.append(f"{top.name}()")
        elif isinstance(top, ast.ClassDef):
            symbols.append(f"class {top.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            imports.append((base, node.level))
            imports.extend(
                (f"{base}.{alias.name}" if base else alias.name, node.level) for alias in node.names
            )
    return doc, symbols, imports


def _summary(f: ViewFile, text: str) -> tuple[str, list[str]]:
    suffix = PurePosixPath(f.path).suffix.lower()
    if f.kind == "code":
        found = _CODE_DEF.findall(text) + _SHELL_DEF.findall(text)
        return "", list(dict.fromkeys(found))
    if suffix in (".md", ".rst", ".txt", ".tex") or f.kind == "doc":
        heading = _HEADING.search(text)
        return (heading.group(1)[:_SUMMARY_CHARS] if heading else _first_line(text)), []
    if suffix in (".csv", ".tsv"):
        return f"columns: {_first_line(text)}", []
    if suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return "", []
        if isinstance(data, dict):
            return "keys: " + ", ".join(str(k) for k in list(data)[:20]), []
        if isinstance(data, list):
            return f"a list of {len(data)}", []
    return "", []


def _module_paths(view: SubmissionView) -> dict[str, str]:
    """Dotted module name → path, for every Python file (each suffix of its folders too, so
    ``from model import X`` finds ``src/model.py``)."""
    out: dict[str, str] = {}
    for f in view.files:
        if not f.path.endswith(".py"):
            continue
        parts = list(PurePosixPath(f.path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        for start in range(len(parts)):
            out.setdefault(".".join(parts[start:]), f.path)
    return out


def _resolve(path: str, module: str, level: int, modules: dict[str, str]) -> str | None:
    if level:
        base = list(PurePosixPath(path).parent.parts)
        base = base[: len(base) - (level - 1)] if level > 1 else base
        module = ".".join([*base, *([module] if module else [])])
    return modules.get(module)


def _line(entry: MapEntry, symbols: int | None) -> str:
    tags = entry.kind + (f", {entry.changed} by the run" if entry.changed else "")
    line = f"{entry.path} [{tags}]"
    if entry.summary:
        line += f" {entry.summary}"
    shown = entry.symbols if symbols is None else entry.symbols[:symbols]
    if shown:
        more = len(entry.symbols) - len(shown)
        line += ": " + ", ".join(shown) + (f" (+{more} more)" if more else "")
    return line


def build_map(view: SubmissionView, model: str, max_tokens: int) -> SubmissionMap:
    """The map of ``view`` within ``max_tokens`` (counted for ``model``)."""
    modules = _module_paths(view)
    entries: list[MapEntry] = []
    imports: dict[str, list[str]] = {}
    for f in view.files:
        entry = MapEntry(path=f.path, kind=f.kind, changed=f.changed)
        text = f.text if f.text is not None else f.head
        if text is not None and f.kind != "binary":
            parsed = _python(text) if f.path.endswith(".py") else None
            if parsed is not None:
                entry.summary, entry.symbols, found = parsed
                targets = [_resolve(f.path, m, level, modules) for m, level in found]
                imports[f.path] = list(
                    dict.fromkeys(t for t in targets if t is not None and t != f.path)
                )
            else:
                entry.summary, entry.symbols = _summary(f, text)
        entries.append(entry)
    for symbols in _SYMBOL_STEPS:
        text = "\n".join(_line(e, symbols) for e in entries)
        tokens = count_tokens(text, model)
        if tokens <= max_tokens:
            return SubmissionMap(text, tokens, entries, imports, paths=_paths(view))
    return _drop_paths(view, entries, imports, model, max_tokens)


def _paths(view: SubmissionView) -> frozenset[str]:
    return frozenset(f.path for f in view.files)


def _drop_paths(
    view: SubmissionView,
    entries: list[MapEntry],
    imports: dict[str, list[str]],
    model: str,
    max_tokens: int,
) -> SubmissionMap:
    """Bare paths, the run's files first, then code, then the rest, as many as fit."""
    order = sorted(
        range(len(entries)),
        key=lambda i: (entries[i].changed is None, entries[i].kind != "code", i),
    )
    lines = [_line(entries[i], 0) for i in order]
    kept = len(lines)
    costs = [count_tokens(line, model) + 1 for line in lines]
    while kept and sum(costs[:kept]) > max_tokens:
        kept -= 1
    keep = sorted(order[:kept])
    text = "\n".join(_line(entries[i], 0) for i in keep)
    while keep and count_tokens(text, model) > max_tokens:
        keep.pop()
        text = "\n".join(_line(entries[i], 0) for i in keep)
    dropped = len(entries) - len(keep)
    notes = [
        f"the submission map lists {len(keep)} of {len(entries)} paths (no symbols): "
        f"{dropped} left out for room"
    ]
    return SubmissionMap(
        text,
        count_tokens(text, model),
        [entries[i] for i in keep],
        imports,
        notes=notes,
        paths=_paths(view),
    )
