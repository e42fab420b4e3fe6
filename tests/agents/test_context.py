"""Fitting the conversation to the window (paperbench/agents/_context.py), and the loop's
answers to what long runs meet: empty answers, tool calls cut off at the output limit."""

from __future__ import annotations

import random
import string
from pathlib import Path
from typing import Any

from paperbench.agents import AgentOutcome, BasicConfig, NoteEvent, ToolEvent, load_agent
from paperbench.agents._context import REMOVED_MARK, ContextFitter, split_turns
from paperbench.agents._loop import BasicAgent
from paperbench.llm import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall

from .conftest import Rig, model_for, run, with_context

PROMPTS = load_agent("basic").prompts
SUBMIT = FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))


def _basic(**fields: Any) -> BasicConfig:
    return BasicConfig.model_validate({"type": "basic", **fields})


def _noise(seed: int, chars: int) -> str:
    """Text as dense in tokens as real tool output (repeated letters would compress)."""
    return "".join(random.Random(seed).choices(string.ascii_letters + string.digits, k=chars))


def _conversation(turns: int, output_chars: int = 4_000) -> list[Message]:
    messages: list[Message] = [SystemMessage(content="sys"), UserMessage(content="Begin")]
    for n in range(turns):
        call = ToolCall(id=f"call_{n}", name="bash", arguments={"command": f"step {n}"})
        messages.append(AssistantMessage(content=f"thinking {n}", tool_calls=(call,)))
        messages.append(
            ToolMessage(tool_call_id=call.id, content=f"{n}:" + _noise(n, output_chars))
        )
        if n % 3 == 2:
            messages.append(UserMessage(content="keep going"))
    return messages


def _valid(messages: list[Message]) -> None:
    """What both APIs require: the opening first, then assistant turns, every call answered
    right after its assistant message, every tool result answering a call."""
    assert isinstance(messages[0], SystemMessage) and isinstance(messages[1], UserMessage)
    assert isinstance(messages[2], AssistantMessage)
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not open_calls
            open_calls = {c.id for c in message.tool_calls}
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls
            open_calls.discard(message.tool_call_id)
        else:
            assert not open_calls
    assert not open_calls


def test_a_fitting_conversation_is_left_alone() -> None:
    fitter = ContextFitter(model="openai/gpt-4o", window=128_000, answer_tokens=4_096)
    messages = _conversation(5)
    fitted = fitter.fit(messages, [])
    assert fitted.messages is messages and not fitted.changed


def test_old_outputs_are_shortened_before_any_turn_is_dropped() -> None:
    messages = _conversation(12)
    fitter = ContextFitter(model="openai/gpt-4o", window=12_000, answer_tokens=1_000)
    fitted = fitter.fit(messages, [])
    assert fitted.shortened_ids and fitted.dropped_turns == 0
    assert fitted.tokens <= fitted.budget
    outputs = [m for m in fitted.messages if isinstance(m, ToolMessage)]
    assert "cut to save context" in outputs[0].content
    assert "cut to save context" not in outputs[-1].content  # the newest is never cut
    _valid(fitted.messages)


def test_whole_turns_go_oldest_first_at_least_thirty_percent_and_the_rest_stays_valid() -> None:
    messages = _conversation(40, output_chars=200)  # short outputs: nothing to shorten
    fitter = ContextFitter(model="openai/gpt-4o", window=4_096, answer_tokens=1_000)
    before = fitter.count(messages, [])
    fitted = fitter.fit(messages, [])
    assert before > fitted.budget
    _, turns = split_turns(messages)
    assert fitted.dropped_turns >= 0.3 * len(turns)
    assert fitted.tokens <= fitted.budget * fitter.low_water
    _valid(fitted.messages)
    first_kept = fitted.messages[2]
    assert isinstance(first_kept, AssistantMessage)
    assert first_kept.content == f"thinking {fitted.dropped_turns}"  # the oldest went first
    opening = fitted.messages[1]
    assert isinstance(opening, UserMessage)
    assert opening.content.startswith("Begin\n\n" + REMOVED_MARK)
    assert f"the {fitted.dropped_turns} oldest turns" in opening.content
    # The next fit of the kept conversation leaves its prefix alone (a stable cache prefix).
    grown = fitted.messages + _conversation(1, output_chars=200)[2:]
    again = fitter.fit(grown, [])
    assert again.messages[:3] == fitted.messages[:3] and not again.changed


def test_a_context_refusal_teaches_the_count_and_forces_a_drop() -> None:
    messages = _conversation(10, output_chars=200)
    fitter = ContextFitter(model="openai/gpt-4o", window=128_000, answer_tokens=4_096)
    ours = fitter.count(messages, [])
    fitter.learn(provider_tokens=ours * 2, provider_limit=100_000, ours=ours)
    assert fitter.correction >= 2 and fitter.window == 100_000
    assert fitter.count(messages, []) >= 2 * ours
    forced = fitter.fit(messages, [], force=True)
    assert forced.dropped_turns >= 3
    _valid(forced.messages)
    fitter.learn(provider_tokens=None, provider_limit=None, ours=ours)
    assert fitter.correction > 2  # without numbers: assume more


def test_the_newest_turn_alone_is_never_dropped() -> None:
    messages = _conversation(1, output_chars=50_000)
    fitter = ContextFitter(model="openai/gpt-4o", window=4_096, answer_tokens=1_000)
    fitted = fitter.fit(messages, [])
    assert fitted.over and fitted.dropped_turns == 0
    assert len(fitted.messages) == len(messages)


def test_empty_answers_in_a_row_end_the_run_with_that_reason(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(*(FakeReply(text="") for _ in range(10)))
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(max_empty_answers=3), PROMPTS, model).run(rig.ctx)

    outcome = run(with_context(tmp_path, body, model=model))
    assert outcome.status == "error" and outcome.error is not None
    assert "3 empty answers in a row" in outcome.error
    assert len(fake_llm.requests) == 3
    # an empty answer went back as the API accepts it: a string, never null
    sent = fake_llm.requests[-1].body["messages"]
    assistants = [m for m in sent if m["role"] == "assistant"]
    assert assistants and all(isinstance(m.get("content"), str) for m in assistants)


def test_an_answer_with_text_resets_the_empty_count(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(
        FakeReply(text=""), FakeReply(text=""), FakeReply(text="thinking"), FakeReply(text="")
    )
    fake_llm.script(FakeReply(text=""), SUBMIT)
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> AgentOutcome:
        return await BasicAgent(_basic(max_empty_answers=3), PROMPTS, model).run(rig.ctx)

    assert run(with_context(tmp_path, body, model=model)).status == "submitted"


def test_a_tool_call_cut_off_at_the_output_limit_is_not_run_and_the_limit_is_raised(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    cut = FakeReply(
        tool_calls=(FakeToolCall("bash", {"command": "touch /home/submission/cut"}),),
        stop="max_tokens",
    )
    fake_llm.script(cut, SUBMIT)
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> tuple[AgentOutcome, int]:
        outcome = await BasicAgent(_basic(max_tokens=1_000), PROMPTS, model).run(rig.ctx)
        probe = await rig.sandbox.exec("test -e /home/submission/cut", timeout=30)
        return outcome, probe.exit_code

    outcome, exists = run(with_context(tmp_path, body, model=model))
    assert outcome.status == "submitted"
    assert exists != 0  # the cut-off call never ran
    first, second = fake_llm.requests
    assert first.body["max_tokens"] == 1_000 and second.body["max_tokens"] == 2_000
    tool = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert len(tool) == 1 and "cut off at the output limit" in tool[0]["content"]
    assert "2000 tokens" in tool[0]["content"]


def test_cut_off_calls_are_recorded(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    cut = FakeReply(tool_calls=(FakeToolCall("bash", {"command": "echo hi"}),), stop="max_tokens")
    fake_llm.script(cut, SUBMIT)
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> list[Any]:
        await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)
        return rig.events()

    events = run(with_context(tmp_path, body, model=model))
    notes = [e for e in events if isinstance(e, NoteEvent) and e.kind == "output_cut"]
    assert len(notes) == 1 and notes[0].data["max_tokens"] == 2 * 8_192
    assert not [e for e in events if isinstance(e, ToolEvent) and e.name == "bash"]


def _long_outputs(n: int, chars: int = 2_000) -> list[FakeReply]:
    return [
        FakeReply(
            text=f"step {i} " + "words " * 200,
            tool_calls=(
                FakeToolCall("bash", {"command": f"echo s{i}; head -c {chars} /dev/zero"}),
            ),
        )
        for i in range(n)
    ]


def test_dropped_turns_can_be_summarised_by_the_model(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    steps = _long_outputs(12)
    summaries: list[str] = []

    def answer(request: Any) -> FakeReply:
        messages = request.body["messages"]
        if messages[0]["content"].startswith("You keep the notes"):
            summaries.append(messages[1]["content"])
            return FakeReply(text=f"SUMMARY {len(summaries)}: the loader was fixed.")
        return steps.pop(0) if steps else SUBMIT

    fake_llm.handler = answer
    model = model_for("chat", fake_llm)
    config = _basic(context_window=4_096, answer_tokens=512, context_summary=True)

    async def body(rig: Rig) -> list[Any]:
        await BasicAgent(config, PROMPTS, model).run(rig.ctx)
        return rig.events()

    events = run(with_context(tmp_path, body, model=model))
    labels = [e.label for e in events if type(e).__name__ == "ModelCallEvent"]
    assert labels.count("context_summary") == len(summaries) >= 1
    assert "step 0" in summaries[0]  # the summary request shows the dropped turns
    last = fake_llm.requests[-1].body["messages"]
    assert f"SUMMARY {len(summaries)}: the loader was fixed." in last[1]["content"]
    assert "SUMMARY 1:" not in last[1]["content"]  # each summary covers the earlier ones
    assert "SUMMARY 1:" in summaries[1]
    assert REMOVED_MARK in last[1]["content"]


def test_a_context_refusal_refits_and_the_run_goes_on(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    """The agent believes in a 128k window; the server's is 6,000 tokens. Its refusal (the
    real error shape, through the real SDK) makes the loop learn the limit and drop turns,
    and the run ends normally."""
    fake_llm.context_windows["gpt-4o"] = 6_000
    steps = [
        FakeReply(
            text=f"step {i}",
            tool_calls=(
                FakeToolCall("bash", {"command": "head -c 1200 /dev/urandom | base64 -w 0"}),
            ),
        )
        for i in range(12)
    ]
    fake_llm.script(*steps, SUBMIT)
    model = model_for("chat", fake_llm)

    async def body(rig: Rig) -> tuple[AgentOutcome, list[Any]]:
        outcome = await BasicAgent(_basic(), PROMPTS, model).run(rig.ctx)
        return outcome, rig.events()

    outcome, events = run(with_context(tmp_path, body, model=model))
    assert outcome.status == "submitted", outcome
    refused = [e for e in events if isinstance(e, NoteEvent) and e.kind == "context_refused"]
    assert refused and refused[0].data["limit"] == 6_000
    assert refused[0].data["provider_tokens"] > 6_000
    trimmed = [e for e in events if isinstance(e, NoteEvent) and e.kind == "context_trimmed"]
    assert trimmed and trimmed[-1].data["window"] == 6_000
    # after learning, no request went over the server's window again
    assert len(refused) <= 2
