"""External agents' set-up refused before any work, in one line: a command agent reaches its
model only through the gateway, by the egress proxy, and speaks one provider's API. And their
own event streams (the samples the real CLIs printed) read into transcript events, and a
command that fails on its own an error in its own words."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.agents import read_transcript
from paperbench.agents._base import AgentOutcome, AgentSetup
from paperbench.agents._config import CommandConfig
from paperbench.agents._external import ExternalAgent
from paperbench.agents._external_events import (
    ClaudeStreamReader,
    CodexJsonReader,
    mini_trajectory_events,
)
from paperbench.agents._transcript import MessageEvent, NoteEvent, ToolEvent
from paperbench.cli import app
from paperbench.llm import AssistantMessage, Model, ModelConfig
from paperbench.testing import FakeLLMServer
from tests.agents.conftest import Rig, run, with_context

DATA = Path(__file__).resolve().parents[1] / "testing" / "data"
runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["rollout", "--agent", "claude-code", "--network", "none"],
            "--network none: the claude-code agent reaches its model through the gateway",
        ),
        (
            ["rollout", "--agent", "claude-code", "--model", "openai/gpt-4o"],
            "--model openai/gpt-4o: the claude-code agent speaks Anthropic's API",
        ),
        (
            ["rollout", "--agent", "codex", "--model", "anthropic/claude-sonnet-4-5"],
            "the codex agent speaks OpenAI's API",
        ),
        (
            ["run", "--agent", "codex", "--agent-model", "anthropic/claude-sonnet-4-5"],
            "--agent-model anthropic/claude-sonnet-4-5: the codex agent speaks OpenAI's API",
        ),
    ],
)
def test_a_command_agent_that_cannot_reach_its_model_is_refused_before_any_work(
    args: list[str], said: str, tmp_path: Path
) -> None:
    where = ["--out", str(tmp_path / "out")] if args[0] == "rollout" else []
    where += ["--runs-dir", str(tmp_path / "runs")] if args[0] == "run" else []
    extra = ["--paper", "calibration-binning"] if args[0] == "rollout" else []
    env = {"ANTHROPIC_API_KEY": "sk-ant-x", "OPENAI_API_KEY": "sk-x"}
    result = runner.invoke(app, [*args, *extra, *where], env=env)
    assert result.exit_code == 2, result.output
    assert said in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_claude_codes_stream_json_becomes_messages_and_tool_calls() -> None:
    lines = (DATA / "claude_stream_json.jsonl").read_text().splitlines()
    events = ClaudeStreamReader().feed_all([*lines, "not json"])
    tools = [e for e in events if isinstance(e, ToolEvent)]
    assert [(t.name, t.arguments["content"]) for t in tools] == [("Write", "hello\n")]
    assert "File created" in tools[0].output
    answers = [
        e.message
        for e in events
        if isinstance(e, MessageEvent) and isinstance(e.message, AssistantMessage)
    ]
    assert any(a.tool_calls and a.tool_calls[0].id == tools[0].tool_call_id for a in answers)
    assert [a.content for a in answers if a.content][-1] == "done"
    notes = [e.kind for e in events if isinstance(e, NoteEvent)]
    assert notes == ["agent_started", "agent_result", "agent_output"]


def test_codex_json_events_become_messages_and_tool_calls() -> None:
    lines = (DATA / "codex_exec_json.jsonl").read_text().splitlines()
    events = CodexJsonReader().feed_all(lines)
    [tool] = [e for e in events if isinstance(e, ToolEvent)]
    assert tool.name == "shell" and "echo hello" in tool.arguments["command"]
    assert tool.exit_code == 0
    usage = [e for e in events if isinstance(e, NoteEvent) and e.kind == "agent_usage"]
    assert usage and usage[0].data["input_tokens"] == 15241


# what Codex 0.169.0 printed for a model it has no metadata for (openai/gpt-5), and went on
FALLBACK_ITEM = (
    '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata '
    "for `gpt-5` not found. Defaulting to fallback metadata; this can degrade performance and "
    'cause issues."}}'
)


def test_codexs_errors_are_kept_and_its_failure_is_the_error_it_gave_up_on() -> None:
    """``codex_exec_json_failed.jsonl``: what Codex printed when every answer was a 401 (five
    announced retries, the error, ``turn.failed``)."""
    lines = (DATA / "codex_exec_json_failed.jsonl").read_text().splitlines()
    reader = CodexJsonReader()
    events = reader.feed_all([lines[0], FALLBACK_ITEM, *lines[1:]])
    errors = [e for e in events if isinstance(e, NoteEvent) and e.kind == "agent_error"]
    assert [e.data["event"] for e in errors] == ["item", *["error"] * 6, "turn.failed"]
    assert errors[0].text.startswith("Model metadata for `gpt-5` not found")
    assert errors[1].text.startswith("Reconnecting... 1/5 (unexpected status 401")
    assert reader.failure is not None and reader.failure == errors[-1].text
    assert reader.failure.startswith("unexpected status 401 Unauthorized: Incorrect API key")
    # the failure is the error it gave up on, not a retry nor the item it went on from
    reader = CodexJsonReader()
    reader.feed_all([FALLBACK_ITEM, *lines[:-1]])
    assert reader.failure == errors[-1].text


def test_a_mini_swe_agent_trajectory_becomes_messages_and_tool_calls() -> None:
    trajectory = json.loads((DATA / "mini_swe_agent_trajectory.json").read_text())
    events = mini_trajectory_events(trajectory)
    tools = [e for e in events if isinstance(e, ToolEvent)]
    assert [(t.name, t.output, t.exit_code) for t in tools] == [("bash", "hello\n", 0)]
    result = [e for e in events if isinstance(e, NoteEvent) and e.kind == "agent_result"]
    assert result and result[0].text == "Submitted"


def test_a_command_agent_that_fails_on_its_own_is_an_error_in_its_own_words(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """A command (in a local sandbox) that prints Codex's events of a failed turn, a line on
    its stderr, and exits 1: the run's error is the failure its stream gave, not its stderr;
    the gateway's record holds nothing outside it (no model call), so nothing is raised."""
    failed = {
        "type": "turn.failed",
        "error": {"message": "stream closed before response.completed"},
    }
    launch = (
        f"echo {shlex.quote(json.dumps(failed))}; "
        "echo 'Reading additional input from stdin...' >&2; exit 1"
    )
    config = CommandConfig(type="command", name="fake-codex", api="openai", launch=launch)
    config = config.model_copy(update={"events": "codex-json", "poll_s": 0.2})
    model = Model(ModelConfig(model="openai/gpt-5.5", base_url=fake_llm.openai_url, api_key="x"))
    agent = ExternalAgent(config, model)

    async def body(rig: Rig) -> AgentOutcome:
        await agent.prepare(AgentSetup(tmp_path / "run", rig.ctx.transcript, rig.ctx.limits))
        try:
            return await agent.run(rig.ctx)
        finally:
            await agent.release()

    outcome = run(with_context(tmp_path, body, model=model))
    assert outcome.status == "error"
    assert outcome.error == "fake-codex exited with code 1: stream closed before response.completed"
    events = read_transcript(tmp_path / "run" / "transcript.jsonl")
    assert [(e.kind, e.data) for e in events if isinstance(e, NoteEvent)] == [
        ("agent_error", {"event": "turn.failed"})
    ]
    assert fake_llm.requests == []
