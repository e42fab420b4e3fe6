"""What one rollout is asked to do, as ``paperbench rollout`` and ``paperbench.rollout()`` take
it: :class:`RolloutSettings`, one typed model (each field marked with a
:class:`~paperbench._flags.Flag` is an option of the command, its default the field's).

:func:`prepare_rollout` checks and resolves it before any work (the paper, the run folder, the
agent, the resources) into the :class:`~paperbench.agents._rollout_plan.RolloutOptions` that a
rollout takes whole; :func:`agent_overrides` is where a model and limits given over an agent
config's are applied, for this command and for the pipeline of ``paperbench run`` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from paperbench._console import warning
from paperbench._flags import (
    AllowNetworks,
    AllowUnsandboxed,
    Cpus,
    DiskMb,
    Flag,
    Gpus,
    MemoryMb,
    SandboxBackendOption,
)
from paperbench.agents._base import AgentLimits
from paperbench.agents._resources import resources_from_flags
from paperbench.agents._rollout_files import DEFAULT_MAX_RESTARTS, DEFAULT_SNAPSHOT_EVERY_S
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.errors import UsageError
from paperbench.llm import ModelConfig
from paperbench.llm._registry import ModelChecks
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS
from paperbench.papers import Paper, PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig, SandboxLimits
from paperbench.sandbox._internal_nets import describe

if TYPE_CHECKING:
    from paperbench.agents._config import LoadedAgent

DEFAULT_RUNS = Path("runs")


def agent_overrides(
    config: Any,
    *,
    model: str | None,
    base_url: str | None,
    limits: Mapping[str, Any],
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> tuple[ModelConfig | None, AgentLimits]:
    """A rollout's model and limits: those of its agent ``config`` with what is given over
    them (``model`` over the config's, ``base_url`` for either, each limit that is not None
    over the config's). ``paperbench rollout`` and ``paperbench run`` both take them from
    here."""
    name = model or config.model
    model_config = (
        ModelConfig(model=name, base_url=base_url, max_connections=max_connections)
        if name
        else None
    )
    given = {k: v for k, v in limits.items() if v is not None}
    agent_limits: AgentLimits = config.limits
    return model_config, agent_limits.model_copy(update=given)


class RolloutSettings(ModelChecks):
    """One rollout: an agent on a paper in a fresh sandbox, into a run folder.

    The defaults are the command line's: the replay agent (no model needed), the sandbox that
    answers, network ``filtered`` with the paper's blacklist, the agent config's limits and
    resources, and a new folder runs/default/<paper>/<agent>/seed-<n>.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper: Annotated[str, Flag("--paper", shared=True)] = Field(description="The paper's id.")
    agent: Annotated[str, Flag("--agent", metavar="CONFIG")] = Field(
        default="replay", description="An agent from the catalog, or a YAML file."
    )
    data_dir: Annotated[Path | None, Flag("--data-dir", shared=True)] = Field(
        default=None, description="A PaperBench data directory (default: the bundled papers)."
    )
    model: Annotated[str | None, Flag("--model", shared=True)] = Field(
        default=None, description="Use this model instead of the agent config's."
    )
    base_url: Annotated[str | None, Flag("--base-url", shared=True)] = Field(
        default=None, description="An OpenAI- or Anthropic-compatible server for the calls."
    )
    seed: Annotated[int, Flag("--seed")] = Field(
        default=0, ge=0, description="The seed, recorded with the run."
    )
    sandbox: SandboxBackendOption = "auto"
    allow_unsandboxed: AllowUnsandboxed = False
    allow_uncapped_disk: Annotated[bool, Flag("--allow-uncapped-disk", shared=True)] = Field(
        default=False, description="Allow a sandbox without a disk cap."
    )
    network: Annotated[
        Literal["none", "full", "filtered"] | None, Flag("--network", shared=True)
    ] = Field(default=None, description="The sandbox's network (default: filtered).")
    allow_networks: AllowNetworks = ()
    code_dev: Annotated[bool, Flag("--code-dev", shared=True)] = Field(
        default=False, description="Code-Dev: the agent is told nothing is reproduced."
    )
    out: Annotated[Path | None, Flag("--out", metavar="FOLDER")] = Field(
        default=None,
        description="The new run's folder (default: runs/default/<paper>/<agent>/seed-<n>).",
    )
    resume: Annotated[str | None, Flag("--resume", shared=True)] = Field(
        default=None, description="The folder of a run to continue (instead of out)."
    )
    snapshot_every_s: Annotated[float, Flag("--snapshot-every", shared=True)] = Field(
        default=DEFAULT_SNAPSHOT_EVERY_S,
        gt=0,
        description="Seconds between snapshots of /home/submission.",
    )
    max_steps: Annotated[int | None, Flag("--max-steps", shared=True)] = Field(
        default=None, ge=1, description="Steps (default: the agent config's)."
    )
    max_time_s: Annotated[float | None, Flag("--max-time", shared=True)] = Field(
        default=None, gt=0, description="Wall time in seconds (default: the agent config's)."
    )
    max_dollars: Annotated[float | None, Flag("--max-dollars", shared=True)] = Field(
        default=None, gt=0, description="Dollars (default: the agent config's)."
    )
    max_tokens: Annotated[int | None, Flag("--max-tokens", shared=True)] = Field(
        default=None, ge=1, description="Tokens (default: the agent config's)."
    )
    gpus: Gpus = None
    gpu_type: Annotated[str | None, Flag("--gpu-type", shared=True)] = Field(
        default=None, description="What the GPUs are, told to the agent."
    )
    cpus: Cpus = None
    memory_mb: MemoryMb = None
    disk_mb: DiskMb = None
    image: Annotated[str | None, Flag("--image", shared=True)] = Field(
        default=None, description="The sandbox's image."
    )
    env: Annotated[list[str] | None, Flag("--env", shared=True)] = Field(
        default=None, description="NAME=VALUE pairs set in the sandbox."
    )
    env_file: Annotated[Path | None, Flag("--agent-env", shared=True)] = Field(
        default=None, description="A dotenv file of keys for the agent's own use."
    )
    max_restarts: Annotated[int, Flag("--max-restarts")] = Field(
        default=DEFAULT_MAX_RESTARTS,
        ge=0,
        description="New sandboxes (from the last snapshot) started when the sandbox is lost, "
        "before the run pauses.",
    )


@dataclass(frozen=True)
class PreparedRollout:
    """A rollout checked and resolved, before any file of its run folder is touched."""

    paper: Paper
    agent: LoadedAgent
    options: RolloutOptions
    out_dir: Path
    resume: bool


def _default_out(paper_id: str, agent: str, seed: int) -> Path:
    name = Path(agent).stem if agent.endswith((".yaml", ".yml")) else agent
    return DEFAULT_RUNS / "default" / paper_id / name / f"seed-{seed}"


def run_folder(out: Path | None, resume: str | None, paper_id: str, agent: str, seed: int) -> Path:
    """The run folder: ``resume`` (a run to continue) or ``out`` (a new one).

    Raises:
        UsageError: both given, or a folder that does not fit, naming the flag.
    """
    if resume is not None:
        if out is not None:
            raise UsageError(
                "give --out FOLDER for a new run or --resume FOLDER to continue one, not both"
            )
        folder = Path(resume)
        if not folder.is_dir():
            raise UsageError(f"--resume {resume}: no such folder; give the run folder to continue")
        if not (folder / "config.json").exists() and not (folder / "status.json").exists():
            raise UsageError(
                f"--resume {resume}: no run to resume there (no config.json); start one with "
                "--out FOLDER"
            )
        return folder
    folder = out or _default_out(paper_id, agent, seed)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {folder}: exists and is not a folder; give another --out")
    if folder.is_dir() and any(folder.iterdir()):
        raise UsageError(
            f"--out {folder}: the folder is not empty; continue the run in it with --resume "
            f"{folder} (instead of --out), or give another --out"
        )
    return folder


def _check_model(model: str | None, base_url: str | None) -> None:
    if model is None:
        if base_url is not None:
            raise UsageError("--base-url needs a model: pass --model provider/model")
        return
    try:
        ModelConfig(model=model, base_url=base_url)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--base-url" if "base_url" in err["loc"] else "--model"
        raise UsageError(f"{flag}: {err['msg']}") from None


def prepare_rollout(settings: RolloutSettings) -> PreparedRollout:
    """``settings`` checked and resolved: the paper loaded, the run folder chosen, the agent
    loaded with the model and limits given over its config's, the resources read; what is
    less safe than the default (no bubblewrap, no disk cap, internal ranges) said as a
    warning.

    Raises:
        UsageError: a bad value or folder, naming its flag.
        ConfigError: a bad agent config (file and key path named).
        LfsPointerError, RubricError: the paper's bundle is not usable.
    """
    from paperbench.agents._config import load_agent

    s = settings
    network = NetworkPolicy(s.network) if s.network is not None else NetworkPolicy.FILTERED
    if s.allow_networks and network is NetworkPolicy.NONE:
        raise UsageError("--allow-network: the sandbox has no network (--network none)")
    _check_model(s.model, s.base_url)
    paper = PaperSource.resolve(s.data_dir).load(s.paper)
    paper.require_usable()
    out_dir = run_folder(s.out, s.resume, paper.id, s.agent, s.seed)
    resources = resources_from_flags(
        gpus=s.gpus,
        gpu_type=s.gpu_type,
        cpus=s.cpus,
        memory=s.memory_mb,
        disk=s.disk_mb,
        image=s.image,
        agent_env=s.env_file,
        env=s.env,
    )
    loaded = load_agent(s.agent).for_paper(paper.id)
    given = {
        "steps": s.max_steps,
        "wall_time_s": s.max_time_s,
        "dollars": s.max_dollars,
        "tokens": s.max_tokens,
    }
    model_config, limits = agent_overrides(
        loaded.config, model=s.model, base_url=s.base_url, limits=given
    )
    if s.allow_unsandboxed:
        warning("--allow-unsandboxed: without bubblewrap the agent runs on the host itself")
    if s.allow_uncapped_disk and s.disk_mb is None:
        warning("--allow-uncapped-disk: the agent's sandbox has no disk cap")
    if s.allow_networks:
        warning(describe(s.allow_networks))
    options = RolloutOptions(
        model_config=model_config,
        seed=s.seed,
        sandbox=SandboxConfig(backend=s.sandbox, allow_unsandboxed=s.allow_unsandboxed),
        network=network,
        allow_networks=s.allow_networks,
        code_dev=s.code_dev,
        snapshot_every_s=s.snapshot_every_s,
        limits=limits,
        max_restarts=s.max_restarts,
        resources=resources,
        sandbox_limits=SandboxLimits(allow_uncapped_disk=s.allow_uncapped_disk),
    )
    return PreparedRollout(paper, loaded, options, out_dir, resume=s.resume is not None)
