"""Command-line options made from a pydantic model: each field marked with a :class:`Flag` is
one option, its help the field's description and its default the field's default, so that a
command and the Python API it maps onto cannot disagree."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, cast

import annotated_types
import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from paperbench.errors import UsageError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Flag:
    """Marks a model field as a command-line option (in ``Annotated`` metadata).

    ``option`` is the shared option of :mod:`paperbench._options` when other commands take the
    same flag (its type, unit and help are then theirs); otherwise the option is made from the
    field's type, description and lower bound.
    """

    name: str
    option: Any = None
    metavar: str | None = None
    on_resume: bool = False
    """Whether a resume takes it (how the work runs, not what it is)."""
    convert: Callable[[Any], Any] | None = None
    """From the option's value to the field's (the option's default is then None: unset)."""

    @property
    def param(self) -> str:
        """The command function's parameter name: ``--max-time`` → ``max_time``."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def flag(self) -> str:
        """The flag as written (``--report`` of ``--report/--no-report``)."""
        return self.name.split("/")[0]


def flag_of(metadata: list[Any]) -> Flag | None:
    """The :class:`Flag` among a field's metadata, if any."""
    return next((m for m in metadata if isinstance(m, Flag)), None)


def model_flags(model: type[BaseModel]) -> Iterator[tuple[tuple[str, ...], FieldInfo, Flag]]:
    """Every field of ``model`` (and of its sections, fields that are models themselves) that
    is an option: its path, field and flag."""

    def walk(kind: type[BaseModel], path: tuple[str, ...]) -> Iterator[Any]:
        for name, field in kind.model_fields.items():
            flag = flag_of(field.metadata)
            inner = field.annotation
            if flag is not None:
                yield (*path, name), field, flag
            elif isinstance(inner, type) and issubclass(inner, BaseModel):
                yield from walk(inner, (*path, name))

    yield from walk(model, ())


def parameters(model: type[BaseModel]) -> list[inspect.Parameter]:
    """The typer parameters of ``model``'s options, in field order."""
    out: list[inspect.Parameter] = []
    for _, field, flag in model_flags(model):
        default = None if flag.convert else field.get_default(call_default_factory=True)
        annotation = flag.option
        if annotation is None:
            lower = [m.ge for m in field.metadata if isinstance(m, annotated_types.Ge)]
            option = typer.Option(
                flag.name,
                help=field.description,
                metavar=flag.metavar,
                min=cast("int | float", lower[0]) if lower else None,
            )
            annotation = Annotated[field.annotation, option]
        kind = inspect.Parameter.KEYWORD_ONLY
        out.append(inspect.Parameter(flag.param, kind, default=default, annotation=annotation))
    return out


def from_options(model: type[M], values: dict[str, Any]) -> M:
    """The model from the options' values (by parameter name).

    Raises:
        UsageError: a value the model refuses, naming its flag.
    """
    data: dict[str, Any] = {}
    where: dict[tuple[str, ...], str] = {}
    for path, _, flag in model_flags(model):
        value = values[flag.param]
        if flag.convert is not None:
            value = flag.convert(value)
        section = data
        for part in path[:-1]:
            section = section.setdefault(part, {})
        section[path[-1]] = value
        where[path] = flag.flag
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(str(p) for p in first["loc"])
        named = next((where[loc[:n]] for n in (len(loc), 2, 1) if loc[:n] in where), "a value")
        message = str(first["msg"]).removeprefix("Value error, ")
        raise UsageError(f"{named}: {message}") from None


def given_on_command_line(ctx: typer.Context, model: type[BaseModel]) -> list[str]:
    """The flags of ``model`` given on the command line that a resume does not take."""
    found = []
    for _, _, flag in model_flags(model):
        source = ctx.get_parameter_source(flag.param)
        if not flag.on_resume and source is not None and source.name == "COMMANDLINE":
            found.append(flag.flag)
    return found
