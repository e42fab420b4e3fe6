"""``paperbench papers list``, and the ``rubric`` sub-app with its paper-aware ``rubric stats``
(which reads the papers' rubrics by default; the rubric package never imports this one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import console, error, plural, print_table, printable, warning
from paperbench._options import DataDir, Json, ResourcesProvided, Split
from paperbench.errors import InputError, PaperbenchError
from paperbench.papers._bundle import LFS_POINTER_MESSAGE, PaperSource
from paperbench.rubric._cli import make_app, print_stats, rubric_files

app = typer.Typer(help="List the papers of this repository or a PaperBench data directory.")


def _paper_row(source: PaperSource, paper_id: str) -> dict[str, Any]:
    """One row of ``papers list``; a paper that cannot be used gets its problem in ``error``."""
    try:
        paper = source.load(paper_id)
        pointers = paper.lfs_pointers()
        blacklist: int | None = None
        if paper.blacklist_file not in pointers:
            blacklist = len(paper.blacklist())
        if paper.rubric_file not in pointers:
            paper.rubric()  # a rubric that does not load makes the paper unusable
    except PaperbenchError as exc:
        return {"id": paper_id, "error": str(exc)}
    return {
        "id": paper.id,
        "title": paper.title,
        "layout": paper.layout,
        "paper_md": "lfs-pointer" if paper.paper_md_is_lfs_pointer else "ok",
        "lfs_pointers": [
            str(p.relative_to(paper.folder) if p.is_relative_to(paper.folder) else p)
            for p in pointers
        ],
        "addendum": paper.addendum is not None,
        "judge_addendum": paper.judge_addendum is not None,
        "blacklist": blacklist,
        "folder": str(paper.folder),
        "error": None,
    }


@app.command("list")
def papers_list(data_dir: DataDir = None, split: Split = None, as_json: Json = False) -> None:
    """Papers with their title and what their bundle holds; a paper that cannot be used
    shows its problem in its row, and each file that is a Git LFS pointer is listed (exit
    code 1)."""
    source = PaperSource.resolve(data_dir)
    ids = source.split(split) if split else source.paper_ids()
    rows = [_paper_row(source, paper_id) for paper_id in ids]
    bad = [row for row in rows if row["error"] or row.get("lfs_pointers")]
    if as_json:
        console.print(json.dumps(rows, indent=2), markup=False)
    else:
        _papers_table(rows)
        for row in bad:
            if row["error"]:
                error(row["error"])
    if bad:
        raise typer.Exit(1)


def _papers_table(rows: list[dict[str, Any]]) -> None:
    table = Table(title=plural(len(rows), "paper"))
    longest = max((len(str(row["id"])) for row in rows), default=2)
    # At 80 columns: id and title fold or wrap within their minimum widths, never one word
    # a line; piped, the table keeps its natural width (print_table).
    table.add_column("id", overflow="fold", min_width=min(longest, 14))
    table.add_column("title", overflow="fold", min_width=16)
    table.add_column("paper.md", no_wrap=True)
    for column in ["addendum", "judge", "blacklist"]:
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        if row["error"]:
            problem = Text(f"cannot be used: {printable(row['error'])}", style="red")
            table.add_row(Text(printable(row["id"])), problem, "-", "-", "-", "-")
            continue
        pointers = row["lfs_pointers"]
        table.add_row(
            Text(printable(row["id"])),
            Text(printable(row["title"])),
            _cell("paper.md", pointers, "ok"),
            _cell("addendum.md", pointers, "yes" if row["addendum"] else "-"),
            _cell("judge.addendum.md", pointers, "yes" if row["judge_addendum"] else "-"),
            "?" if row["blacklist"] is None else str(row["blacklist"]),
        )
    print_table(table)
    for row in rows:
        if row.get("lfs_pointers"):
            files = ", ".join(row["lfs_pointers"])
            error(f"{row['folder']}: {files}: {LFS_POINTER_MESSAGE}")


def _cell(name: str, pointers: list[str], shown: str) -> Text | str:
    return Text("LFS pointer", style="red") if name in pointers else shown


# --- rubric stats: the rubrics of the papers by default --------------------------------


def _paper_rubrics(data_dir: Path | None, split: str | None) -> tuple[list[tuple[str, Path]], bool]:
    """(paper id, rubric file) of the papers, and whether a paper could not be used (its
    error already printed)."""
    source = PaperSource.resolve(data_dir)
    ids = source.split(split) if split else source.paper_ids()
    if not ids:
        raise InputError("no paper folders found", file=source.papers_folder)
    targets = []
    pointers: list[Path] = []
    failed = False
    for paper_id in ids:
        try:
            paper = source.load(paper_id)
        except PaperbenchError as exc:
            error(str(exc))
            failed = True
            continue
        if paper.paper_md_is_lfs_pointer:
            pointers.append(paper.paper_md)
        targets.append((paper.id, paper.rubric_file))
    if pointers:
        more = f" (and {plural(len(pointers) - 1, 'more paper')})" if len(pointers) > 1 else ""
        warning(f"{pointers[0]}: {LFS_POINTER_MESSAGE}{more}; statistics need only the rubric")
    return targets, failed


def rubric_stats(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Rubric files or folders (default: the papers).")
    ] = None,
    data_dir: DataDir = None,
    split: Split = None,
    resources: ResourcesProvided = False,
    as_json: Json = False,
) -> None:
    """Sizes, depth, leaves by category and effective weight share by category."""
    if paths:
        targets, failed = rubric_files(paths), False
    else:
        targets, failed = _paper_rubrics(data_dir, split)
    if print_stats(targets, resources=resources, as_json=as_json) or failed:
        raise typer.Exit(1)


rubric_app = make_app(rubric_stats)
"""``paperbench rubric ...``: validate, stats, score, show."""
