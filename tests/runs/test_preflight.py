"""``paperbench run`` refuses, before anything is written or any model is called, a group
whose models have no key (agents and judge); and a rollout that meets a cause outside the
agent (its key refused) makes the run ``failed`` and resumable, never a graded submission."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.runs import RunOutcome
from paperbench.testing import FakeLLMServer, Fault

PAPER = "calibration-binning"
_RUN = ["run", "--papers", PAPER, "--sandbox", "local", "--no-report", "--group", "g"]


@pytest.fixture
def fake_llm(llm_env: Path) -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_a_model_without_its_key_is_refused_before_anything(
    llm_env: Path, fake_llm: FakeLLMServer
) -> None:
    judge = ["--judge-model", "openai/gpt-4o", "--judge-base-url", fake_llm.openai_url]
    agent = ["--agent", "basic", "--agent-model", "anthropic/claude-haiku-4-5"]
    code, out = _invoke([*_RUN, *agent, *judge])
    assert code == 1, out
    assert out.strip() == (
        "error: --agent-model: agent basic calls anthropic/claude-haiku-4-5 and "
        "ANTHROPIC_API_KEY is not set; set it in the environment or a .env file, or give "
        "--agent-base-url for a server that needs no key"
    )
    # the agent config's own model, and the judge's
    agent = ["--agent", "basic", "--agent-base-url", fake_llm.openai_url]
    code, out = _invoke([*_RUN, *agent, "--judge-model", "anthropic/claude-haiku-4-5"])
    assert code == 1, out
    assert out.strip().startswith("error: --judge-model: the judge simple calls "), out
    assert "ANTHROPIC_API_KEY is not set" in out and out.strip().count("\n") == 0, out
    code, out = _invoke([*_RUN, "--agent", "basic", *judge])
    assert code == 1, out
    assert out.strip().startswith("error: --agent: agent basic calls openai/"), out
    assert "OPENAI_API_KEY is not set" in out
    assert not (llm_env / "runs").exists()
    assert fake_llm.requests == []


def test_a_rejected_key_fails_the_run_and_a_resume_runs_it_again(
    llm_env: Path, fake_llm: FakeLLMServer
) -> None:
    agent = ["--agent", "basic", "--agent-model", "openai/gpt-4o-mini"]
    agent += ["--agent-base-url", fake_llm.openai_url, "--max-steps", "1"]
    fake_llm.script(Fault.http(401, "Incorrect API key provided"))
    code, out = _invoke([*_RUN, *agent, "--judge", "dummy"])
    assert code == 3, out  # some runs failed
    run = llm_env / "runs" / "g" / PAPER / "basic" / "seed-0"
    outcome = RunOutcome.model_validate_json((run / "outcome.json").read_text())
    assert outcome.status == "failed" and outcome.failed_stage == "rollout", outcome
    assert outcome.reason is not None
    assert "the API key was rejected (HTTP 401" in outcome.reason, outcome.reason
    assert "pass --key" not in out
    assert not (run / "status.json").exists()  # the rollout is kept resumable
    assert not (run / "grading").exists()  # nothing graded
    assert len(fake_llm.requests) == 1
    assert "retry the failed runs with `paperbench run --resume " in " ".join(out.split())
    # the key fixed (the server answers now): the resume runs it again, to a graded end
    code, out = _invoke(["run", "--resume", "g"])
    assert code == 0, out
    outcome = RunOutcome.model_validate_json((run / "outcome.json").read_text())
    assert outcome.status == "scored", outcome
    assert "--resume" not in out  # nothing failed: nothing to retry
    assert "judge dummy (sha256 " in out and "; calls no model)" in out


def test_a_judge_that_cannot_fit_the_window_of_its_model_is_refused_before_anything(
    llm_env: Path, fake_llm: FakeLLMServer
) -> None:
    judge = ["--judge", "simple-faithful", "--judge-base-url", fake_llm.openai_url]
    code, out = _invoke([*_RUN, *judge, "--judge-model", "openai/gpt-4"])
    assert code == 1, out
    assert out.strip().startswith("error: "), out
    assert "openai/gpt-4 has a 8,192-token window" in out and out.strip().count("\n") == 0
    assert not (llm_env / "runs").exists()
    assert fake_llm.requests == []
