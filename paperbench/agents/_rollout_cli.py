"""``paperbench rollout``: run an agent on a paper from the command line (thin)."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from rich.logging import RichHandler
from rich.markup import escape

from paperbench._console import console, err_console, warning
from paperbench.agents._base import AgentLimits
from paperbench.agents._resources import AgentResources, ResolvedResources, read_env_file
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_SNAPSHOT_EVERY_S,
    RolloutPausedError,
    RolloutResult,
    RolloutStatus,
)
from paperbench.errors import UsageError
from paperbench.llm import ModelConfig
from paperbench.papers import DATA_DIR_ENV, PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig

EXIT_ERROR = 3
"""Exit code when the rollout ran but ended in an error (the agent or its sandbox failed)."""
EXIT_PAUSED = 4
"""Exit code when the run paused before its end (the model provider stayed unavailable past
its retries, or the sandbox was lost more often than --max-restarts): it is kept without
status.json and goes on with the command printed (the same flags and --resume)."""
DEFAULT_RUNS = Path("runs")


def _log_to_stderr() -> None:
    """Show the sandbox's and the model layer's warnings on stderr, once."""
    for name in ("paperbench.sandbox", "paperbench.llm"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, RichHandler) for h in logger.handlers):
            handler = RichHandler(console=err_console, show_time=False, show_path=False)
            handler.setLevel(logging.WARNING)
            logger.addHandler(handler)


def _positive(flag: str) -> Any:
    def check(value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise typer.BadParameter(f"expected a number > 0, found {value}", param_hint=flag)
        return value

    return check


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


GPUS_HELP = "GPUs for the agent's sandbox (default: the agent config's resources, else none)."
GPU_TYPE_HELP = "What the GPUs are, told to the agent (e.g. 'NVIDIA A10')."
CPUS_HELP = "CPUs for the agent's sandbox (default: the agent config's, else no limit)."
MEMORY_HELP = "Memory limit of the agent's sandbox in MB (default: the agent config's, else 8192)."
DISK_HELP = "Cap of the agent's writable space in MB (default: the agent config's, else none)."
IMAGE_HELP = "The agent's sandbox image (default: the agent config's, else paperbench-agent)."
ENV_HELP = (
    "NAME=value set in the agent's sandbox (repeat for several; over the agent config's env). "
    "Recorded with the group: not for keys (use --agent-env)."
)
AGENT_ENV_HELP = (
    "A dotenv file of keys for the agent's own use (NAME=value lines), set in its sandbox; "
    "the names are recorded, never the values. Instead of the agent config's env_file."
)


def load_agent_config(ref: str) -> Any:
    """``load_agent(ref)`` of the agent catalog (imported only when a rollout needs it)."""
    try:
        module = importlib.import_module("paperbench.agents._config")
    except ImportError:
        raise UsageError(
            f"--agent {ref}: this installation has no agent catalog (paperbench.agents._config)"
        ) from None
    return module.load_agent(ref)


def _default_out(paper_id: str, agent: str, seed: int) -> Path:
    name = Path(agent).stem if agent.endswith((".yaml", ".yml")) else agent
    return DEFAULT_RUNS / "default" / paper_id / name / f"seed-{seed}"


def _check_out(out: Path, resume: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if resume and not (out / "config.json").exists() and not (out / "status.json").exists():
        raise UsageError(f"--out {out}: no run to resume (no config.json); drop --resume")
    if not resume and out.is_dir() and any(out.iterdir()):
        raise UsageError(
            f"--out {out}: the folder is not empty; pass --resume to continue the run in it, "
            "or give another --out"
        )


def _model_config(model: str | None, base_url: str | None) -> ModelConfig | None:
    if model is None:
        if base_url is not None:
            raise UsageError("--base-url needs a model: pass --model provider/model")
        return None
    try:
        return ModelConfig(model=model, base_url=base_url)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--base-url" if "base_url" in err["loc"] else "--model"
        raise UsageError(f"{flag}: {err['msg']}") from None


def rollout_command(
    ctx: typer.Context,
    paper: Annotated[str, typer.Option("--paper", help="The paper id.")],
    agent: Annotated[
        str, typer.Option("--agent", help="An agent from the catalog, or a YAML file.")
    ],
    data_dir: Annotated[
        Path | None,
        typer.Option(envvar=DATA_DIR_ENV, help="A PaperBench data directory (holds papers/)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="provider/model, instead of the agent config's model."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="An OpenAI- or Anthropic-compatible server for --model.")
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="The seed, recorded with the run.")] = 0,
    sandbox: Annotated[
        Literal["auto", "docker", "local"],
        typer.Option(
            help="Sandbox backend; auto = docker when an engine answers, else local with "
            "bubblewrap (said as a warning)."
        ),
    ] = "auto",
    allow_unsandboxed: Annotated[
        bool,
        typer.Option(
            "--allow-unsandboxed",
            help="Without bubblewrap, run the agent's commands as PLAIN HOST SUBPROCESSES "
            "instead of refusing. Said loudly and recorded as isolation none.",
        ),
    ] = False,
    network: Annotated[
        NetworkPolicy,
        typer.Option(
            help="Network of the sandbox: filtered (through the egress proxy, with the paper's "
            "blacklist, logged to network.jsonl), full or none."
        ),
    ] = NetworkPolicy.FILTERED,
    code_dev: Annotated[
        bool, typer.Option("--code-dev", help="The Code-Dev variant of the instructions.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="The run folder (default: runs/default/<paper>/<agent>/seed-<n>)."),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue a run that did not finish, in a new sandbox from its last snapshot.",
        ),
    ] = False,
    snapshot_every: Annotated[
        float,
        typer.Option(
            help="Minutes between snapshots of /home/submission.",
            callback=_positive("--snapshot-every"),
        ),
    ] = DEFAULT_SNAPSHOT_EVERY_S / 60,
    max_steps: Annotated[
        int | None, typer.Option(min=1, help="Step limit (default: the agent config's).")
    ] = None,
    max_hours: Annotated[
        float | None,
        typer.Option(
            help="Wall-time limit in hours (default: the agent config's).",
            callback=_positive("--max-hours"),
        ),
    ] = None,
    max_dollars: Annotated[
        float | None,
        typer.Option(
            help="Dollar limit (default: the agent config's).",
            callback=_positive("--max-dollars"),
        ),
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(min=1, help="Token limit (default: the agent config's).")
    ] = None,
    gpus: Annotated[int | None, typer.Option(min=0, help=GPUS_HELP)] = None,
    gpu_type: Annotated[str | None, typer.Option(help=GPU_TYPE_HELP)] = None,
    cpus: Annotated[float | None, typer.Option(min=0.01, help=CPUS_HELP)] = None,
    memory: Annotated[int | None, typer.Option(min=64, help=MEMORY_HELP)] = None,
    disk: Annotated[int | None, typer.Option(min=16, help=DISK_HELP)] = None,
    image: Annotated[str | None, typer.Option(help=IMAGE_HELP)] = None,
    env: Annotated[list[str] | None, typer.Option(metavar="NAME=VALUE", help=ENV_HELP)] = None,
    agent_env: Annotated[
        Path | None, typer.Option("--agent-env", metavar="FILE", help=AGENT_ENV_HELP)
    ] = None,
    max_restarts: Annotated[
        int,
        typer.Option(
            min=0,
            help="New sandboxes (from the last snapshot) started when the sandbox is lost, "
            "before the run pauses.",
        ),
    ] = DEFAULT_MAX_RESTARTS,
    as_json: Annotated[bool, typer.Option("--json", help="Print status.json.")] = False,
) -> None:
    """Run an agent on a paper in a fresh sandbox; write the run folder (config.json,
    transcript.jsonl, costs.jsonl, snapshots/, submission.tar.gz, status.json last). Exit
    code 0 when the agent submitted or reached a limit, 3 when it ended in an error, 4 when the
    run paused (provider unavailable past its retries, sandbox lost too often): it prints the
    command that continues it."""
    _log_to_stderr()
    model_config = _model_config(model, base_url)
    the_paper = PaperSource.resolve(data_dir).load(paper)
    out_dir = out or _default_out(the_paper.id, agent, seed)
    _check_out(out_dir, resume)
    resources = resources_from_flags(
        gpus=gpus,
        gpu_type=gpu_type,
        cpus=cpus,
        memory=memory,
        disk=disk,
        image=image,
        agent_env=agent_env,
        env=env,
    )
    loaded = load_agent_config(agent)
    limits: AgentLimits = loaded.config.limits
    overrides = {
        "steps": max_steps,
        "wall_time_s": max_hours * 3600 if max_hours is not None else None,
        "dollars": max_dollars,
        "tokens": max_tokens,
    }
    limits = limits.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if model_config is None and loaded.config.model:
        model_config = ModelConfig(model=loaded.config.model)
    if allow_unsandboxed:
        warning("--allow-unsandboxed: without bubblewrap the agent runs on the host itself")
    try:
        with err_console.status(f"rollout of {the_paper.id} into {out_dir} ..."):
            result = asyncio.run(
                rollout(
                    the_paper,
                    loaded,
                    out_dir=out_dir,
                    model_config=model_config,
                    seed=seed,
                    sandbox=SandboxConfig(backend=sandbox, allow_unsandboxed=allow_unsandboxed),
                    network=network,
                    code_dev=code_dev,
                    snapshot_every_s=snapshot_every * 60,
                    resume=resume,
                    limits=limits,
                    max_restarts=max_restarts,
                    resources=resources,
                )
            )
    except RolloutPausedError as exc:
        again = _resume_command(ctx, out_dir)
        console.print(
            f"paused ({exc.kind}): {' '.join(exc.reason.split())}; continue with: {again}",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_PAUSED) from None
    if as_json:
        console.print(json.dumps(result.status.model_dump(mode="json"), indent=2), markup=False)
    else:
        _summary(result)
    if result.status.status == "error":
        raise typer.Exit(EXIT_ERROR)


def _resume_command(ctx: typer.Context, out_dir: Path) -> str:
    """This command again with the flags it was given, ``--out`` and ``--resume``."""
    words = ["paperbench", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        if param.param_type_name != "option" or param.name in ("out", "resume", "as_json"):
            continue
        value = ctx.params.get(param.name or "")
        flag_only = bool(getattr(param, "is_flag", False))
        if value is None or value == param.default or (flag_only and not value):
            continue
        flag = param.opts[0]
        if isinstance(value, list | tuple):  # a repeated option: once per value
            if not value:
                continue
            for item in value:
                words += [flag, str(item)]
            continue
        words += [flag] if flag_only else [flag, str(getattr(value, "value", value))]
    words += ["--out", str(out_dir), "--resume"]
    return shlex.join(words)


def _summary(result: RolloutResult) -> None:
    s: RolloutStatus = result.status
    if result.already_finished:
        console.print("this run had already finished: nothing was run", markup=False)
    colour = {"submitted": "green", "limit": "yellow"}.get(s.status, "red")
    limit = f" ({s.limit})" if s.limit else ""
    cost = f"${s.costs.cost_usd:.2f}" + (
        f" + {s.costs.unpriced_calls} unpriced calls" if s.costs.unpriced_calls else ""
    )
    console.print(
        f"[bold {colour}]{s.status}{limit}[/]  {s.steps} steps  {s.wall_time_s:.0f} s  "
        f"{s.costs.calls} model calls, {s.costs.usage.total_tokens} tokens, {cost}  "
        f"attempts {s.attempts}" + (f", restarts {s.restarts}" if s.restarts else "")
    )
    console.print(
        f"agent {escape(s.agent)}, model {escape(s.model or '-')}, sandbox "
        f"{s.sandbox_backend or '-'} ({escape(s.sandbox_image or '-')}), isolation "
        f"{s.isolation or '-'}, network {s.network.value}"
    )
    if s.resources is not None:
        console.print(f"resources: {resources_line(s.resources)}", markup=False)
    if s.error:
        console.print(f"[red]{escape(s.error)}[/]")
    if s.left_out:
        files = ", ".join(f"{f.path} ({f.size} bytes)" for f in s.left_out)
        console.print(f"not kept (over 10 MB): {escape(files)}")
    console.print(f"run folder {result.out_dir}", markup=False)


def resources_line(r: ResolvedResources) -> str:
    """The resources in one line: what is set, and the environment's names (never values)."""
    parts = [f"{r.gpus} GPU" + (f" ({r.gpu_type})" if r.gpu_type else "")]
    if r.cpus is not None:
        parts.append(f"{r.cpus:g} CPUs")
    if r.memory_mb is not None:
        parts.append(f"{r.memory_mb} MB memory")
    if r.disk_mb is not None:
        parts.append(f"{r.disk_mb} MB disk")
    env = ", ".join(r.env_names) or "none"
    parts.append(f"env {env}" + (f" (from {r.env_file})" if r.env_file else ""))
    return ", ".join(parts)
