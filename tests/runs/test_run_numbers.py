"""``paperbench run`` through the real CLI: the numbers and names a user reads (summary.json,
the terminal's tables, the HTML report) come from what ran."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.runs._progress import GroupProgress
from paperbench.runs._store import GROUP_LOG
from paperbench.sandbox._local_gc import reap_local_orphans
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, Fault, RecordedRequest
from tests.judge.conftest import fake_llm  # noqa: F401  (a fixture used here)
from tests.judge.scripted import ScriptedJudge, is_shortlist
from tests.runs.groups import sleeper_agent

PAPER = "calibration-binning"


def _text(html: str) -> str:
    """The HTML's text, tags dropped and spaces folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _agent_or_judge(request: RecordedRequest) -> FakeReply | Fault:
    """The agent's call (it offers tools) submits at once; the judge's get a verdict of 1
    per criterion."""
    if request.body.get("tools"):
        return FakeReply(tool_calls=(FakeToolCall(name="submit", arguments={"summary": "x"}),))
    return ScriptedJudge(lambda text: 1.0)(request)


def test_the_leaderboard_names_the_model_that_ran_not_the_configs_default(
    tmp_path: Path,
    fake_llm: FakeLLMServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """basic's config says openai/gpt-4o and the simple judge's grading role o3-mini;
    --agent-model and --judge-model are what ran, and every table says so."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-server")
    fake_llm.handler = _agent_or_judge
    args = ["run", "--agent", "basic", "--agent-model", "openai/gpt-4o-mini"]
    args += ["--agent-base-url", fake_llm.openai_url, "--papers", PAPER]
    args += ["--judge-model", "openai/gpt-4.1-mini", "--judge-base-url", fake_llm.openai_url]
    args += ["--skip-reproduction", "--sandbox", "local", "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*args, "--group", "g"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    asked = Counter(r.body["model"] for r in fake_llm.requests)
    assert asked["gpt-4o-mini"] == 1 and set(asked) == {"gpt-4o-mini", "gpt-4.1-mini"}
    sent = len(fake_llm.requests)
    group = tmp_path / "runs" / "g"
    status = json.loads((group / PAPER / "basic" / "seed-0" / "status.json").read_text())
    assert status["model"] == "openai/gpt-4o-mini"

    summary = json.loads((group / "summary.json").read_text())
    [row] = summary["agents"]
    assert (row["agent"], row["model"], row["label"]) == ("basic", "openai/gpt-4o-mini", "basic")
    assert [r["model"] for r in summary["runs"]] == ["openai/gpt-4o-mini"]
    # the grading calls and the shortlist calls that choose their evidence
    called = {"grading": ["openai/gpt-4.1-mini"], "shortlist": ["openai/gpt-4.1-mini"]}
    assert summary["judge"]["called"] == called
    lines = result.stdout.splitlines()
    board = next(line for line in lines if line.startswith("│ basic "))
    assert board.split("│")[2].strip() == "openai/gpt-4o-mini"
    identity = next(line for line in lines if line.startswith("judge simple "))
    assert "every role on openai/gpt-4.1-mini, instead of the config's grading openai/o3-mini" in (
        identity
    )
    assert "openai/gpt-4o " not in result.stdout and "openai/gpt-4o\n" not in result.stdout
    index = _text((group / "report" / "index.html").read_text())
    assert "basic openai/gpt-4o-mini" in index
    assert "Models grading: openai/gpt-4.1-mini (config: openai/o3-mini" in index
    assert "gpt-4o " not in index.replace("gpt-4o-mini", "")

    # --resume on the finished group: one line, nothing re-run, no old start line again
    again = CliRunner().invoke(app, ["run", "--resume", str(group)], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert f"group g in {group} is finished (1 run: 1 unscored); nothing to re-run" in again.output
    assert "started" not in again.output and "resuming" not in again.output
    assert len(fake_llm.requests) == sent
    assert json.loads((group / "summary.json").read_text())["agents"][0]["model"] == (
        "openai/gpt-4o-mini"
    )


def test_run_warns_of_evidence_chosen_without_the_shortlist_as_grade_does(
    tmp_path: Path,
    fake_llm: FakeLLMServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The judge's shortlist call is refused: the leaves are graded on the lexical choice,
    and `run`'s console says so for the run, with the leaves' count from its grade.json."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-server")

    def handler(request: RecordedRequest) -> FakeReply | Fault:
        return Fault.http(400, "refused") if is_shortlist(request) else _agent_or_judge(request)

    fake_llm.handler = handler
    args = ["run", "--agent", "basic", "--agent-base-url", fake_llm.openai_url, "--papers", PAPER]
    args += ["--judge-model", "openai/gpt-4.1-mini", "--judge-base-url", fake_llm.openai_url]
    args += ["--skip-reproduction", "--sandbox", "local", "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*args, "--group", "g"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    grade = json.loads(
        (tmp_path / "runs/g" / PAPER / "basic/seed-0/grading/grade.json").read_text()
    )
    [(note, leaves)] = grade["selection_notes"].items()
    assert "shortlist call failed" in note and leaves > 0
    said = " ".join(result.output.split())
    assert f"{PAPER}/basic/seed-0: grading: {leaves} leaves: {note}" in said, result.output


def test_a_resumed_display_prints_only_the_lines_of_its_own_work(tmp_path: Path) -> None:
    old = "2026-01-01T00:00:00 p/a/seed-0: rollout: started (attempt 1)\n"
    (tmp_path / GROUP_LOG).write_text(old)
    progress = GroupProgress(tmp_path, [])
    new = "2026-01-01T00:01:00 p/a/seed-0: grading: started (attempt 1)\n"
    with (tmp_path / GROUP_LOG).open("a") as log:
        log.write(new)
    out = io.StringIO()

    async def show() -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        await progress.show(Console(file=out, width=200), done)

    asyncio.run(show())
    assert new.strip() in out.getvalue() and old.strip() not in out.getvalue()


def test_an_interrupted_run_names_its_own_group_in_the_resume_hint(tmp_path: Path) -> None:
    """No --group: the hint names the group's folder (its default name), not a
    placeholder."""
    agent = sleeper_agent(tmp_path / "agent", 60)
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-c", "from paperbench.cli import main; main()", "run"]
    cmd += ["--agent", str(agent), "--papers", PAPER, "--judge", "dummy", "--sandbox", "local"]
    cmd += ["--runs-dir", str(runs)]
    sandboxes = tmp_path / "sandboxes"  # the local backend's workspaces go to TMPDIR
    sandboxes.mkdir()
    env = {**os.environ, "TMPDIR": str(sandboxes), "COLUMNS": "200"}
    errors = tmp_path / "run.stderr"  # a file, not a pipe: nothing the run prints can block it
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True
        )
    try:
        deadline = time.monotonic() + 180
        while not list(runs.glob(f"*/{PAPER}/sleeper/seed-0/reproduction")):
            if proc.poll() is not None or time.monotonic() > deadline:
                logs = [f.read_text()[-3000:] for f in runs.glob(f"*/{GROUP_LOG}")]
                raise AssertionError(f"exit {proc.poll()}: {errors.read_text()[-3000:]} {logs}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reap_local_orphans(sandboxes)
    err = errors.read_text()
    (group,) = runs.iterdir()
    assert proc.returncode == 130, err
    assert f"interrupted: continue with `paperbench run --resume {group}`" in err
