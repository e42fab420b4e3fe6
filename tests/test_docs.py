"""The README and docs/ speak of the repository only: they name no file outside it, and every
relative link they make points at a file (and a heading) the repository has. The README stays
a front door (at most 200 lines), every page of docs/ is on the site, and the commands the
pages mark for it (a ``<!-- test: commands -->`` line right before a fenced block) exit 0."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from paperbench.cli import app

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


README_MAX_LINES = 200
"""The README is a front door; the reference is the site under docs/."""


def test_the_readme_is_a_front_door_that_links_every_page_of_the_site() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name == "index.md":
            continue  # the site's home page: the README itself is the repository's
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_the_site_navigation_holds_every_page_of_docs() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text("utf-8"))
    assert config["docs_dir"] == "docs" and config["strict"] is True
    pages = _nav_pages(config["nav"])
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))


TESTED = "<!-- test: commands -->"
"""Put on the line right before a fenced block whose commands a test runs (each must exit 0)."""


def marked_commands(path: Path, text: str) -> list[tuple[str, list[str]]]:
    """(where, argv after ``paperbench``) for every command of the blocks marked ``TESTED``:
    one command a line, lines ending in a backslash joined, ``#`` comments dropped. A marker
    without a fenced block right after it, or a command that is not ``paperbench ...``, is a
    ``ValueError`` naming the file and line."""
    lines = text.splitlines()
    found: list[tuple[str, list[str]]] = []
    for index, line in enumerate(lines):
        if line.strip() != TESTED:
            continue
        where = f"{path.name}:{index + 1}"
        if index + 1 >= len(lines) or not _FENCE.match(lines[index + 1]):
            raise ValueError(f"{where}: {TESTED} is not followed by a fenced block")
        block: list[str] = []
        for body in lines[index + 2 :]:
            if _FENCE.match(body):
                break
            block.append(body)
        else:
            raise ValueError(f"{where}: the fenced block is not closed")
        joined = "\n".join(block).replace("\\\n", " ")
        commands = [c for c in joined.splitlines() if shlex.split(c, comments=True)]
        for number, command in enumerate(commands, start=1):
            argv = shlex.split(command, comments=True)
            if argv[0] != "paperbench":
                raise ValueError(f"{where}: not a paperbench command: {command.strip()}")
            found.append((f"{where} command {number}", argv[1:]))
    return found


def _expand(argv: list[str]) -> list[str]:
    """The shell's globbing of the arguments (run from the repository's root)."""
    out: list[str] = []
    for arg in argv:
        matches = sorted(glob.glob(arg, root_dir=ROOT)) if glob.has_magic(arg) else []
        out.extend(matches or [arg])
    return out


def _documented_commands() -> list[tuple[str, list[str]]]:
    return [c for doc in doc_files() for c in marked_commands(doc, doc.read_text("utf-8"))]


def test_the_docs_mark_cheap_commands_to_run() -> None:
    assert len(_documented_commands()) >= 5


@pytest.mark.parametrize(
    "argv", [argv for _, argv in _documented_commands()], ids=[w for w, _ in _documented_commands()]
)
def test_a_documented_command_exits_0(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "120")
    result = CliRunner().invoke(app, _expand(argv))
    assert result.exit_code == 0, f"paperbench {shlex.join(argv)}\n{result.output}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{TESTED}\nparagraph\n", "is not followed by a fenced block"),
        (f"{TESTED}\n```bash\npaperbench --help\n", "the fenced block is not closed"),
        (f"{TESTED}\n```bash\nrm -rf /tmp/x\n```\n", "not a paperbench command: rm -rf /tmp/x"),
    ],
)
def test_a_bad_marked_block_is_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        marked_commands(ROOT / "docs" / "x.md", text)


def test_marked_commands_join_lines_and_drop_comments() -> None:
    text = (
        "```bash\npaperbench not --marked\n```\n"
        f"{TESTED}\n```bash\npaperbench rubric show a.json \\\n    --depth 2   # why\n\n"
        "paperbench papers list\n```\n"
    )
    assert marked_commands(ROOT / "docs" / "x.md", text) == [
        ("x.md:4 command 1", ["rubric", "show", "a.json", "--depth", "2"]),
        ("x.md:4 command 2", ["papers", "list"]),
    ]
