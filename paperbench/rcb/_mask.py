"""Make a problem and put an answer back: mask one snippet of an annotated file, fill its
place with code, and take the code out of a model's answer.

``text`` is always the annotated file as read (``Path.read_text``), numbered as
:func:`paperbench.rcb._load.split_lines` numbers it; ``snippet`` one of its snippets as
:func:`~paperbench.rcb._load.load_problem_set` found it.
"""

from __future__ import annotations

import re
import textwrap

from paperbench.rcb._load import split_lines, tag
from paperbench.rcb._models import Snippet

_FENCE = re.compile(r"^\s*```+\s*(?P<info>[^`\s]*)[^`]*$")
_CODE_FENCES = {"", "python", "py", "python3"}


def _check(lines: list[str], snippet: Snippet) -> None:
    """``snippet`` must be where its tags are in ``lines`` (else the text is another file)."""
    ok = (
        snippet.end < len(lines)
        and tag(lines[snippet.start]) == ("open", snippet.name, snippet.indent)
        and (tag(lines[snippet.end]) or ("", "", ""))[:2] == ("close", snippet.name)
    )
    if not ok:
        raise ValueError(
            f'{snippet.file}: the text has no snippet "{snippet.name}" at lines '
            f"{snippet.start + 1}-{snippet.end + 1}"
        )


def _untagged(lines: list[str]) -> list[str]:
    return [line for line in lines if tag(line) is None]


def body_indent(text: str, snippet: Snippet) -> str:
    """The indentation of the snippet's code: the whitespace every non-blank line between its
    tags starts with (the opening tag's indentation when that is longer or there is none)."""
    lines = split_lines(text)
    body = [line for line in lines[snippet.start + 1 : snippet.end] if line.strip()]
    if not body:
        return snippet.indent
    common = body[0][: len(body[0]) - len(body[0].lstrip())]
    for line in body[1:]:
        while not line.startswith(common):
            common = common[:-1]
    return common if len(common) >= len(snippet.indent) else snippet.indent


def reference_code(text: str, snippet: Snippet) -> str:
    """The snippet's own code in ``text``: the lines between its tags as they are, tag lines
    of nested snippets removed (what :func:`fill` puts back to restore the file).

    Raises:
        ValueError: the snippet's tags are not where ``snippet`` says in ``text``.
    """
    lines = split_lines(text)
    _check(lines, snippet)
    return "\n".join(_untagged(lines[snippet.start + 1 : snippet.end]))


def placeholder(snippet: Snippet, indent: str) -> list[str]:
    """The lines the model sees in place of the snippet."""
    lines = "line" if snippet.code_lines == 1 else "lines"
    return [
        f'{indent}# TODO: write the code of "{snippet.name}" here',
        f"{indent}# (about {snippet.code_lines} {lines} of code)",
    ]


def mask(text: str, snippet: Snippet) -> str:
    """``text`` with the snippet's whole tagged range (its tags, its code, every snippet
    nested in it) replaced by :func:`placeholder` lines at the snippet's indentation, and
    every other tag line removed: the model sees plain code with one TODO.

    Raises:
        ValueError: the snippet's tags are not where ``snippet`` says in ``text``.
    """
    lines = split_lines(text)
    _check(lines, snippet)
    indent = body_indent(text, snippet)
    before = _untagged(lines[: snippet.start])
    after = _untagged(lines[snippet.end + 1 :])
    return "\n".join([*before, *placeholder(snippet, indent), *after])


def reindent(code: str, indent: str) -> list[str]:
    """``code`` as lines at ``indent``: dedented (``textwrap.dedent``), leading and trailing
    blank lines dropped, ``indent`` put before every non-blank line; blank lines empty."""
    lines = textwrap.dedent(code.replace("\r\n", "\n")).split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return [indent + line if line.strip() else "" for line in lines]


def fill(text: str, snippet: Snippet, code: str) -> str:
    """The annotated ``text`` with only the lines between the snippet's tags replaced by
    ``code`` re-indented to the snippet's indentation (:func:`reindent`); every tag line
    removed (the answer's own too); every other line as it was, byte for byte.

    ``code`` is taken as the snippet's code whatever it holds: an answer that repeats the
    whole file (with the rest of its code changed or deleted) is put, all of it, in the
    snippet's place; nothing outside that place ever changes.

    Raises:
        ValueError: the snippet's tags are not where ``snippet`` says in ``text``.
    """
    lines = split_lines(text)
    _check(lines, snippet)
    indent = body_indent(text, snippet)
    before = _untagged(lines[: snippet.start])
    after = _untagged(lines[snippet.end + 1 :])
    code = "\n".join(_untagged(split_lines(code.replace("\r\n", "\n"))))
    return "\n".join([*before, *reindent(code, indent), *after])


def _closes(line: str, ticks: int) -> bool:
    stripped = line.strip()
    return len(stripped) >= ticks and set(stripped) == {"`"}


def extract_code(answer: str) -> str | None:
    """The first fenced code block of ``answer`` whose fence is ```` ```python ````,
    ```` ```py ```` (or ``python3``, any case) or bare ```` ``` ````; blocks in another
    language are skipped. A block left open at the end of the answer (a cut-off answer)
    runs to the end. None when the answer has no such block."""
    lines = answer.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        fence = lines[index].strip()
        ticks = len(fence) - len(fence.lstrip("`"))
        end = index + 1
        while end < len(lines) and not _closes(lines[end], ticks):
            end += 1
        if match["info"].lower() in _CODE_FENCES:
            return "\n".join(lines[index + 1 : end])
        index = end + 1
    return None
