"""``paperbench run``: :func:`paperbench.evaluate` from the command line. Its options are made
from :class:`~paperbench.runs.EvalConfig` (one per field marked with a flag), so a new field
is a new option with the same default."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import annotated_types
import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from paperbench import _options as opt
from paperbench._console import console, err_console
from paperbench.errors import UsageError
from paperbench.runs._config import EvalConfig, Flag, flag_of

EXIT_FAILED_RUNS = 3
"""Exit code when every run was worked on but some failed (their reasons are recorded)."""


def config_flags() -> Iterator[tuple[tuple[str, ...], FieldInfo, Flag]]:
    """Every field of :class:`EvalConfig` that is an option: its path, field and flag."""

    def walk(model: type[BaseModel], path: tuple[str, ...]) -> Iterator[Any]:
        for name, field in model.model_fields.items():
            flag = flag_of(field.metadata)
            kind = field.annotation
            if flag is not None:
                yield (*path, name), field, flag
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from walk(kind, (*path, name))

    yield from walk(EvalConfig, ())


def _param_name(flag: Flag) -> str:
    return flag.name.split("/")[0].removeprefix("--").replace("-", "_")


def _parameter(field: FieldInfo, flag: Flag) -> inspect.Parameter:
    default = None if flag.convert else field.get_default(call_default_factory=True)
    if flag.option is not None:
        annotation = flag.option
    else:
        lower = [m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)]
        option = typer.Option(
            flag.name,
            help=field.description,
            metavar=flag.metavar,
            min=lower[0] if lower else None,
        )
        annotation = Annotated[field.annotation, option]  # type: ignore[name-defined]
    return inspect.Parameter(
        _param_name(flag), inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _config(values: dict[str, Any]) -> EvalConfig:
    data: dict[str, Any] = {}
    where: dict[tuple[str, ...], str] = {}
    for path, _, flag in config_flags():
        value = values[_param_name(flag)]
        if flag.convert is not None:
            value = flag.convert(value)
        section = data
        for part in path[:-1]:
            section = section.setdefault(part, {})
        section[path[-1]] = value
        where[path] = flag.name.split("/")[0]
    try:
        return EvalConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = where.get(tuple(str(p) for p in first["loc"][:2]), "") or where.get(
            tuple(str(p) for p in first["loc"][:1]), "a value"
        )
        raise UsageError(f"{flag}: {first['msg']}") from None


def _given(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _run(ctx: typer.Context, resume: str | None, **values: Any) -> None:
    from paperbench import _evaluate
    from paperbench.report._cli import print_summary, show_report

    if resume is not None:
        given = [
            flag.name.split("/")[0]
            for _, _, flag in config_flags()
            if not flag.on_resume and _given(ctx, _param_name(flag))
        ]
        if given:
            raise UsageError(
                f"--resume takes the group's own configuration; drop {', '.join(given)}"
            )
        config = _config(values)
        settings = config.executor
        run = lambda: _evaluate.resume(  # noqa: E731
            resume, runs_dir=config.runs_dir, executor=settings, report=config.report
        )
    else:
        config = _config(values)
        run = lambda: _evaluate.evaluate(config)  # noqa: E731
    try:
        result = run()
    except KeyboardInterrupt:
        again = resume or "runs/<group>"
        err_console.print(f"interrupted: continue with `paperbench run --resume {again}`")
        raise typer.Exit(130) from None
    unread = False
    if config.report:
        unread = show_report(result.summary, result.group_dir)
    else:
        print_summary(result.summary)
    console.print(
        f"the group's files: {result.group_dir}; continue or retry failed runs with "
        f"`paperbench run --resume {result.group_dir}`"
    )
    if result.failed:
        raise typer.Exit(EXIT_FAILED_RUNS)
    if unread:
        raise typer.Exit(1)


def _command() -> Callable[..., None]:
    def run_command(ctx: typer.Context, resume: str | None = None, **values: Any) -> None:
        _run(ctx, resume, **values)

    params = [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        inspect.Parameter(
            "resume",
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=opt.Resume,
        ),
        *(_parameter(field, flag) for _, field, flag in config_flags()),
    ]
    run_command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run_command.__annotations__ = {p.name: p.annotation for p in params}
    run_command.__doc__ = (
        "Run papers × agents × seeds through rollout, monitor, reproduction and grading into "
        "runs/GROUP/. With no options: the bundled papers, the replay agent (no model needed), "
        "Docker (else the local sandbox with bubblewrap), reproduction, and the simple judge, "
        "whose leaves that need a model are reported not graded when no key is set. Kill it at "
        "any moment and continue with --resume GROUP. On a terminal it shows each run live; "
        "piped, a line per stage a run begins or ends (the group's group.log)."
    )
    return run_command


run_command = _command()
