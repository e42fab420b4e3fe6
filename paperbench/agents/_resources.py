"""What an agent's sandbox is given: GPUs, CPUs, memory, disk, image and environment.

An agent config's ``resources:`` section (:class:`AgentResources`) says it; the flags of
``paperbench rollout`` and ``paperbench run`` (or ``RolloutOptions(resources=...)``) override it
field by field (:meth:`AgentResources.over`). The environment comes from ``env`` (names and
values in the YAML) and ``env_file``, a dotenv file of keys for the agent's own use (e.g. its
own ``OPENAI_API_KEY`` or ``HF_TOKEN``): never the judge's keys, never the host's environment.

The values of an env file go into the sandbox and nowhere else: a run records their names
(:class:`ResolvedResources`), and an agent config's identity hashes the names, not the values,
so changing a key's value keeps the identity while adding or removing a key changes it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dotenv.parser import parse_stream
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from paperbench._console import plural
from paperbench.errors import ConfigError, PaperbenchError, UsageError
from paperbench.sandbox import CA_BUNDLE_VARS, GpuRequest, SandboxLimits

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SANDBOX_SET = frozenset({"PATH", "HOME", "TMPDIR", *(name.upper() for name in CA_BUNDLE_VARS)})
"""Variables the sandbox sets itself (its paths and the egress proxy's CA), in upper case."""


def env_name_problem(name: str) -> str | None:
    """Why ``name`` may not be set in an agent's sandbox, or None when it may."""
    if not _NAME.fullmatch(name):
        return f"{name!r} is not a variable name (letters, digits and _)"
    upper = name.upper()
    if upper.endswith("_PROXY") or upper in _SANDBOX_SET or upper.startswith("PAPERBENCH_"):
        return f"{name} is set by the sandbox itself (its paths, proxy and certificates)"
    return None


DEFAULT_AGENT_DISK_MB = 50 * 1024
"""The disk cap of an agent's sandbox when neither its config nor ``--disk`` says one (50 GiB,
as a reproduction's); ``--allow-uncapped-disk`` lifts it."""


class AgentResources(BaseModel):
    """The ``resources:`` section of an agent config; every field None means "not said"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int | None = Field(default=None, ge=0)
    """GPUs attached to the agent's sandbox (Docker device request; on Ray, the task's
    ``num_gpus``); 0 or None: none."""
    gpu_type: str | None = Field(default=None, min_length=1)
    """What the GPUs are, for the instructions' notes (e.g. ``NVIDIA A10``); not checked."""
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, ge=64)
    disk_mb: int | None = Field(default=None, ge=16)
    """Cap of the sandbox's writable space; a backend that cannot enforce it refuses to start
    unless an uncapped disk is allowed (``--allow-uncapped-disk``)."""
    image: str | None = Field(default=None, min_length=1)
    """The sandbox image (Docker); None: paperbench's agent image."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the sandbox (recorded with the config: not for keys)."""
    env_file: str | None = Field(default=None, min_length=1)
    """A dotenv file of keys for the agent, relative to the YAML's folder (or absolute); its
    values reach the sandbox only, its names are recorded."""

    @field_validator("env")
    @classmethod
    def _names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            problem = env_name_problem(name)
            if problem:
                raise ValueError(problem)
        return env

    def over(self, base: AgentResources) -> AgentResources:
        """These settings over ``base``: each field said here wins; ``env`` is merged."""
        said = self.model_dump(exclude_unset=True, exclude_defaults=True)
        merged = base.model_copy(update=said)
        if self.env:
            merged = merged.model_copy(update={"env": {**base.env, **self.env}})
        return merged


class ResolvedResources(BaseModel):
    """The resources a rollout ran with, as recorded in its config.json and a group's
    group.json (names of the environment only, never a value). None: the stage's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: int = 0
    gpu_type: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    disk_mb: int | None = None
    image: str | None = None
    env_names: tuple[str, ...] = ()
    """Every variable set in the sandbox from ``env`` and the env file, sorted."""
    env_file: str | None = None
    """The env file's absolute path (its values are never recorded)."""

    def gpu_request(self) -> GpuRequest | None:
        return GpuRequest(count=self.gpus) if self.gpus else None

    def limits(self, base: SandboxLimits) -> SandboxLimits:
        """``base`` with the CPUs, memory and disk said here."""
        said = {"cpus": self.cpus, "memory_mb": self.memory_mb, "disk_mb": self.disk_mb}
        return base.model_copy(update={k: v for k, v in said.items() if v is not None})


class RunResources(ResolvedResources):
    """What an agent is told of its resources (``RunContext.resources``), e.g. for the
    instructions' additional notes."""

    hours: float | None = None
    """The wall-time limit in hours (None: none)."""

    def notes(self) -> str:
        """The resources in plain sentences (empty when nothing is said)."""
        lines: list[str] = []
        if self.gpus:
            kind = f"{self.gpu_type} " if self.gpu_type else ""
            lines.append(f"You have {self.gpus} {kind}GPU{'s' if self.gpus != 1 else ''}.")
        if self.cpus is not None:
            lines.append(f"You have {self.cpus:g} CPU{'' if self.cpus == 1 else 's'}.")
        if self.memory_mb is not None:
            lines.append(f"You have {self.memory_mb / 1024:g} GB of memory.")
        if self.disk_mb is not None:
            lines.append(f"You have {self.disk_mb / 1024:g} GB of disk space.")
        if self.hours is not None:
            lines.append(f"You have {self.hours:g} hours to work.")
        if self.env_names:
            lines.append(
                "These environment variables are set for you (e.g. your own API keys): "
                + ", ".join(self.env_names)
                + "."
            )
        return "\n".join(lines)


def refuse_image_without_docker(image: str | None, backend: str) -> None:
    """An image runs on the Docker backend only: the local backend runs the host's own
    system, and is never given an image it would not use.

    Raises:
        UsageError: ``image`` given with a backend other than ``docker``.
    """
    if image is not None and backend not in ("docker", "auto"):
        raise UsageError(
            f"image {image} (--image or resources.image): only the Docker backend runs an "
            f"image; the {backend} backend runs the host's own system; use --sandbox docker "
            "or drop the image"
        )


def refuse_install_without_docker(install: Sequence[str], backend: str, file: Path | None) -> None:
    """``install`` commands run in a Docker image build only: the local backend has no image.

    Raises:
        ConfigError: ``install`` given with a backend other than ``docker`` (or ``auto``).
    """
    if install and backend not in ("docker", "auto"):
        raise ConfigError(
            f"install commands run only in a Docker image build; the {backend} backend runs "
            "the host's own system: use --sandbox docker",
            file=file,
            path="$.install",
        )


def read_env_file(path: Path, *, file: Path | None = None, where: str = "") -> dict[str, str]:
    """The variables of dotenv file ``path`` (no interpolation: nothing from the host).

    ``file`` and ``where`` name what gave the path (a config and its key path, or a flag as
    ``where`` alone) in the error.

    Raises:
        ConfigError: (``file`` given) the file cannot be read, a line is not ``NAME=value``,
            or a name is one the sandbox sets itself.
        UsageError: the same, when a flag gave the file.
    """

    def refuse(why: str) -> PaperbenchError:
        if file is not None:
            return ConfigError(f"env file {path}: {why}", file=file, path=where)
        return UsageError(f"{where} {path}: {why}")

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise refuse("not UTF-8 text") from None
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    env: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        line = binding.original.line
        if binding.error:
            raise refuse(f"line {line}: expected NAME=value")
        if binding.key is None:
            continue
        if binding.value is None:
            raise refuse(f"line {line}: {binding.key} has no value (write {binding.key}=...)")
        problem = env_name_problem(binding.key)
        if problem:
            raise refuse(f"line {line}: {problem}")
        env[binding.key] = binding.value
    return env


def resolve(
    config: AgentResources,
    override: AgentResources | None = None,
    *,
    config_file: Path | None = None,
    flag: str = "--agent-env",
) -> tuple[ResolvedResources, dict[str, str]]:
    """``override`` over ``config`` (an agent config's section, from ``config_file``), resolved,
    and the sandbox's environment (values included: for the sandbox only). The config's
    relative ``env_file`` is under the config's folder; the override's (a flag) under the
    working folder.

    Raises:
        ConfigError: the config's env file is missing or bad (file and key path named).
        UsageError: the override's env file is missing or bad (``flag`` named).
    """
    merged = override.over(config) if override is not None else config
    env = dict(merged.env)
    env_file: str | None = None
    if merged.env_file is not None:
        from_flag = override is not None and override.env_file is not None
        path = Path(merged.env_file).expanduser()
        if not path.is_absolute():
            base = config_file.parent if config_file is not None and not from_flag else Path.cwd()
            path = base / path
        path = path.absolute()
        if from_flag or config_file is None:
            values = read_env_file(path, where=flag)
        else:
            values = read_env_file(path, file=config_file, where="$.resources.env_file")
        env.update(values)
        env_file = str(path)
    resolved = ResolvedResources(
        gpus=merged.gpus or 0,
        gpu_type=merged.gpu_type,
        cpus=merged.cpus,
        memory_mb=merged.memory_mb,
        disk_mb=merged.disk_mb,
        image=merged.image,
        env_names=tuple(sorted(env)),
        env_file=env_file,
    )
    return resolved, env


def resources_from_flags(
    *,
    gpus: int | None,
    gpu_type: str | None,
    cpus: float | None,
    memory: int | None,
    disk: int | None,
    image: str | None,
    agent_env: Path | None,
    env: list[str] | None = None,
) -> AgentResources | None:
    """The resource flags (shared by ``rollout`` and ``run``) as overrides of the agent
    configs' ``resources:``; None when no flag was given. The env file is read now, so that a
    bad one is refused before any work (its path made absolute).

    Raises:
        UsageError: a bad value or env file, naming the flag.
    """
    said = {
        "gpus": gpus,
        "gpu_type": gpu_type,
        "cpus": cpus,
        "memory_mb": memory,
        "disk_mb": disk,
        "image": image,
    }
    fields: dict[str, Any] = {k: v for k, v in said.items() if v is not None}
    pairs: dict[str, str] = {}
    for item in env or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item}: expected NAME=value")
        pairs[name] = value
    if pairs:
        fields["env"] = pairs
    if agent_env is not None:
        path = agent_env.expanduser().absolute()
        read_env_file(path, where="--agent-env")
        fields["env_file"] = str(path)
    if not fields:
        return None
    try:
        return AgentResources(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        flag = {"memory_mb": "memory", "disk_mb": "disk", "env_file": "agent-env"}.get(name, name)
        message = str(err["msg"]).removeprefix("Value error, ")
        raise UsageError(f"--{flag.replace('_', '-')}: {message}") from None


def resources_line(r: ResolvedResources) -> str:
    """The resources in one line: what is set, and the environment's names (never values)."""
    parts = [plural(r.gpus, "GPU") + (f" ({r.gpu_type})" if r.gpu_type else "")]
    if r.cpus is not None:
        parts.append(f"{r.cpus:g} CPU" + ("" if r.cpus == 1 else "s"))
    if r.memory_mb is not None:
        parts.append(f"{r.memory_mb} MB memory")
    if r.disk_mb is not None:
        parts.append(f"{r.disk_mb} MB disk")
    env = ", ".join(r.env_names) or "none"
    parts.append(f"env {env}" + (f" (from {r.env_file})" if r.env_file else ""))
    return ", ".join(parts)
