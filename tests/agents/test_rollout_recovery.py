"""A long rollout survives what goes wrong around it: the real ``basic`` agent with its Docker
container killed mid-run (restart from the last snapshot, or pause once the restarts are used
up), a provider outage longer than the retry budget (pause, then resume), and what snapshots
keep (files over 10 MB left out, old snapshots pruned)."""

from __future__ import annotations

import asyncio
import json
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import (
    AgentLimits,
    EndEvent,
    ModelCallEvent,
    NoteEvent,
    SnapshotEvent,
    ToolEvent,
    TranscriptEvent,
    load_agent,
    read_transcript,
)
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import RolloutPausedError, RolloutResult
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.llm import ModelConfig, read_cost_journal
from paperbench.sandbox import NetworkPolicy, SandboxConfig
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, Fault
from paperbench.testing.fake_llm import RecordedRequest
from tests.agents.step_agent import INSTRUCTIONS, REPO
from tests.sandbox.docker_fixtures import TEST_LABELS, sweep

BASIC = load_agent("basic")
RESTART_PROMPT = BASIC.prompts["restart"].splitlines()[0]


def _bash(command: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("bash", {"command": command}),))


SUBMIT = FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))


def _paper() -> Any:
    from paperbench.papers import PaperSource

    return PaperSource(repo_root=REPO).load("calibration-binning")


def _model(server: FakeLLMServer, **retry: float) -> ModelConfig:
    settings: dict[str, Any] = {
        "timeout_s": 10.0,
        "retry_initial_s": 0.01,
        "retry_max_s": 0.05,
        "max_retry_wait_s": 2.0,
        "api_key": "x",
    }
    settings.update(retry)
    return ModelConfig(model="openai/gpt-4o", base_url=server.openai_url, **settings)


def _rollout(out: Path, server: FakeLLMServer, **kw: Any) -> RolloutResult:
    options: dict[str, Any] = {
        "model_config": _model(server),
        "sandbox": SandboxConfig(backend="local"),
        "network": NetworkPolicy.NONE,
        "snapshot_every_s": 0.3,
        "instructions": INSTRUCTIONS,
        "limits": AgentLimits(wall_time_s=300, steps=40),
    }
    options.update(kw)
    agent = options.pop("agent", BASIC)
    resume = bool(options.pop("resume", False))
    given = RolloutOptions(**options)

    async def bounded() -> RolloutResult:
        return await asyncio.wait_for(
            rollout(_paper(), agent, options=given, out_dir=out, resume=resume), 240
        )

    return asyncio.run(bounded())


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers()}


def _notes(events: list[TranscriptEvent], kind: str) -> list[NoteEvent]:
    return [e for e in events if isinstance(e, NoteEvent) and e.kind == kind]


def _said(request: RecordedRequest, text: str) -> bool:
    return text in json.dumps(request.body["messages"])


class _Killer:
    """The fake model's handler: the scripted work of the basic agent, with the rollout's
    container killed (``docker kill``) as the answer to chosen calls is sent."""

    def __init__(self, client: Any, case: str, kill_at: set[int], out: Path) -> None:
        self.client = client
        self.case = case
        self.kill_at = kill_at
        self.out = out
        self.calls = 0
        self.killed_at: list[int] = []
        self.lock = threading.Lock()
        self.work_done_at: float | None = None

    def wait_for_a_snapshot_of_the_work(self) -> None:
        """Until a snapshot taken after step one's tool ran (so a restart has one.txt)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            snaps = (self.out / "snapshots").glob("[0-9]*.tar.gz")
            # two finished since: the second began after the work was done
            if sum(p.stat().st_mtime > (self.work_done_at or 0) for p in snaps) >= 2:
                return
            time.sleep(0.05)
        raise AssertionError("no snapshot of the work before the kill")

    def kill(self) -> None:
        flt = {"label": f"paperbench.case={self.case}", "status": "running"}
        for container in self.client.api.containers(filters=flt):
            self.client.api.kill(container["Id"])

    def __call__(self, request: RecordedRequest) -> FakeReply:
        with self.lock:
            self.calls += 1
            n = self.calls
        if n == 2:
            self.work_done_at = time.time()
        if n in self.kill_at:
            self.wait_for_a_snapshot_of_the_work()
            self.kill()
            self.killed_at.append(n)
            return _bash("echo lost > lost.txt")  # runs in no sandbox: it is gone
        if _said(request, RESTART_PROMPT) and not _said(request, "seen.txt"):
            return _bash("cat one.txt > seen.txt && git add -A && git commit -qm seen")
        if _said(request, "seen.txt"):
            return SUBMIT
        if n == 1:
            return _bash("echo one > one.txt && git add -A && git commit -qm one")
        return _bash("sleep 1")  # a snapshot holds one.txt before the kill


def _docker_run(
    tmp_path: Path, fake_llm: FakeLLMServer, request: pytest.FixtureRequest, **kw: Any
) -> tuple[Path, _Killer, Any]:
    request.getfixturevalue("docker_images")
    client = request.getfixturevalue("docker_client")
    case = uuid.uuid4().hex[:12]
    killer = _Killer(client, case, kw.pop("kill_at"), tmp_path / "run")
    fake_llm.handler = killer
    options = {
        "sandbox": SandboxConfig(backend="docker"),
        "labels": {**TEST_LABELS, "paperbench.case": case},
        **kw,
    }
    return tmp_path / "run", killer, (client, options)


def _paid_between_kill_and_restart(events: list[TranscriptEvent]) -> int:
    """Model calls answered after the first tool that found the sandbox gone and before the
    restart note."""
    lost = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, ToolEvent) and (e.error or "").startswith("the sandbox is gone")
    )
    restart = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, NoteEvent) and e.data.get("cause") == "sandbox_lost"
    )
    return sum(isinstance(e, ModelCallEvent) for e in events[lost:restart])


@pytest.mark.docker
def test_basic_agent_whose_container_is_killed_restarts_from_the_last_snapshot(
    tmp_path: Path, fake_llm: FakeLLMServer, request: pytest.FixtureRequest
) -> None:
    out, killer, (client, options) = _docker_run(tmp_path, fake_llm, request, kill_at={4})
    try:
        result = _rollout(out, fake_llm, **options)
    finally:
        sweep(client)
    status = result.status
    assert (status.status, status.restarts, status.attempts) == ("submitted", 1, 1), status
    assert killer.killed_at == [4]
    events = read_transcript(out / "transcript.jsonl")
    # The kill came with call 4's answer: that call was paid, no other before the restart.
    assert _paid_between_kill_and_restart(events) == 0
    before_restart = next(i for i, r in enumerate(fake_llm.requests) if _said(r, RESTART_PROMPT))
    assert before_restart == 4  # calls 1-4, then the restarted conversation
    (note,) = [n for n in _notes(events, "environment_restarted")]
    assert note.data["snapshot"].startswith("snapshots/") and note.data["restart"] == 1
    assert "gone" in note.data["reason"]
    members = _members(out / "submission.tar.gz")
    assert {"one.txt", "seen.txt"} <= members and "lost.txt" not in members
    assert json.loads((out / "status.json").read_text())["restarts"] == 1


@pytest.mark.docker
def test_restarts_used_up_leave_the_run_resumable_then_resume_finishes(
    tmp_path: Path, fake_llm: FakeLLMServer, request: pytest.FixtureRequest
) -> None:
    out, killer, (client, options) = _docker_run(
        tmp_path, fake_llm, request, kill_at={4, 6}, max_restarts=1
    )
    try:
        with pytest.raises(RolloutPausedError) as paused:
            _rollout(out, fake_llm, **options)
        assert paused.value.kind == "sandbox"
        assert not (out / "status.json").exists()
        events = read_transcript(out / "transcript.jsonl")
        assert isinstance(events[-1], EndEvent) and events[-1].status == "paused"
        assert len(_notes(events, "environment_restarted")) == 1
        assert killer.killed_at == [4, 6]
        sent = len(fake_llm.requests)
        killer.kill_at = set()
        result = _rollout(out, fake_llm, resume=True, **options)
    finally:
        sweep(client)
    status = result.status
    assert (status.status, status.attempts, status.restarts) == ("submitted", 2, 1), status
    assert len(fake_llm.requests) > sent
    assert "one.txt" in _members(out / "submission.tar.gz")


def test_an_outage_longer_than_the_retry_budget_pauses_then_resume_finishes(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    down = threading.Event()

    def handler(request: RecordedRequest) -> FakeReply | Fault:
        if down.is_set():
            return Fault.server_error(503)
        if _said(request, "two.txt"):
            return SUBMIT
        if _said(request, "one.txt"):
            down.set()  # the provider goes down after answering this call
            return _bash("echo two > two.txt && git add -A && git commit -qm two")
        return _bash("echo one > one.txt && git add -A && git commit -qm one")

    fake_llm.handler = handler
    out = tmp_path / "run"
    config = _model(fake_llm, max_retry_wait_s=0.3)
    with pytest.raises(RolloutPausedError) as paused:
        _rollout(out, fake_llm, model_config=config)
    assert paused.value.kind == "provider" and "503" in paused.value.reason
    assert not (out / "status.json").exists()
    events = read_transcript(out / "transcript.jsonl")
    assert isinstance(events[-1], EndEvent) and events[-1].status == "paused"
    (note,) = _notes(events, "paused")
    assert note.data["cause"] == "provider" and "503" in note.text
    assert len(fake_llm.requests) > 3  # two answers, then the retried 503s

    down.clear()
    result = _rollout(out, fake_llm, model_config=config, resume=True)
    status = result.status
    assert (status.status, status.attempts) == ("submitted", 2), status
    assert {"one.txt", "two.txt"} <= _members(out / "submission.tar.gz")
    # No answered call was paid twice: three answers in all, each recorded once.
    records = read_cost_journal(out / "costs.jsonl")
    assert sum(r.outcome == "ok" for r in records) == 3
    assert (
        sum(isinstance(e, ModelCallEvent) for e in read_transcript(out / "transcript.jsonl")) == 3
    )
    sizes = [len(r.body["messages"]) for r in fake_llm.requests]
    assert sizes == sorted(sizes)  # never an earlier request sent again


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_snapshots_leave_out_large_files_and_are_pruned(
    tmp_path: Path, fake_llm: FakeLLMServer, request: pytest.FixtureRequest, backend: str
) -> None:
    options: dict[str, Any] = {}
    if backend == "docker":
        request.getfixturevalue("docker_images")
        client = request.getfixturevalue("docker_client")
        options = {"sandbox": SandboxConfig(backend="docker"), "labels": TEST_LABELS}
        request.addfinalizer(lambda: sweep(client))
    fake_llm.script(
        _bash(
            "head -c 11000000 /dev/urandom > big.bin && echo small > small.txt && "
            "git add small.txt && git commit -qm small"
        ),
        _bash("sleep 2"),
        SUBMIT,
    )
    out = tmp_path / "run"
    result = _rollout(out, fake_llm, snapshot_every_s=0.2, keep_snapshots=2, **options)
    status = result.status
    assert status.status == "submitted", status
    assert [(f.path, f.size) for f in status.left_out] == [("big.bin", 11000000)]
    members = _members(out / "submission.tar.gz")
    assert "small.txt" in members and "big.bin" not in members
    kept = sorted((out / "snapshots").glob("*.tar.gz"))
    assert len(kept) == 2
    events = read_transcript(out / "transcript.jsonl")
    snaps = [e for e in events if isinstance(e, SnapshotEvent)]
    assert status.snapshots == len(snaps) > 2
    assert kept[-1].relative_to(out).as_posix() == snaps[-1].path  # the newest is kept
    pruned = _notes(events, "snapshots_pruned")
    deleted = [name for note in pruned for name in note.data["deleted"]]
    assert len(deleted) == status.snapshots_pruned == len(snaps) - 2
    assert not any((out / name).exists() for name in deleted)
    assert any(e.left_out and e.left_out[0].path == "big.bin" for e in snaps)


def test_papercoder_pauses_on_an_outage_and_pays_nothing_after_it(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.handler = lambda request: Fault.server_error(503)
    out = tmp_path / "run"
    with pytest.raises(RolloutPausedError) as paused:
        _rollout(
            out,
            fake_llm,
            model_config=_model(fake_llm, max_retry_wait_s=0.2),
            snapshot_every_s=None,
            agent=load_agent("papercoder"),
        )
    assert paused.value.kind == "provider"
    assert not (out / "status.json").exists()
    assert not any(r.outcome == "ok" for r in read_cost_journal(out / "costs.jsonl"))
    events = read_transcript(out / "transcript.jsonl")
    assert isinstance(events[-1], EndEvent) and events[-1].status == "paused"


def test_pruning_keeps_the_newest_within_the_count_and_the_size_cap() -> None:
    from paperbench.agents._snapshots import to_prune

    snaps = [(Path(f"{i:04d}.tar.gz"), size) for i, size in enumerate([5, 5, 5, 5, 50])]
    assert to_prune(snaps, keep=10, max_total_bytes=None) == []
    assert to_prune(snaps, keep=3, max_total_bytes=None) == [
        Path("0000.tar.gz"),
        Path("0001.tar.gz"),
    ]
    # over the cap the oldest go first, but never the newest, however large it is
    assert to_prune(snaps, keep=10, max_total_bytes=60) == [
        Path("0000.tar.gz"),
        Path("0001.tar.gz"),
    ]
    assert [p.name for p in to_prune(snaps, keep=10, max_total_bytes=10)] == [
        "0000.tar.gz",
        "0001.tar.gz",
        "0002.tar.gz",
        "0003.tar.gz",
    ]
