"""The PaperBench presets (paperbench-basic, paperbench-iterative): they load with
PaperBench's settings, and the real tool loop, driven by a scripted model through the real
SDKs (FakeLLMServer) in a real local-bubblewrap sandbox, sends the periodic reminder, the
no-tool-call message and the request-only continuation, and applies the tool limits; the
rollout writes the preset's own instructions, with the additional notes, into the sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import (
    AgentLimits,
    AgentOutcome,
    AgentResources,
    BasicConfig,
    IterativeConfig,
    LimitTracker,
    MessageEvent,
    ToolEvent,
    instructions_text,
    load_agent,
    read_transcript,
)
from paperbench.agents._loop import BasicAgent, IterativeAgent
from paperbench.agents._notes import additional_notes, default_template
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.agents._tools import ToolSet, cap_text, tool_defs
from paperbench.llm import ModelConfig, UserMessage
from paperbench.papers import PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from paperbench.testing.fake_llm import RecordedRequest
from tests.agents.step_agent import REPO

from .conftest import Rig, model_for, run, with_context

BASIC = load_agent("paperbench-basic")
ITERATIVE = load_agent("paperbench-iterative")
SUBMIT = FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))


def bash(command: str) -> FakeReply:
    return FakeReply(tool_calls=(FakeToolCall("bash", {"command": command}),))


def _for_test(config: Any) -> Any:
    """The preset's config with the fake model's own name and no reasoning setting (the
    test model is a chat model)."""
    return config.model_copy(update={"reasoning_effort": None})


def _body(agent: BasicAgent) -> Callable[[Rig], Awaitable[AgentOutcome]]:
    async def body(rig: Rig) -> AgentOutcome:
        return await agent.run(rig.ctx)

    return body


def _events(tmp_path: Path) -> list[Any]:
    return read_transcript(tmp_path / "run" / "transcript.jsonl")


def _users(tmp_path: Path) -> list[MessageEvent]:
    return [
        e
        for e in _events(tmp_path)
        if isinstance(e, MessageEvent) and isinstance(e.message, UserMessage)
    ]


def _last_text(request: RecordedRequest) -> str:
    """The text of the last message of a request (chat), or of its last text block
    (messages, where consecutive user messages become one turn)."""
    last = request.body["messages"][-1]
    content = last["content"]
    if isinstance(content, str):
        return content
    texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return texts[-1] if texts else ""


# -- the configs --------------------------------------------------------------------------


def test_the_presets_load_with_paperbench_settings() -> None:
    for loaded in (BASIC, ITERATIVE):
        config = loaded.config
        assert isinstance(config, BasicConfig | IterativeConfig)
        assert config.limits.wall_time_s == 12 * 3600 and config.limits.exclude_retry_wait
        assert config.limits.steps is None
        assert config.reminder_every_steps == 5 and config.sandbox_user == "root"
        tools = config.tools
        assert (tools.output_chars, tools.output_cut) == (16384, "head")
        assert (tools.read_default_lines, tools.read_max_lines) == (50, 50)
        assert tools.timeout_s == tools.max_timeout_s == 12 * 3600
        assert "{instructions}" in loaded.prompts["system"]
        assert "{elapsed}" in loaded.prompts["reminder"]
        assert "{time_limit}" in loaded.prompts["reminder"]
        assert "commit" in loaded.prompts["reminder"]
        for placeholder in ("{gpu}", "{time_limit}", "{api_keys}"):
            assert placeholder in loaded.prompts["additional_notes"]
        full, code_dev = instructions_text(False, loaded), instructions_text(True, loaded)
        assert full != instructions_text(False) and code_dev != instructions_text(True)
        assert "reproduce.sh" in full and "appendix" in full and "partial credit" in full.lower()
        assert "not run during grading" in code_dev and "bash reproduce.sh" not in code_dev
    assert BASIC.config.tools.enabled == (
        "bash",
        "python",
        "read_file_chunk",
        "search_file",
        "web_fetch",
        "submit",
    )
    assert isinstance(ITERATIVE.config, IterativeConfig)
    assert ITERATIVE.config.tools.enabled == ("bash", "read_file_chunk")
    assert not ITERATIVE.config.continue_in_history
    assert ITERATIVE.prompts["continue"] != ITERATIVE.prompts["continue_code_dev"]
    assert "A TINY EXAMPLE" in instructions_text(False, BASIC)
    assert "HOW TO GO ABOUT IT" in instructions_text(False, ITERATIVE)


def test_the_other_agents_keep_their_behaviour() -> None:
    for name in ("basic", "iterative"):
        loaded = load_agent(name)
        config = loaded.config
        assert isinstance(config, BasicConfig | IterativeConfig)
        assert config.reminder_every_steps is None and config.tools.output_cut == "middle"
        assert loaded.instructions == {} and "no_tool_call" not in loaded.prompts
        assert instructions_text(False, loaded) == instructions_text(False)
    config = load_agent("iterative").config
    assert isinstance(config, IterativeConfig) and config.continue_in_history


# -- the loop -----------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["chat", "messages"])
def test_the_reminder_comes_every_five_steps_with_the_time_used_and_left(
    tmp_path: Path, fake_llm: FakeLLMServer, protocol: str
) -> None:
    tracker: list[LimitTracker] = []

    def handler(request: RecordedRequest) -> FakeReply:
        n = len(fake_llm.requests)
        if n == 6:  # half the hour is gone before the second reminder
            tracker[0].used_s = 1800.0
        return SUBMIT if n == 12 else bash(f"echo step {n}")

    fake_llm.handler = handler
    model = model_for(protocol, fake_llm)
    agent = BasicAgent(_for_test(BASIC.config), BASIC.prompts, model)

    async def body(rig: Rig) -> AgentOutcome:
        tracker.append(rig.ctx.limits)
        return await agent.run(rig.ctx)

    limits = AgentLimits(wall_time_s=3600)
    outcome = run(with_context(tmp_path, body, model=model, limits=limits))
    assert outcome.status == "submitted" and len(fake_llm.requests) == 12
    # how many reminders each request carries: one more before steps 5 and 10
    per_request = [json.dumps(r.body).count("Progress:") for r in fake_llm.requests]
    assert per_request == [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    assert "Progress:" in _last_text(fake_llm.requests[4])
    reminders = [e for e in _users(tmp_path) if "Progress:" in e.message.content]
    assert [e.step for e in reminders] == [4, 9]  # each closes the step before 5 and 10
    first, second = (e.message.content for e in reminders)
    assert first.startswith("Progress: 0:00:0") and "of 1:00:00" in first
    assert second.startswith("Progress: 0:30:0") and "of 1:00:00" in second
    assert "commit" in second and "{" not in second


def test_no_reminder_without_the_setting(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = lambda r: SUBMIT if len(fake_llm.requests) == 6 else bash("true")
    model = model_for("chat", fake_llm)
    config = load_agent("basic").config
    agent = BasicAgent(config, {**BASIC.prompts}, model)  # a reminder prompt, no setting

    outcome = run(with_context(tmp_path, _body(agent), model=model))
    assert outcome.status == "submitted"
    assert not any("Progress:" in json.dumps(r.body) for r in fake_llm.requests)


@pytest.mark.parametrize(
    ("loaded", "prompt"),
    [(BASIC, "paperbench_no_tool_call_basic"), (ITERATIVE, "paperbench_no_tool_call_iterative")],
)
def test_an_answer_without_a_tool_call_gets_the_no_tool_call_message(
    tmp_path: Path, fake_llm: FakeLLMServer, loaded: Any, prompt: str
) -> None:
    fake_llm.handler = lambda r: (
        FakeReply(text="I will now think.") if len(fake_llm.requests) == 1 else SUBMIT
    )
    model = model_for("chat", fake_llm)
    cls = IterativeAgent if isinstance(loaded.config, IterativeConfig) else BasicAgent
    agent = cls(_for_test(loaded.config), loaded.prompts, model)
    limits = AgentLimits(steps=2)
    run(with_context(tmp_path, _body(agent), model=model, limits=limits))
    text = (loaded.path.parent / "prompts" / f"{prompt}.md").read_text()
    assert text == loaded.prompts["no_tool_call"]
    assert [e.message.content for e in _users(tmp_path)][1:] == [text]
    sent = fake_llm.requests[1].body["messages"]
    assert any(m.get("content") == text for m in sent)


@pytest.mark.parametrize("protocol", ["chat", "messages"])
@pytest.mark.parametrize("code_dev", [False, True])
def test_the_iterative_continuation_ends_every_request_and_is_never_kept(
    tmp_path: Path, fake_llm: FakeLLMServer, protocol: str, code_dev: bool
) -> None:
    fake_llm.handler = lambda r: bash("echo working")
    model = model_for(protocol, fake_llm)
    agent = IterativeAgent(_for_test(ITERATIVE.config), ITERATIVE.prompts, model)

    async def body(rig: Rig) -> AgentOutcome:
        rig.ctx.code_dev = code_dev
        return await agent.run(rig.ctx)

    outcome = run(with_context(tmp_path, body, model=model, limits=AgentLimits(steps=3)))
    assert outcome.status == "limit" and outcome.limit == "steps"
    wanted = ITERATIVE.prompts["continue_code_dev" if code_dev else "continue"]
    other = ITERATIVE.prompts["continue" if code_dev else "continue_code_dev"]
    assert len(fake_llm.requests) == 3
    for request in fake_llm.requests:
        assert _last_text(request) == wanted
        dumped = json.dumps(request.body)
        assert dumped.count(json.dumps(wanted)[1:-1]) == 1  # never piles up
        assert json.dumps(other)[1:-1] not in dumped
        offered = [t.get("name") or t["function"]["name"] for t in request.body["tools"]]
        assert offered == ["bash", "read_file_chunk"]
    assert not any(wanted in e.message.content for e in _users(tmp_path))


def test_the_tool_limits_apply(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    lines = "".join(f"line {i}\n" for i in range(1, 201))
    fake_llm.script(
        bash("python3 -c \"print('x' * 20000 + 'END')\""),
        FakeReply(tool_calls=(FakeToolCall("read_file_chunk", {"path": "/home/paper/long.txt"}),)),
        FakeReply(
            tool_calls=(
                FakeToolCall("read_file_chunk", {"path": "/home/paper/long.txt", "n_lines": 51}),
            )
        ),
        SUBMIT,
    )
    model = model_for("chat", fake_llm)
    agent = BasicAgent(_for_test(BASIC.config), BASIC.prompts, model)
    files = {"/home/paper/long.txt": lines}
    run(with_context(tmp_path, _body(agent), model=model, files=files))
    tools = [e for e in _events(tmp_path) if isinstance(e, ToolEvent)]
    big, chunk, refused = tools[0].output, tools[1].output, tools[2].output
    assert big.startswith("x" * 16384) and "END" not in big  # the head is kept, not the tail
    assert big.endswith("more characters cut ...]") and len(big) < 16384 + 100
    assert "line 50\n" in chunk and "line 51" not in chunk and "line 1\n" in chunk
    assert refused.startswith("error:") and "at most 50" in refused
    defs = {d["function"]["name"]: d for d in fake_llm.requests[0].body["tools"]}
    assert "default 43200" in json.dumps(defs["bash"])
    assert defs["read_file_chunk"]["function"]["parameters"]["properties"]["n_lines"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
    }


def test_cap_text_keeps_the_head_or_both_ends() -> None:
    text = "a" * 50 + "b" * 50
    assert cap_text(text, 100) == text
    head = cap_text(text, 20, "head")
    assert head.startswith("a" * 20) and "b" not in head and "80 more characters" in head
    middle = cap_text(text, 20)
    assert middle.startswith("a" * 10) and middle.endswith("b" * 10)


def test_default_tool_settings_are_unchanged(tmp_path: Path) -> None:
    async def body(rig: Rig) -> list[Any]:
        config = load_agent("basic").config
        assert isinstance(config, BasicConfig)
        return tool_defs(ToolSet.for_sandbox(config.tools, rig.sandbox))

    defs = {d.name: d for d in run(with_context(tmp_path, body))}
    assert defs["read_file_chunk"].parameters["properties"]["n_lines"]["maximum"] == 2000
    assert "the middle cut" in defs["bash"].description


# -- the additional notes and the instructions ----------------------------------------------


def test_additional_notes_fill_every_placeholder() -> None:
    notes = additional_notes("NVIDIA A10", 12, ["OPENAI_API_KEY", "HF_TOKEN", "HF_TOKEN"])
    assert "ADDITIONAL NOTES" in notes and "{" not in notes
    assert "NVIDIA A10" in notes and "12 hours" in notes
    assert "`HF_TOKEN`, `OPENAI_API_KEY`" in notes  # sorted, once each
    bare = additional_notes(None, None, [])
    assert "no GPU" in bare and "no API keys" in bare and "hours" not in bare
    assert "0.5 hours" in additional_notes(None, 0.5, [])
    assert additional_notes("H100", 1, [], template="{gpu}|{time_limit}|{api_keys}").count("|") == 2
    assert default_template() == BASIC.prompts["additional_notes"]


def _rollout(tmp_path: Path, fake_llm: FakeLLMServer, **kw: Any) -> list[Any]:
    paper = PaperSource(repo_root=REPO).load("calibration-binning")
    out = tmp_path / "run"
    asyncio.run(
        rollout(
            paper,
            BASIC,
            options=RolloutOptions(
                model_config=ModelConfig(
                    model="openai/o1", base_url=fake_llm.openai_url, api_key="x"
                ),
                sandbox=SandboxConfig(backend="local"),
                network=NetworkPolicy.NONE,
                snapshot_every_s=None,
                limits=AgentLimits(wall_time_s=300),
                **kw,
            ),
            out_dir=out,
        )
    )
    return read_transcript(out / "transcript.jsonl")


def test_the_sandbox_receives_the_preset_instructions_with_the_notes(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(bash("cat /home/instructions.txt"), SUBMIT)
    notes = additional_notes("NVIDIA A10", 12, ["OPENAI_API_KEY"])
    text = instructions_text(False, BASIC) + notes
    events = _rollout(tmp_path, fake_llm, instructions=text)
    seen = next(e for e in events if isinstance(e, ToolEvent)).output
    assert seen.rstrip() == text.rstrip()
    assert "NVIDIA A10" in seen and "12 hours" in seen and "`OPENAI_API_KEY`" in seen
    system = json.dumps(fake_llm.requests[0].body)
    assert "ADDITIONAL NOTES" in system and "NVIDIA A10" in system


def test_the_rollout_writes_the_agent_own_code_dev_instructions(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    fake_llm.script(bash("cat /home/instructions.txt"), SUBMIT)
    events = _rollout(tmp_path, fake_llm, code_dev=True)
    seen = next(e for e in events if isinstance(e, ToolEvent)).output
    assert seen.startswith(instructions_text(True, BASIC).rstrip())


def test_the_rollout_adds_the_notes_from_what_the_run_really_gives(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    keys = tmp_path / "agent.env"
    keys.write_text("HF_TOKEN=hf-secret-value\n")
    fake_llm.script(bash("cat /home/instructions.txt; printenv HF_TOKEN"), SUBMIT)
    given = AgentResources(env_file=str(keys), gpu_type="NVIDIA A10")
    events = _rollout(tmp_path, fake_llm, resources=given)
    seen = next(e for e in events if isinstance(e, ToolEvent)).output
    assert seen.startswith(instructions_text(False, BASIC).rstrip())
    expected = additional_notes(
        None, 300 / 3600, ["HF_TOKEN"], template=BASIC.prompts["additional_notes"]
    )
    assert expected.strip() in seen
    assert "`HF_TOKEN`" in seen and "no GPU" in seen  # a GPU type without GPUs is no GPU
    assert "hf-secret-value" not in seen  # the value itself is masked in the transcript
