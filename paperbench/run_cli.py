"""``paperbench run``: papers × agents × seeds through rollout, monitor, reproduction and
grading, into runs/<group>/ (thin: the work is in the pipeline and the executors)."""

from __future__ import annotations

import asyncio
import contextlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from paperbench._console import console, err_console, warning
from paperbench.agents import resources_from_flags, resources_line
from paperbench.agents._cli import (
    AGENT_ENV_HELP,
    CPUS_HELP,
    DISK_HELP,
    ENV_HELP,
    GPU_TYPE_HELP,
    IMAGE_HELP,
    MEMORY_HELP,
    _log_to_stderr,
)
from paperbench.agents._resources import ResolvedResources, refuse_image_without_docker
from paperbench.errors import UsageError
from paperbench.report._cli import report_command
from paperbench.runs._executor import DEFAULT_CONCURRENCY, Executor, LocalExecutor
from paperbench.runs._group import (
    RunOptions,
    check_resume,
    default_group_name,
    open_group,
    plan_group,
    reap_leftovers,
    resolve_sandbox,
)
from paperbench.runs._pipeline import RunSpec
from paperbench.runs._progress import GroupProgress
from paperbench.runs._store import GroupConfig, RunOutcome, run_keys

EXIT_FAILED_RUNS = 3
"""Exit code when every run was worked on but some failed (their reasons are recorded)."""
DEFAULT_RUNS_DIR = Path("runs")

_CONFIG_FLAGS = frozenset(
    {
        "papers",
        "data_dir",
        "agent",
        "seeds",
        "judge",
        "judge_model",
        "judge_base_url",
        "code_dev",
        "resources_provided",
        "skip_reproduction",
        "monitor_policy",
        "sandbox",
        "allow_unsandboxed",
        "allow_uncapped_disk",
        "agent_model",
        "agent_base_url",
        "agent_time",
        "agent_dollars",
        "reproduce_timeout",
        "snapshot_every",
        "gpus",
        "gpu_type",
        "cpus",
        "memory",
        "disk",
        "image",
        "agent_env",
        "env",
        "budget_usd",
    }
)


def _concurrency(values: list[str] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    allowed = [*DEFAULT_CONCURRENCY, "leaves"]
    for value in values or []:
        for item in value.split(","):
            stage, sep, number = item.partition("=")
            stage = stage.strip()
            if not sep or stage not in allowed or not number.strip().isdigit():
                raise UsageError(
                    f"--concurrency {item}: expected STAGE=N with STAGE one of "
                    f"{', '.join(allowed)} and N ≥ 1, e.g. reproduction=1"
                )
            n = int(number)
            if n < 1:
                raise UsageError(f"--concurrency {item}: N must be ≥ 1")
            out[stage] = n
    return out


def _positive(flag: str, value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value <= 0):
        raise UsageError(f"{flag}: expected a number > 0, found {value}")


def _group_dir(resume: str, runs_dir: Path) -> Path:
    path = Path(resume)
    if (path / "group.json").is_file():
        return path
    if (runs_dir / resume / "group.json").is_file():
        return runs_dir / resume
    raise UsageError(
        f"--resume {resume}: no group there (no group.json in {path} or {runs_dir / resume}); "
        "give the group's folder, e.g. runs/<group>"
    )


def _executor(kind: str, address: str | None, config: GroupConfig) -> Executor:
    if kind == "local":
        if address is not None:
            raise UsageError("--ray-address: only with --executor ray")
        return LocalExecutor(config.concurrency)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(
            "--executor ray: Ray is not installed; install it with pip install 'paperbench[ray]'"
        ) from None
    from paperbench.runs._ray import RayExecutor

    ray_executor: Executor = RayExecutor(address=address)
    return ray_executor


def _say_what_is_less(config: GroupConfig) -> None:
    """Anything less faithful than a full evaluation, said before the work starts."""
    if not config.judge.key_set:
        warning(
            f"the judge {config.judge.identity.get('name')} has no API key for "
            f"{', '.join(sorted(set(config.judge.identity.get('models', {}).values())))}: the "
            "leaves that need a model are reported not graded (with coverage), check leaves "
            "still run; set the key (e.g. OPENAI_API_KEY) or pass --judge-base-url to grade them"
        )
    if config.skip_reproduction and config.mode == "full":
        warning(
            "--skip-reproduction: reproduce.sh is not run; the judge grades without its log "
            "and outputs (recorded in group.json)"
        )
    if config.sandbox.get("allow_unsandboxed"):
        warning("--allow-unsandboxed: agents and reproductions may run without isolation")


async def _work(
    group_dir: Path, config: GroupConfig, executor: Executor, show: bool
) -> list[RunOutcome]:
    keys = run_keys(config)
    specs = [RunSpec(group_dir=str(group_dir), key=key, config=config) for key in keys]
    task = asyncio.ensure_future(executor.run(specs))
    if show:
        progress = GroupProgress(group_dir, keys)
        await progress.show(err_console, task)
    return await task


def run_command(
    group: Annotated[
        str | None,
        typer.Option(help="Name of the new group (default: the date and time)."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            help="Continue a group (its folder or name) after an interruption: finished "
            "stages are skipped, the rest resumes where it stopped.",
        ),
    ] = None,
    runs_dir: Annotated[
        Path, typer.Option("--runs-dir", help="Where groups are written.")
    ] = DEFAULT_RUNS_DIR,
    papers: Annotated[
        str | None,
        typer.Option(help="Comma-separated paper ids or a split name (default: every paper)."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="A PaperBench data directory (default: the bundled papers)."),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            help="An agent config (catalog name or YAML); repeat for several [default: replay]."
        ),
    ] = None,
    seeds: Annotated[int | None, typer.Option(min=1, help="Runs per paper and agent.")] = None,
    judge: Annotated[
        str | None, typer.Option(help="A judge config (catalog name or YAML) [default: simple].")
    ] = None,
    judge_model: Annotated[
        str | None, typer.Option(help="Use this provider/model for every judge role.")
    ] = None,
    judge_base_url: Annotated[
        str | None, typer.Option(help="An OpenAI-compatible server for the judge's calls.")
    ] = None,
    code_dev: Annotated[
        bool,
        typer.Option(
            "--code-dev", help="Code-Dev: grade Code Development leaves only, no reproduction."
        ),
    ] = False,
    resources_provided: Annotated[
        bool,
        typer.Option("--resources-provided", help="Weight 0 for dataset and model acquisition."),
    ] = False,
    skip_reproduction: Annotated[
        bool,
        typer.Option("--skip-reproduction", help="Do not run reproduce.sh (said and recorded)."),
    ] = False,
    monitor_policy: Annotated[
        Literal["disqualify", "flag"] | None,
        typer.Option(help="A blacklist hit disqualifies the run (score 0) or is only flagged."),
    ] = None,
    sandbox: Annotated[
        Literal["auto", "docker", "local"] | None,
        typer.Option(help="auto: Docker when an engine answers, else local with bubblewrap."),
    ] = None,
    allow_unsandboxed: Annotated[
        bool,
        typer.Option("--allow-unsandboxed", help="Allow the local backend without bubblewrap."),
    ] = False,
    allow_uncapped_disk: Annotated[
        bool,
        typer.Option(
            "--allow-uncapped-disk",
            help="Allow reproductions (and agents given --disk) without a disk cap.",
        ),
    ] = False,
    agent_model: Annotated[
        str | None, typer.Option(help="Use this provider/model for every agent.")
    ] = None,
    agent_base_url: Annotated[
        str | None, typer.Option(help="An OpenAI-compatible server for the agents' calls.")
    ] = None,
    agent_time: Annotated[
        float | None, typer.Option(help="Wall-time limit of each rollout, in seconds.")
    ] = None,
    agent_dollars: Annotated[
        float | None, typer.Option(help="Dollar limit of each rollout.")
    ] = None,
    snapshot_every: Annotated[
        float | None,
        typer.Option(help="Seconds between saves of a rollout's submission [default: 300]."),
    ] = None,
    reproduce_timeout: Annotated[
        float | None, typer.Option(help="Time limit of each reproduce.sh, in seconds.")
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="GPUs given to each agent's sandbox and its reproduction (on Ray: the "
            "reproduction's resource) [default: the agent config's resources, else none].",
        ),
    ] = None,
    gpu_type: Annotated[str | None, typer.Option(help=GPU_TYPE_HELP)] = None,
    cpus: Annotated[
        float | None, typer.Option(min=0.01, help=CPUS_HELP + " Its reproduction too.")
    ] = None,
    memory: Annotated[
        int | None, typer.Option(min=64, help=MEMORY_HELP + " Its reproduction too.")
    ] = None,
    disk: Annotated[
        int | None, typer.Option(min=16, help=DISK_HELP + " Its reproduction too (else 51200).")
    ] = None,
    image: Annotated[str | None, typer.Option(help=IMAGE_HELP + " Its reproduction too.")] = None,
    env: Annotated[list[str] | None, typer.Option(metavar="NAME=VALUE", help=ENV_HELP)] = None,
    agent_env: Annotated[
        Path | None, typer.Option("--agent-env", metavar="FILE", help=AGENT_ENV_HELP)
    ] = None,
    budget_usd: Annotated[
        float | None,
        typer.Option(help="Dollars for the whole group, shared by every run and worker."),
    ] = None,
    max_connections: Annotated[
        int, typer.Option(min=1, help="Requests in flight per provider endpoint.")
    ] = 32,
    concurrency: Annotated[
        list[str] | None,
        typer.Option(
            help="Runs in a stage at once, STAGE=N (rollout, reproduction, grading; leaves: "
            "leaves graded at once per run), e.g. reproduction=1 for one GPU."
        ),
    ] = None,
    executor: Annotated[
        Literal["local", "ray"],
        typer.Option(help="local: this process; ray: each run's stages as Ray tasks."),
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option(help="With --executor ray: the cluster, HOST:PORT.")
    ] = None,
    report: Annotated[
        bool, typer.Option(help="Write the report (tables, summary.json, HTML) at the end.")
    ] = True,
) -> None:
    """Run papers × agents × seeds through rollout, monitor, reproduction and grading into
    runs/GROUP/. With no options: the bundled papers, the replay agent (no model needed),
    Docker (else the local sandbox with bubblewrap), reproduction, and the simple judge, whose
    leaves that need a model are reported not graded when no key is set. Kill it at any moment
    and continue with --resume GROUP."""
    _log_to_stderr()
    for flag, value in (
        ("--agent-time", agent_time),
        ("--agent-dollars", agent_dollars),
        ("--reproduce-timeout", reproduce_timeout),
        ("--snapshot-every", snapshot_every),
    ):
        _positive(flag, value)
    if budget_usd is not None and (not math.isfinite(budget_usd) or budget_usd < 0):
        raise UsageError(f"--budget-usd: expected a number ≥ 0, found {budget_usd}")
    slots = _concurrency(concurrency)
    if resume is not None:
        given = {k: v for k, v in locals().items() if k in _CONFIG_FLAGS}
        named = ["--" + k.replace("_", "-") for k, v in given.items() if v not in (None, False, [])]
        if named or group is not None:
            drop = ", ".join(named or ["--group"])
            raise UsageError(f"--resume takes the group's own configuration; drop {drop}")
        group_dir = _group_dir(resume, runs_dir)
        config = check_resume(group_dir)
        config = config.model_copy(
            update={
                "concurrency": {**config.concurrency, **slots},
                "max_connections": max_connections,
            }
        )
        console.print(f"resuming group {config.group} in {group_dir}")
        reaped = reap_leftovers()
        if reaped:
            console.print(f"removed {reaped} sandbox objects left by the interrupted run")
    else:
        limits: dict[str, Any] | None = None
        if agent_time is not None or agent_dollars is not None:
            limits = {}
            if agent_time is not None:
                limits["wall_time_s"] = agent_time
            if agent_dollars is not None:
                limits["dollars"] = agent_dollars
        reproduction: dict[str, Any] = {}
        if reproduce_timeout is not None:
            reproduction["timeout_s"] = reproduce_timeout
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
        options = RunOptions(
            papers=papers,
            data_dir=data_dir,
            agents=agent or ["replay"],
            seeds=seeds or 1,
            judge=judge or "simple",
            judge_model=judge_model,
            judge_base_url=judge_base_url,
            mode="code-dev" if code_dev else "full",
            resources_provided=resources_provided,
            skip_reproduction=skip_reproduction,
            monitor_policy=monitor_policy or "disqualify",
            sandbox=sandbox or "auto",
            allow_unsandboxed=allow_unsandboxed,
            allow_uncapped_disk=allow_uncapped_disk,
            agent_model=agent_model,
            agent_base_url=agent_base_url,
            agent_limits=limits,
            resources=resources,
            snapshot_every_s=snapshot_every or 300.0,
            reproduction=reproduction,
            budget_usd=budget_usd,
            max_connections=max_connections,
            concurrency=slots,
        )
        name = group or default_group_name()
        config = plan_group(name, options, {})  # every option checked before any work
        resolved = asyncio.run(resolve_sandbox(options))
        config = config.model_copy(update={"sandbox": resolved})
        for entry in config.agents:
            if entry.resources is not None:
                refuse_image_without_docker(entry.resources.image, resolved["backend"])
        group_dir = runs_dir / name
        open_group(group_dir, config)
        sizes = [(len(config.papers), "paper"), (len(config.agents), "agent")]
        sizes.append((config.seeds, "seed"))
        console.print(
            f"group {name}: "
            + " × ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in sizes)
            + f" in {group_dir} (sandbox {config.sandbox['backend']}, judge "
            f"{config.judge.identity.get('name')}, {config.mode})"
        )
        for entry in config.agents:
            if entry.resources is not None and entry.resources != ResolvedResources():
                console.print(
                    f"agent {entry.name}: {resources_line(entry.resources)}", markup=False
                )
    _say_what_is_less(config)
    runner = _executor(executor, ray_address, config)
    try:
        outcomes = asyncio.run(_work(group_dir, config, runner, True))
    except KeyboardInterrupt:
        err_console.print(
            f"interrupted: continue with `paperbench run --resume {group_dir}`", style="yellow"
        )
        raise typer.Exit(130) from None
    failed = [o for o in outcomes if o.status == "failed"]
    for outcome in failed:
        warning(f"{outcome.key.label}: failed in {outcome.failed_stage}: {outcome.reason}")
    if report:
        _report(group_dir)
    console.print(
        f"the group's files: {group_dir}; continue or retry failed runs with "
        f"`paperbench run --resume {group_dir}`"
    )
    if failed:
        raise typer.Exit(EXIT_FAILED_RUNS)


def _report(group_dir: Path) -> None:
    """The group's report: its tables, summary.json and the HTML pages."""
    # files that could not be read are named by the report itself
    with contextlib.suppress(typer.Exit):
        report_command(group_dir)
