"""An evaluation from Python: :func:`evaluate` and :func:`resume`, what ``paperbench run``
does, on one typed :class:`~paperbench.runs.EvalConfig`.

::

    import paperbench

    result = paperbench.evaluate(paperbench.EvalConfig(papers="calibration-binning"))
    print(result.group_dir, result.summary.agents)

Each runs in one event loop of its own; where one is running already (Jupyter),
``await paperbench.evaluate_async(config)`` and ``await paperbench.resume_async(group)``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paperbench._console import console, err_console, plural, warning
from paperbench.agents import load_agent, resources_line
from paperbench.agents._config import CommandConfig, command_agent_refusal
from paperbench.agents._resources import (
    ResolvedResources,
    refuse_image_without_docker,
    refuse_install_without_docker,
)
from paperbench.errors import InputError, UsageError
from paperbench.judge import read_result
from paperbench.report import Summary, read_group_files, summarize_group, write_report
from paperbench.runs._config import DEFAULT_RUNS_DIR, EvalConfig, ExecutorSettings
from paperbench.runs._executor import Executor, build_executor
from paperbench.runs._group import (
    check_resume,
    open_group,
    plan_group,
    reap_leftovers,
    refuse_existing,
    resolve_sandbox,
)
from paperbench.runs._pipeline import RunSpec, load_outcome
from paperbench.runs._preflight import (
    refuse_missing_keys,
    refuse_silent_servers,
    refuse_unfit_judge,
)
from paperbench.runs._progress import GroupProgress
from paperbench.runs._store import GROUP_FILE, GroupConfig, RunOutcome, run_keys
from paperbench.sandbox._internal_nets import describe


class Evaluation(BaseModel):
    """What an evaluation left: its folder, each run's outcome and the group's summary."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    group_dir: Path
    outcomes: list[RunOutcome]
    """One per (paper, agent, seed), in the group's order; ``failed`` ones say why."""
    summary: Summary
    """The group's metrics (also in ``group_dir/summary.json`` when the report is written)."""

    @property
    def failed(self) -> list[RunOutcome]:
        """The runs that failed (a resume runs them again)."""
        return [o for o in self.outcomes if o.status == "failed"]


def evaluate(config: EvalConfig | None = None) -> Evaluation:
    """:func:`evaluate_async` in an event loop of its own (the only one it starts).

    Raises:
        UsageError: called where an event loop is running (e.g. in Jupyter): there,
            ``await paperbench.evaluate_async(config)``.
        see :func:`evaluate_async`.
    """
    _refuse_running_loop("evaluate")
    return asyncio.run(evaluate_async(config))


async def evaluate_async(config: EvalConfig | None = None) -> Evaluation:
    """Run papers × agents × seeds through rollout, monitor, reproduction and grading into
    ``config.runs_dir/<group>/``, and return what it left.

    Everything is checked before any work (papers, agent and judge configs, the sandbox, the
    executor); nothing is written when a check fails. Interrupted (Ctrl-C, a killed
    process), the group goes on with :func:`resume`.

    Raises:
        UsageError: a bad value, naming its flag.
        ConfigError: a bad agent or judge config (file and key path named), or a judge
            whose fixed parts do not fit the window of the model it would call.
        MissingKeyError: a model the group would call has no key (see
            :func:`~paperbench.runs._preflight.refuse_missing_keys`).
        ModelUnavailableError: a server the group would call does not answer.
        SandboxUnavailableError: the sandbox asked for does not answer.
        ExecutorUnavailableError: the Ray cluster cannot be joined.
    """
    config = config or EvalConfig()
    planned = plan_group(config)  # every value checked before any work
    refuse_unfit_judge(planned)
    refuse_missing_keys(planned)
    await refuse_silent_servers(planned)
    group_dir = config.runs_dir / planned.group
    refuse_existing(group_dir, planned.group)
    sandbox, reason = await resolve_sandbox(config.sandbox)
    planned = planned.model_copy(update={"sandbox": sandbox, "sandbox_reason": reason})
    for entry in planned.agents:
        if entry.resources is not None:
            refuse_image_without_docker(entry.resources.image, sandbox.backend)
        loaded = load_agent(entry.ref)
        install = getattr(loaded.config, "install", None) or []
        refuse_install_without_docker(install, sandbox.backend, loaded.path)
        if isinstance(loaded.config, CommandConfig):  # rollouts of a group are filtered
            model = planned.agent_model or entry.model
            refused = command_agent_refusal(loaded.config, model, "filtered")
            if refused is not None:
                raise UsageError(f"--agent-model {refused[1]}")
    executor = build_executor(config.executor)
    try:
        open_group(group_dir, planned)
        _say_group(group_dir, planned)
        return await _finish(group_dir, planned, executor, config.report)
    finally:
        executor.close()


def resume(
    group: str | Path,
    *,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    executor: ExecutorSettings | None = None,
    report: bool = True,
) -> Evaluation:
    """:func:`resume_async` in an event loop of its own (the only one it starts).

    Raises:
        UsageError: called where an event loop is running (e.g. in Jupyter): there,
            ``await paperbench.resume_async(group)``.
        see :func:`resume_async`.
    """
    _refuse_running_loop("resume")
    return asyncio.run(resume_async(group, runs_dir=runs_dir, executor=executor, report=report))


async def resume_async(
    group: str | Path,
    *,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    executor: ExecutorSettings | None = None,
    report: bool = True,
) -> Evaluation:
    """Continue a group after an interruption: finished stages are skipped, the rest resumes
    where it stopped, and failed runs run again from the stage that failed. ``group`` is the
    group's folder or its name under ``runs_dir``. Only how the work runs may change
    (``executor``: concurrency, connections, Ray); what the group is stays as it was.

    Raises:
        UsageError: no group there.
        ConfigError: an agent or the judge changed since the group started.
    """
    group_dir = _group_dir(group, runs_dir)
    stored = check_resume(group_dir)
    settings = executor or ExecutorSettings()
    stored = stored.model_copy(
        update={
            "concurrency": {**stored.concurrency, **settings.concurrency},
            "max_connections": settings.max_connections,
        }
    )
    finished = _finished(group_dir, stored)
    if finished is not None:
        counts = Counter(o.status for o in finished)
        said = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        console.print(
            f"group {stored.group} in {group_dir} is finished ({plural(len(finished), 'run')}: "
            f"{said}); nothing to re-run"
        )
        summary = (
            write_report(group_dir) if report else summarize_group(read_group_files(group_dir))
        )
        return Evaluation(group_dir=group_dir, outcomes=finished, summary=summary)
    refuse_missing_keys(stored)  # only work still to do can need a key or a server
    await refuse_silent_servers(stored)
    runner = build_executor(settings)
    try:
        console.print(f"resuming group {stored.group} in {group_dir}")
        reaped = reap_leftovers()
        if reaped:
            console.print(f"removed {plural(reaped, 'sandbox object')} left by the interrupted run")
        return await _finish(group_dir, stored, runner, report)
    finally:
        runner.close()


def _refuse_running_loop(name: str) -> None:
    """Refuse a blocking entry point where an event loop is running (it would have to start
    a second one): say which to await instead.

    Raises:
        UsageError: an event loop is running in this thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UsageError(
        f"paperbench.{name}() was called where an event loop is running (e.g. in Jupyter): "
        f"use `await paperbench.{name}_async(...)` there"
    )


def _finished(group_dir: Path, config: GroupConfig) -> list[RunOutcome] | None:
    """Every run's outcome when each has one that a resume leaves as it is (none failed),
    else None."""
    outcomes = [load_outcome(key.folder(group_dir)) for key in run_keys(config)]
    done = [o for o in outcomes if o is not None and o.status != "failed"]
    return done if len(done) == len(outcomes) else None


def _group_dir(group: str | Path, runs_dir: Path) -> Path:
    path = Path(group)
    if (path / GROUP_FILE).is_file():
        return path
    if (runs_dir / group / GROUP_FILE).is_file():
        return runs_dir / group
    raise UsageError(
        f"--resume {group}: no group there (no {GROUP_FILE} in {path} or {runs_dir / group}); "
        "give the group's folder, e.g. runs/<group>"
    )


def _say_group(group_dir: Path, config: GroupConfig) -> None:
    sizes = [
        plural(len(config.papers), "paper"),
        plural(len(config.agents), "agent"),
        plural(config.seeds, "seed"),
    ]
    console.print(
        f"group {config.group}: {' × '.join(sizes)} in {group_dir} (judge "
        f"{config.judge.identity.get('name')}, {config.mode})"
    )
    console.print(
        f"sandbox: {config.sandbox.backend} ({config.sandbox_reason or 'asked for'})",
        markup=False,
    )
    for entry in config.agents:
        if entry.resources is not None and entry.resources != ResolvedResources():
            console.print(f"agent {entry.name}: {resources_line(entry.resources)}", markup=False)


def _say_what_is_less(config: GroupConfig) -> None:
    """Anything less faithful than a full evaluation, said before the work starts."""
    if not config.judge.key_set:
        models = sorted(set(config.judge.identity.get("models", {}).values()))
        warning(
            f"the judge {config.judge.identity.get('name')} has no API key for "
            f"{', '.join(models)}: the leaves that need a model are reported not graded (with "
            "coverage), check leaves still run; set the key (e.g. OPENAI_API_KEY) or pass "
            "--judge-base-url to grade them"
        )
    if config.skip_reproduction and config.mode == "full":
        warning(
            "--skip-reproduction: reproduce.sh is not run; the judge grades without its log "
            "and outputs (recorded in group.json)"
        )
    if config.sandbox.allow_unsandboxed:
        warning("--allow-unsandboxed: agents and reproductions may run without isolation")
    if config.allow_networks:
        warning(describe(config.allow_networks))
    if config.reproduction.allow_uncapped_disk:
        warning(
            "--allow-uncapped-disk: agent sandboxes get no default disk cap, and a sandbox "
            "whose cap cannot be enforced runs without one (recorded in group.json)"
        )


async def _finish(
    group_dir: Path, config: GroupConfig, executor: Executor, report: bool
) -> Evaluation:
    _say_what_is_less(config)
    outcomes = await _work(group_dir, config, executor)
    for outcome in outcomes:
        if outcome.status == "failed":
            warning(f"{outcome.key.label}: failed in {outcome.failed_stage}: {outcome.reason}")
        elif outcome.status == "disqualified":
            warning(f"{outcome.key.label}: {outcome.reason} (score 0; its monitor.json says more)")
        else:
            _say_evidence(outcome.key.label, outcome.key.folder(group_dir))
    summary = write_report(group_dir) if report else summarize_group(read_group_files(group_dir))
    for run in summary.runs:
        if run.harness_refusals:
            err_console.print(
                f"{run.label}: {plural(run.harness_refusals, 'request')} of the agent's own "
                "refused by the harness's rule, not the paper's blacklist: not counted (its "
                "monitor.json lists them)",
                markup=False,
            )
    return Evaluation(group_dir=group_dir, outcomes=outcomes, summary=summary)


def _say_evidence(label: str, folder: Path) -> None:
    """A graded run's warnings of evidence the judge was not shown as it asks (as ``grade``
    prints them); a grading without its grade.json is counted elsewhere."""
    try:
        result = read_result(folder)
    except InputError:
        return
    for line in result.evidence_warnings():
        warning(f"{label}: grading: {line}")


async def _work(group_dir: Path, config: GroupConfig, executor: Executor) -> list[RunOutcome]:
    keys = run_keys(config)
    specs = [RunSpec(group_dir=str(group_dir), key=key, config=config) for key in keys]
    task = asyncio.ensure_future(executor.run(specs))
    await GroupProgress(group_dir, keys).show(err_console, task)
    return await task
