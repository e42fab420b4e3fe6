"""Streamed answers from the fake server, read with the official SDKs' streaming APIs: what
each SDK assembles from the stream equals what the same reply gives without ``stream``, and
refusals and faults reach a streaming client as they would from the real APIs."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, FakeUsage, Fault
from tests.fixtures import anthropic_client, openai_client

HI: Any = [{"role": "user", "content": "hi"}]
CLAUDE = "claude-haiku-4-5"
USAGE = FakeUsage(input=120, cached_input=0, output=42, reasoning=7)
BASH = FakeToolCall("bash", {"cmd": "ls -la /tmp && echo 'done, really done'"})
EDIT = FakeToolCall("edit", {"path": "a.py", "text": "print(1)\n" * 4})
TEXT = "Here is a reply long enough to arrive in several deltas."

REPLIES = {
    "text": FakeReply(text=TEXT, usage=USAGE),
    "tools": FakeReply(tool_calls=(BASH, EDIT), usage=USAGE),
    "text and tools": FakeReply(text=TEXT, tool_calls=(BASH,), usage=USAGE),
    "reasoning": FakeReply(text=TEXT, reasoning="Let me think about it step by step.", usage=USAGE),
    "cut off": FakeReply(text=TEXT, stop="max_tokens", usage=USAGE),
}
VOLATILE = {"id", "call_id", "item_id", "created", "created_at", "signature", "data"}


def _stable(value: Any) -> Any:
    """``value`` without the fields that differ between two answers (ids, times, signatures),
    and without ``None`` fields (an SDK's parse helpers add some)."""
    if isinstance(value, dict):
        if "function" in value:  # a streamed tool call keeps its delta index
            value = {k: v for k, v in value.items() if k != "index"}
        return {
            k: _stable(v)
            for k, v in value.items()
            if k not in VOLATILE and v is not None and k not in ("parsed", "parsed_arguments")
        }
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _raw_events(server: FakeLLMServer, path: str, body: dict[str, Any]) -> list[str]:
    """The raw ``text/event-stream`` lines of a streamed answer."""
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        return [line for line in answer.read().decode().split("\n") if line]


# -- Chat Completions ---------------------------------------------------------------------


@pytest.mark.parametrize("name", REPLIES)
def test_chat_stream_assembles_the_non_stream_answer(fake_llm: FakeLLMServer, name: str) -> None:
    reply = REPLIES[name]
    fake_llm.script(reply, reply)
    client = openai_client(fake_llm)
    whole = client.chat.completions.create(model="gpt-4o", messages=HI)
    with client.chat.completions.stream(
        model="gpt-4o", messages=HI, stream_options={"include_usage": True}
    ) as stream:
        if reply.stop == "max_tokens":  # the SDK refuses to parse an answer cut off
            with pytest.raises(openai.LengthFinishReasonError) as info:
                stream.get_final_completion()
            final = info.value.completion
        else:
            final = stream.get_final_completion()
    assert _stable(final.model_dump()) == _stable(whole.model_dump())
    assert final.usage is not None and final.usage.completion_tokens == 42
    assert final.choices[0].finish_reason == whole.choices[0].finish_reason
    calls = final.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls if c.type == "function"] == [
        c.arguments for c in reply.tool_calls
    ]
    assert fake_llm.requests[-1].stream and not fake_llm.requests[0].stream


def test_chat_chunks_are_the_wire_format(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text=TEXT, tool_calls=(BASH,), usage=USAGE))
    client = openai_client(fake_llm)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=HI, stream=True))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    heads = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert heads[0].id and heads[0].function and heads[0].function.name == "bash"
    pieces = [h.function.arguments for h in heads if h.function and h.function.arguments]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == BASH.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # no usage chunk unless asked for
    assert all(c.usage is None for c in chunks)


def test_chat_usage_chunk_only_with_include_usage(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text="hi", usage=USAGE))
    lines = _raw_events(
        fake_llm,
        "/v1/chat/completions",
        {
            "model": "gpt-4o",
            "messages": HI,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2].removeprefix("data: "))
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 42
    assert all(json.loads(line[6:])["usage"] is None for line in lines[:-2])


def test_stream_options_without_stream_is_refused(fake_llm: FakeLLMServer) -> None:
    client = openai_client(fake_llm)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gpt-4o", messages=HI, stream_options={"include_usage": True}
        )
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "stream_options"
    assert fake_llm.pending == 0


# -- Responses ----------------------------------------------------------------------------


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
CUSTOM = FakeReply(
    tool_calls=(BASH, FakeToolCall("apply_patch", raw_arguments=PATCH, custom=True)), usage=USAGE
)


@pytest.mark.parametrize("name", [*(n for n in REPLIES if n != "cut off"), "custom tool"])
def test_responses_stream_assembles_the_non_stream_answer(
    fake_llm: FakeLLMServer, name: str
) -> None:
    reply = REPLIES.get(name, CUSTOM)
    fake_llm.script(reply, reply)
    client = openai_client(fake_llm)
    whole = client.responses.create(model="o3", input="hi")
    with client.responses.stream(model="o3", input="hi") as stream:
        final = stream.get_final_response()
    assert _stable(final.model_dump()) == _stable(whole.model_dump())
    assert final.output_text == whole.output_text
    assert final.usage is not None and final.usage.output_tokens == 42
    calls = [item for item in final.output if item.type == "function_call"]
    functions = [c for c in reply.tool_calls if not c.custom]
    assert [json.loads(c.arguments) for c in calls] == [c.arguments for c in functions]
    custom = [item.input for item in final.output if item.type == "custom_tool_call"]
    assert custom == [c.raw_arguments for c in reply.tool_calls if c.custom]


def test_responses_events_are_numbered_in_order(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text=TEXT, reasoning="why", tool_calls=(BASH,), usage=USAGE))
    client = openai_client(fake_llm)
    events = list(client.responses.create(model="o3", input="hi", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    for kind in (
        "response.reasoning_summary_text.delta",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ):
        assert kind in kinds
    assert kinds.count("response.output_text.delta") > 1
    assert kinds[-1] == "response.completed"


def test_responses_cut_off_ends_incomplete(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(REPLIES["cut off"])
    client = openai_client(fake_llm)
    events = list(client.responses.create(model="o3", input="hi", stream=True))
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.output_text == TEXT and last.response.usage is not None


def test_responses_stream_failed_mid_way(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(Fault.stream_error(after_events=4, reply=FakeReply(text=TEXT)))
    client = openai_client(fake_llm)
    events = list(client.responses.create(model="o3", input="hi", stream=True))
    assert len(events) == 5 and events[-1].type == "response.failed"
    assert events[-1].response.error is not None
    assert events[-1].response.error.code == "server_error"


# -- Anthropic Messages -------------------------------------------------------------------


@pytest.mark.parametrize("name", REPLIES)
def test_messages_stream_assembles_the_non_stream_answer(
    fake_llm: FakeLLMServer, name: str
) -> None:
    reply = REPLIES[name]
    fake_llm.script(reply, reply)
    client = anthropic_client(fake_llm)
    whole = client.messages.create(model=CLAUDE, max_tokens=500, messages=HI)
    with client.messages.stream(model=CLAUDE, max_tokens=500, messages=HI) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert _stable(final.model_dump()) == _stable(whole.model_dump())
    assert streamed == (TEXT if reply.text else "")
    assert final.usage == whole.usage and final.stop_reason == whole.stop_reason
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [u.input for u in uses] == [c.arguments for c in reply.tool_calls]


def test_messages_events_are_the_wire_format(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text=TEXT, reasoning="hmm", tool_calls=(BASH,), usage=USAGE))
    client = anthropic_client(fake_llm)
    events = list(client.messages.create(model=CLAUDE, max_tokens=500, messages=HI, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]
    assert start.type == "message_start" and start.message.usage.input_tokens == 120
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert deltas.index("thinking_delta") < deltas.index("signature_delta")
    assert "text_delta" in deltas and deltas.count("input_json_delta") > 1
    end = events[-2]
    assert end.type == "message_delta" and end.delta.stop_reason == "tool_use"
    assert end.usage.output_tokens == 42


def test_messages_thinking_streamed_is_accepted_back(fake_llm: FakeLLMServer) -> None:
    """The signed thinking a stream hands out is sent back in a tool loop and accepted."""
    fake_llm.script(FakeReply(reasoning="plan", tool_calls=(BASH,)), FakeReply(text="done"))
    client = anthropic_client(fake_llm)
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    with client.messages.stream(
        model=CLAUDE, max_tokens=2000, messages=HI, thinking=thinking
    ) as stream:
        first = stream.get_final_message()
    use = next(b for b in first.content if b.type == "tool_use")
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "ok"}
    messages: Any = [
        *HI,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [result]},
    ]
    for block in messages[1]["content"]:
        block.pop("caller", None)
    answer = client.messages.create(
        model=CLAUDE, max_tokens=2000, messages=messages, thinking=thinking
    )
    assert answer.content[0].type == "text"


def test_messages_overloaded_mid_stream(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(Fault.stream_error(after_events=3, reply=FakeReply(text=TEXT)))
    client = anthropic_client(fake_llm)
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(model=CLAUDE, max_tokens=500, messages=HI) as stream,
    ):
        stream.get_final_message()
    assert "overloaded_error" in str(info.value.body)


# -- refusals and faults, for every protocol ---------------------------------------------


def _stream_call(server: FakeLLMServer, protocol: str, **extra: Any) -> Any:
    """Read a whole streamed answer with the SDK of ``protocol``."""
    if protocol == "messages":
        with anthropic_client(server).messages.stream(
            model=CLAUDE, max_tokens=500, messages=HI, **extra
        ) as stream:
            return stream.get_final_message()
    if protocol == "responses":
        with openai_client(server).responses.stream(model="o3", input="hi", **extra) as stream:
            return stream.get_final_response()
    with openai_client(server).chat.completions.stream(
        model="gpt-4o", messages=HI, **extra
    ) as stream:
        return stream.get_final_completion()


PROTOCOLS = ["chat", "responses", "messages"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_stream_is_the_json_error(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(FakeReply(text="never sent"))
    with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as info:
        _stream_call(fake_llm, protocol, extra_body={"no_such_parameter": 1})
    assert info.value.status_code == 400
    assert "no_such_parameter" in str(info.value.body)
    assert fake_llm.pending == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_before_the_stream(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(Fault.rate_limit(0.5))
    with pytest.raises((openai.RateLimitError, anthropic.RateLimitError)) as info:
        _stream_call(fake_llm, protocol)
    assert info.value.response.headers["retry-after"] == "0.5"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("after", [0, 3])
def test_a_stream_cut_mid_way(fake_llm: FakeLLMServer, protocol: str, after: int) -> None:
    fake_llm.script(Fault.stream_cut(after_events=after, reply=FakeReply(text=TEXT)))
    with pytest.raises((httpx2.RemoteProtocolError, openai.APIError, anthropic.APIError)):
        _stream_call(fake_llm, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dropped_stream(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(Fault.drop())
    with pytest.raises((openai.APIConnectionError, anthropic.APIConnectionError)):
        _stream_call(fake_llm, protocol)


def test_chat_error_mid_stream(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(Fault.stream_error(after_events=2, reply=FakeReply(text=TEXT)))
    with pytest.raises(openai.APIError, match="Overloaded"):
        _stream_call(fake_llm, "chat")


def test_the_server_continues_after_faults(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(Fault.stream_cut(after_events=2), FakeReply(text="fine"))
    with pytest.raises(httpx2.RemoteProtocolError):
        _stream_call(fake_llm, "messages")
    final = _stream_call(fake_llm, "messages")
    assert final.content[0].text == "fine"
