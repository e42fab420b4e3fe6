"""Load a ResearchCodeBench problem set as it is: ``pset/papers.yaml``, every paper folder it
names, and every ``paper2code`` snippet of the annotated files, nested ones included.

The tag format (RCB's): a whole line ``# <paper2code name="NAME">`` opens a snippet, a whole
line ``# </paper2code name="NAME">`` closes it; leading and trailing whitespace is allowed,
any other text on the line makes it an ordinary comment. Snippets nest; a closing tag must
close the innermost open snippet and be indented as its opening tag is.

Every problem in the input is one :class:`~paperbench.errors.InputError` line naming the
file and line (``pset/x/model.py:12: ...``) or the ``papers.yaml`` entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from paperbench.errors import InputError
from paperbench.rcb._models import PAPERS_FILE, TEST_ENTRY, ProblemSet, RcbPaper, Snippet

_OPEN = re.compile(r'^(?P<indent>\s*)#\s*<paper2code\s+name="(?P<name>[^"]+)">\s*$')
_CLOSE = re.compile(r'^(?P<indent>\s*)#\s*</paper2code\s+name="(?P<name>[^"]+)">\s*$')
PAPER_FILES = ("paper2code_paper.tex", "paper2code_paper.md")
"""The paper's text, in order of preference (RCB: the ``.tex`` wins when both exist)."""


def tag(line: str) -> tuple[str, str, str] | None:
    """``("open" | "close", name, indent)`` when ``line`` is a whole-line snippet tag."""
    for kind, pattern in (("open", _OPEN), ("close", _CLOSE)):
        match = pattern.match(line)
        if match:
            return kind, match["name"], match["indent"]
    return None


def is_code_line(line: str) -> bool:
    """RCB's weight: a line counts when it is not blank and does not start with ``#``."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def split_lines(text: str) -> list[str]:
    """The lines of a file's text as every function of this package numbers them (split at
    ``\\n`` only, so that joining them with ``\\n`` gives the text back)."""
    return text.split("\n")


# --- papers.yaml ---------------------------------------------------------------------------


class _Entry(BaseModel):
    """One entry of ``papers.yaml``; RCB's other keys (arxiv, venue, ...) are allowed."""

    model_config = ConfigDict(extra="allow")

    id: str
    title: str = ""
    annotated_file_paths: str | list[str]
    context_file_paths: str | list[str] | None = None
    first_commit_date: str | None = None

    @field_validator("first_commit_date", mode="before")
    @classmethod
    def _date(cls, value: Any) -> Any:
        return value.isoformat() if isinstance(value, date) else value

    @field_validator("id", "title", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        # YAML reads an unquoted 2025 or 1.5 as a number; a folder name is text
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return str(value) if number else value

    def files(self, key: str) -> list[str]:
        value = getattr(self, key)
        items = [value] if isinstance(value, str) else list(value or [])
        return [item.strip() for item in items]


def find_pset(rcb_dir: Path) -> Path:
    """The ``pset/`` folder of a clone of RCB, or ``rcb_dir`` itself when it holds
    ``papers.yaml``.

    Raises:
        InputError: neither holds ``papers.yaml``.
    """
    for candidate in (rcb_dir / "pset", rcb_dir):
        if (candidate / PAPERS_FILE).is_file():
            return candidate.resolve()
    if not rcb_dir.is_dir():
        raise InputError("no such folder; clone ResearchCodeBench and pass its path", file=rcb_dir)
    raise InputError(
        f"no pset/{PAPERS_FILE} here (expected a clone of ResearchCodeBench or its pset/ folder)",
        file=rcb_dir,
    )


def _entries(papers_file: Path) -> list[tuple[int, _Entry]]:
    """The entries of ``papers.yaml`` with the line each starts on (1-based)."""
    try:
        text = papers_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot be read: {exc}", file=papers_file) from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{papers_file}:{mark.line + 1}" if mark else papers_file
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"invalid YAML: {problem}", file=where) from exc
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        raise InputError("expected a list of papers", file=papers_file, path="$")
    out: list[tuple[int, _Entry]] = []
    for index, (item, node) in enumerate(zip(data, root.value, strict=True)):
        line = node.start_mark.line + 1
        try:
            out.append((line, _Entry.model_validate(item)))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
            raise InputError(
                first["msg"], file=f"{papers_file}:{line}", path=f"$[{index}]{loc}"
            ) from exc
    return out


# --- the tags of one file --------------------------------------------------------------------


def parse_snippets(text: str, *, paper: str, file: str, shown: str | Path) -> list[Snippet]:
    """Every snippet of one annotated file's text, in the order of their opening tags
    (a parent before its children). ``shown`` is the file's path in error lines.

    Raises:
        InputError: ``shown:LINE: ...`` for a tag that never closes, a closing tag that
            closes nothing or another snippet than the innermost open one, a closing tag
            indented differently from its opening tag, a name used twice in the file, or a
            snippet with no code line.
    """
    lines = split_lines(text)
    stack: list[tuple[str, int, str]] = []  # name, line index, indent
    found: dict[str, tuple[int, int, str, int]] = {}  # name -> start, end, indent, depth
    order: list[str] = []
    parents: dict[str, str | None] = {}
    for index, line in enumerate(lines):
        parsed = tag(line)
        if parsed is None:
            continue
        kind, name, indent = parsed
        where = f"{shown}:{index + 1}"
        if kind == "open":
            if name in parents:
                opened = [i for n, i, _ in stack if n == name]
                first = found[name][0] if name in found else opened[0]
                raise InputError(
                    f'snippet "{name}" is opened a second time (first at line {first + 1})',
                    file=where,
                )
            parents[name] = stack[-1][0] if stack else None
            order.append(name)
            stack.append((name, index, indent))
            continue
        if not stack:
            raise InputError(f'closing tag of "{name}", but no snippet is open', file=where)
        open_name, start, open_indent = stack[-1]
        if open_name != name:
            raise InputError(
                f'closing tag of "{name}", but the innermost open snippet is "{open_name}" '
                f"(opened at line {start + 1})",
                file=where,
            )
        if len(indent) != len(open_indent):
            raise InputError(
                f'closing tag of "{name}" is indented {len(indent)} characters, its opening '
                f"tag (line {start + 1}) {len(open_indent)}",
                file=where,
            )
        stack.pop()
        found[name] = (start, index, open_indent, len(stack))
    if stack:
        name, start, _ = stack[-1]
        raise InputError(f'snippet "{name}" is never closed', file=f"{shown}:{start + 1}")
    snippets = []
    for name in order:
        start, end, indent, depth = found[name]
        count = sum(is_code_line(line) for line in lines[start + 1 : end])
        if count == 0:
            raise InputError(f'snippet "{name}" has no code line', file=f"{shown}:{start + 1}")
        snippets.append(
            Snippet(
                paper=paper,
                file=file,
                name=name,
                start=start,
                end=end,
                indent=indent,
                code_lines=count,
                depth=depth,
                parent=parents[name],
            )
        )
    return snippets


# --- the problem set ---------------------------------------------------------------------------


def _file(folder: Path, rel: str, where: str, what: str) -> Path:
    path = folder / rel
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist", file=where)
    return path


def _paper(pset: Path, line: int, entry: _Entry) -> tuple[RcbPaper, list[Snippet]]:
    where = f"{pset / PAPERS_FILE}:{line}"
    folder = pset / entry.id
    if not entry.id or "/" in entry.id or entry.id in (".", ".."):
        raise InputError(f"paper id {entry.id!r} is not a folder name", file=where)
    if not folder.is_dir():
        raise InputError(f'paper "{entry.id}": its folder {folder} does not exist', file=where)
    paper_file = next((folder / n for n in PAPER_FILES if (folder / n).is_file()), None)
    if paper_file is None:
        raise InputError(
            f'paper "{entry.id}": no {" or ".join(PAPER_FILES)} in {folder}', file=where
        )
    _file(folder, TEST_ENTRY, where, f'paper "{entry.id}": its test')
    annotated = entry.files("annotated_file_paths")
    if not annotated:
        raise InputError(f'paper "{entry.id}": annotated_file_paths is empty', file=where)
    context = entry.files("context_file_paths")
    for rel in context:
        _file(folder, rel, where, f'paper "{entry.id}": context file')
    snippets: list[Snippet] = []
    first_seen: dict[str, str] = {}
    for rel in annotated:
        path = _file(folder, rel, where, f'paper "{entry.id}": annotated file')
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot be read: {exc}", file=path) from exc
        for snippet in parse_snippets(text, paper=entry.id, file=rel, shown=path):
            if snippet.name in first_seen:
                raise InputError(
                    f'snippet name "{snippet.name}" is used twice in paper "{entry.id}" '
                    f"(first in {first_seen[snippet.name]})",
                    file=f"{path}:{snippet.start + 1}",
                )
            first_seen[snippet.name] = rel
            snippets.append(snippet)
    paper = RcbPaper(
        id=entry.id,
        title=entry.title,
        folder=folder,
        paper_file=paper_file,
        annotated_files=annotated,
        context_files=context,
        first_commit_date=entry.first_commit_date,
    )
    return paper, snippets


def load_problem_set(rcb_dir: Path, papers: Iterable[str] | None = None) -> ProblemSet:
    """The problem set of a clone of RCB (``rcb_dir`` holds ``pset/``) or of its ``pset/``
    folder: the papers of ``papers.yaml`` in its order and every snippet of their annotated
    files. ``papers`` selects some paper ids (the others are not read at all, so a broken or
    missing paper that is not selected is no error).

    Raises:
        InputError: one line naming the file and line: no ``papers.yaml``, an entry that
            does not validate, a duplicate id, a paper not listed (``papers``), a listed paper
            whose folder, paper text, test, annotated or context file is missing, a malformed
            tag (see :func:`parse_snippets`), a snippet name used twice in one paper.
    """
    pset = find_pset(Path(rcb_dir))
    papers_file = pset / PAPERS_FILE
    entries = _entries(papers_file)
    seen: dict[str, int] = {}
    for line, entry in entries:
        if entry.id in seen:
            raise InputError(
                f'paper "{entry.id}" is listed twice (first at line {seen[entry.id]})',
                file=f"{papers_file}:{line}",
            )
        seen[entry.id] = line
    wanted = None if papers is None else list(dict.fromkeys(papers))
    if wanted is not None:
        unknown = [p for p in wanted if p not in seen]
        if unknown:
            raise InputError(
                f"no paper {', '.join(repr(p) for p in unknown)} in the list "
                f"(it has {', '.join(seen)})",
                file=papers_file,
            )
    loaded = [
        _paper(pset, line, entry) for line, entry in entries if wanted is None or entry.id in wanted
    ]
    return ProblemSet(
        root=pset,
        papers=[paper for paper, _ in loaded],
        snippets=[snippet for _, snippets in loaded for snippet in snippets],
    )
