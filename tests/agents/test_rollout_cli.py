"""``paperbench rollout`` end to end with agents from the catalog: the dummy agent offline,
and the basic agent on a scripted model killed with SIGKILL mid-run, then resumed.

These need the agent catalog (``paperbench.agents._config.load_agent``); where it is absent
they are skipped, and say so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.agents import SnapshotEvent, StartEvent, read_transcript
from paperbench.cli import app
from paperbench.sandbox._local_gc import reap_local_orphans
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("paperbench.agents._config") is None,
    reason="needs the agent catalog (paperbench.agents._config)",
)
LOCAL = ["--sandbox", "local", "--network", "none"]


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        return {m.name.removeprefix("./") for m in tar.getmembers()}


def test_dummy_agent_rollout_offline(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy", *LOCAL]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert status["status"] == "submitted" and status["agent"] == "dummy"
    assert status["agent_identity"]["type"] == "dummy"
    assert "reproduce.sh" in _members(out / "submission.tar.gz")
    again = CliRunner().invoke(app, [*args, "--resume", str(out)])
    assert again.exit_code == 0 and "already finished" in again.output


def _snapshots(out: Path) -> int:
    return sum(isinstance(e, SnapshotEvent) for e in read_transcript(out / "transcript.jsonl"))


def _wait_for(predicate: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _bash(command: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall(name="bash", arguments={"command": command}),))


def test_cli_kill_9_then_resume_repeats_no_model_call(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(
        _bash("echo one > a.txt && git add -A && git commit -qm one"),
        _bash("echo two > b.txt && sleep 120"),
        _bash("echo three > c.txt"),
        FakeReply(tool_calls=(FakeToolCall(name="submit", arguments={"summary": "done"}),)),
    )
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", "from paperbench.cli import main; main()", "rollout"]
    cmd += ["--paper", "calibration-binning", "--agent", "basic", *LOCAL]
    cmd += ["--model", "openai/gpt-4o", "--base-url", fake_llm.openai_url]
    cmd += ["--snapshot-every", "0.3s"]
    sandboxes = tmp_path / "sandboxes"  # the local backend's workspaces go to TMPDIR
    sandboxes.mkdir()
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-fake-server", "TMPDIR": str(sandboxes)}
    pipe = subprocess.PIPE
    proc = subprocess.Popen(
        [*cmd, "--out", str(out)], cwd=tmp_path, env=env, stdout=pipe, stderr=pipe
    )
    try:
        _wait_for(lambda: len(fake_llm.requests) == 2)  # step one's tool has run
        taken = _snapshots(out)
        _wait_for(lambda: _snapshots(out) > taken)  # and a snapshot holds its work
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        reap_local_orphans(sandboxes)  # the killed run's workspace and cgroups
    assert not (out / "status.json").exists()
    assert len(fake_llm.requests) == 2

    done = subprocess.run(
        [*cmd, "--resume", str(out), "--json"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    status = json.loads((out / "status.json").read_text())
    assert (status["status"], status["attempts"]) == ("submitted", 2)
    assert len(fake_llm.requests) == 4 and fake_llm.pending == 0
    sizes = [len(r.body["messages"]) for r in fake_llm.requests]
    assert sizes == sorted(set(sizes)), "a model request was sent again"
    assert {"a.txt", "c.txt"} <= _members(out / "submission.tar.gz")
    starts = [e for e in read_transcript(out / "transcript.jsonl") if isinstance(e, StartEvent)]
    assert [s.resumed for s in starts] == [0, 1]


def test_a_paused_run_says_why_and_how_to_continue_and_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from paperbench.agents import _cli
    from paperbench.agents._rollout_files import RolloutPausedError

    seen: dict[str, object] = {}

    async def paused(paper: object, agent: object, *, out_dir: Path, **kw: object) -> None:
        seen.update(kw)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "config.json").write_text("{}")  # a run was begun: it can be resumed
        raise RolloutPausedError(out_dir, "provider", "the model provider is unavailable: 503")

    monkeypatch.setattr(_cli, "rollout", paused)
    out = tmp_path / "run"
    args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy", *LOCAL]
    flags = ["--seed", "2", "--max-restarts", "1", "--max-time", "2h", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == _cli.EXIT_PAUSED == 4, result.output
    assert seen["max_restarts"] == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("paused (provider): the model provider is unavailable: 503; ")
    assert line.endswith(
        "continue with: paperbench rollout --paper calibration-binning --agent dummy --seed 2 "
        f"--sandbox local --network none --max-time 7200 --max-restarts 1 --resume {out}"
    )
    resumed = CliRunner().invoke(app, shlex.split(line.split("continue with: ")[1])[1:])
    assert resumed.exit_code == 4, resumed.output  # the command it printed is accepted
    assert seen["resume"] is True and seen["limits"].wall_time_s == 7200  # type: ignore[attr-defined]
