"""The tool loops against a scripted model (real SDKs, FakeLLMServer) in a real
local-bubblewrap sandbox: submission, limits, iterative continuation, context trimming,
resume, tool errors, and the dummy agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import (
    AgentLimits,
    AgentOutcome,
    BasicConfig,
    DummyConfig,
    IterativeConfig,
    LimitTracker,
    MessageEvent,
    ModelCallEvent,
    NoteEvent,
    ToolEvent,
    load_agent,
)
from paperbench.agents._loop import INTERRUPTED, BasicAgent, DummyAgent, IterativeAgent
from paperbench.llm import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from paperbench.testing.fake_llm import RecordedRequest

from .conftest import Rig, model_for, run, with_context

PROMPTS = load_agent("basic").prompts


def bash(command: str, **extra: Any) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("bash", {"command": command, **extra}),))


SUBMIT = FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))


def _basic(**fields: Any) -> BasicConfig:
    return BasicConfig.model_validate({"type": "basic", **fields})


@pytest.mark.parametrize("protocol", ["chat", "messages"])
def test_basic_agent_works_to_a_submission(
    tmp_path: Path, fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script(
        bash("echo hello > /home/submission/out.txt && cat /home/paper/paper.md"), SUBMIT
    )
    model = model_for(protocol, fake_llm)

    async def body(rig: Rig) -> tuple[AgentOutcome, bytes]:
        outcome = await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)
        return outcome, await rig.sandbox.read_file("/home/submission/out.txt")

    outcome, written = run(with_context(tmp_path, body, model=model))
    assert outcome.status == "submitted" and written == b"hello\n"
    events = read_events(tmp_path)
    assert [type(e).__name__ for e in events].count("ModelCallEvent") == 2
    tools = [e for e in events if isinstance(e, ToolEvent)]
    assert [t.name for t in tools] == ["bash", "submit"] and "A paper" in tools[0].output
    assert len(fake_llm.requests) == 2
    sent = fake_llm.requests[1].body
    assert "A paper" in str(sent)  # the tool result went back to the model


def read_events(tmp_path: Path) -> list[Any]:
    from paperbench.agents import read_transcript

    return read_transcript(tmp_path / "run" / "transcript.jsonl")


@pytest.mark.parametrize(
    ("limits", "kind"),
    [
        ({"steps": 2}, "steps"),
        ({"tokens": 1}, "tokens"),
        ({"dollars": 1e-9}, "dollars"),
        ({"wall_time_s": 1.0}, "wall_time"),
    ],
)
def test_each_limit_stops_the_run_and_says_which(
    tmp_path: Path, fake_llm: FakeLLMServer, limits: dict[str, Any], kind: str
) -> None:
    fake_llm.handler = lambda request: bash("sleep 0.3; echo step")
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)

    outcome = run(with_context(tmp_path, body, model=model, limits=AgentLimits(**limits)))
    assert outcome.status == "limit" and outcome.limit == kind
    notes = [e for e in read_events(tmp_path) if isinstance(e, NoteEvent) and e.kind == "limit"]
    assert notes and notes[-1].data["limit"] == kind
    if kind == "steps":
        assert len(fake_llm.requests) == 2


@pytest.mark.parametrize("protocol", ["chat", "messages"])
def test_iterative_has_no_submit_and_goes_on_until_its_time_is_up(
    tmp_path: Path, fake_llm: FakeLLMServer, protocol: str
) -> None:
    model = model_for(protocol, fake_llm)
    config = IterativeConfig.model_validate({"type": "iterative"})
    prompts = load_agent("iterative").prompts
    tracker: list[LimitTracker] = []

    def handler(request: RecordedRequest) -> FakeReply:
        if len(fake_llm.requests) == 1:
            return SUBMIT
        if len(fake_llm.requests) == 4:  # the clock runs out during the fourth step
            tracker[0].used_s = 3600.0
        return FakeReply(text="thinking")

    fake_llm.handler = handler

    async def body(rig: Rig) -> AgentOutcome:
        tracker.append(rig.ctx.limits)
        return await IterativeAgent(config, prompts, model).run(rig.ctx)

    outcome = run(with_context(tmp_path, body, model=model, limits=AgentLimits(wall_time_s=3600)))
    assert outcome.status == "limit" and outcome.limit == "wall_time"
    assert len(fake_llm.requests) == 4
    tools = fake_llm.requests[0].body["tools"]
    offered = [t.get("name") or t["function"]["name"] for t in tools]
    assert "submit" not in offered and "bash" in offered
    events = read_events(tmp_path)
    # the submit the model tried is an error result, not the end of the run
    submit_events = [e for e in events if isinstance(e, ToolEvent) and e.name == "submit"]
    assert submit_events and submit_events[0].error is not None
    users = [
        e.message.content
        for e in events
        if isinstance(e, MessageEvent) and isinstance(e.message, UserMessage)
    ]
    assert sum("Time left:" in text for text in users) == 4


def test_context_trimming_shortens_the_oldest_tool_outputs_first_and_records_it(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    big = "head -c 2400 /dev/urandom | base64 -w 0"  # 3,200 characters dense in tokens
    fake_llm.script(*(bash(f"echo out{n}; {big}") for n in range(6)), SUBMIT)
    model = model_for("chat", fake_llm)
    config = _basic(context_window=8192, answer_tokens=256)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(config, PROMPTS, model).run(rig.ctx)

    assert run(with_context(tmp_path, body, model=model)).status == "submitted"
    last = fake_llm.requests[-1].body["messages"]
    tool_texts = [m["content"] for m in last if m["role"] == "tool"]
    assert len(tool_texts) == 6  # every call kept its result
    assert "cut to save context" in tool_texts[0]
    assert "cut to save context" not in tool_texts[-1] and len(tool_texts[-1]) > 3000
    notes = [
        e for e in read_events(tmp_path) if isinstance(e, NoteEvent) and e.kind == "context_trimmed"
    ]
    assert notes
    first_cut = notes[0].data["tool_call_ids"][0]
    first_call = last[2]["tool_calls"][0]["id"]
    assert first_cut == first_call
    # the transcript keeps the full outputs
    tool_events = [e for e in read_events(tmp_path) if isinstance(e, ToolEvent)]
    assert len(tool_events[0].output) > 3000


def test_resume_rebuilds_the_conversation_and_pays_for_no_earlier_call(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    call = ToolCall(id="call_1", name="bash", arguments={"command": "echo one"})
    running = ToolCall(id="call_2", name="bash", arguments={"command": "sleep 100"})
    history: list[Any] = [
        MessageEvent(message=SystemMessage(content="sys")),
        MessageEvent(message=UserMessage(content="Begin")),
        MessageEvent(step=1, message=AssistantMessage(tool_calls=(call,))),
        MessageEvent(step=1, message=ToolMessage(tool_call_id="call_1", content="one")),
        MessageEvent(step=2, message=AssistantMessage(tool_calls=(running,))),
    ]
    fake_llm.script(SUBMIT)
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)

    outcome = run(with_context(tmp_path, body, model=model, history=history))
    assert outcome.status == "submitted"
    assert len(fake_llm.requests) == 1  # the two earlier answers were not asked again
    sent = fake_llm.requests[0].body["messages"]
    assert [m["role"] for m in sent] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
    ]
    assert sent[5]["tool_call_id"] == "call_2" and INTERRUPTED in sent[5]["content"]
    assert "restarted from the last snapshot" in sent[6]["content"]


def test_tool_errors_are_tool_results_and_the_loop_goes_on(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(
        FakeReply(tool_calls=(FakeToolCall("no_such_tool", {}),)),
        FakeReply(tool_calls=(FakeToolCall("bash", raw_arguments="{not json"),)),
        FakeReply(tool_calls=(FakeToolCall("read_file_chunk", {"path": "/nope"}),)),
        FakeReply(tool_calls=(FakeToolCall("bash", {"command": 5}),)),
        SUBMIT,
    )
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)

    assert run(with_context(tmp_path, body, model=model)).status == "submitted"
    last = fake_llm.requests[-1].body["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert "no tool named 'no_such_tool'" in results[0]
    assert "not a JSON object" in results[1]
    assert "no such file: /nope" in results[2]
    assert "must be a str" in results[3]
    events = [e for e in read_events(tmp_path) if isinstance(e, ToolEvent)]
    assert [e.error is not None for e in events] == [True, True, False, True, False]


def test_dummy_agent_writes_a_trivial_submission_without_a_model(tmp_path: Path) -> None:
    agent = load_agent("dummy").build(None)
    assert isinstance(agent, DummyAgent)

    async def body(rig: Rig) -> tuple[AgentOutcome, str]:
        outcome = await agent.run(rig.ctx)
        result = await rig.sandbox.exec(
            "cd /home/submission && bash reproduce.sh && git log --oneline", timeout=60
        )
        return outcome, result.stdout

    outcome, out = run(with_context(tmp_path, body))
    assert outcome.status == "submitted"
    assert "dummy reproduction done" in out and "dummy submission" in out
    assert isinstance(DummyConfig.model_validate({"type": "dummy"}), DummyConfig)


def test_model_calls_are_recorded(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.script(SUBMIT)
    model = model_for("messages", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)

    run(with_context(tmp_path, body, model=model))
    calls = [e for e in read_events(tmp_path) if isinstance(e, ModelCallEvent)]
    assert len(calls) == 1 and calls[0].usage.total_tokens > 0 and calls[0].step == 1
