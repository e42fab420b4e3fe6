"""The one-shot prompt of RCB task mode (this project's own wording): the paper (or not), the
context files with their names, and the masked file; the answer is one fenced code block."""

from __future__ import annotations

from pathlib import Path

from paperbench.rcb._models import RcbPaper, Snippet

_EXPERT_WITH_PAPER = (
    "You are reproducing the code of a research paper. The paper is below; the code that "
    "implements it has one missing part, marked with a TODO comment."
)
_EXPERT_WITHOUT_PAPER = (
    "You are completing research code. The code below has one missing part, marked with a "
    "TODO comment."
)
_RULES = """\
Write the code that belongs where the TODO comment is, and nothing else:
- answer with one code block, fenced with ```python and ```;
- write only the lines that replace the TODO comment, not the function or class around them;
- indent them as the TODO comment is indented (the code is put back at that place);
- the code must run as it is: use only names the file defines or imports.
"""


def prompt(
    paper: RcbPaper,
    snippet: Snippet,
    masked: str,
    *,
    with_paper: bool = True,
    context: dict[str, str] | None = None,
) -> str:
    """The user message for one problem: ``masked`` is the annotated file with the snippet
    replaced by its TODO; ``context`` maps the paper's context files to their text (read
    from the paper folder when None)."""
    if context is None:
        context = {
            name: (paper.folder / name).read_text(encoding="utf-8", errors="replace")
            for name in paper.context_files
        }
    parts = [_EXPERT_WITH_PAPER if with_paper else _EXPERT_WITHOUT_PAPER, ""]
    if with_paper:
        text = paper.paper_file.read_text(encoding="utf-8", errors="replace")
        parts += [f"# The paper ({paper.paper_file.name})", "", text.rstrip(), ""]
    for name, text in context.items():
        parts += [f"# Context file {name}", "", "```python", text.rstrip(), "```", ""]
    parts += [
        f"# The file with the missing part: {snippet.file}",
        "",
        "```python",
        masked.rstrip(),
        "```",
        "",
        f'The missing part is "{snippet.name}", about {snippet.code_lines} lines of code.',
        "",
        _RULES,
    ]
    return "\n".join(parts)


def paper_chars(paper: RcbPaper) -> int:
    """Characters of the paper's text (for a cost estimate)."""
    return len(Path(paper.paper_file).read_text(encoding="utf-8", errors="replace"))
