"""The rollout stage: run an agent on a paper in a fresh sandbox and keep what it leaves.

``await rollout(paper, agent, out_dir=...)`` starts an agent sandbox (network ``filtered`` with
the paper's blacklist by default), uploads the paper to /home/paper (paper.md, paper.pdf,
assets/, addendum.md, blacklist.txt — never the rubric, the judge addendum or check files),
writes the instructions to /home/instructions.txt, makes /home/submission an empty git
repository and runs the agent under its limits. The run folder::

    out_dir/
      config.json          what was asked (compared on --resume: a change is refused)
      transcript.jsonl     every event, appended and synced as it happens
      costs.jsonl          one cost record a line, appended as each model call ends
      network.jsonl        the egress proxy's request log (network filtered)
      snapshots/NNNN.tar.gz  /home/submission every few minutes and at the end
      submission.tar.gz    the final /home/submission
      status.json          RolloutStatus, written last: it marks completion

A run folder without status.json is resumed (``resume=True``) in a new sandbox from its last
snapshot and its transcript, with the time, steps and budget that remain.

What goes wrong around a long run:

- **A lost sandbox** (a tool finds it gone; see :func:`run_tool`) stops the agent before
  another model call; the same call starts a new sandbox from the last snapshot, rebuilds the
  agent's context from the transcript and tells it of the restart (a NoteEvent
  ``environment_restarted`` with the reason and the snapshot), up to ``max_restarts`` times.
  The time a restart takes is not the agent's.
- **Paused**: once the restarts are used up, or when the provider stays unavailable past the
  model layer's retries (ModelUnavailableError), the run ends without status.json (a NoteEvent
  ``paused`` and an EndEvent ``paused``) and :class:`RolloutPausedError` is raised; a resume
  goes on from there.
- **Snapshots** leave out files over 10 MB (named in each SnapshotEvent and in status.json's
  ``left_out``) and are pruned to the newest ``keep_snapshots`` within
  ``snapshots_max_bytes`` (never the newest; each prune a NoteEvent ``snapshots_pruned``).

``max_restarts``, ``keep_snapshots`` and ``snapshots_max_bytes`` are recorded in config.json
but a resume may change them: they decide how a run is kept, not what it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paperbench._console import plural
from paperbench._io import atomic_write_json, atomic_write_text, read_json
from paperbench.agents._base import (
    INSTRUCTIONS_PATH,
    PAPER_DIR,
    SUBMISSION_DIR,
    Agent,
    AgentOutcome,
    AgentSetup,
    LimitReached,
    LimitTracker,
    RunContext,
    TranscriptWriter,
    read_transcript,
)
from paperbench.agents._resources import (
    RunResources,
    refuse_image_without_docker,
    refuse_install_without_docker,
)
from paperbench.agents._rollout_files import (
    JournalLedger,
    RolloutConfig,
    RolloutPausedError,
    RolloutResult,
    RolloutStatus,
    check_out_dir,
    used_before,
)
from paperbench.agents._rollout_plan import (
    LoadedAgentLike,
    RolloutOptions,
    RolloutPlan,
    plan_rollout,
)
from paperbench.agents._snapshots import (
    to_prune,
    without_large_files,
)
from paperbench.agents._transcript import (
    EndEvent,
    NoteEvent,
    SnapshotEvent,
    StartEvent,
    TranscriptEvent,
)
from paperbench.errors import (
    OUTSIDE_MODEL_ERRORS,
    BudgetExhaustedError,
    ConfigError,
    ModelUnavailableError,
    PaperbenchError,
    SandboxError,
    SandboxLostError,
)
from paperbench.llm import BudgetCaps, Model
from paperbench.papers import Paper
from paperbench.sandbox import (
    HostService,
    LeftOutFile,
    NetworkPolicy,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    safe_extract,
    stage_image,
)

log = logging.getLogger("paperbench.sandbox")
AGENT_IMAGE = "paperbench-agent"
GIT_USER = ("paperbench-agent", "agent@paperbench.invalid")
_COMMAND_TIMEOUT_S = 120.0
_STOP_GRACE_S = 30.0
"""How long past its wall-time limit an agent that does not stop by itself is given."""


def _identity(agent_config: dict[str, Any]) -> dict[str, Any] | None:
    identity = agent_config.get("identity")
    return identity if isinstance(identity, dict) else None


def _now() -> datetime:
    return datetime.now(UTC)


async def resolve_agent_image(
    backend: SandboxBackend,
    image: str | None = None,
    install: Sequence[str] = (),
    config_file: Path | None = None,
) -> str:
    """The agent image: ``image`` when given, else paperbench's agent image on Docker (built
    when missing) or the host's own system on the local backend. With ``install`` (the agent
    config's commands; Docker only), the image derived from that one by running them, built
    once and reused while its tag exists (:func:`~paperbench.sandbox._images.ensure_derived_image`).

    Raises:
        SandboxError: the image cannot be found or built.
        ConfigError: an install command failed (``$.install[i]`` of ``config_file``, with the
            last lines of the build's log), or ``install`` on a backend other than Docker.
    """
    base = await stage_image(backend, AGENT_IMAGE, image)
    if not install:
        return base
    refuse_install_without_docker(install, backend.name, config_file)
    from paperbench.sandbox._images import DerivedBuildError, ensure_derived_image

    def say(line: str) -> None:
        log.warning("%s", line)

    try:
        return await asyncio.to_thread(ensure_derived_image, base, list(install), log=say)
    except DerivedBuildError as exc:
        if exc.index is None:
            raise
        raise ConfigError(
            f"install command failed in the image build: {exc.tail}",
            file=config_file,
            path=f"$.install[{exc.index}]",
        ) from None


def stage_paper(paper: Paper, dest: Path) -> list[str]:
    """Copy what the agent may see of ``paper`` into ``dest``; return the names copied.

    Only paper.md, paper.pdf, assets/, addendum.md and blacklist.txt: never the rubric, the
    judge addendum or check files.
    """
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paper.paper_md, dest / "paper.md")
    names = ["paper.md"]
    if paper.paper_pdf is not None:
        shutil.copyfile(paper.paper_pdf, dest / "paper.pdf")
        names.append("paper.pdf")
    if paper.assets is not None and paper.assets.is_dir():
        shutil.copytree(paper.assets, dest / "assets", symlinks=False)
        names.append("assets")
    if paper.addendum is not None:
        shutil.copyfile(paper.addendum, dest / "addendum.md")
        names.append("addendum.md")
    urls = paper.blacklist()
    (dest / "blacklist.txt").write_text("\n".join(urls) + "\n" if urls else "none\n")
    names.append("blacklist.txt")
    return names


class _Run:
    """One attempt of a rollout (the first, or a resume)."""

    def __init__(
        self,
        out_dir: Path,
        config: RolloutConfig,
        snapshot_every_s: float | None,
        history: list[TranscriptEvent],
    ):
        self.out = out_dir
        self.config = config
        self.snapshot_every_s = snapshot_every_s
        self.started_at = _now()
        self.snapshot_lock = asyncio.Lock()
        self.snapshots = sorted((out_dir / "snapshots").glob("[0-9][0-9][0-9][0-9].tar.gz"))
        for stale in (out_dir / "snapshots").glob("*.tar.gz.*"):  # cut short by a kill
            stale.unlink(missing_ok=True)
        self.writer: TranscriptWriter | None = None
        self.inflight: asyncio.Future[Path] | None = None
        self.tracker: LimitTracker | None = None
        self.taken = sum(isinstance(e, SnapshotEvent) for e in history)
        self.pruned = sum(
            len(e.data.get("deleted", []))
            for e in history
            if isinstance(e, NoteEvent) and e.kind == "snapshots_pruned"
        )
        self.restarts = sum(
            isinstance(e, NoteEvent)
            and e.kind == "environment_restarted"
            and e.data.get("cause") == "sandbox_lost"
            for e in history
        )
        self.left_out: list[LeftOutFile] = []
        """What the newest snapshot left out."""

    def next_snapshot(self) -> Path:
        last = int(self.snapshots[-1].name.split(".")[0]) if self.snapshots else -1
        return self.out / "snapshots" / f"{last + 1:04d}.tar.gz"

    async def snapshot(self, sb: Sandbox) -> Path:
        """/home/submission into the next snapshots/NNNN.tar.gz (atomically) + SnapshotEvent."""
        async with self.snapshot_lock:
            dest = self.next_snapshot()
            dest.parent.mkdir(parents=True, exist_ok=True)
            raw = dest.with_name(dest.name + ".raw")
            # The step under way when the files were read: later steps are not in the snapshot
            # (packing takes a while, and the agent goes on meanwhile).
            step = self.tracker.steps if self.tracker else 0
            try:
                await sb.snapshot(SUBMISSION_DIR, raw)
                left_out = await asyncio.to_thread(without_large_files, raw, dest)
            except (OSError, tarfile.TarError) as exc:
                raise SandboxError(f"snapshot {dest.name} could not be packed: {exc}") from exc
            finally:
                raw.unlink(missing_ok=True)
            self.snapshots.append(dest)
            self.taken += 1
            self.left_out = left_out
            if self.writer is not None:
                rel = dest.relative_to(self.out).as_posix()
                size = dest.stat().st_size
                self.writer.append(
                    SnapshotEvent(path=rel, bytes=size, step=step, left_out=left_out)
                )
            await asyncio.to_thread(self.prune, step)
            return dest

    def prune(self, step: int) -> None:
        """Delete the snapshots beyond ``keep_snapshots`` and the size cap (never the newest)."""
        sizes = [(p, p.stat().st_size) for p in self.snapshots]
        doomed = to_prune(sizes, self.config.keep_snapshots, self.config.snapshots_max_bytes)
        if not doomed:
            return
        freed = 0
        for path in doomed:
            freed += path.stat().st_size
            path.unlink()
            self.snapshots.remove(path)
        self.pruned += len(doomed)
        if self.writer is not None:
            names = [p.relative_to(self.out).as_posix() for p in doomed]
            self.writer.append(
                NoteEvent(
                    kind="snapshots_pruned",
                    text=f"deleted {plural(len(names), 'old snapshot')}, {freed} bytes: "
                    + ", ".join(names),
                    data={"deleted": names, "bytes": freed, "kept": len(self.snapshots)},
                    step=step,
                )
            )

    async def snapshot_loop(self, sb: Sandbox) -> None:
        assert self.snapshot_every_s is not None
        while True:
            await asyncio.sleep(self.snapshot_every_s)
            # Shielded: stopping the loop lets a snapshot under way finish (it holds the lock,
            # so the final snapshot comes after it and never shares its number).
            self.inflight = asyncio.ensure_future(self.snapshot(sb))
            try:
                await asyncio.shield(self.inflight)
            except SandboxError as exc:
                if self.writer is not None:
                    self.writer.append(NoteEvent(kind="snapshot_failed", text=str(exc)))


async def _sh(sb: Sandbox, cmd: str, what: str) -> None:
    result = await sb.exec(cmd, timeout=_COMMAND_TIMEOUT_S)
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["timed out"]
        raise SandboxError(f"{what} failed in the sandbox: {detail[0]}")


async def _prepare(
    sb: Sandbox, paper: Paper, instructions: str, snapshot: Path | None, tmp: Path
) -> None:
    staged = tmp / "paper"
    await asyncio.to_thread(stage_paper, paper, staged)
    await sb.upload(staged, PAPER_DIR)
    await sb.write_file(INSTRUCTIONS_PATH, instructions.encode())
    if snapshot is not None:
        restored = tmp / "submission"
        await asyncio.to_thread(safe_extract, snapshot, restored, strip_top=False)
        await sb.upload(restored, SUBMISSION_DIR)
        return
    name, email = GIT_USER
    await _sh(
        sb,
        f"mkdir -p {SUBMISSION_DIR} && cd {SUBMISSION_DIR} && git init -q && "
        f"git config user.name {name} && git config user.email {email}",
        "git init of /home/submission",
    )


@dataclass
class _Session:
    """A rollout once its run folder is open: what its sandbox phase works with and leaves."""

    paper: Paper
    plan: RolloutPlan
    agent: Agent
    run: _Run
    history: list[TranscriptEvent]
    used_s: float
    """The agent's time before this attempt (less the earlier retry waits, when excluded)."""
    steps: int
    starts: int
    """The attempts before this one."""
    resume: bool
    ledger: JournalLedger
    model: Model | None
    tracker: LimitTracker
    backend: SandboxBackend
    status: RolloutStatus
    writer: TranscriptWriter
    sb: Sandbox | None = None
    services: tuple[HostService, ...] = ()
    """Host services the agent asked for (its model gateway): its sandboxes reach them."""
    paused: RolloutPausedError | None = None
    cancelled: bool = False


async def rollout(
    paper: Paper,
    agent: Agent | LoadedAgentLike,
    options: RolloutOptions | None = None,
    *,
    out_dir: Path,
    resume: bool = False,
    others: Collection[str] = (),
    on_event: Callable[[TranscriptEvent], None] | None = None,
) -> RolloutResult:
    """Run ``agent`` on ``paper`` into ``out_dir`` as ``options`` ask (:class:`RolloutOptions`,
    passed whole by the command line, the pipeline and ``paperbench.rollout()``; its defaults
    when not given); see the module docstring.

    An agent that raises is a recorded ``error``, a limit a recorded ``limit``. A
    cancellation ends the transcript with ``cancelled`` and is re-raised, without status.json:
    the run stays resumable. A folder with status.json is a finished run: it is returned as
    it is (``already_finished``), never run again. The options' ``labels`` go on the sandbox
    (e.g. the run it belongs to) and are not part of the configuration a resume compares.
    ``others`` names files another writer keeps in ``out_dir`` (the pipeline's run.json and
    run.log). ``allow_networks``: internal ranges the sandbox may reach after all (recorded in
    config.json).
    ``on_event`` is told of each transcript event once it is written (e.g. to show progress).
    A replay whose recording names ``{paper}`` replays ``paper``'s recording.

    The options' ``resources`` override the agent config's ``resources:`` field by field
    (``image``, when given, wins over both; ``sandbox_limits`` is the base their CPUs, memory
    and disk are set on, e.g. to allow an uncapped disk); the resolved ones are recorded in
    config.json and status.json (the environment's names, never its values) and given to the
    agent as ``ctx.resources``. The env file's values reach the sandbox only, and are
    written as ``[NAME]`` wherever they would appear in the transcript.

    Raises:
        UsageError: ``out_dir`` holds another run (without ``resume``) or none (with it).
        ConfigError: resuming with a configuration that differs from config.json, or the
            config's env file is missing or bad.
        UsageError: the env file of ``resources`` is missing or bad, or an image is given
            to a backend other than Docker.
        LfsPointerError: a file of the paper's bundle is a Git LFS pointer, not its content.
        RubricError: the paper's rubric does not load.
        SandboxUnavailableError: the sandbox backend asked for does not answer.
        RolloutPausedError: the run paused (the provider unavailable past its retries, or
            the sandbox lost or not started, more often than ``max_restarts``); the run folder
            is kept without status.json, to be resumed.
    """
    paper.require_usable()  # no LFS pointer, a rubric that loads: before any folder
    out = Path(out_dir)
    status_file = out / "status.json"
    if status_file.exists():
        status = RolloutStatus.model_validate(read_json(status_file))
        return RolloutResult(status=status, out_dir=out, already_finished=True)
    plan = plan_rollout(paper, agent, options or RolloutOptions())
    history = check_out_dir(out, plan.config, resume, others)
    session = await _open(paper, plan, out, history, resume, on_event)
    await _attempt(session)
    return RolloutResult(status=session.status, out_dir=out)


def _model(plan: RolloutPlan, ledger: JournalLedger) -> Model | None:
    """The agent's model, with its config's options for the provider (unless given some),
    its costs into ``ledger``."""
    model_config = plan.agent.model_config
    by_provider = getattr(getattr(plan.agent.source, "config", None), "model_options", None) or {}
    options = by_provider.get(model_config.provider) if model_config is not None else None
    if model_config is not None and options and not model_config.options:
        model_config = model_config.model_copy(update={"options": dict(options)})
    return Model(model_config, ledger=ledger, stage="rollout") if model_config else None


async def _open(
    paper: Paper,
    plan: RolloutPlan,
    out: Path,
    history: list[TranscriptEvent],
    resume: bool,
    on_event: Callable[[TranscriptEvent], None] | None,
) -> _Session:
    """The run folder opened for this attempt: costs.jsonl, the model, the agent built,
    config.json, the limits (what earlier attempts used deducted), the sandbox backend, the
    status so far and the transcript."""
    config, who = plan.config, plan.agent
    seconds, steps, starts = used_before(history)
    # The dollar limit is also the ledger's cap: no call is sent once it is spent, even by an
    # agent that makes many calls between two checks of its limits.
    caps = BudgetCaps(run_usd=who.limits.dollars)
    ledger = JournalLedger.open(out / "costs.jsonl", caps)
    model = _model(plan, ledger)
    built = who.built
    if built is None:
        assert not isinstance(who.source, Agent)
        built = who.source.build(model)  # e.g. an agent that needs a model: refused before any file
    out.mkdir(parents=True, exist_ok=True)
    # On resume only the fields a resume may change (NOT_COMPARED) can differ: recorded anew.
    atomic_write_json(out / "config.json", config.model_dump(mode="json"))

    run = _Run(out, config, config.snapshot_every_s, history)
    if who.limits.exclude_retry_wait:
        seconds = max(0.0, seconds - ledger.earlier_retry_wait_s)
    tracker = LimitTracker(limits=who.limits, ledger=ledger, used_s=seconds, steps=steps)
    ledger.tracker = tracker
    run.tracker = tracker

    backend = await config.sandbox.build()
    refuse_image_without_docker(plan.resolved.image, backend.name)  # auto chose another backend
    refuse_install_without_docker(plan.agent.install, backend.name, plan.agent.config_file)
    status = RolloutStatus(
        status="error",
        paper_id=paper.id,
        agent=who.name,
        agent_identity=_identity(who.config),
        model=config.model,
        seed=config.seed,
        code_dev=config.code_dev,
        attempts=starts + 1,
        started_at=run.started_at,
        finished_at=run.started_at,
        sandbox_backend=backend.name,
        isolation=backend.isolation_kind,
        isolation_reason=backend.isolation_reason,
        network=config.network,
        resources=plan.resolved,
    )
    writer = TranscriptWriter(out / "transcript.jsonl", on_event)
    writer.redact(plan.secrets)
    run.writer = writer
    return _Session(
        paper=paper,
        plan=plan,
        agent=built,
        run=run,
        history=history,
        used_s=seconds,
        steps=steps,
        starts=starts,
        resume=resume,
        ledger=ledger,
        model=model,
        tracker=tracker,
        backend=backend,
        status=status,
        writer=writer,
    )


async def _attempt(session: _Session) -> None:
    """Start the sandbox and run the agent in it (in a new one when it is lost), then finish
    the run (:func:`_close`). A cancellation is re-raised, a pause raised
    (RolloutPausedError): both leave the run resumable."""
    status = session.status
    try:
        setup = AgentSetup(session.run.out, session.writer, session.tracker)
        session.services = await session.agent.prepare(setup)
        spec = await _start_sandbox(session)
        outcome = await _run_restarting(session, spec)
        status.status, status.limit = outcome.status, outcome.limit
        status.error, status.summary = outcome.error, outcome.summary
    except asyncio.CancelledError:
        session.cancelled = True
        status.status, status.error = "cancelled", "the rollout was cancelled"
    except ConfigError as exc:  # an install command failed: the config's fault, not the sandbox's
        status.status, status.error = "error", str(exc)
    except ModelUnavailableError as exc:
        session.paused = RolloutPausedError(
            session.run.out, "provider", f"the model provider is unavailable: {exc}"
        )
    except OUTSIDE_MODEL_ERRORS as exc:  # no key, or a key refused: not the agent's doing
        session.paused = RolloutPausedError(
            session.run.out, "provider", f"the model cannot be called: {exc}"
        )
    except SandboxError as exc:
        tried = (
            f" ({plural(session.run.restarts, 'restart')} used)"
            if session.plan.config.max_restarts
            else ""
        )
        session.paused = RolloutPausedError(
            session.run.out, "sandbox", f"the sandbox failed{tried}: {exc}"
        )
    finally:
        await _close(session)
    if session.cancelled:
        raise asyncio.CancelledError
    if session.paused is not None:
        raise session.paused


async def _start_sandbox(session: _Session) -> SandboxSpec:
    """The agent's sandbox started (``session.sb``) and prepared (the paper, the instructions, and
    /home/submission: the last snapshot on a resume), the agent's time started, and the
    transcript told (StartEvent; on a resume an ``environment_restarted`` note)."""
    plan, out = session.plan, session.run.out
    session.status.sandbox_image = await resolve_agent_image(
        session.backend, plan.resolved.image, plan.agent.install, plan.agent.config_file
    )
    spec = SandboxSpec(
        image=session.status.sandbox_image,
        limits=plan.sandbox_limits,
        gpu=plan.resolved.gpu_request(),
        env=plan.sandbox_env,
        network=plan.config.network,
        allow_networks=plan.config.allow_networks,
        blacklist=plan.config.blacklist,
        harness_blacklist=list(session.agent.blacklist()),
        host_services=session.services,
        network_log=(out / "network.jsonl")
        if plan.config.network == NetworkPolicy.FILTERED
        else None,
        workdir=SUBMISSION_DIR,
        user=plan.agent.sandbox_user,
        labels=plan.labels,
    )
    session.sb = await session.backend.start(spec)
    last = session.run.snapshots[-1] if session.run.snapshots else None
    with tempfile.TemporaryDirectory(prefix="paperbench-rollout-") as tmp:
        await _prepare(
            session.sb, session.paper, plan.text, last if session.resume else None, Path(tmp)
        )
    session.tracker.started = time.monotonic()  # the agent's time starts here, as on a resume
    session.writer.append(
        StartEvent(
            agent=plan.agent.name,
            model=plan.config.model,
            paper_id=session.paper.id,
            seed=plan.config.seed,
            resumed=session.starts,
            config=plan.agent.config,
            step=session.steps,
        )
    )
    if session.starts > 0:
        restored = last.relative_to(out).as_posix() if last else "an empty repository"
        session.writer.append(
            NoteEvent(
                kind="environment_restarted",
                text=f"new sandbox; /home/submission restored from {restored}",
                data={
                    "cause": "resume",
                    "snapshot": restored,
                    "used_s": session.used_s,
                    "steps": session.steps,
                },
                step=session.steps,
            )
        )
    return spec


async def _run_restarting(session: _Session, spec: SandboxSpec) -> AgentOutcome:
    """The agent's outcome (:func:`_run_agent`); a lost sandbox is replaced (from the last
    snapshot, :func:`_restart`) up to ``max_restarts`` times, its context rebuilt from the
    transcript.

    Raises:
        SandboxError: the sandbox was lost once more than ``max_restarts`` allow, or a new one
            could not be started.
        ModelUnavailableError: the provider stayed unavailable past the retries.
    """
    plan, sb = session.plan, session.sb
    assert sb is not None
    history, restarted, restarts_here = session.history, session.starts > 0, 0
    while True:
        ctx = RunContext(
            sandbox=sb,
            model=session.model,
            instructions=plan.text,
            transcript=session.writer,
            limits=session.tracker,
            paper_id=session.paper.id,
            seed=plan.config.seed,
            code_dev=plan.config.code_dev,
            history=history,
            resumed=restarted,
            run_dir=session.run.out,
            resources=RunResources(
                **plan.resolved.model_dump(),
                hours=plan.agent.limits.wall_time_s / 3600
                if plan.agent.limits.wall_time_s
                else None,
            ),
        )
        try:
            return await _run_agent(session.agent, ctx, session.run, sb)
        except SandboxError as exc:
            if restarts_here >= plan.config.max_restarts:
                raise
            restarts_here += 1
            dead, session.sb = sb, None
            with contextlib.suppress(Exception):
                await dead.stop()
            sb = session.sb = await _restart(
                session.run, session.backend, spec, session.paper, plan.text, exc
            )
            history = read_transcript(session.writer.path)
            restarted = True


async def _close(session: _Session) -> None:
    """The end of an attempt, whatever happened: the last snapshot and submission.tar.gz
    (unless the sandbox is lost), what the run used into the status, the transcript's end
    (``paused`` when it pauses), everything closed and status.json written, unless the run
    stays resumable (cancelled or paused)."""
    status, tracker, run, paused = session.status, session.tracker, session.run, session.paused
    try:
        if session.sb is not None and (paused is None or paused.kind == "provider"):
            await _finish_submission(run, session.sb, status)
    finally:
        status.steps = tracker.steps
        status.wall_time_s = tracker.elapsed_s()
        status.retry_wait_s = session.ledger.earlier_retry_wait_s + tracker.retry_wait_s
        status.snapshots = run.taken
        status.snapshots_pruned = run.pruned
        status.restarts = run.restarts
        status.left_out = run.left_out
        status.costs = session.ledger.report().total
        status.finished_at = _now()
        if paused is not None:
            session.writer.append(
                NoteEvent(
                    kind="paused",
                    text=paused.reason,
                    data={"cause": paused.kind},
                    step=tracker.steps,
                )
            )
        session.writer.append(
            EndEvent(
                status="paused" if paused is not None else status.status,
                limit=status.limit,
                error=paused.reason if paused is not None else status.error,
                step=tracker.steps,
            )
        )
        session.writer.close()
        session.ledger.close()
        if session.model is not None:
            with contextlib.suppress(Exception):
                await session.model.aclose()
        if session.sb is not None:
            await session.sb.stop()
        await session.agent.release()
        if not session.cancelled and paused is None:  # else the run stays resumable
            atomic_write_text(run.out / "status.json", status.model_dump_json(indent=2))


async def _restart(
    run: _Run,
    backend: SandboxBackend,
    spec: SandboxSpec,
    paper: Paper,
    instructions: str,
    cause: SandboxError,
) -> Sandbox:
    """A new sandbox holding the last snapshot, after the one the agent worked in was lost.
    The time it takes is not the agent's: it is left out of the wall time (``restart_s``).

    Raises:
        SandboxError: the new sandbox could not be started or prepared.
    """
    began = time.monotonic()
    sb = await backend.start(spec)
    try:
        last = run.snapshots[-1] if run.snapshots else None
        with tempfile.TemporaryDirectory(prefix="paperbench-rollout-") as tmp:
            await _prepare(sb, paper, instructions, last, Path(tmp))
    except BaseException:
        await sb.stop()
        raise
    took = time.monotonic() - began
    step = 0
    if run.tracker is not None:
        run.tracker.started += took
        step = run.tracker.steps
    run.restarts += 1
    restored = last.relative_to(run.out).as_posix() if last else "an empty repository"
    if run.writer is not None:
        run.writer.append(
            NoteEvent(
                kind="environment_restarted",
                text=f"the sandbox was lost ({cause}); new sandbox, /home/submission "
                f"restored from {restored} (restart {run.restarts})",
                data={
                    "cause": "sandbox_lost",
                    "reason": str(cause),
                    "snapshot": restored,
                    "restart": run.restarts,
                    "restart_s": took,
                },
                step=step,
            )
        )
    return sb


async def _run_agent(agent: Agent, ctx: RunContext, run: _Run, sb: Sandbox) -> AgentOutcome:
    """``agent.run(ctx)`` with the snapshot loop beside it and the wall-time limit around it;
    an exception or a limit becomes the outcome."""
    snapshots = (
        asyncio.create_task(run.snapshot_loop(sb)) if run.snapshot_every_s is not None else None
    )
    remaining = ctx.limits.remaining_s()
    try:
        ctx.limits.check()
        async with asyncio.timeout(None if remaining is None else remaining + _STOP_GRACE_S):
            return await agent.run(ctx)
    except LimitReached as exc:
        return AgentOutcome(status="limit", limit=exc.kind, error=None, summary=str(exc))
    except BudgetExhaustedError as exc:
        return AgentOutcome(status="limit", limit="dollars", summary=str(exc))
    except OUTSIDE_MODEL_ERRORS:
        raise  # no key, a key refused, the provider down past the retries: the run pauses
    except SandboxError as exc:
        if isinstance(exc, SandboxLostError) or not await sb.alive():
            raise  # the sandbox is gone: the run goes on in a new one
        return AgentOutcome(status="error", error=f"the sandbox failed: {exc}")
    except TimeoutError:
        return AgentOutcome(
            status="limit",
            limit="wall_time",
            summary="the agent did not stop at its wall-time limit and was stopped",
        )
    except PaperbenchError as exc:  # one of ours: its message says what went wrong
        return AgentOutcome(status="error", error=str(exc))
    except Exception as exc:  # the agent's own code broke: the exception's type says how
        return AgentOutcome(status="error", error=f"{type(exc).__name__}: {exc}")
    finally:
        if snapshots is not None:
            snapshots.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await snapshots
        if run.inflight is not None:  # its failure, if any, is in the transcript already
            with contextlib.suppress(SandboxError):
                await run.inflight


async def _finish_submission(run: _Run, sb: Sandbox, status: RolloutStatus) -> None:
    """The last snapshot and submission.tar.gz (a copy of it, written atomically)."""
    try:
        final = await run.snapshot(sb)
    except SandboxError as exc:
        status.error = (status.error + "; " if status.error else "") + f"final snapshot: {exc}"
        if status.status != "cancelled":
            status.status = "error"
        return
    dest = run.out / "submission.tar.gz"
    partial = dest.with_name(dest.name + ".partial")
    await asyncio.to_thread(shutil.copyfile, final, partial)
    os.replace(partial, dest)
    status.submission = dest.name
    status.submission_bytes = dest.stat().st_size
