"""``paperbench rcb``: ResearchCodeBench task mode. ``rcb list`` shows a problem set."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import console, plural, print_table, printable
from paperbench._options import Json
from paperbench.errors import UsageError
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._models import TEST_ENTRY, ProblemSet

RCB_DIR_ENV = "PAPERBENCH_RCB_DIR"
RCB_URL = "https://github.com/PatrickHua/ResearchCodeBench"

RcbDir = Annotated[
    Path | None,
    typer.Option(
        "--rcb-dir",
        metavar="DIR",
        help=f"A clone of ResearchCodeBench (or its pset/ folder); default: ${RCB_DIR_ENV}.",
    ),
]
"""The problem set every ``rcb`` command reads (resolve it with :func:`rcb_dir`)."""

app = typer.Typer(
    help="ResearchCodeBench: fill in code from a paper, graded by its unit tests.",
    no_args_is_help=True,
)


def rcb_dir(value: Path | None) -> Path:
    """``--rcb-dir``, else ``$PAPERBENCH_RCB_DIR``.

    Raises:
        UsageError: neither is given (says how to get a problem set).
    """
    if value is not None:
        return value
    env = os.environ.get(RCB_DIR_ENV)
    if env:
        return Path(env)
    raise UsageError(
        f"--rcb-dir: no problem set given; clone {RCB_URL} and pass --rcb-dir DIR "
        f"(or set {RCB_DIR_ENV})"
    )


def problem_rows(problem_set: ProblemSet) -> list[dict[str, Any]]:
    """One row per problem (snippet), in file order: what ``rcb list --json`` prints."""
    return [
        {
            "paper": s.paper,
            "snippet": s.name,
            "id": s.id,
            "file": s.file,
            "line": s.start + 1,
            "code_lines": s.code_lines,
            "depth": s.depth,
            "parent": s.parent,
            "test": TEST_ENTRY,
        }
        for s in problem_set.snippets
    ]


@app.command("list")
def rcb_list(rcb_dir_opt: RcbDir = None, as_json: Json = False) -> None:
    """The papers of a problem set and their problems: every snippet (nested ones indented
    under their parent), its code lines (its weight) and the test that grades it."""
    problem_set = load_problem_set(rcb_dir(rcb_dir_opt))
    rows = problem_rows(problem_set)
    if as_json:
        console.print(json.dumps(rows, indent=2), markup=False)
        return
    lines = sum(row["code_lines"] for row in rows)
    table = Table(
        title=f"{plural(len(problem_set.papers), 'paper')}, {plural(len(rows), 'problem')}, "
        f"{plural(lines, 'code line')} ({problem_set.root})"
    )
    table.add_column("paper", overflow="fold")
    table.add_column("file", overflow="fold")
    table.add_column("snippet", overflow="fold")
    table.add_column("lines", justify="right", no_wrap=True)
    table.add_column("test", overflow="fold")
    for paper in problem_set.papers:
        mine = [row for row in rows if row["paper"] == paper.id]
        for index, row in enumerate(mine):
            first = index == 0
            table.add_row(
                Text(printable(paper.id)) if first else "",
                Text(printable(f"{row['file']}:{row['line']}")),
                Text("  " * row["depth"] + printable(row["snippet"])),
                str(row["code_lines"]),
                TEST_ENTRY if first else "",
                end_section=index == len(mine) - 1,
            )
        if not mine:
            table.add_row(Text(printable(paper.id)), "-", "(no snippet)", "0", TEST_ENTRY)
    print_table(table)
