"""The request fields real agent CLIs send (Claude Code on Anthropic's beta Messages API,
Codex CLI on Responses) are accepted as the real APIs accept them, and only so far."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from tests.fixtures import anthropic_client, openai_client

CLAUDE = "claude-haiku-4-5"
WRITE: Any = {
    "name": "Write",
    "description": "Writes a file.",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
        "additionalProperties": False,
    },
}
CACHED: Any = {"type": "ephemeral"}


def _claude_code_request(**extra: Any) -> dict[str, Any]:
    """A request shaped as Claude Code sends it: system blocks with breakpoints, a
    mid-conversation system message, adaptive thinking, effort, context management."""
    messages: Any = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>context</system-reminder>"},
                {"type": "text", "text": "write hello.txt", "cache_control": CACHED},
            ],
        },
        {"role": "system", "content": "Available agent types: ..."},
    ]
    return {
        "model": CLAUDE,
        "max_tokens": 16000,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": CACHED},
        ],
        "messages": messages,
        "tools": [WRITE],
        "metadata": {"user_id": '{"device_id":"abc","session_id":"s"}'},
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "extra_body": {"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}},
        **extra,
    }


def test_claude_code_request_is_accepted_on_the_beta_api(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(reasoning="plan", tool_calls=(FakeToolCall("Write", {}),)))
    client = anthropic_client(fake_llm)
    request = _claude_code_request()
    with client.beta.messages.stream(betas=["context-management-2025-06-27"], **request) as stream:
        first = stream.get_final_message()
    recorded = fake_llm.requests[-1]
    assert recorded.stream and "context-management" in recorded.headers["anthropic-beta"]
    use = next(b for b in first.content if b.type == "tool_use")
    # the tool loop goes on with the system message still in place and thinking sent back
    request["messages"] += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}],
        },
    ]
    for block in request["messages"][2]["content"]:
        block.pop("caller", None)
    answer = client.beta.messages.create(betas=["context-management-2025-06-27"], **request)
    assert answer.content[0].type == "text"


def test_beta_fields_need_the_beta_header(fake_llm: FakeLLMServer) -> None:
    client = anthropic_client(fake_llm)
    with pytest.raises(anthropic.BadRequestError, match="context_management"):
        client.messages.create(**_claude_code_request())


@pytest.mark.parametrize(
    ("system", "problem"),
    [("", "non-empty"), ([{"type": "image", "source": {}}], "non-empty text")],
)
def test_a_system_message_is_text(fake_llm: FakeLLMServer, system: Any, problem: str) -> None:
    client = anthropic_client(fake_llm)
    request = _claude_code_request()
    request["messages"][1]["content"] = system
    with pytest.raises(anthropic.BadRequestError, match=problem):
        client.beta.messages.create(betas=["context-management-2025-06-27"], **request)


def test_turns_still_alternate_around_system_messages(fake_llm: FakeLLMServer) -> None:
    client = anthropic_client(fake_llm)
    request = _claude_code_request()
    request["messages"].append({"role": "user", "content": "again"})
    with pytest.raises(anthropic.BadRequestError, match="alternate"):
        client.beta.messages.create(betas=["context-management-2025-06-27"], **request)


def _codex_request(**extra: Any) -> dict[str, Any]:
    """A request shaped as Codex CLI sends it."""
    return {
        "model": "gpt-5.5",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are Codex."}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "write hello.txt"}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "description": "Runs a command.",
                "strict": False,
                "parameters": {
                    "type": "object",
                    "properties": {"cmd": {"type": "string"}},
                    "required": ["cmd"],
                    "additionalProperties": False,
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "text": {"verbosity": "low"},
        "extra_body": {"client_metadata": {"thread_id": "thread-1", "turn_id": "turn-1"}},
        **extra,
    }


def test_codex_request_is_accepted(fake_llm: FakeLLMServer) -> None:
    call = FakeToolCall("exec_command", {"cmd": "echo hello > hello.txt"})
    fake_llm.script(FakeReply(reasoning="run it", tool_calls=(call,)))
    client = openai_client(fake_llm)
    request = _codex_request()
    with client.responses.stream(**request) as stream:
        first = stream.get_final_response()
    # the next turn sends the reasoning back encrypted (store is false) with the call output
    items = [item.model_dump(exclude_none=True) for item in first.output]
    call_id = next(i["call_id"] for i in items if i["type"] == "function_call")
    request["input"] += [
        *items,
        {"type": "function_call_output", "call_id": call_id, "output": "ok"},
    ]
    answer = client.responses.create(**request)
    assert answer.output_text == "ok"


def test_custom_tool_calls_pair_with_their_outputs(fake_llm: FakeLLMServer) -> None:
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
    fake_llm.script(
        FakeReply(tool_calls=(FakeToolCall("apply_patch", raw_arguments=patch, custom=True),))
    )
    client = openai_client(fake_llm)
    tool: Any = {"type": "custom", "name": "apply_patch", "description": "Edit files."}
    request = _codex_request(tools=[tool])
    first = client.responses.create(**request)
    call = first.output[0]
    assert call.type == "custom_tool_call" and call.input == patch
    request["input"] += [call.model_dump(exclude_none=True)]
    with pytest.raises(openai.BadRequestError, match="No tool output found for custom tool call"):
        client.responses.create(**request)
    answer: Any = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done"}
    assert client.responses.create(**{**request, "input": [*request["input"], answer]}).output_text
    orphan = {**answer, "call_id": "call_unknown"}
    with pytest.raises(openai.BadRequestError, match="No tool call found for custom tool call"):
        client.responses.create(**{**request, "input": [*request["input"], answer, orphan]})


def test_unknown_fields_are_still_refused(fake_llm: FakeLLMServer) -> None:
    client = openai_client(fake_llm)
    with pytest.raises(openai.BadRequestError, match="client_meta"):
        client.responses.create(**_codex_request(extra_body={"client_meta": {}}))
