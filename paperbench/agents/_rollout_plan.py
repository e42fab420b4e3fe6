"""What a rollout (:mod:`paperbench.agents._rollout`) is asked to do, resolved before any file
of its run folder is touched: the agent (built already, or loaded from its config), its limits
and model, the instructions it is given, the resources of its sandbox and the
:class:`RolloutConfig` that config.json records."""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from paperbench._console import plural
from paperbench.agents._base import Agent, AgentLimits
from paperbench.agents._config import CommandConfig, command_agent_refusal
from paperbench.agents._notes import additional_notes
from paperbench.agents._resources import (
    DEFAULT_AGENT_DISK_MB,
    AgentResources,
    ResolvedResources,
    refuse_image_without_docker,
    refuse_install_without_docker,
    resolve,
)
from paperbench.agents._rollout_files import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_SNAPSHOT_EVERY_S,
    RolloutConfig,
)
from paperbench.agents._snapshots import DEFAULT_KEEP_SNAPSHOTS, DEFAULT_SNAPSHOTS_MAX_BYTES
from paperbench.errors import UsageError
from paperbench.llm import Model, ModelConfig
from paperbench.papers import Paper
from paperbench.sandbox import NetworkPolicy, SandboxConfig, SandboxLimits, SandboxUserKind
from paperbench.sandbox._internal_nets import IPNetwork


class LoadedAgentLike(Protocol):
    """What ``load_agent`` returns (paperbench.agents._config.LoadedAgent)."""

    @property
    def config(self) -> Any: ...

    def build(self, model: Model | None) -> Agent: ...


@dataclass
class ResolvedAgent:
    """The agent a rollout runs, before it is built: a loaded agent's config says its name,
    limits, sandbox user, resources and model; an Agent given built says little."""

    source: Agent | LoadedAgentLike
    """The agent given, or the one a replay gives for the paper (its recording of it)."""
    name: str
    config: dict[str, Any]
    """config.json's ``agent_config``: the loaded config and its identity."""
    limits: AgentLimits
    model_config: ModelConfig | None
    built: Agent | None = None
    sandbox_user: SandboxUserKind = "root"
    own_resources: AgentResources = field(default_factory=AgentResources)
    config_file: Path | None = None
    install: list[str] = field(default_factory=list)
    """The config's ``install`` commands: the agent runs in the image they derive."""


@dataclass(frozen=True)
class RolloutOptions:
    """What a rollout is asked to do besides its paper, agent and run folder, passed whole from
    the command line, the pipeline and ``paperbench.rollout()`` to
    :func:`~paperbench.agents._rollout.rollout`."""

    model_config: ModelConfig | None = None
    seed: int = 0
    sandbox: SandboxConfig | None = None
    network: NetworkPolicy = NetworkPolicy.FILTERED
    allow_networks: tuple[IPNetwork, ...] = ()
    code_dev: bool = False
    snapshot_every_s: float | None = DEFAULT_SNAPSHOT_EVERY_S
    limits: AgentLimits | None = None
    instructions: str | None = None
    image: str | None = None
    sandbox_limits: SandboxLimits | None = None
    labels: dict[str, str] | None = None
    resources: AgentResources | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    keep_snapshots: int = DEFAULT_KEEP_SNAPSHOTS
    snapshots_max_bytes: int | None = DEFAULT_SNAPSHOTS_MAX_BYTES


@dataclass
class RolloutPlan:
    """Everything a rollout is asked to do, resolved (nothing of the run folder read yet)."""

    agent: ResolvedAgent
    config: RolloutConfig
    text: str
    """The instructions, with the agent's additional notes."""
    resolved: ResolvedResources
    sandbox_env: dict[str, str]
    """The sandbox's environment, values included (for the sandbox only)."""
    secrets: dict[str, str]
    """What the transcript writes as ``[NAME]``: the env file's values."""
    sandbox_limits: SandboxLimits
    labels: dict[str, str]


def default_instructions(code_dev: bool, agent: object = None) -> str:
    """The agent's own instructions (full or Code-Dev) when its config names them, else the
    catalog's, from the agents' config module."""
    try:
        module = importlib.import_module("paperbench.agents._config")
        loaded = agent if isinstance(agent, module.LoadedAgent) else None
        text: str = module.instructions_text(code_dev, loaded)
    except (ImportError, AttributeError):
        raise UsageError(
            "no instructions: this installation has no agent catalog; pass instructions="
        ) from None
    return text


def resolve_agent(
    paper: Paper,
    agent: Agent | LoadedAgentLike,
    limits: AgentLimits | None,
    model_config: ModelConfig | None,
) -> ResolvedAgent:
    """``agent`` with what its config says (a replay's: its recording of ``paper``);
    ``limits`` and ``model_config``, when given, win over the config's."""
    if isinstance(agent, Agent):
        return ResolvedAgent(
            source=agent,
            name=agent.name,
            config={},
            limits=limits or AgentLimits(),
            model_config=model_config,
            built=agent,
        )
    for_paper = getattr(agent, "for_paper", None)
    if callable(for_paper):  # a replay of the recording of this paper
        for_this_paper: LoadedAgentLike = for_paper(paper.id)
        agent = for_this_paper
    cfg = agent.config
    agent_config = {"config": cfg.model_dump(mode="json")}
    identity = getattr(agent, "identity", None)
    if isinstance(identity, BaseModel):
        agent_config["identity"] = identity.model_dump(mode="json")
    if model_config is None and getattr(cfg, "model", None):
        model_config = ModelConfig(model=cfg.model)
    return ResolvedAgent(
        source=agent,
        name=str(getattr(cfg, "name", None) or "agent"),
        config=agent_config,
        limits=limits or cfg.limits,
        model_config=model_config,
        sandbox_user=getattr(cfg, "sandbox_user", "root"),
        own_resources=getattr(cfg, "resources", None) or AgentResources(),
        config_file=getattr(agent, "path", None),
        install=list(getattr(cfg, "install", None) or []),
    )


def _instructions_and_resources(
    who: ResolvedAgent,
    instructions: str | None,
    code_dev: bool,
    resources: AgentResources | None,
    image: str | None,
    sandbox: SandboxConfig | None,
) -> tuple[str, ResolvedResources, dict[str, str]]:
    """The instructions (with the agent's additional notes when they are the config's), the
    resolved resources and the sandbox's environment."""
    agent = who.source
    text = instructions if instructions is not None else default_instructions(code_dev, agent)
    resolved, sandbox_env = resolve(who.own_resources, resources, config_file=who.config_file)
    if image is not None:
        resolved = resolved.model_copy(update={"image": image})
    backend = (sandbox or SandboxConfig()).backend
    refuse_image_without_docker(resolved.image, backend)
    refuse_install_without_docker(who.install, backend, who.config_file)
    notes_template = (getattr(agent, "prompts", None) or {}).get("additional_notes")
    if instructions is None and notes_template:
        # What the run really gives the agent, never more (PaperBench's additional notes).
        hours = who.limits.wall_time_s / 3600 if who.limits.wall_time_s else None
        gpu = (resolved.gpu_type or plural(resolved.gpus, "GPU")) if resolved.gpus else None
        notes = additional_notes(gpu, hours, list(resolved.env_names), template=notes_template)
        text = text.rstrip("\n") + "\n\n" + notes.strip() + "\n"
    return text, resolved, sandbox_env


def plan_rollout(
    paper: Paper, agent: Agent | LoadedAgentLike, options: RolloutOptions
) -> RolloutPlan:
    """The rollout's options resolved (see ``rollout`` for their meaning).

    Raises:
        UsageError, ConfigError: see ``rollout``.
    """
    o = options
    network = o.network
    who = resolve_agent(paper, agent, o.limits, o.model_config)
    text, resolved, sandbox_env = _instructions_and_resources(
        who, o.instructions, o.code_dev, o.resources, o.image, o.sandbox
    )
    base = o.sandbox_limits or SandboxLimits()
    if resolved.disk_mb is None and base.disk_mb is None and not base.allow_uncapped_disk:
        # Every agent sandbox has a disk cap unless --allow-uncapped-disk lifts it; the cap
        # is recorded with the resources, as if it had been asked for.
        resolved = resolved.model_copy(update={"disk_mb": DEFAULT_AGENT_DISK_MB})
    mc = who.model_config
    command = getattr(who.source, "config", None)
    if isinstance(command, CommandConfig):
        refused = command_agent_refusal(command, mc.model if mc else None, network.value)
        if refused is not None:
            raise UsageError(f"{refused[0]} {refused[1]}")
    config = RolloutConfig(
        paper_id=paper.id,
        agent=who.name,
        agent_config=who.config,
        model=mc.model if mc else None,
        base_url=mc.base_url if mc else None,
        seed=o.seed,
        code_dev=o.code_dev,
        network=network,
        allow_networks=o.allow_networks,
        blacklist=paper.blacklist() if network == NetworkPolicy.FILTERED else [],
        limits=who.limits,
        snapshot_every_s=o.snapshot_every_s,
        sandbox=o.sandbox or SandboxConfig(),
        image=resolved.image,
        instructions_sha=hashlib.sha256(text.encode()).hexdigest(),
        resources=resolved,
        max_restarts=o.max_restarts,
        keep_snapshots=o.keep_snapshots,
        snapshots_max_bytes=o.snapshots_max_bytes,
    )
    own = who.own_resources
    said = (o.resources.over(own) if o.resources is not None else own).env
    return RolloutPlan(
        agent=who,
        config=config,
        text=text,
        resolved=resolved,
        sandbox_env=sandbox_env,
        secrets={k: v for k, v in sandbox_env.items() if said.get(k) != v},  # the env file's
        sandbox_limits=resolved.limits(base),
        labels={**(o.labels or {}), "paperbench.stage": "rollout", "paperbench.paper": paper.id},
    )
