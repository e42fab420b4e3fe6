"""``paperbench run``: :func:`paperbench.evaluate` from the command line. Its options are made
from :class:`~paperbench.runs.EvalConfig` (one per field marked with a flag), so a new field
is a new option with the same default."""

from __future__ import annotations

from typing import Any

import typer

from paperbench import _options as opt
from paperbench._console import console, err_console
from paperbench._model_options import from_options, given_on_command_line, option, with_options
from paperbench.errors import UsageError
from paperbench.runs._config import EvalConfig

EXIT_FAILED_RUNS = 3
"""Exit code when every run was worked on but some failed (their reasons are recorded)."""


def _run(ctx: typer.Context, resume: str | None, **values: Any) -> None:
    from paperbench import _evaluate
    from paperbench.report._cli import print_summary, show_report
    from paperbench.runs._group import default_group_name

    config = from_options(EvalConfig, values)
    if resume is None and config.group is None:  # named now, so that an interruption can
        config = config.model_copy(update={"group": default_group_name()})  # say which
    if resume is not None:
        given = given_on_command_line(ctx, EvalConfig)
        if given:
            drop = ", ".join(given)
            raise UsageError(f"--resume takes the group's own configuration; drop {drop}")
    try:
        if resume is not None:
            result = _evaluate.resume(
                resume, runs_dir=config.runs_dir, executor=config.executor, report=config.report
            )
        else:
            result = _evaluate.evaluate(config)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: {_resume_hint(config, resume)}", markup=False)
        raise typer.Exit(130) from None
    unread = show_report(result.summary, result.group_dir) if config.report else False
    if not config.report:
        print_summary(result.summary)
    again = f"`paperbench run --resume {result.group_dir}`"
    console.print(
        f"the group's files: {result.group_dir}; retry the failed runs with {again}"
        if result.failed
        else f"the group's files: {result.group_dir}"
    )
    if result.failed:
        raise typer.Exit(EXIT_FAILED_RUNS)
    if unread:
        raise typer.Exit(1)


def _resume_hint(config: EvalConfig, resume: str | None) -> str:
    """How to continue an interrupted ``run``: the group's own folder, or that there is
    none yet."""
    from paperbench.runs._store import GROUP_FILE

    if resume is not None:
        return f"continue with `paperbench run --resume {resume}`"
    assert config.group is not None
    group_dir = config.runs_dir / config.group
    if not (group_dir / GROUP_FILE).is_file():
        return f"group {config.group} was not written yet: nothing to resume"
    return f"continue with `paperbench run --resume {group_dir}`"


def _run_command(ctx: typer.Context, resume: str | None = None, **values: Any) -> None:
    _run(ctx, resume, **values)


_run_command.__doc__ = (
    "Run papers × agents × seeds through rollout, monitor, reproduction and grading into "
    "runs/GROUP/. With no options: the bundled papers, the replay agent (no model needed), "
    "Docker (else the local sandbox with bubblewrap), reproduction, and the simple judge, "
    "whose leaves that need a model are reported not graded when no key is set. Kill it at "
    "any moment and continue with --resume GROUP. On a terminal it shows each run live; "
    "piped, a line per stage a run begins or ends (the group's group.log)."
)
run_command = with_options(
    _run_command, EvalConfig, context=True, before=[option("resume", opt.Resume, None)]
)
