"""The ``paperbench`` command line. Thin: each command calls into the packages."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer._click import Command, Context
from typer.core import TyperGroup, TyperOption

from paperbench import __version__
from paperbench._console import console, error
from paperbench.agents._cli import monitor, rollout_command
from paperbench.errors import PaperbenchError, UsageError
from paperbench.judge._cli import grade, judge_eval_command
from paperbench.llm._cli import app as models_app
from paperbench.papers._cli import app as papers_app
from paperbench.papers._cli import rubric_app
from paperbench.rcb._cli import app as rcb_app
from paperbench.report._cli import report_command
from paperbench.reproduce._cli import reproduce
from paperbench.runs._cli import run_command
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
app.add_typer(papers_app, name="papers")
app.add_typer(
    rcb_app, name="rcb", help="ResearchCodeBench: fill in code from a paper, graded by tests."
)
# --- end of sub-apps ---------------------------------------------------------


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


def main() -> None:
    app()
