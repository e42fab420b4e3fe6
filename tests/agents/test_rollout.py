"""The rollout stage on the local backend (bubblewrap) with a scripted model behind the real
OpenAI SDK: run folder, paper upload, limits, errors, snapshots, kill -9 and resume."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from paperbench.agents import (
    Agent,
    AgentLimits,
    AgentOutcome,
    EndEvent,
    NoteEvent,
    RunContext,
    SnapshotEvent,
    StartEvent,
    TranscriptEvent,
    _rollout,
    read_transcript,
)
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import RolloutPausedError, RolloutResult, used_before
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.errors import ConfigError, UsageError
from paperbench.llm import Model, ModelConfig, read_cost_journal
from paperbench.papers import Paper, PaperSource, load_data_dir_paper
from paperbench.sandbox import NetworkPolicy, SandboxConfig
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, Fault
from tests.agents.step_agent import INSTRUCTIONS, REPO, CrashingAgent, StepAgent
from tests.fixtures import reap_killed_run
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    sweep,
)

LOCAL = SandboxConfig(backend="local")


def _paper() -> Paper:
    return PaperSource(repo_root=REPO).load("calibration-binning")


def _bash(cmd: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall(name="bash", arguments={"cmd": cmd}),))


def _run(
    out: Path,
    agent: Agent,
    server: FakeLLMServer | None = None,
    paper: Paper | None = None,
    **kw: object,
) -> RolloutResult:
    config = ModelConfig(model="openai/gpt-4o", base_url=server.openai_url) if server else None
    options: dict[str, object] = {
        "sandbox": LOCAL,
        "network": NetworkPolicy.NONE,
        "snapshot_every_s": None,
        "instructions": INSTRUCTIONS,
        "limits": AgentLimits(wall_time_s=300),
    }
    options.update(kw)
    resume = bool(options.pop("resume", False))
    given = RolloutOptions(model_config=config, **options)  # type: ignore[arg-type]
    return asyncio.run(rollout(paper or _paper(), agent, options=given, out_dir=out, resume=resume))


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers()}


def _read(archive: Path, name: str) -> str:
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.removeprefix("./") == name:
                handle = tar.extractfile(member)
                assert handle is not None
                return handle.read().decode()
    raise AssertionError(f"{name} not in {archive}")


def test_rollout_writes_the_run_folder(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        _bash("echo 1 > a.txt && git add a.txt && git commit -qm a"),
        _bash("echo 2 > b.txt"),
        FakeReply(text="done"),
    )
    out = tmp_path / "run"
    result = _run(out, StepAgent(), fake_llm)
    status = result.status
    assert (status.status, status.limit, status.error) == ("submitted", None, None)
    assert (status.steps, status.attempts, status.agent) == (3, 1, "step-agent")
    assert status.model == "openai/gpt-4o"
    assert status.isolation == "bubblewrap" and status.sandbox_backend == "local"
    assert status.costs.calls == 3 and status.costs.usage.total_tokens > 0
    saved = json.loads((out / "status.json").read_text())
    assert saved["status"] == "submitted" and saved["submission"] == "submission.tar.gz"
    members = _members(out / "submission.tar.gz")
    assert {"a.txt", "b.txt", ".git/HEAD"} <= members
    events = read_transcript(out / "transcript.jsonl")
    assert isinstance(events[0], StartEvent) and events[0].resumed == 0
    assert isinstance(events[-1], EndEvent) and events[-1].status == "submitted"
    assert any(isinstance(e, SnapshotEvent) for e in events)
    assert len(read_cost_journal(out / "costs.jsonl")) == 3
    assert json.loads((out / "config.json").read_text())["agent"] == "step-agent"
    assert len(fake_llm.requests) == 3


class _LookAround(Agent):
    """Records what the sandbox holds into the submission."""

    name = "look-around"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        await ctx.sandbox.exec(
            "cd /home/paper && find . -mindepth 1 | sort > /home/submission/paper-files.txt; "
            "cp /home/instructions.txt /home/submission/instructions.txt; "
            "cd /home/submission && git config user.email > email.txt && "
            "git rev-parse --is-inside-work-tree > git.txt",
            timeout=60,
        )
        return AgentOutcome(status="submitted")


def _data_dir_paper(root: Path) -> Paper:
    folder = root / "papers" / "p1"
    (folder / "assets").mkdir(parents=True)
    (folder / "config.yaml").write_text("id: p1\ntitle: A paper\n")
    (folder / "paper.md").write_text("# A paper\n")
    (folder / "paper.pdf").write_bytes(b"%PDF-1.4\n")
    (folder / "assets" / "fig1.png").write_bytes(b"png")
    (folder / "addendum.md").write_text("addendum\n")
    (folder / "judge.addendum.md").write_text("SECRET judge addendum\n")
    (folder / "blacklist.txt").write_text("https://github.com/someone/p1-code\n")
    rubric = '{"id": "r", "requirements": "x", "weight": 1, "task_category": "Code Development"}'
    (folder / "rubric.json").write_text(rubric)
    (folder / "checks").mkdir()
    (folder / "checks" / "hidden_test.py").write_text("assert True\n")
    return load_data_dir_paper(root, "p1")


def test_paper_upload_holds_only_what_the_agent_may_see(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _run(out, _LookAround(), paper=_data_dir_paper(tmp_path / "data"))
    assert result.status.status == "submitted", result.status.error
    archive = out / "submission.tar.gz"
    listed = _read(archive, "paper-files.txt").split()
    assert listed == [
        "./addendum.md",
        "./assets",
        "./assets/fig1.png",
        "./blacklist.txt",
        "./paper.md",
        "./paper.pdf",
    ]
    assert _read(archive, "instructions.txt") == INSTRUCTIONS
    assert _read(archive, "git.txt").strip() == "true"
    assert _read(archive, "email.txt").strip() == "agent@paperbench.invalid"


def test_an_agent_that_raises_is_a_recorded_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _run(out, CrashingAgent())
    assert result.status.status == "error"
    assert result.status.error == "RuntimeError: the agent broke"
    assert "partial.txt" in _members(out / "submission.tar.gz")
    end = read_transcript(out / "transcript.jsonl")[-1]
    assert isinstance(end, EndEvent) and end.error == "RuntimeError: the agent broke"
    assert json.loads((out / "status.json").read_text())["status"] == "error"


def test_a_step_limit_stops_the_run_and_is_named(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = lambda request: _bash("echo again >> log.txt")
    result = _run(tmp_path / "run", StepAgent(), fake_llm, limits=AgentLimits(steps=2))
    assert (result.status.status, result.status.limit) == ("limit", "steps")
    assert len(fake_llm.requests) == 2


def test_a_finished_run_is_not_run_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _run(out, CrashingAgent())
    again = _run(out, CrashingAgent(), resume=True)
    assert again.already_finished and again.status == first.status
    assert sum(isinstance(e, StartEvent) for e in read_transcript(out / "transcript.jsonl")) == 1


def test_an_existing_run_folder_is_refused_without_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="--resume"):
        _run(out, CrashingAgent())


def test_resume_refuses_a_changed_configuration(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _run(out, CrashingAgent())
    (out / "status.json").unlink()  # as if it had crashed
    with pytest.raises(ConfigError, match=r"\$\.seed"):
        _run(out, CrashingAgent(), resume=True, seed=7)


def test_resume_without_a_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no run to resume"):
        _run(tmp_path / "run", CrashingAgent(), resume=True)


def _wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


@pytest.mark.slow
def test_kill_9_mid_run_then_resume(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        _bash("echo one > a.txt && git add -A && git commit -qm one"),
        _bash("echo two > b.txt && sleep 120"),
        _bash("echo three > c.txt"),
        FakeReply(text="done"),
    )
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.agents.step_agent", str(out), fake_llm.openai_url]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:

        def snapshots() -> int:
            events = read_transcript(out / "transcript.jsonl")
            return sum(isinstance(e, SnapshotEvent) for e in events)

        _wait_for(lambda: len(fake_llm.requests) == 2)  # step one's tool has run
        taken = snapshots()
        _wait_for(lambda: snapshots() > taken)  # and a snapshot holds its work
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        reap_killed_run(tmp_path / "sandboxes")  # the killed run's workspace and cgroups
    assert not (out / "status.json").exists()
    sent_before = len(fake_llm.requests)
    assert sent_before == 2

    resumed = subprocess.run(
        [*cmd, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    status = json.loads((out / "status.json").read_text())
    assert (status["status"], status["attempts"], status["steps"]) == ("submitted", 2, 4)
    assert status["costs"]["calls"] == 4  # two before the kill, two after: none twice
    assert len(fake_llm.requests) == 4 and fake_llm.pending == 0
    sizes = [len(r.body["messages"]) for r in fake_llm.requests]
    assert sizes == sorted(set(sizes)), "a model request was sent again"
    members = _members(out / "submission.tar.gz")
    assert {"a.txt", "c.txt"} <= members
    assert _read(out / "submission.tar.gz", "a.txt") == "one\n"
    events = read_transcript(out / "transcript.jsonl")
    starts = [e for e in events if isinstance(e, StartEvent)]
    assert [s.resumed for s in starts] == [0, 1]
    assert any(isinstance(e, NoteEvent) and e.kind == "environment_restarted" for e in events)


class _Fetch(Agent):
    """Asks for a blacklisted page of the paper through the sandbox's network."""

    name = "fetch"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        result = await ctx.sandbox.exec(
            "curl -s -o /dev/null -w '%{http_code}' "
            "https://github.com/okonkwo-lab/scaling-or-binning/tree/main",
            timeout=60,
        )
        return AgentOutcome(status="submitted", summary=result.stdout)


def test_the_network_is_filtered_with_the_paper_blacklist_by_default(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = asyncio.run(
        rollout(
            _paper(),
            _Fetch(),
            options=RolloutOptions(sandbox=LOCAL, instructions=INSTRUCTIONS),
            out_dir=out,
        )
    )
    assert result.status.status == "submitted", result.status.error
    assert result.status.network == NetworkPolicy.FILTERED
    config = json.loads((out / "config.json").read_text())
    assert "https://github.com/okonkwo-lab/scaling-or-binning" in config["blacklist"]
    log = [json.loads(line) for line in (out / "network.jsonl").read_text().splitlines()]
    blocked = [e for e in log if e["verdict"] == "blocked"]
    assert blocked and "okonkwo-lab" in (blocked[0].get("url") or blocked[0].get("host") or "")


@pytest.mark.docker
def test_rollout_in_docker_with_the_agent_image(
    tmp_path: Path, fake_llm: FakeLLMServer, request: pytest.FixtureRequest
) -> None:
    images = request.getfixturevalue("docker_images")
    client = request.getfixturevalue("docker_client")
    fake_llm.script(
        _bash("ls /home/paper > seen.txt && git add -A && git commit -qm seen"),
        FakeReply(text="done"),
    )
    out = tmp_path / "run"
    try:
        result = _run(
            out,
            StepAgent(),
            fake_llm,
            sandbox=SandboxConfig(backend="docker"),
            labels=TEST_LABELS,
        )
    finally:
        sweep(client)
    status = result.status
    assert status.status == "submitted", status.error
    assert status.isolation == "docker" and status.sandbox_image == images["paperbench-agent"]
    assert _read(out / "submission.tar.gz", "seen.txt").split() == [
        "addendum.md",
        "blacklist.txt",
        "paper.md",
    ]


def test_resume_carries_the_steps_used(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = lambda request: _bash("echo again >> log.txt")
    out = tmp_path / "run"
    first = _run(out, StepAgent(), fake_llm, limits=AgentLimits(steps=2))
    assert (first.status.status, first.status.steps) == ("limit", 2)
    (out / "status.json").unlink()  # as if it had died before its end
    again = _run(out, StepAgent(), fake_llm, limits=AgentLimits(steps=2), resume=True)
    assert (again.status.status, again.status.limit, again.status.steps) == ("limit", "steps", 2)
    assert again.status.attempts == 2
    assert len(fake_llm.requests) == 2  # nothing was asked after the resume
    assert again.status.costs.calls == 2  # the first attempt's costs, read from costs.jsonl


def test_time_used_counts_each_attempt_from_its_start_to_its_last_event() -> None:
    events: list[TranscriptEvent] = [
        StartEvent(agent="a", paper_id="p", time=100.0),
        NoteEvent(kind="x", time=130.0, step=3),
        StartEvent(agent="a", paper_id="p", time=500.0, resumed=1, step=3),
        EndEvent(status="submitted", time=520.0, step=5),
    ]
    assert used_before(events) == (50.0, 5, 2)  # the time between attempts does not count
    restart = NoteEvent(
        kind="environment_restarted",
        time=510.0,
        step=4,
        data={"cause": "sandbox_lost", "restart_s": 4.0},
    )
    assert used_before([*events[:3], restart, events[3]]) == (46.0, 5, 2)  # nor a restart


class _LosesItsSandboxOnce(Agent):
    """First attempt: the sandbox disappears under it. Later: writes a file and submits."""

    name = "loses-sandbox"
    attempts = 0

    async def run(self, ctx: RunContext) -> AgentOutcome:
        type(self).attempts += 1
        await ctx.sandbox.exec("echo kept > kept.txt", timeout=30)
        if type(self).attempts == 1:
            await asyncio.sleep(0.5)  # a snapshot holds kept.txt
            await ctx.sandbox.stop()
            await ctx.sandbox.exec("true", timeout=30)
        await ctx.sandbox.exec("echo after > after.txt", timeout=30)
        return AgentOutcome(status="submitted")


def test_a_lost_sandbox_without_restarts_leaves_the_run_resumable(tmp_path: Path) -> None:
    _LosesItsSandboxOnce.attempts = 0
    out = tmp_path / "run"
    with pytest.raises(RolloutPausedError, match="paused") as paused:
        _run(out, _LosesItsSandboxOnce(), snapshot_every_s=0.1, max_restarts=0)
    assert paused.value.kind == "sandbox"
    assert not (out / "status.json").exists()
    events = read_transcript(out / "transcript.jsonl")
    end = events[-1]
    assert isinstance(end, EndEvent) and end.status == "paused"
    note = events[-2]
    assert isinstance(note, NoteEvent) and note.kind == "paused" and note.data["cause"] == "sandbox"
    result = _run(out, _LosesItsSandboxOnce(), snapshot_every_s=0.1, resume=True)
    assert (result.status.status, result.status.attempts) == ("submitted", 2)
    assert {"kept.txt", "after.txt"} <= _members(out / "submission.tar.gz")


def test_a_lost_sandbox_restarts_from_the_last_snapshot_in_the_same_call(tmp_path: Path) -> None:
    _LosesItsSandboxOnce.attempts = 0
    out = tmp_path / "run"
    result = _run(out, _LosesItsSandboxOnce(), snapshot_every_s=0.1)
    status = result.status
    assert (status.status, status.attempts, status.restarts) == ("submitted", 1, 1)
    assert {"kept.txt", "after.txt"} <= _members(out / "submission.tar.gz")
    events = read_transcript(out / "transcript.jsonl")
    restarts = [e for e in events if isinstance(e, NoteEvent) and e.kind == "environment_restarted"]
    assert len(restarts) == 1
    assert restarts[0].data["cause"] == "sandbox_lost"
    assert restarts[0].data["snapshot"].startswith("snapshots/")
    assert "stopped" in restarts[0].data["reason"]
    assert json.loads((out / "status.json").read_text())["restarts"] == 1


class _ReadsAMissingFile(Agent):
    name = "reads-missing"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        await ctx.sandbox.read_file("/home/submission/nope.txt")
        return AgentOutcome(status="submitted")


def test_a_sandbox_error_of_the_agent_own_making_is_a_recorded_error(tmp_path: Path) -> None:
    result = _run(tmp_path / "run", _ReadsAMissingFile())
    assert result.status.status == "error"
    assert (result.status.error or "").startswith("the sandbox failed: ")
    assert (tmp_path / "run" / "status.json").exists()


def test_dollar_limit_stops_calls_within_a_step(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    """An agent that calls the model many times without checking its limits is stopped by the
    ledger's cap, recorded as the dollar limit."""
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  openai/gpt-4o: {input: 100000, output: 100000}\n")
    fake_llm.handler = lambda request: FakeReply(text="thinking")

    class _Chatty(Agent):
        name = "chatty"

        async def run(self, ctx: RunContext) -> AgentOutcome:
            assert ctx.model is not None
            for _ in range(10):
                await ctx.model.generate("go on", label="agent_step")
            return AgentOutcome(status="submitted")

    config = ModelConfig(
        model="openai/gpt-4o", base_url=fake_llm.openai_url, prices_path=str(prices)
    )
    result = asyncio.run(
        rollout(
            _paper(),
            _Chatty(),
            options=RolloutOptions(
                model_config=config,
                sandbox=LOCAL,
                network=NetworkPolicy.NONE,
                snapshot_every_s=None,
                instructions=INSTRUCTIONS,
                limits=AgentLimits(dollars=1.0),
            ),
            out_dir=tmp_path / "run",
        )
    )
    assert (result.status.status, result.status.limit) == ("limit", "dollars")
    assert len(fake_llm.requests) == 1  # one call spent it all; no other was sent


class _Sleeper(Agent):
    """Ignores its limits."""

    name = "sleeper"
    sleeping = False

    async def run(self, ctx: RunContext) -> AgentOutcome:
        await ctx.sandbox.exec("echo started > started.txt", timeout=30)
        self.sleeping = True
        await asyncio.sleep(3600)
        return AgentOutcome(status="submitted")


def test_an_agent_past_its_wall_time_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_rollout, "_STOP_GRACE_S", 0.2)
    out = tmp_path / "run"
    result = _run(out, _Sleeper(), limits=AgentLimits(wall_time_s=1))
    assert (result.status.status, result.status.limit) == ("limit", "wall_time")
    assert "started.txt" in _members(out / "submission.tar.gz")


def test_a_cancelled_rollout_is_recorded_and_stays_resumable(tmp_path: Path) -> None:
    out = tmp_path / "run"

    agent = _Sleeper()

    async def cancel_soon() -> None:
        task = asyncio.create_task(
            rollout(
                _paper(),
                agent,
                options=RolloutOptions(
                    sandbox=LOCAL,
                    network=NetworkPolicy.NONE,
                    snapshot_every_s=None,
                    instructions=INSTRUCTIONS,
                ),
                out_dir=out,
            )
        )
        while not agent.sleeping:  # the agent runs: the rollout's set-up is done
            assert not task.done()
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    assert not (out / "status.json").exists()
    end = read_transcript(out / "transcript.jsonl")[-1]
    assert isinstance(end, EndEvent) and end.status == "cancelled"


class _NeedsModelConfig(BaseModel):
    name: str = "needs-model"
    model: str | None = None
    limits: AgentLimits = AgentLimits()


class _NeedsAModel:
    """A loaded config (as load_agent returns) whose agent refuses to be built without a model."""

    config = _NeedsModelConfig()

    def build(self, model: Model | None) -> Agent:
        raise ConfigError("the basic agent needs a model", path="$.model")


def test_an_agent_that_cannot_be_built_leaves_no_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="needs a model"):
        given = RolloutOptions(sandbox=LOCAL, instructions="x")
        asyncio.run(rollout(_paper(), _NeedsAModel(), options=given, out_dir=out))
    assert not out.exists()


def test_time_waiting_on_provider_retries_can_be_left_out_of_the_wall_time(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(Fault.rate_limit(retry_after=1.0), FakeReply(text="done"))
    limits = AgentLimits(wall_time_s=300, exclude_retry_wait=True)
    t0 = time.monotonic()
    result = _run(tmp_path / "run", StepAgent(), fake_llm, limits=limits)
    elapsed = time.monotonic() - t0
    status = result.status
    assert status.status == "submitted" and status.costs.retried == 1
    assert status.retry_wait_s >= 0.9  # retry-after: 1 s
    assert status.wall_time_s <= elapsed - status.retry_wait_s
