"""The README and docs/ speak of the repository only: they name no file outside it, and every
relative link they make points at a file (and a heading) the repository has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

OUTSIDE = (
    (re.compile(r"\bDESIGN\.md\b"), "names DESIGN.md, a file outside the repository"),
    (re.compile(r"\bSTYLE\.md\b"), "names STYLE.md, a file outside the repository"),
    (re.compile(r"(?:\.\./|/work/)shared\b"), "names the shared folder outside the repository"),
    (re.compile(r"§\s*\d"), "cites a numbered section (§N) of a document"),
)
"""Text that refers to files outside the repository (link docs/design.md and its headings)."""

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
_REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def doc_files() -> list[Path]:
    """The documents checked: README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose_lines(text: str) -> list[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) for every line."""
    out: list[tuple[int, str, bool]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            out.append((number, line, True))
            fenced = not fenced
            continue
        out.append((number, line, fenced))
    return out


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = _CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text (repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line, fenced in _prose_lines(text):
        match = None if fenced else _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def problems(path: Path, text: str, root: Path = ROOT) -> list[str]:
    """What is wrong with ``text`` (the content of ``path`` inside ``root``), one line each."""
    rel = path.relative_to(root)
    found: list[str] = []
    for number, line, fenced in _prose_lines(text):
        for pattern, why in OUTSIDE:
            if pattern.search(line):
                found.append(f"{rel}:{number}: {why}: {line.strip()}")
        if fenced:
            continue
        prose = _CODE_SPAN.sub("", line)
        targets = [m.group(1) for m in _INLINE_LINK.finditer(prose)]
        ref = _REF_LINK.match(prose)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            issue = _link_problem(path, text, target, root)
            if issue:
                found.append(f"{rel}:{number}: link {target!r}: {issue}")
    return found


def _link_problem(path: Path, text: str, target: str, root: Path) -> str | None:
    if _SCHEME.match(target):
        return None  # a web address, mail address, ...
    file_part, _, anchor = target.partition("#")
    if not file_part:
        return None if anchor in anchors(text) else "no such heading in this file"
    if file_part.startswith("/"):
        return "an absolute path (link relative to this file)"
    dest = (path.parent / file_part).resolve()
    if not dest.is_relative_to(root.resolve()):
        return "points outside the repository"
    if not dest.exists():
        return "no such file in the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text("utf-8")):
        return f"no heading #{anchor} in {dest.relative_to(root.resolve())}"
    return None


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_doc_names_only_files_of_the_repository(doc: Path) -> None:
    assert problems(doc, doc.read_text("utf-8")) == []


def test_the_design_document_is_in_the_repository_and_the_readme_links_it() -> None:
    design = ROOT / "docs" / "design.md"
    assert design.is_file()
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "](docs/design.md" in readme
    # the run store, the judge's view and the costs are documented under their own headings
    assert {
        "the-run-store",
        "the-judges-view-of-a-submission",
        "model-calls-costs-caps-limits-retries",
        "sandboxes",
    } <= anchors(design.read_text("utf-8"))


@pytest.mark.parametrize(
    "text",
    [
        "the run store of DESIGN.md §5",
        "see [the notes](../shared/DESIGN.md)",
        "as /work/shared/STYLE.md says",
        "the layout (§1)",
        "[design](docs/missing.md)",
        "[design](docs/design.md#no-such-heading)",
        "[top](#no-such-heading)",
        "[abs](/etc/passwd)",
        "[up](../../outside.md)",
        "[ref]: docs/missing.md",
    ],
)
def test_the_check_finds_a_reference_outside_the_repository(text: str) -> None:
    assert problems(ROOT / "README.md", text), text


@pytest.mark.parametrize(
    "text",
    [
        "# Title\n\n[top](#title)",
        "[design](docs/design.md#the-run-store) and [security](SECURITY.md)",
        "[web](https://example.com/DESIGN) <https://example.com>",
        "```\n[not a link](nowhere.md)\n```",
        "`[not a link](nowhere.md)` in code",
        "## Same\n## Same\n[second](#same-1)",
    ],
)
def test_the_check_passes_what_is_fine(text: str) -> None:
    assert problems(ROOT / "README.md", text) == []
