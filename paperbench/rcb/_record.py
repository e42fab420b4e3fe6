"""problem.json: what a problem folder of a run records about its problem (the masked file,
the reference code), written once when the run first reaches the problem."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from paperbench._io import atomic_write_text, read_json
from paperbench.errors import InputError
from paperbench.rcb._mask import body_indent, mask, reference_code
from paperbench.rcb._models import ProblemRecord, ProblemSet, Snippet

PROBLEM_FILE = "problem.json"
"""The :class:`ProblemRecord` of a problem folder."""


def problem_record(problem_set: ProblemSet, snippet: Snippet) -> ProblemRecord:
    """The record of ``snippet``, read from its annotated file."""
    text = (problem_set.paper(snippet.paper).folder / snippet.file).read_text(encoding="utf-8")
    return ProblemRecord(
        paper=snippet.paper,
        snippet=snippet.name,
        file=snippet.file,
        line=snippet.start + 1,
        code_lines=snippet.code_lines,
        depth=snippet.depth,
        parent=snippet.parent,
        masked=mask(text, snippet),
        reference=reference_code(text, snippet),
        indent=body_indent(text, snippet),
    )


def write_problem_record(problem_set: ProblemSet, snippet: Snippet, folder: Path) -> None:
    """Write ``folder/problem.json`` unless it is there already."""
    path = folder / PROBLEM_FILE
    if path.is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    record = problem_record(problem_set, snippet)
    atomic_write_text(path, record.model_dump_json(indent=2) + "\n")


def read_problem_record(folder: Path) -> ProblemRecord | None:
    """``folder/problem.json``, or None when the folder has none (a run from before it was
    recorded).

    Raises:
        InputError: the file is not JSON or not a problem record (one line naming it).
    """
    path = folder / PROBLEM_FILE
    if not path.is_file():
        return None
    try:
        return ProblemRecord.model_validate(read_json(path))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"not a problem record: {first['msg']}", file=path) from None
