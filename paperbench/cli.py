"""The ``paperbench`` command line. Thin: each command calls into the packages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from typer._click import Command, Context
from typer.core import TyperGroup, TyperOption

from paperbench import __version__
from paperbench._console import console, error, print_table, printable, warning
from paperbench.agents._monitor_cli import monitor
from paperbench.agents._rollout_cli import rollout_command
from paperbench.errors import PaperbenchError, UsageError
from paperbench.judge._cli import grade, judge_eval_command
from paperbench.llm._cli import app as models_app
from paperbench.papers import DATA_DIR_ENV, LFS_POINTER_MESSAGE, PaperSource
from paperbench.report._cli import report_command
from paperbench.reproduce_cli import reproduce
from paperbench.rubric._cli import app as rubric_app
from paperbench.run_cli import run_command
from paperbench.sandbox._cli import app as sandbox_app
from paperbench.sandbox._cli import images_app


def _reflow(text: str) -> str:
    """Docstring text as plain paragraphs: reST backticks dropped, lines joined (the
    terminal wraps them), paragraphs kept."""
    paragraphs = text.replace("`", "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _plain_help(command: Command, ctx: Context) -> None:
    """Help as plain, reflowed text, and no ``<bool>`` type column for flags (typer shows
    one for every boolean flag), for every command below ``command``."""
    stack = [command]
    while stack:
        cmd = stack.pop()
        if cmd.help:
            cmd.help = _reflow(cmd.help)
        help_option = cmd.get_help_option(ctx)
        for param in [*cmd.params, *([help_option] if help_option else [])]:
            if isinstance(param, TyperOption):
                if param.help:
                    param.help = _reflow(param.help)
                if param.is_flag and param.metavar is None:
                    param.metavar = ""
        if isinstance(cmd, TyperGroup):
            stack.extend(cmd.commands.values())


class _Group(TyperGroup):
    """Turns paperbench's errors into one line and an exit code, at one place."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        _plain_help(self, ctx)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            error(str(exc))
            raise typer.Exit(2) from None
        except PaperbenchError as exc:
            error(str(exc))
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    help="Evaluate how well AI agents replicate machine-learning research.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# --- sub-apps: one line each -------------------------------------------------
app.add_typer(rubric_app, name="rubric")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(images_app, name="images")
app.command("rollout")(rollout_command)
app.command("reproduce")(reproduce)
app.command("judge-eval")(judge_eval_command)
app.command("monitor")(monitor)
app.command("grade")(grade)
app.command("run")(run_command)
app.command("report")(report_command)
app.add_typer(models_app, name="models", help="Check models before a long run; show prices.")
# --- end of sub-apps ---------------------------------------------------------

papers_app = typer.Typer(help="List the papers of this repository or a PaperBench data directory.")
app.add_typer(papers_app, name="papers")


def _version(value: bool) -> None:
    if value:
        console.print(f"paperbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """paperbench: rollout, reproduction and rubric grading of paper replications."""


def _paper_row(source: PaperSource, paper_id: str) -> dict[str, Any]:
    """One row of ``papers list``; a paper that cannot be used gets its problem in ``error``."""
    try:
        paper = source.load(paper_id)
        blacklist: int | None = len(paper.blacklist())
    except PaperbenchError as exc:
        return {"id": paper_id, "error": str(exc)}
    return {
        "id": paper.id,
        "title": paper.title,
        "layout": paper.layout,
        "paper_md": "lfs-pointer" if paper.paper_md_is_lfs_pointer else "ok",
        "addendum": paper.addendum is not None,
        "judge_addendum": paper.judge_addendum is not None,
        "blacklist": blacklist,
        "folder": str(paper.folder),
        "error": None,
    }


@papers_app.command("list")
def papers_list(
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar=DATA_DIR_ENV, help="A PaperBench data directory (holds papers/)."),
    ] = None,
    split: Annotated[str | None, typer.Option(help="A named split, e.g. lite, dev, all.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Papers with their title and what their bundle holds; a paper that cannot be used
    shows its problem in its row (exit code 1)."""
    source = PaperSource.resolve(data_dir)
    ids = source.split(split) if split else source.paper_ids()
    rows = [_paper_row(source, paper_id) for paper_id in ids]
    bad = [row for row in rows if row["error"]]
    if as_json:
        console.print(json.dumps(rows, indent=2), markup=False)
    else:
        _papers_table(rows)
        for row in bad:
            error(row["error"])
    if bad:
        raise typer.Exit(1)


def _papers_table(rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(rows)} papers")
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
        pointer = row["paper_md"] != "ok"
        table.add_row(
            Text(printable(row["id"])),
            Text(printable(row["title"])),
            Text("LFS pointer", style="red") if pointer else "ok",
            "yes" if row["addendum"] else "-",
            "yes" if row["judge_addendum"] else "-",
            str(row["blacklist"]),
        )
    print_table(table)
    if any(row.get("paper_md") == "lfs-pointer" for row in rows):
        warning(f"paper.md {LFS_POINTER_MESSAGE} (the papers marked LFS pointer)")


def main() -> None:
    app()
