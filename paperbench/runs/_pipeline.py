"""One run through its stages: rollout → monitor → reproduction → grading.

``await run_stages(spec)`` takes one (paper, agent, seed) of a group as far as it goes and
writes it into the run store (see :mod:`paperbench.runs._store`). Each stage is skipped when
its completion marker is there and resumed at the finest grain its files keep otherwise: the
rollout from its snapshots and transcript, the grading per leaf. A stage that cannot finish
(its sandbox lost, a bad config) is recorded as failed with the reason, and the run ends as
``failed``; a resume runs such a run again from that stage. ``execute(spec)`` does the same
from synchronous code, in any process (a Ray worker).
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError

from paperbench._console import plural
from paperbench._io import read_json
from paperbench.agents import (
    AgentResources,
    LoadedAgent,
    MonitorReport,
    PapercoderConfig,
    RolloutPausedError,
    RolloutStatus,
    load_agent,
    load_status,
    monitor_run,
    write_report,
)
from paperbench.agents._monitor import harness_note, paper_rules
from paperbench.agents._resources import resolve
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.agents._rollout_settings import agent_overrides
from paperbench.errors import PaperbenchError
from paperbench.judge import (
    GradeOptions,
    GradeResult,
    ModelSettings,
    build_view,
    grade_submission,
    load_judge_config,
    read_result,
)
from paperbench.papers import Paper, PaperSource
from paperbench.reproduce import ReproduceConfig, ReproductionMetadata, reproduce_submission
from paperbench.rubric import GradedTaskNode, aggregate, code_dev
from paperbench.runs._store import (
    GROUP_LOG,
    OUTCOME_FILE,
    RUN_FILE,
    RUN_LOG,
    STAGES,
    GroupConfig,
    RunFolder,
    RunKey,
    RunOutcome,
    RunState,
    StageName,
    StageStatus,
    now,
    write_model,
)
from paperbench.sandbox import SandboxConfig, SandboxLimits

_RETRY_REPRODUCTION = frozenset({"sandbox_error", "host_error", "cancelled"})
"""Reproduction results that say nothing about the submission: run again on a resume."""


class RunSpec(BaseModel):
    """One run of a group: all a process needs to work on it (plain, never a key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_dir: str
    key: RunKey
    config: GroupConfig

    @property
    def folder(self) -> Path:
        """The run's folder."""
        return self.key.folder(Path(self.group_dir))

    @property
    def files(self) -> RunFolder:
        """The run's files."""
        return self.key.files(Path(self.group_dir))


PAUSED = "paused"
"""How the reason of a run whose rollout paused (resumable) begins."""


class StageFailed(Exception):
    """A stage could not finish; the run stops there (recorded, resumable)."""


class StagePaused(PaperbenchError):
    """A stage stopped before its end and is kept (a paused rollout): recorded as failed with
    this reason, and continued when the group is run again."""


class _Ended(Exception):
    """The run ends early with this outcome (disqualified, no submission): the stage that
    raised it ends ``status`` with ``detail`` (never left ``running``), and every later stage
    is skipped with the reason ``skip`` (None: a failed run, whose later stages stay pending
    for a resume)."""

    def __init__(
        self, outcome: RunOutcome, status: StageStatus, detail: str | None, skip: str | None
    ) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome
        self.status = status
        self.detail = detail
        self.skip = skip


def load_state(folder: Path, key: RunKey) -> RunState:
    """run.json of a run folder, or a fresh state (also for an unreadable file: the stages'
    own markers say what is done)."""
    path = folder / RUN_FILE
    if path.is_file():
        try:
            return RunState.model_validate(read_json(path))
        except (PaperbenchError, ValidationError):
            pass
    return RunState(key=key)


def load_outcome(folder: Path) -> RunOutcome | None:
    path = folder / OUTCOME_FILE
    if not path.is_file():
        return None
    try:
        return RunOutcome.model_validate(read_json(path))
    except (PaperbenchError, ValidationError):
        return None


class _Recorder:
    """run.json and run.log of one run, and its lines in the group's log."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.folder = spec.folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.state = load_state(self.folder, spec.key)
        self.state.host = os.environ.get("PAPERBENCH_NODE") or platform.node()
        self._log: TextIO = (self.folder / RUN_LOG).open("a", encoding="utf-8")
        self._group_log = Path(spec.group_dir) / GROUP_LOG
        self._started: dict[str, float] = {}
        self.waiting_s = 0.0
        """Time waited (for a slot, in a queue) since the last stage began; recorded as the
        wait of the next stage begun."""

    def log(self, line: str, *, group: bool = False) -> None:
        stamp = now().strftime("%Y-%m-%dT%H:%M:%S")
        self._log.write(f"{stamp} {line}\n")
        self._log.flush()
        if group:
            with self._group_log.open("a", encoding="utf-8") as f:
                f.write(f"{stamp} {self.spec.key.label}: {line}\n")

    def save(self) -> None:
        self.state.updated_at = now()
        write_model(self.folder / RUN_FILE, self.state)

    def begin(self, stage: StageName) -> None:
        record = self.state.stages[stage]
        record.waited_s += self.waiting_s
        self.waiting_s = 0.0
        record.status, record.started_at, record.detail = "running", now(), None
        record.attempts += 1
        self._started[stage] = time.monotonic()
        self.save()
        self.log(f"{stage}: started (attempt {record.attempts})", group=True)

    def end(self, stage: StageName, status: StageStatus, detail: str | None = None) -> None:
        record = self.state.stages[stage]
        if stage in self._started:
            record.seconds += time.monotonic() - self._started.pop(stage)
            record.finished_at = now()
        record.status, record.detail = status, detail
        self.save()
        self.log(f"{stage}: {status}" + (f" ({detail})" if detail else ""), group=True)

    def close(self) -> None:
        self._log.close()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, PaperbenchError) else f"{type(exc).__name__}: {text}"


# --- the stages ------------------------------------------------------------------------


def _sandbox(config: GroupConfig) -> SandboxConfig:
    return config.sandbox


def _labels(spec: RunSpec) -> dict[str, str]:
    return {"paperbench.group": spec.config.group, "paperbench.run": spec.key.label}


def _uncapped_disk(config: GroupConfig) -> bool:
    """``--allow-uncapped-disk``: recorded with the reproductions' settings; it holds for the
    agents' sandboxes too (where a disk cap is asked for)."""
    return config.reproduction.allow_uncapped_disk


def reproduce_config(spec: RunSpec) -> ReproduceConfig:
    """How the run's submission is reproduced: the group's reproduction settings, with the
    GPUs, CPUs, memory, disk and image of the run's agent (PaperBench reproduces in the same
    kind of machine the agent had)."""
    group = spec.config.reproduction
    config = ReproduceConfig(
        sandbox=_sandbox(spec.config),
        labels=_labels(spec),
        allow_networks=spec.config.allow_networks,
    )
    update: dict[str, Any] = {}
    if group.timeout_s is not None:
        update["timeout_s"] = group.timeout_s
    if group.allow_uncapped_disk:
        update["limits"] = config.limits.model_copy(update={"allow_uncapped_disk": True})
    config = config.model_copy(update=update)
    entry = next((a for a in spec.config.agents if a.name == spec.key.agent), None)
    resources = entry.resources if entry is not None else None
    if resources is None:
        return config
    update = {"limits": resources.limits(config.limits)}
    if resources.gpus:
        update["gpu"] = resources.gpu_request()
    if resources.image is not None:
        update["image"] = resources.image
    if resources.env_names and entry is not None:
        # The agent was told its variables (its own API keys) are set for reproduce.sh too:
        # read again from the agent's config and env file, never from a run file.
        loaded = load_agent(entry.ref)
        own = getattr(loaded.config, "resources", None) or AgentResources()
        _, env = resolve(own, spec.config.resources, config_file=loaded.path)
        update["env"] = {**env, **config.env}
    return config.model_copy(update=update)


def _with_group_settings(agent: LoadedAgent, config: GroupConfig) -> LoadedAgent:
    """A PaperCoder agent's repair rounds get the group's reproduction timeout (they run
    reproduce.sh as the reproduction stage will)."""
    timeout = config.reproduction.timeout_s
    if isinstance(agent.config, PapercoderConfig) and timeout is not None:
        changed = agent.config.model_copy(update={"repair_timeout_s": float(timeout)})
        return agent.model_copy(update={"config": changed})
    return agent


async def _rollout(spec: RunSpec, paper: Paper, rec: _Recorder) -> str:
    config = spec.config
    folder = spec.folder
    status = load_status(folder)
    if status is None:
        entry = next(a for a in config.agents if a.name == spec.key.agent)
        agent = _with_group_settings(load_agent(entry.ref).for_paper(paper.id), config)
        model_config, limits = agent_overrides(
            agent.config,
            model=config.agent_model,
            base_url=config.agent_base_url,
            limits=config.agent_limits.given(),
            max_connections=config.max_connections,
        )
        resume = spec.files.rollout_config.is_file()
        if resume:
            rec.log("rollout: resuming from its snapshots and transcript")
        options = RolloutOptions(
            model_config=model_config,
            seed=spec.key.seed,
            sandbox=_sandbox(config),
            allow_networks=config.allow_networks,
            code_dev=config.mode == "code-dev",
            limits=limits,
            labels=_labels(spec),
            snapshot_every_s=config.snapshot_every_s,
            resources=config.resources,
            sandbox_limits=SandboxLimits(allow_uncapped_disk=_uncapped_disk(config)),
        )
        try:
            result = await rollout(
                paper, agent, options, out_dir=folder, resume=resume, others=(RUN_FILE, RUN_LOG)
            )
        except RolloutPausedError as exc:
            # Like a lost sandbox: the run is kept and goes on when the group is run again.
            rec.log(f"rollout: paused ({exc.kind}); it resumes when the group is run again")
            raise StagePaused(f"{PAUSED} ({exc.kind}): {' '.join(exc.reason.split())}") from exc
        status = result.status
    return _after_rollout(spec, status)


def _after_rollout(spec: RunSpec, status: RolloutStatus) -> str:
    detail = f"{status.status}" + (f", {status.limit} limit" if status.limit else "")
    detail += f", {status.steps} step{'' if status.steps == 1 else 's'}"
    if status.error:
        detail += f": {status.error}"
    if status.submission is None:
        reason = f"the rollout left no submission ({detail})"
        raise _Ended(
            RunOutcome(
                key=spec.key,
                status="failed",
                failed_stage="rollout",
                reason=reason,
                cost_usd=status.costs.cost_usd if not status.costs.unpriced_calls else None,
            ),
            "failed",
            reason,
            None,
        )
    return detail


def _monitor(spec: RunSpec, paper: Paper, rec: _Recorder) -> MonitorReport:
    path = spec.files.monitor
    if path.is_file():
        try:
            return MonitorReport.model_validate(read_json(path))
        except ValidationError:
            rec.log(f"monitor: {path} is not a monitor report; scanning again")
    rules, echoes, warnings = paper_rules(paper)
    for line in warnings:
        rec.log(f"monitor: warning: {line}", group=True)
    report = monitor_run(spec.folder, rules, policy=spec.config.monitor_policy, echoes=echoes)
    write_report(report, spec.folder)
    note = harness_note(report)
    if note is not None:
        rec.log(f"monitor: {note}", group=True)
    return report


async def _reproduction(spec: RunSpec, rec: _Recorder) -> ReproductionMetadata:
    out = spec.files.reproduction
    meta_file = spec.files.reproduction_metadata
    if meta_file.is_file():
        meta = ReproductionMetadata.model_validate(read_json(meta_file))
        if meta.status not in _RETRY_REPRODUCTION:
            return meta
        rec.log(f"reproduction: the last attempt ended {meta.status}; running it again")
    if out.exists():  # an attempt that was killed or lost its sandbox: start afresh
        await asyncio.to_thread(shutil.rmtree, out)
    config = reproduce_config(spec)
    meta = await reproduce_submission(spec.files.submission, out, config)
    if meta.status in _RETRY_REPRODUCTION:
        raise StageFailed(f"the reproduction ended {meta.status}: {meta.error}")
    return meta


async def _grading(spec: RunSpec, paper: Paper, reproduced: bool) -> GradeResult:
    folder = spec.folder
    if spec.files.grading_complete.is_file():
        return read_result(folder)
    config = spec.config
    judge = load_judge_config(config.judge.ref)
    executed = spec.files.reproduction if reproduced else None
    view = await asyncio.to_thread(build_view, spec.files.submission, executed)
    options = GradeOptions(
        code_dev=config.mode == "code-dev",
        resources_provided=config.resources_provided,
        samples=judge.config.samples,
    )
    settings = ModelSettings(
        model=config.judge.model,
        base_url=config.judge.base_url,
        concurrency=config.concurrency.get("leaves", ModelSettings().concurrency),
        max_connections=config.max_connections,
        batch=config.judge.batch,
    )
    return await grade_submission(
        view,
        paper,
        judge,
        out_dir=folder,
        options=options,
        settings=settings,
        sandbox=_sandbox(config),
    )


def _code_dev_score(result: GradeResult) -> float | None:
    if result.options.code_dev:
        return result.partial_score
    try:
        tree = GradedTaskNode.model_validate(result.graded_task_tree)
        return aggregate(code_dev(tree)).score
    except (PaperbenchError, ValueError):
        return None


def _graded_outcome(spec: RunSpec, result: GradeResult, rollout_cost: float | None) -> RunOutcome:
    cost = (
        None if rollout_cost is None or result.cost_usd is None else rollout_cost + result.cost_usd
    )
    return RunOutcome(
        key=spec.key,
        status="unscored" if result.unscored else "scored",
        score=result.score,
        partial_score=result.partial_score,
        code_dev_score=_code_dev_score(result),
        coverage=result.coverage,
        invalid_leaves=result.invalid_leaves,
        leaves=result.leaves,
        interval=result.interval,
        reason=result.unscored_reason,
        cost_usd=cost,
    )


# --- the run -----------------------------------------------------------------------------


def paper_source(config: GroupConfig) -> PaperSource:
    """Where the group's papers come from, as recorded when it was planned (never looked up
    again: a resume or a Ray worker elsewhere reads the same papers)."""
    if config.data_dir is not None:
        return PaperSource(data_dir=Path(config.data_dir))
    if config.papers_root is not None:
        return PaperSource(repo_root=Path(config.papers_root))
    return PaperSource.resolve(None)  # a group.json written before papers_root was recorded


@asynccontextmanager
async def _begin(rec: _Recorder, stage: StageName) -> AsyncIterator[None]:
    """Begin a stage that takes no slot."""
    rec.begin(stage)
    yield


@asynccontextmanager
async def _begin_in_slot(
    rec: _Recorder, slots: Mapping[str, asyncio.Semaphore] | None, stage: StageName
) -> AsyncIterator[None]:
    """Wait for one of the stage's slots (the wait is recorded), then begin the stage."""
    asked = time.monotonic()
    slot: AbstractAsyncContextManager[Any] = (
        slots[stage] if slots is not None and stage in slots else nullcontext()
    )
    async with slot:
        rec.waiting_s += time.monotonic() - asked
        rec.begin(stage)
        yield


async def run_stages(
    spec: RunSpec,
    stages: Sequence[StageName] | None = None,
    *,
    slots: Mapping[str, asyncio.Semaphore] | None = None,
    waited_s: float = 0.0,
) -> RunOutcome | None:
    """Take the run through ``stages`` (default: all) as far as its store allows.

    Returns the outcome once outcome.json is written (every stage done or skipped, or the
    run ended early), ``None`` when stages outside ``stages`` remain. A finished run is
    returned as it is, except a ``failed`` one, which is run again from where it failed.
    ``slots`` limits how many runs are in each stage at once (local executor); ``waited_s``
    is how long the run waited for this call (e.g. a task in Ray's queue), recorded as the
    wait of the first stage it begins.
    """
    folder = spec.folder
    outcome = load_outcome(folder)
    if outcome is not None and outcome.status != "failed":
        return outcome
    wanted = set(stages or STAGES)
    rec = _Recorder(spec)
    rec.waiting_s = waited_s
    try:
        if outcome is not None:
            rec.log(f"resuming a run that failed in {outcome.failed_stage}: {outcome.reason}")
            (folder / OUTCOME_FILE).unlink(missing_ok=True)
        outcome = await _walk(spec, rec, wanted, slots)
        if outcome is not None:
            write_model(folder / OUTCOME_FILE, outcome)
            rec.log(
                f"finished: {outcome.status}"
                + (f" score {outcome.score:.4f}" if outcome.score is not None else "")
                + (f" ({outcome.reason})" if outcome.reason else ""),
                group=True,
            )
        return outcome
    finally:
        rec.close()


@dataclass
class _Run:
    """One run on its way through the stages: what a stage needs and what it leaves."""

    spec: RunSpec
    rec: _Recorder
    paper: Paper
    rollout_cost: float | None = None
    reproduced: bool = False
    result: GradeResult | None = None

    @property
    def files(self) -> RunFolder:
        return self.spec.files


async def _rollout_stage(run: _Run) -> str:
    detail = await _rollout(run.spec, run.paper, run.rec)
    status = load_status(run.spec.folder)
    assert status is not None  # the rollout's completion marker
    run.rollout_cost = status.costs.cost_usd if not status.costs.unpriced_calls else None
    return detail


async def _monitor_stage(run: _Run) -> str:
    report = _monitor(run.spec, run.paper, run.rec)
    detail = f"{report.verdict}, {plural(report.counted, 'counted hit')}"
    if report.harness_refusals_total:
        refused = plural(report.harness_refusals_total, "harness refusal")
        detail += f"; {refused} not counted"
    if report.disqualify:
        raise _Ended(
            RunOutcome(
                key=run.spec.key,
                status="disqualified",
                score=0.0,
                reason=f"disqualified: {report.reason}",
                cost_usd=run.rollout_cost,
            ),
            "done",
            f"{detail}: disqualified",
            "the run was disqualified by the monitor",
        )
    return detail


async def _reproduction_stage(run: _Run) -> str:
    meta = await _reproduction(run.spec, run.rec)
    run.reproduced = True
    return _repro_detail(meta)


async def _grading_stage(run: _Run) -> str:
    result = await _grading(run.spec, run.paper, run.reproduced)
    run.result = result
    score = "unscored" if result.score is None else f"score {result.score:.3f}"
    return f"{score}, coverage {result.coverage:.0%}"


def _reproduction_finished(files: RunFolder) -> bool:
    if not files.reproduction_metadata.is_file():
        return False
    meta = ReproductionMetadata.model_validate(read_json(files.reproduction_metadata))
    return meta.status not in _RETRY_REPRODUCTION


def _no_reproduction(config: GroupConfig) -> str | None:
    if config.mode == "code-dev":
        return "not run: Code-Dev mode"
    if config.skip_reproduction:
        return "not run: --skip-reproduction"
    return None


@dataclass(frozen=True)
class _Stage:
    """One stage of the table: its completion marker, its work (which also reads back a
    finished stage's result), why a group skips it, and whether it waits for a slot."""

    name: StageName
    finished: Callable[[RunFolder], bool]
    work: Callable[[_Run], Awaitable[str]]
    skipped: Callable[[GroupConfig], str | None] = lambda _config: None
    slot: bool = True


_TABLE: tuple[_Stage, ...] = (
    _Stage("rollout", lambda f: f.rollout_status.is_file(), _rollout_stage),
    _Stage("monitor", lambda f: f.monitor.is_file(), _monitor_stage, slot=False),
    _Stage("reproduction", _reproduction_finished, _reproduction_stage, _no_reproduction),
    _Stage("grading", lambda f: f.grading_complete.is_file(), _grading_stage),
)
assert tuple(stage.name for stage in _TABLE) == STAGES


async def _walk(
    spec: RunSpec,
    rec: _Recorder,
    wanted: set[StageName],
    slots: Mapping[str, asyncio.Semaphore] | None,
) -> RunOutcome | None:
    states = rec.state.stages
    current: StageName = "rollout"
    try:
        run = _Run(spec, rec, paper_source(spec.config).load(spec.key.paper))
        for stage in _TABLE:
            current = stage.name
            why = stage.skipped(spec.config)
            if why is not None:
                if states[current].status != "skipped":
                    rec.end(current, "skipped", why)
                continue
            if stage.finished(run.files):
                detail = await stage.work(run)  # reads the stage's result back
            elif current not in wanted:
                return None
            else:
                gate = _begin_in_slot(rec, slots, current) if stage.slot else _begin(rec, current)
                async with gate:
                    detail = await stage.work(run)
            if states[current].status != "done":
                rec.end(current, "done", detail)
        assert run.result is not None
        return _graded_outcome(spec, run.result, run.rollout_cost)
    except _Ended as ended:
        if states[current].status != ended.status:
            rec.end(current, ended.status, ended.detail)
        for later in STAGES[STAGES.index(current) + 1 :] if ended.skip else ():
            if states[later].status != "skipped":
                rec.end(later, "skipped", ended.skip)
        return ended.outcome
    except asyncio.CancelledError:
        if states[current].status == "running":
            rec.log(f"{current}: cancelled; the run is kept and resumes from here")
        raise
    except Exception as exc:
        reason = _one_line(exc)
        if not isinstance(exc, PaperbenchError | StageFailed):
            rec.log("".join(traceback.format_exception(exc)).rstrip())
        rec.end(current, "failed", reason)
        return RunOutcome(key=spec.key, status="failed", failed_stage=current, reason=reason)


def _repro_detail(meta: ReproductionMetadata) -> str:
    code = "" if meta.exit_code is None else f" exit {meta.exit_code}"
    if meta.status == "no_reproduce_script":
        return "no reproduce.sh in the submission"
    return f"reproduce.sh {meta.status}{code} in {meta.wall_time_s:.0f} s"


WAKE_S = 0.5
"""How often :func:`execute`'s event loop wakes at least."""


def execute(
    spec: RunSpec, stages: Sequence[StageName] | None = None, *, waited_s: float = 0.0
) -> RunOutcome | None:
    """:func:`run_stages` from synchronous code, in any process (e.g. a Ray worker).

    The event loop wakes at least every :data:`WAKE_S`: an interrupt raised without a
    signal (Ray's cancellation of a running task interrupts the main thread) is then seen
    within that, not when the stage next has I/O (a quiet reproduction: hours)."""

    async def body() -> RunOutcome | None:
        async def wake() -> None:
            while True:
                await asyncio.sleep(WAKE_S)

        waker = asyncio.create_task(wake())
        try:
            return await run_stages(spec, stages, waited_s=waited_s)
        finally:
            waker.cancel()

    return asyncio.run(body())
