"""Long runs against a server with a real context window: a scripted model asks for large,
token-dense outputs step after step, and the real loop must keep every request inside the
window until the end (the server refuses anything longer, as the real APIs do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import AgentLimits, AgentOutcome, BasicConfig, NoteEvent, load_agent
from paperbench.agents._loop import BasicAgent
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from paperbench.testing.fake_llm import RecordedRequest

from .conftest import Rig, model_for, run, with_context

PROMPTS = load_agent("basic").prompts
WINDOW = 128_000

COMMANDS = (
    # base64 of random bytes: about one token per 1.5 characters with OpenAI's tokenizers
    "head -c 9000 /dev/urandom | base64 -w 0",
    # a log of numbers, also dense in tokens
    "seq -f 'step %g loss 0.%g acc 0.9%g' 1 700",
    # ordinary text
    'for i in $(seq 1 200); do echo "epoch $i: training the model on the data set"; done',
)


def _thoughts(n: int) -> str:
    """What a model writes around its tool calls: a few paragraphs with numbers in them."""
    line = (
        f"Step {n}: the last run reported loss {n % 97 / 100:.2f} and accuracy "
        f"{(n * 37) % 100}%; next I check the data loader, the learning-rate schedule and the "
        "evaluation script against section 4 of the paper before running it again. "
    )
    return line * 12


def scripted(steps: int, *, reasoning: bool) -> Any:
    """The n-th answer: a large-output command, a submit after ``steps`` answers."""

    def handler(request: RecordedRequest) -> FakeReply:
        body = request.body
        turns = body.get("messages") or body.get("input") or []
        # Turns are dropped from the conversation: count steps on the server side instead.
        handler.calls += 1  # type: ignore[attr-defined]
        n = handler.calls  # type: ignore[attr-defined]
        del turns
        thought = f"step {n}: next command" if reasoning else None
        if n >= steps:
            return FakeReply(
                tool_calls=(FakeToolCall("submit", {"summary": "done"}),), reasoning=thought
            )
        command = COMMANDS[n % len(COMMANDS)]
        return FakeReply(
            text=_thoughts(n),
            tool_calls=(FakeToolCall("bash", {"command": command}),),
            reasoning=thought,
        )

    handler.calls = 0  # type: ignore[attr-defined]
    return handler


def _long_run(
    tmp_path: Path,
    server: FakeLLMServer,
    protocol: str,
    steps: int,
    window: int = WINDOW,
    **model: Any,
) -> tuple[AgentOutcome, list[NoteEvent]]:
    server.handler = scripted(steps, reasoning=bool(model.pop("reasoning", False)))
    llm = model_for(protocol, server, **model)
    config = BasicConfig(type="basic", context_window=window, answer_tokens=4_096)

    async def body(rig: Rig) -> tuple[AgentOutcome, list[NoteEvent]]:
        outcome = await BasicAgent(config, PROMPTS, llm).run(rig.ctx)
        notes = [e for e in rig.events() if isinstance(e, NoteEvent)]
        return outcome, notes

    limits = AgentLimits(steps=steps + 10, wall_time_s=3_600)
    return run(with_context(tmp_path, body, model=llm, limits=limits), timeout=900)


def _refused(server: FakeLLMServer) -> list[str]:
    return [r.path for r in server.requests if getattr(r, "refused", None)]


@pytest.mark.slow
def test_a_hundred_and_fifty_steps_of_dense_outputs_stay_inside_a_32k_window(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    outcome, notes = _long_run(tmp_path, fake_llm, "chat", 150, window=32_000)
    assert outcome.status == "submitted", outcome
    assert len(fake_llm.requests) == 150
    trimmed = [n for n in notes if n.kind == "context_trimmed"]
    assert trimmed, "a run this long must have been trimmed"
    assert not [n for n in notes if n.kind == "context_refused"]
    peak = max(int(n.data["tokens"]) for n in trimmed)
    assert peak <= 32_000
    dropped = [n for n in trimmed if n.data["turns_dropped"]]
    assert dropped and all(int(n.data["turns_dropped"]) >= 1 for n in dropped)
    # each drop removes at least 30 % of the turns, so drops are rare and the prefix is stable
    assert len(dropped) < 150 / 6, len(dropped)  # about 19: one drop in eight steps


@pytest.mark.slow
@pytest.mark.parametrize(
    ("protocol", "model"),
    [
        ("chat", {"options": {"api": "responses"}, "reasoning": True}),
        ("messages", {"options": {"thinking_budget": 1024}, "reasoning": True}),
    ],
    ids=["responses-reasoning", "anthropic-thinking"],
)
def test_reasoning_turns_survive_trimming(
    tmp_path: Path, fake_llm: FakeLLMServer, protocol: str, model: dict[str, Any]
) -> None:
    outcome, notes = _long_run(tmp_path, fake_llm, protocol, 60, window=16_000, **model)
    assert outcome.status == "submitted", outcome
    assert [n for n in notes if n.kind == "context_trimmed" and n.data["turns_dropped"]]
