"""``paperbench rollout`` end to end with agents from the catalog: the dummy agent offline,
and the basic agent on a scripted model killed with SIGKILL mid-run, then resumed.

These need the agent catalog (``paperbench.agents._config.load_agent``); where it is absent
they are skipped, and say so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
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
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from tests.fixtures import reap_killed_run

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


@pytest.mark.slow
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
        reap_killed_run(sandboxes)  # the killed run's workspace and cgroups
    assert not (out / "status.json").exists()
    assert len(fake_llm.requests) == 2

    again = [*cmd, "--resume", str(out), "--json"]
    done = subprocess.run(again, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
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

    async def paused(
        paper: object, agent: object, options: object, *, out_dir: Path, **kw: object
    ) -> None:
        seen.update(kw, options=options)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "config.json").write_text("{}")  # a run was begun: it can be resumed
        raise RolloutPausedError(out_dir, "provider", "the model provider is unavailable: 503")

    monkeypatch.setattr(_cli, "rollout", paused)
    out = tmp_path / "run"
    args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy", *LOCAL]
    flags = ["--seed", "2", "--max-restarts", "1", "--max-time", "2h", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == _cli.EXIT_PAUSED == 4, result.output
    assert seen["options"].max_restarts == 1  # type: ignore[attr-defined]
    (line,) = result.output.strip().splitlines()
    assert line.startswith("paused (provider): the model provider is unavailable: 503; ")
    assert line.endswith(
        "continue with: paperbench rollout --paper calibration-binning --agent dummy --seed 2 "
        f"--sandbox local --network none --max-time 7200 --max-restarts 1 --resume {out}"
    )
    resumed = CliRunner().invoke(app, shlex.split(line.split("continue with: ")[1])[1:])
    assert resumed.exit_code == 4, resumed.output  # the command it printed is accepted
    assert seen["resume"] is True
    assert seen["options"].limits.wall_time_s == 7200  # type: ignore[attr-defined]


def _piped_rollout(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real command, its stdout and stderr pipes (not a terminal)."""
    cmd = [sys.executable, "-c", "from paperbench.cli import main; main()", "rollout", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_replay_runs_the_recording_of_the_paper_given_and_says_each_step_when_piped(
    tmp_path: Path,
) -> None:
    # --agent replay is the default; its recording is chosen by --paper.
    out = tmp_path / "run"
    done = _piped_rollout(["--paper", "calibration-binning", *LOCAL, "--out", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "submitted" in done.stdout and "agent replay" in done.stdout
    steps = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert len(steps) >= 3, done.stderr
    for n, line in enumerate(steps, start=1):
        assert re.fullmatch(rf"step {n}: [a-z_]+, \d+ s, \$0\.00", line), line
    assert steps[-1].startswith(f"step {len(steps)}: submit, ")
    status = json.loads((out / "status.json").read_text())
    assert (status["status"], status["steps"]) == ("submitted", len(steps))
    assert "reproduce.sh" in _members(out / "submission.tar.gz")


def test_replay_of_a_paper_without_a_recording_says_so_and_names_no_internals(
    tmp_path: Path,
) -> None:
    paper = tmp_path / "data" / "papers" / "p1"
    paper.mkdir(parents=True)
    (paper / "paper.md").write_text("# A paper\n")
    (paper / "rubric.json").write_text(
        json.dumps(
            {"id": "r", "requirements": "r", "weight": 1, "task_category": "Code Development"}
        )
    )
    args = ["rollout", "--paper", "p1", "--agent", "replay", *LOCAL]
    args += ["--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "no recorded transcript for paper p1" in result.output, result.output
    assert "choose another --agent" in result.output
    assert not re.search(r"\b[A-Z][a-z]+[A-Z]\w*|\w\(\)", result.output), result.output


def test_resume_takes_the_run_folder_and_refuses_what_is_not_a_run(tmp_path: Path) -> None:
    args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy", *LOCAL]
    nothing = CliRunner().invoke(app, [*args, "--resume", str(tmp_path)])
    assert nothing.exit_code == 2 and f"--resume {tmp_path}: no run to resume" in nothing.output
    both = CliRunner().invoke(app, [*args, "--out", str(tmp_path), "--resume", str(tmp_path)])
    assert both.exit_code == 2 and "not both" in both.output
    (tmp_path / "x").write_text("")
    taken = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert taken.exit_code == 2 and f"--resume {tmp_path} (instead of --out)" in taken.output


@pytest.mark.parametrize(
    "backend", ["local", pytest.param("docker", marks=pytest.mark.docker)], ids=str
)
def test_an_agent_sandbox_has_a_disk_cap_unless_lifted(
    tmp_path: Path, fake_llm: FakeLLMServer, backend: str, request: pytest.FixtureRequest
) -> None:
    """Without --disk, the agent's sandbox still has a disk of its own of the default size
    (what the agent sees with df), recorded in config.json; a small --disk stops a writer at
    the cap; --allow-uncapped-disk lifts the default, said and recorded."""
    if backend == "docker":
        request.getfixturevalue("docker_images")
    probe = "df -Pk /home/submission | tail -1 | awk '{print $2}' > size.txt"
    writer = "dd if=/dev/zero of=big bs=1M count=200 2> dd.txt; ls -s big > written.txt; rm big"
    submit = FakeReply(tool_calls=(FakeToolCall(name="submit", arguments={"summary": "done"}),))
    base = ["rollout", "--paper", "calibration-binning", "--agent", "basic"]
    base += ["--sandbox", backend, "--network", "none", "--model", "openai/gpt-4o"]
    base += ["--base-url", fake_llm.openai_url]
    env = {"OPENAI_API_KEY": "sk-test-fake-server"}
    runs = {"default": [], "small": ["--disk", "64"], "lifted": ["--allow-uncapped-disk"]}
    for name, extra in runs.items():
        fake_llm.script(_bash(probe), _bash(writer), submit)
        out = tmp_path / name
        result = CliRunner().invoke(app, [*base, *extra, "--out", str(out), "--json"], env=env)
        assert result.exit_code == 0, result.output
        with tarfile.open(out / "submission.tar.gz") as tar:
            size_kb = int(tar.extractfile("size.txt").read())  # type: ignore[union-attr]
            written_kb = int(tar.extractfile("written.txt").read().split()[0])  # type: ignore[union-attr]
        disk_mb = json.loads((out / "config.json").read_text())["resources"]["disk_mb"]
        if name == "default":
            assert disk_mb == 50 * 1024 and 45 * 1024**2 < size_kb <= 51 * 1024**2
        elif name == "small":
            assert disk_mb == 64 and size_kb <= 64 * 1024 and written_kb < 64 * 1024
        else:
            assert disk_mb is None and "no disk cap" in result.stderr


def test_run_says_allow_uncapped_disk_before_the_work(capsys: pytest.CaptureFixture[str]) -> None:
    """``run --allow-uncapped-disk`` lifts the agents' default disk cap: said before any work
    and recorded in group.json."""
    from paperbench._evaluate import _say_what_is_less
    from paperbench.runs._config import EvalConfig, SandboxSettings
    from paperbench.runs._group import plan_group
    from paperbench.sandbox import SandboxConfig

    options = EvalConfig(
        group="g",
        papers="calibration-binning",
        agents=["dummy"],
        sandbox=SandboxSettings(allow_uncapped_disk=True),
    )
    config = plan_group(options, SandboxConfig(backend="local"))
    assert config.model_dump(mode="json")["reproduction"]["allow_uncapped_disk"] is True
    _say_what_is_less(config)
    assert (
        "--allow-uncapped-disk: agent sandboxes get no default disk cap" in capsys.readouterr().err
    )
