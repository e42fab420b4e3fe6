"""``paperbench run`` end to end: the no-argument default, kill -9 during each stage then
--resume (same graded tree as an uninterrupted run, no answered request asked again), and
the runs that end early (disqualified, failed) recorded as data."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from paperbench.llm import read_cost_journal
from paperbench.runs import GroupConfig, RunOutcome, RunState
from paperbench.testing import FakeLLMServer
from tests.judge.conftest import _ENV as _KEYLESS

from .conftest import CountingJudge

PAPER = "calibration-binning"
_DURATION = re.compile(r"after \d+(\.\d+)? s")
RUN = Path(PAPER) / "replay" / "seed-0"


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from paperbench.cli import app; app()", *args]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "COLUMNS": "120", **extra}


def _judge_args(server: FakeLLMServer) -> list[str]:
    return ["--judge-model", "openai/gpt-4o", "--judge-base-url", server.openai_url]


def _outcome(run: Path) -> RunOutcome:
    return RunOutcome.model_validate_json((run / "outcome.json").read_text())


def _leaves(run: Path) -> dict[str, tuple[float, bool, str]]:
    """Per leaf of the final graded tree: score, validity and explanation."""
    grade = json.loads((run / "grading" / "grade.json").read_text())
    out: dict[str, tuple[float, bool, str]] = {}
    stack = [grade["graded_task_tree"]]
    while stack:
        node = stack.pop()
        if node["sub_tasks"]:
            stack.extend(node["sub_tasks"])
        else:
            # a check's explanation says how long it took: the only part that may differ
            text = _DURATION.sub("after N s", node["explanation"])
            out[node["id"]] = (node["score"], node["valid_score"], text)
    return out


@pytest.mark.slow
def test_the_no_argument_run_completes_with_coverage_and_no_invented_grade(
    llm_env: Path,
) -> None:
    result = subprocess.run(
        _cmd("run"), cwd=llm_env, env=_env(), capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OPENAI_API_KEY" in result.stderr or "no API key" in result.stderr
    (group,) = (llm_env / "runs").iterdir()
    config = GroupConfig.model_validate_json((group / "group.json").read_text())
    assert config.paper_set == "bundled" and config.agents[0].name == "replay"
    assert config.sandbox.backend in ("docker", "local") and not config.judge.key_set
    causes: list[str] = []
    for paper in config.papers:
        run = group / paper / "replay" / "seed-0"
        outcome = _outcome(run)
        # without a key the model leaves are not graded: unscored, never a made-up score
        assert outcome.status == "unscored" and outcome.score is None
        assert outcome.coverage is not None and 0 < outcome.coverage < 1  # check leaves ran
        # the reason names the cause first: the key, and the leaves it left
        cause = f"no key for openai/o3-mini: {outcome.invalid_leaves} leaves not graded"
        assert outcome.reason is not None and outcome.reason.startswith(cause + "; coverage ")
        causes.append(cause)
        state = RunState.model_validate_json((run / "run.json").read_text())
        assert [s.status for s in state.stages.values()] == ["done"] * 4
        meta = json.loads((run / "reproduction" / "metadata.json").read_text())
        assert meta["status"] == "success"
        assert "grading: done" in (run / "run.log").read_text()
    # the report is written at the end: summary.json and the HTML pages
    summary = json.loads((group / "summary.json").read_text())
    assert summary and (group / "report" / "index.html").is_file()
    # the cause in summary.json, the terminal's table of runs not scored and the HTML
    reasons = [n["reason"] for n in summary["not_scored"]]
    assert [r[: len(c)] for r, c in zip(reasons, causes, strict=True)] == causes
    table = result.stdout[result.stdout.index("runs not scored") :]
    terminal = " ".join(table.replace("│", " ").split())
    index = (group / "report" / "index.html").read_text()
    page = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", index)).split())
    assert all(cause in terminal and cause in page for cause in causes), terminal
    assert len(list((group / "report" / "runs").glob("*.html"))) == len(config.papers)
    # the live display's last line ends where it should (piped: no terminal)
    tail = result.stderr[result.stderr.rindex("runs finished") :]
    assert "\n" in tail and tail.split("\n")[0].endswith(" s"), tail
    assert "2 papers × 1 agent × 1 seed in" in result.stdout


def _wait_for(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], errors: Path, what: str
) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, f"ended before {what}: {errors.read_text()[-2000:]}"
        if ready():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _stage_running(run: Path, stage: str) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            state = RunState.model_validate_json((run / "run.json").read_text())
        except (OSError, ValueError):
            return False
        return state.stages[stage].status == "running"  # type: ignore[index]

    return ready


_KILL_ARGS = ["--papers", PAPER, "--sandbox", "local", "--no-report"]
_KILL_ARGS += ["--snapshot-every", "0.5", "--concurrency", "leaves=2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[float, bool, str]]:
    """The leaves of the run the killed ones must end as: run once, uninterrupted, against
    a judge that answers as theirs does, with its own response cache."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    env = {k: v for k, v in _env().items() if k not in _KEYLESS}  # as llm_env leaves it
    env |= {"OPENAI_API_KEY": "sk-test", "PAPERBENCH_CACHE_DIR": str(folder / "cache")}
    with FakeLLMServer() as server:
        server.handler = CountingJudge()
        ref = subprocess.run(
            _cmd("run", "--group", "ref", *_KILL_ARGS, *_judge_args(server)),
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert ref.returncode == 0, ref.stdout + ref.stderr
    return _leaves(folder / "runs" / "ref" / RUN)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["rollout", "reproduction", "grading"])
def test_kill_9_during_a_stage_then_resume_ends_as_an_uninterrupted_run(
    judge_server: tuple[FakeLLMServer, CountingJudge],
    uninterrupted: dict[str, tuple[float, bool, str]],
    tmp_path: Path,
    stage: str,
) -> None:
    server, judge = judge_server
    common = [*_KILL_ARGS, *_judge_args(server)]
    env = _env(OPENAI_API_KEY="sk-test")
    expected = uninterrupted

    # the same run, killed with SIGKILL mid-stage, then resumed
    env["PAPERBENCH_CACHE_DIR"] = str(tmp_path / "cache-killed")
    run = tmp_path / "runs" / "killed" / RUN
    errors = tmp_path / "killed.stderr"
    if stage == "grading":
        judge.hold_after = 3  # three calls answered, the fourth waits until the kill
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            _cmd("run", "--group", "killed", *common),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        if stage == "grading":
            _wait_for(judge.held.is_set, process, errors, "a held judge call")
        elif stage == "rollout":
            snapshot = run / "snapshots" / "0000.tar.gz"
            _wait_for(snapshot.is_file, process, errors, "the rollout's first snapshot")
        else:
            _wait_for(_stage_running(run, stage), process, errors, f"{stage} running")
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    judge.hold_after = None
    judge.release.set()
    assert not (run / "outcome.json").exists()
    answered_before = list(judge.answered)
    paid_before = read_cost_journal(run / "grading" / "costs.jsonl")
    if stage == "grading":
        # the ledger is append-only: every answer that reached the process is recorded (an
        # answer on the wire at the kill, with two leaves graded at once, may be lost)
        assert len(paid_before) >= len(answered_before) - 1 >= 2

    resumed = subprocess.run(
        _cmd("run", "--resume", str(tmp_path / "runs" / "killed")),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _outcome(run).status == "scored"
    assert _leaves(run) == expected
    # no request that was answered (paid) was asked again
    repeated = [k for k, n in Counter(judge.answered).items() if n > 1]
    assert not repeated, f"{len(repeated)} answered requests were sent again"
    if stage == "grading":
        assert answered_before and len(judge.answered) > len(answered_before)
    # the killed attempt's records are kept and the resume appends to them
    paid = read_cost_journal(run / "grading" / "costs.jsonl")
    assert paid[: len(paid_before)] == paid_before
    assert len([r for r in paid if r.outcome == "ok"]) >= len(judge.answered) - 1
    state = RunState.model_validate_json((run / "run.json").read_text())
    assert state.stages[stage].attempts == 2  # type: ignore[index]
    earlier = {"rollout": [], "reproduction": ["rollout"], "grading": ["rollout", "reproduction"]}
    for done in earlier[stage]:  # finished stages are not run again
        assert state.stages[done].attempts == 1, done  # type: ignore[index]
    if stage == "rollout":
        status = json.loads((run / "status.json").read_text())
        assert status["attempts"] == 2  # resumed from its snapshot, not started again


@pytest.mark.slow
def test_resume_refuses_config_flags_and_a_changed_agent(llm_env: Path) -> None:
    agent = llm_env / "mine.yaml"
    agent.write_text("type: dummy\nlimits:\n  wall_time_s: 60\n")
    args = ["run", "--group", "g", "--agent", str(agent), "--judge", "dummy"]
    first = subprocess.run(
        _cmd(*args, "--sandbox", "local", "--papers", PAPER, "--no-report"),
        cwd=llm_env,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    again = subprocess.run(
        _cmd(*args, "--sandbox", "local"), cwd=llm_env, env=_env(), capture_output=True, text=True
    )
    assert again.returncode == 2 and "holds a group already" in again.stderr
    assert "--resume" in again.stderr and "Traceback" not in again.stderr
    flags = subprocess.run(
        _cmd("run", "--resume", "g", "--seeds", "2"),
        cwd=llm_env,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert flags.returncode == 2 and "drop --seeds" in flags.stderr
    agent.write_text("type: dummy\nlimits:\n  wall_time_s: 61\n")
    changed = subprocess.run(
        _cmd("run", "--resume", "g"), cwd=llm_env, env=_env(), capture_output=True, text=True
    )
    assert changed.returncode == 1, changed.stderr
    assert "group.json" in changed.stderr and "changed since the group started" in changed.stderr
    assert "Traceback" not in changed.stderr
