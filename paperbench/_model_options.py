"""Command-line options made from a pydantic model: each field marked with a
:class:`~paperbench._flags.Flag` is one option, its help the field's description and its default
the field's default, so that a command and the Python API it maps onto cannot disagree. A flag
marked shared is the option :data:`paperbench._options.SHARED` holds under its name, or the one
a command's own table of shared options holds (``rcb``'s commands share some of their own)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, cast

import annotated_types
import typer
from pydantic import BaseModel

from paperbench._flags import Flag as Flag
from paperbench._flags import flag_of as flag_of
from paperbench._flags import from_options as from_options
from paperbench._flags import model_flags as model_flags
from paperbench._options import SHARED


def parameters(
    model: type[BaseModel], shared: Mapping[str, Any] | None = None
) -> list[inspect.Parameter]:
    """The typer parameters of ``model``'s options, in field order; a shared flag's option is
    the one ``shared`` holds under its name, else :data:`~paperbench._options.SHARED`'s."""
    table = {**SHARED, **(shared or {})}
    out: list[inspect.Parameter] = []
    for _, field, flag in model_flags(model):
        default: Any = None if flag.convert else field.get_default(call_default_factory=True)
        if field.is_required():
            default = inspect.Parameter.empty  # a required option
        if flag.shared:
            annotation = table[flag.flag]
        elif flag.argument:
            argument = typer.Argument(help=field.description, metavar=flag.metavar)
            annotation = Annotated[field.annotation, argument]
        else:
            lower = [m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)]
            option = typer.Option(
                flag.name,
                help=field.description,
                metavar=flag.metavar,
                min=cast("int | float", lower[0]) if lower else None,
                show_default=flag.show_default,
            )
            annotation = Annotated[field.annotation, option]
        kind = inspect.Parameter.KEYWORD_ONLY
        out.append(inspect.Parameter(flag.param, kind, default=default, annotation=annotation))
    return out


def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """A command's own option beside its settings' (``--json``, ``--resume``)."""
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def with_options(
    command: Callable[..., None],
    settings: type[BaseModel],
    *,
    context: bool = False,
    before: Sequence[inspect.Parameter] = (),
    after: Sequence[inspect.Parameter] = (),
    shared: Mapping[str, Any] | None = None,
) -> Callable[..., None]:
    """``command`` (which takes the options' values as ``**values``) signed for typer: the
    click context first when ``context``, then ``before``, the options of ``settings``
    (:func:`parameters`) and ``after``."""
    params = [*before, *parameters(settings, shared), *after]
    if context:
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params.insert(0, ctx.replace(annotation=typer.Context))
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def given_on_command_line(ctx: typer.Context, model: type[BaseModel]) -> list[str]:
    """The flags of ``model`` given on the command line that a resume does not take."""
    found = []
    for _, _, flag in model_flags(model):
        source = ctx.get_parameter_source(flag.param)
        if not flag.on_resume and source is not None and source.name == "COMMANDLINE":
            found.append(flag.flag)
    return found
