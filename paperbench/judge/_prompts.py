"""Prompts from the judge catalog's templates (Markdown with Jinja2), as chat messages.

A grading call is, in this order (the long shared part first, so a provider's prefix cache
can serve it across leaves):

1. system: ``grade_system.md`` (the same for every leaf and paper);
2. user: ``paper.md`` (the paper and addenda; the same for every leaf of a paper), marked as
   the end of the cacheable prefix;
3. user: ``grade_leaf.md`` (the leaf's files, script and log, already fenced as data by
   :func:`~paperbench.judge.select_context`; the preceding criteria; the criterion; the
   category's question; the answer's form).

PaperBench's grading call holds the same parts (system prompt, paper, addendum, files,
``reproduce.sh``, ``reproduce.log`` for non-Code-Development leaves, preceding criteria,
criterion with its category's question, answer instructions) but puts the leaf's files before
the rest, so nothing after the paper is shared between leaves. Its ranking call sends the
paper, the addendum, the criterion and the file tree; its parsing call sends only the verdict.

Templates render with ``StrictUndefined``: a misspelt variable is an error, never empty text.
"""

from __future__ import annotations

import functools
from collections import Counter

import jinja2

from paperbench.judge._config import LoadedJudge
from paperbench.judge._context import ContextCategory, LeafContext
from paperbench.judge._fence import fence
from paperbench.judge._view import SubmissionView
from paperbench.llm import Message, SystemMessage, UserMessage

CATEGORY_QUESTIONS: dict[ContextCategory, str] = {
    "Code Development": (
        "Does the attempt's code implement this correctly? A plan, a description or a comment "
        "is not an implementation: look for code that does it."
    ),
    "Code Execution": (
        "Did running reproduce.sh actually execute this successfully? Look for evidence in "
        "the log and the outputs, not only for code that could do it."
    ),
    "Result Analysis": (
        "Do the outputs of the reproduce.sh run (the log and the files it created or changed) "
        "show results that agree with this?"
    ),
    "Subtree": (
        "How much of this part of the rubric is met? The criteria are listed with their "
        "weights; weigh them accordingly."
    ),
}


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=False,
    )


@functools.lru_cache(maxsize=64)
def _compiled(template: str) -> jinja2.Template:
    """Compiling is what costs (milliseconds); a grading renders the same few templates
    thousands of times."""
    return _environment().from_string(template)


def render(template: str, **values: object) -> str:
    """Render one template; a variable the template uses but is not given is an error."""
    return _compiled(template).render(**values).strip() + "\n"


def _left_out_summary(context: LeafContext) -> str:
    counts = Counter(item.reason for item in context.left_out)
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))


def grading_messages(
    judge: LoadedJudge,
    *,
    paper: str,
    addendum: str,
    judge_addendum: str,
    context: LeafContext,
    criterion: str,
    prior: list[str],
    code_dev: bool = False,
) -> list[Message]:
    """The messages of one grading call; see the module docs for their order."""
    category = context.category
    files_heading = (
        "Documentation and the files the reproduce.sh run created or changed:"
        if category == "Result Analysis"
        else "The attempt's files most relevant to this criterion:"
    )
    leaf = render(
        judge.prompts["leaf"],
        context=context,
        files_heading=files_heading,
        left_out_summary=_left_out_summary(context),
        prior=prior,
        criterion=criterion,
        category=category,
        category_question=CATEGORY_QUESTIONS[category],
        continuous=category == "Subtree",
        code_dev=code_dev,
    )
    return [
        SystemMessage(content=render(judge.prompts["system"])),
        UserMessage(
            content=render(
                judge.prompts["paper"],
                paper=paper,
                addendum=addendum,
                judge_addendum=judge_addendum,
            ),
            cache=True,
        ),
        UserMessage(content=leaf),
    ]


def _walk_key(path: str) -> list[tuple[int, str]]:
    parts = path.split("/")
    return [(1, part) for part in parts[:-1]] + [(0, parts[-1])]


def walk_order(paths: list[str]) -> list[str]:
    """``paths`` in the order a top-down ``os.walk`` meets them, as PaperBench lists a
    submission: the top folder's files first, then each folder walked whole (its own files,
    then its folders) before the next. Names within a folder are sorted: the order the file
    system lists them in, which PaperBench takes as it comes, cannot be reproduced."""
    return sorted(paths, key=_walk_key)


def file_tree(view: SubmissionView, paths: list[str] | None = None) -> str:
    """An indented list of ``paths`` (default: every text file) in walk order, fenced as data."""
    chosen = paths if paths is not None else [f.path for f in view.files if f.text is not None]
    lines: list[str] = []
    seen: set[str] = set()
    for path in walk_order(chosen):
        parts = path.split("/")
        for depth in range(len(parts)):
            prefix = "/".join(parts[: depth + 1])
            if prefix in seen:
                continue
            seen.add(prefix)
            suffix = "" if depth == len(parts) - 1 else "/"
            lines.append("    " * depth + parts[depth] + suffix)
    return fence("\n".join(lines), "files:")


def ranking_messages(
    judge: LoadedJudge,
    *,
    paper: str,
    addenda: str,
    criterion: str,
    tree: str,
    max_files: int,
) -> list[Message]:
    """The faithful mode's ranking call (one user message, as PaperBench sends its parts)."""
    template = judge.prompts.get("ranking")
    if template is None:
        raise ValueError(f"judge {judge.identity.name} has no ranking prompt")
    text = render(
        template, paper=paper, addenda=addenda, criterion=criterion, tree=tree, max_files=max_files
    )
    return [UserMessage(content=text)]


def parsing_messages(judge: LoadedJudge, *, verdict: str, continuous: bool) -> list[Message]:
    """The faithful mode's parsing call: the verdict, fenced, and what to extract."""
    template = judge.prompts.get("parsing")
    if template is None:
        raise ValueError(f"judge {judge.identity.name} has no parsing prompt")
    text = render(template, verdict=fence(verdict, "verdict:"), continuous=continuous)
    return [UserMessage(content=text)]
