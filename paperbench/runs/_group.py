"""A group of runs: what ``paperbench run`` was asked (group.json), checked before any work.

:func:`plan_group` turns the options into a :class:`GroupConfig`: the papers (ids, a split,
or every bundled paper), the agents and the judge loaded and identified, the sandbox backend
resolved once (``auto`` becomes the backend that answered, so that every run and every worker
uses that one and none falls back to another). :func:`open_group` writes group.json for a new
group, or, on a resume, refuses one whose configuration changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._io import json_path
from paperbench.agents import AgentLimits, load_agent
from paperbench.agents._resources import AgentResources, resolve
from paperbench.errors import ConfigError, PaperbenchError, UsageError
from paperbench.judge import DummyConfig, RandomConfig, load_judge_config, missing_keys
from paperbench.judge._job import ModelSettings
from paperbench.papers import PaperSource
from paperbench.reproduce import DEFAULT_DISK_MB
from paperbench.runs._store import (
    GROUP_FILE,
    AgentEntry,
    GroupConfig,
    JudgeEntry,
    Mode,
    read_group,
    safe_name,
    write_model,
)
from paperbench.sandbox import SandboxConfig

DEFAULT_AGENT = "replay"
DEFAULT_JUDGE = "simple"


class RunOptions(BaseModel):
    """The options of ``paperbench run`` that make up a group (plain data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    papers: str | None = None
    """Comma-separated ids or the name of a split; default every paper of the source."""
    data_dir: Path | None = None
    agents: list[str] = Field(default_factory=lambda: [DEFAULT_AGENT])
    seeds: int = Field(default=1, ge=1)
    judge: str = DEFAULT_JUDGE
    judge_model: str | None = None
    judge_base_url: str | None = None
    mode: Mode = "full"
    resources_provided: bool = False
    skip_reproduction: bool = False
    monitor_policy: Literal["disqualify", "flag"] = "disqualify"
    sandbox: Literal["auto", "docker", "local"] = "auto"
    allow_unsandboxed: bool = False
    allow_uncapped_disk: bool = False
    agent_model: str | None = None
    agent_base_url: str | None = None
    agent_limits: dict[str, Any] | None = None
    resources: AgentResources | None = None
    """The resource flags, over each agent config's ``resources:``."""
    snapshot_every_s: float | None = Field(default=300.0, gt=0)
    reproduction: dict[str, Any] = Field(default_factory=dict)
    budget_usd: float | None = Field(default=None, ge=0)
    max_connections: int = Field(default=32, ge=1)
    concurrency: dict[str, int] = Field(default_factory=dict)


def default_group_name() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _papers(source: PaperSource, papers: str | None) -> tuple[list[str], str]:
    if papers is None:
        return source.paper_ids(), "bundled" if source.data_dir is None else "all"
    names = [p.strip() for p in papers.split(",") if p.strip()]
    if not names:
        raise UsageError("--papers: give paper ids (comma-separated) or a split name")
    known = set(source.paper_ids())
    if len(names) == 1 and names[0] not in known:
        try:
            return source.split(names[0]), f"split:{names[0]}"
        except PaperbenchError as exc:
            raise UsageError(
                f"--papers {names[0]}: neither a paper id nor a split ({exc}); "
                "`paperbench papers list` shows the papers"
            ) from None
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"--papers: unknown paper {', '.join(unknown)}; `paperbench papers list` shows them"
        )
    return names, "ids"


def _agents(
    refs: list[str], papers: list[str], resources: AgentResources | None = None
) -> list[AgentEntry]:
    entries: list[AgentEntry] = []
    for ref in refs:
        loaded = load_agent(ref)
        resolved, _ = resolve(loaded.config.resources, resources, config_file=loaded.path)
        for paper in papers:
            loaded.for_paper(paper)  # a replay without a recording of a paper: refused now
        name = loaded.identity.name
        try:
            safe_name(name, "agent name")
        except ValueError as exc:
            raise UsageError(f"--agent {ref}: {exc}; set `name:` in the config") from None
        if any(e.name == name for e in entries):
            raise UsageError(
                f"--agent {ref}: a second agent named {name!r}; runs are filed by agent name, "
                "so give each config its own `name:`"
            )
        entries.append(
            AgentEntry(
                name=name,
                ref=str(loaded.path),
                identity=loaded.identity.model_dump(mode="json"),
                model=loaded.config.model,
                resources=resolved,
            )
        )
    return entries


def _judge(options: RunOptions) -> JudgeEntry:
    loaded = load_judge_config(options.judge)
    settings = ModelSettings(model=options.judge_model, base_url=options.judge_base_url)
    needs_model = not isinstance(loaded.config, DummyConfig | RandomConfig)
    missing = missing_keys(loaded, settings) if needs_model else []
    return JudgeEntry(
        ref=str(loaded.path),
        identity=loaded.identity.model_dump(mode="json"),
        model=options.judge_model,
        base_url=options.judge_base_url,
        key_set=not missing,
    )


async def resolve_sandbox(options: RunOptions) -> dict[str, Any]:
    """The backend that answers now, named: ``auto`` never reaches a run or a worker.

    Raises:
        SandboxUnavailableError: the backend asked for does not answer.
    """
    config = SandboxConfig(backend=options.sandbox, allow_unsandboxed=options.allow_unsandboxed)
    backend = await config.build()
    resolved = config.model_copy(update={"backend": backend.name})
    data: dict[str, Any] = resolved.model_dump(mode="json", exclude_defaults=True)
    data["backend"] = backend.name
    return data


def plan_group(group: str, options: RunOptions, sandbox: dict[str, Any]) -> GroupConfig:
    """The group's configuration, everything loaded and checked.

    Raises:
        UsageError: a bad flag value (named).
        ConfigError: a bad agent or judge config (file and key path named).
    """
    try:
        safe_name(group, "group name")
    except ValueError as exc:
        raise UsageError(f"--group: {exc}") from None
    source = PaperSource.resolve(options.data_dir)
    papers, paper_set = _papers(source, options.papers)
    if not papers:
        raise UsageError("--papers: no paper to run")
    for paper in papers:
        source.load(paper)  # a broken bundle is refused before any work
    if options.agent_limits is not None:
        try:
            AgentLimits.model_validate(options.agent_limits)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UsageError(f"agent limits: {json_path(first['loc'])}: {first['msg']}") from None
    reproduction = dict(options.reproduction)
    if options.allow_uncapped_disk:
        reproduction["limits"] = {
            "disk_mb": DEFAULT_DISK_MB,
            **reproduction.get("limits", {}),
            "allow_uncapped_disk": True,
        }
    return GroupConfig(
        group=group,
        papers=papers,
        paper_set=paper_set,
        data_dir=str(source.data_dir.resolve()) if source.data_dir else None,
        papers_root=str(source.repo_root.resolve()) if source.repo_root else None,
        agents=_agents(options.agents, papers, options.resources),
        seeds=options.seeds,
        judge=_judge(options),
        mode=options.mode,
        resources_provided=options.resources_provided,
        skip_reproduction=options.skip_reproduction,
        monitor_policy=options.monitor_policy,
        sandbox=sandbox,
        agent_limits=options.agent_limits,
        agent_model=options.agent_model,
        agent_base_url=options.agent_base_url,
        resources=options.resources,
        snapshot_every_s=options.snapshot_every_s,
        reproduction=reproduction,
        budget_usd=options.budget_usd,
        max_connections=options.max_connections,
        concurrency=options.concurrency,
    )


def open_group(group_dir: Path, config: GroupConfig) -> None:
    """Write group.json for a new group.

    Raises:
        UsageError: the folder holds a group already (resume it with --resume).
    """
    if (group_dir / GROUP_FILE).exists():
        raise UsageError(
            f"--group {config.group}: {group_dir} holds a group already; continue it with "
            f"`paperbench run --resume {group_dir}` or give another --group"
        )
    group_dir.mkdir(parents=True, exist_ok=True)
    write_model(group_dir / GROUP_FILE, config)


def check_resume(group_dir: Path) -> GroupConfig:
    """group.json of a group to resume, after checking that its agents and judge are what
    they were (same config and prompt hashes).

    Raises:
        InputError: no group there.
        ConfigError: an agent or the judge changed since the group started.
    """
    stored = read_group(group_dir)
    now_agents = _agents([a.ref for a in stored.agents], stored.papers, stored.resources)
    for before, after in zip(stored.agents, now_agents, strict=True):
        if before.identity != after.identity or (
            before.resources is not None and before.resources != after.resources
        ):
            raise ConfigError(
                f"agent {before.name} ({before.ref}) changed since the group started: its runs "
                "would mix two configurations; restore the file or start a new group",
                file=group_dir / GROUP_FILE,
                path="$.agents",
            )
    judge = _judge(
        RunOptions(
            judge=stored.judge.ref,
            judge_model=stored.judge.model,
            judge_base_url=stored.judge.base_url,
        )
    )
    if judge.identity != stored.judge.identity:
        raise ConfigError(
            f"judge {stored.judge.ref} changed since the group started: its scores would not "
            "compare with those already graded; restore the file or start a new group",
            file=group_dir / GROUP_FILE,
            path="$.judge",
        )
    return stored.model_copy(update={"judge": judge})


def reap_leftovers() -> int:
    """Remove the sandboxes, capped disks and firewall rules that a killed run left behind
    (only those whose creating process is gone); returns how many."""
    from paperbench.sandbox._gc import reap_all

    return len(reap_all()[0])
