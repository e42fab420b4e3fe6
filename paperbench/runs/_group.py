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

from paperbench.agents import load_agent, resources_from_flags
from paperbench.agents._resources import AgentResources, resolve
from paperbench.errors import ConfigError, PaperbenchError, UsageError
from paperbench.judge import DummyConfig, RandomConfig, load_judge_config, missing_keys
from paperbench.judge._job import ModelSettings
from paperbench.papers import PaperSource
from paperbench.runs._config import AgentSettings, EvalConfig, JudgeSettings, SandboxSettings
from paperbench.runs._store import (
    GROUP_FILE,
    AgentEntry,
    GroupConfig,
    GroupReproduction,
    JudgeEntry,
    LimitOverrides,
    read_group,
    safe_name,
    write_model,
)
from paperbench.sandbox import SandboxConfig


def default_group_name() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _papers(source: PaperSource, papers: str | None) -> tuple[list[str], str]:
    if papers is None:
        return source.paper_ids(), "bundled" if source.data_dir is None else "all"
    names = [p.strip() for p in papers.split(",") if p.strip()]
    if not names:
        raise UsageError("--papers: give paper ids (comma-separated) or a split name")
    known = {n for n in names if source.folder_of(n) is not None}
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


def _usable(source: PaperSource, name: str) -> str:
    paper = source.load(name)
    paper.require_usable()
    return paper.id


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


def _judge(judge: JudgeSettings) -> JudgeEntry:
    loaded = load_judge_config(judge.config)
    settings = ModelSettings(model=judge.model, base_url=judge.base_url)
    needs_model = not isinstance(loaded.config, DummyConfig | RandomConfig)
    missing = missing_keys(loaded, settings) if needs_model else []
    return JudgeEntry(
        ref=str(loaded.path),
        identity=loaded.identity.model_dump(mode="json"),
        model=judge.model,
        base_url=judge.base_url,
        key_set=not missing,
        batch=judge.batch or bool(getattr(loaded.config, "batch", False)),
    )


async def resolve_sandbox(settings: SandboxSettings) -> tuple[SandboxConfig, str]:
    """The backend that answers now, named (``auto`` never reaches a run or a worker), and
    why it is that one (e.g. ``auto: a Docker engine answers at ...``).

    Raises:
        SandboxUnavailableError: the backend asked for does not answer.
    """
    config = SandboxConfig(backend=settings.backend, allow_unsandboxed=settings.allow_unsandboxed)
    backend = await config.build()
    reason = str(getattr(backend, "isolation_reason", "") or f"{backend.name} asked for")
    return config.model_copy(update={"backend": backend.name}), reason


def _resources(agent: AgentSettings) -> AgentResources | None:
    return resources_from_flags(
        gpus=agent.gpus,
        gpu_type=agent.gpu_type,
        cpus=agent.cpus,
        memory=agent.memory_mb,
        disk=agent.disk_mb,
        image=agent.image,
        agent_env=agent.env_file,
        env=agent.env,
    )


def plan_group(config: EvalConfig, sandbox: SandboxConfig | None = None) -> GroupConfig:
    """The group's configuration, everything loaded and checked (``sandbox``: the resolved
    backend, else the one asked for).

    Raises:
        UsageError: a bad value (its flag named).
        ConfigError: a bad agent or judge config (file and key path named).
    """
    group = config.group or default_group_name()
    try:
        safe_name(group, "group name")
    except ValueError as exc:
        raise UsageError(f"--group: {exc}") from None
    source = PaperSource.resolve(config.data_dir)
    papers, paper_set = _papers(source, config.papers)
    if not papers:
        raise UsageError("--papers: no paper to run")
    # a broken bundle (an LFS pointer, a bad rubric) is refused before any work; the
    # papers are named by their ids (a folder name or a config.yaml id given)
    papers = list(dict.fromkeys(_usable(source, paper) for paper in papers))
    agent = config.agent
    resources = _resources(agent)
    return GroupConfig(
        group=group,
        papers=papers,
        paper_set=paper_set,
        data_dir=str(source.data_dir.resolve()) if source.data_dir else None,
        papers_root=str(source.repo_root.resolve()) if source.repo_root else None,
        agents=_agents(config.agents, papers, resources),
        seeds=config.seeds,
        judge=_judge(config.judge),
        mode="code-dev" if config.code_dev else "full",
        resources_provided=config.resources_provided,
        skip_reproduction=config.reproduction.skip,
        monitor_policy=config.monitor_policy,
        sandbox=sandbox
        or SandboxConfig(
            backend=config.sandbox.backend, allow_unsandboxed=config.sandbox.allow_unsandboxed
        ),
        allow_networks=config.sandbox.allow_networks,
        agent_limits=LimitOverrides(
            steps=agent.max_steps,
            wall_time_s=agent.max_time_s,
            dollars=agent.max_dollars,
            tokens=agent.max_tokens,
        ),
        agent_model=agent.model,
        agent_base_url=agent.base_url,
        resources=resources,
        snapshot_every_s=agent.snapshot_every_s,
        reproduction=GroupReproduction(
            timeout_s=config.reproduction.timeout_s,
            allow_uncapped_disk=config.sandbox.allow_uncapped_disk,
        ),
        budget_usd=config.budget_dollars,
        max_connections=config.executor.max_connections,
        concurrency=config.executor.concurrency,
    )


def refuse_existing(group_dir: Path, group: str) -> None:
    """Refuse a new group in a folder that holds one.

    Raises:
        UsageError: the folder holds a group already (resume it with --resume).
    """
    if (group_dir / GROUP_FILE).exists():
        raise UsageError(
            f"--group {group}: {group_dir} holds a group already; continue it with "
            f"`paperbench run --resume {group_dir}` or give another --group"
        )


def open_group(group_dir: Path, config: GroupConfig) -> None:
    """Write group.json for a new group.

    Raises:
        UsageError: the folder holds a group already (resume it with --resume).
    """
    refuse_existing(group_dir, config.group)
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
        JudgeSettings(
            config=stored.judge.ref, model=stored.judge.model, base_url=stored.judge.base_url
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
