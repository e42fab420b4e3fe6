"""Config fields that are command-line options, described without the command line.

A config model marks a field with a :class:`Flag` (in ``Annotated`` metadata); the command line
(:mod:`paperbench._model_options`) makes one option of each such field, and
:func:`from_options` builds the model back from the options' values. Nothing here imports
typer or click: a config, and ``import paperbench``, stay as light as the engine. The value
parsers that several commands' configs share (``--concurrency``, ``--allow-network``) live here
too, raising :class:`~paperbench.errors.UsageError` that names the flag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo

from paperbench.errors import UsageError
from paperbench.sandbox._internal_nets import IPNetwork, parse_allowed

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Flag:
    """Marks a model field as a command-line option (in ``Annotated`` metadata).

    ``shared``: the option is the one other commands take under the same flag, written once in
    :mod:`paperbench._options` or in the command family's own table (its type, unit and help
    are then theirs); otherwise the option is made from the field's type, description and
    lower bound.
    """

    name: str
    """``--max-time``; a positional argument is named without dashes (``submission``)."""
    shared: bool = False
    argument: bool = False
    """A positional argument of the command rather than an option."""
    metavar: str | None = None
    on_resume: bool = False
    """Whether a resume takes it (how the work runs, not what it is)."""
    convert: Callable[[Any], Any] | None = None
    """From the option's value to the field's (the option's default is then None: unset)."""
    show_default: bool = True
    """Whether the help shows the default (not when the description says it in words)."""

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


def parse_concurrency(values: list[str] | None, stages: dict[str, int]) -> dict[str, int]:
    """``--concurrency`` values (``STAGE=N``, repeatable or comma-separated) over ``stages``,
    the stages this command takes with their defaults.

    Raises:
        UsageError: an unknown stage or a count below 1, naming the flag.
    """
    out = dict(stages)
    for value in values or []:
        for item in value.split(","):
            stage, sep, number = item.partition("=")
            stage = stage.strip()
            if not sep or stage not in stages or not number.strip().isdigit():
                raise UsageError(
                    f"--concurrency {item}: expected STAGE=N with STAGE one of "
                    f"{', '.join(stages)} and N ≥ 1, e.g. {next(iter(stages))}=1"
                )
            n = int(number)
            if n < 1:
                raise UsageError(f"--concurrency {item}: N must be ≥ 1")
            out[stage] = n
    return out


def parse_networks(values: list[str] | None) -> tuple[IPNetwork, ...]:
    """``--allow-network`` values: the ranges, each once.

    Raises:
        UsageError: a value that is not a CIDR, has host bits set, or opens nothing,
            naming the flag.
    """
    found: list[IPNetwork] = []
    for value in values or []:
        try:
            network = parse_allowed(value)
        except ValueError as exc:
            raise UsageError(f"--allow-network: {exc}") from None
        if network not in found:
            found.append(network)
    return tuple(found)


# The options several stages take in the same words, as field types (``cpus: Cpus = None``):
# written once here. A stage that words one differently (``run``'s are about each of its
# sandboxes) declares its own field.
SandboxBackendOption = Annotated[
    Literal["auto", "docker", "local"],
    Flag("--sandbox", shared=True),
    Field(description="The sandbox backend."),
]
AllowUnsandboxed = Annotated[
    bool,
    Flag("--allow-unsandboxed", shared=True),
    Field(description="Allow plain host subprocesses without bubblewrap."),
]
AllowNetworks = Annotated[
    tuple[IPNetwork, ...],
    Flag("--allow-network", shared=True, convert=parse_networks),
    Field(description="Internal ranges the sandbox may reach."),
]
Gpus = Annotated[
    int | None, Flag("--gpus", shared=True), Field(ge=0, description="GPUs of the sandbox.")
]
Cpus = Annotated[
    float | None, Flag("--cpus", shared=True), Field(gt=0, description="CPUs of the sandbox.")
]
MemoryMb = Annotated[
    int | None,
    Flag("--memory", shared=True),
    Field(ge=64, description="Memory of the sandbox in MB."),
]
DiskMb = Annotated[
    int | None,
    Flag("--disk", shared=True),
    Field(ge=16, description="Writable space of the sandbox in MB."),
]
