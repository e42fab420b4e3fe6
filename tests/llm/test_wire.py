"""The fake server refuses what the real APIs refuse (asserted with the SDKs directly), and
the providers never send such a request: reasoning replayed as it came, schemas in the form
each API takes, loose usage fields read as zeros, only unreadable bodies retried."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import anthropic
import openai
import pytest
from pydantic import BaseModel, Field

from paperbench.errors import ModelRequestError
from paperbench.llm import Model, ModelRequest, OutputSchema, ToolDef, ToolMessage, UserMessage
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, Fault
from tests.fixtures import anthropic_client, openai_client
from tests.llm.helpers import config_for, run

PROTOCOLS = ["chat", "responses", "messages"]

BASH = ToolDef(
    name="bash",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
)


def gen(model: Model, *args: Any, **kwargs: Any) -> Any:
    from tests.llm.helpers import gen as _gen

    return _gen(model, *args, **kwargs)


# -- the server refuses as the real APIs do ----------------------------------------------


def _openai_refusal(exc: openai.BadRequestError) -> dict[str, Any]:
    assert exc.status_code == 400
    assert isinstance(exc.body, dict)
    error = exc.body
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    return error


HI: Any = [{"role": "user", "content": "hi"}]
OPEN_OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


@pytest.mark.parametrize(
    ("params", "message", "param"),
    [
        ({"model": "gpt-4o", "extra_body": {"top_k": 3}}, "Unrecognized request argument", None),
        ({"model": "o3", "max_tokens": 10}, "Use 'max_completion_tokens' instead", "max_tokens"),
        ({"model": "o4-mini", "temperature": 0.2}, "'temperature' does not support", "temperature"),
        (
            {
                "model": "gpt-4o",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": OPEN_OBJECT, "strict": True},
                },
            },
            "'additionalProperties' is required to be supplied and to be false",
            "response_format",
        ),
        (
            {
                "model": "gpt-4o",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "strict": True,
                        "schema": {
                            "type": "object",
                            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                            "required": ["a"],
                            "additionalProperties": False,
                        },
                    },
                },
            },
            "Missing 'b'",
            "response_format",
        ),
        (
            {
                "model": "gpt-4o",
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "strict": True,
                        "schema": {
                            "type": "object",
                            "properties": {"a": {"type": "string", "minLength": 2}},
                            "required": ["a"],
                            "additionalProperties": False,
                        },
                    },
                },
            },
            "'minLength' is not permitted",
            "response_format",
        ),
    ],
    ids=["unknown-param", "o-series-max-tokens", "reasoning-temperature", "open", "required", "kw"],
)
def test_chat_refusals(
    fake_llm: FakeLLMServer, params: dict[str, Any], message: str, param: str | None
) -> None:
    with openai_client(fake_llm) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(messages=HI, **params)
    error = _openai_refusal(info.value)
    assert message in error["message"]
    assert error["param"] == param
    assert fake_llm.pending == 0 and len(fake_llm.requests) == 1


def test_responses_refuses_reasoning_without_its_encrypted_content(
    fake_llm: FakeLLMServer,
) -> None:
    items: Any = [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    with openai_client(fake_llm) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="o3", input=items, store=False)
    assert "not persisted when `store` is set to false" in _openai_refusal(info.value)["message"]


def _anthropic_refusal(exc: anthropic.BadRequestError) -> str:
    assert exc.status_code == 400
    assert isinstance(exc.body, dict)
    assert exc.body["type"] == "error"
    assert exc.body["error"]["type"] == "invalid_request_error"
    return str(exc.body["error"]["message"])


@pytest.mark.parametrize(
    ("messages", "extra", "message"),
    [
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            {},
            "text content blocks must be non-empty",
        ),
        (
            [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
            {},
            'first message must use the "user" role',
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            {},
            'multiple "user" roles in a row',
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]},
                {"role": "user", "content": "b"},
            ],
            {},
            "messages.1.content.0.thinking.signature: Field required",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": "t", "signature": "forged"}],
                },
                {"role": "user", "content": "b"},
            ],
            {},
            "Invalid `signature` in `thinking` block",
        ),
        (HI, {"extra_body": {"temperature": 0.2}}, "temperature: Extra inputs are not permitted"),
        (
            HI,
            {
                "output_config": {
                    "format": {
                        "type": "json_schema",
                        "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
                    }
                }
            },
            "'additionalProperties' must be explicitly set to false",
        ),
    ],
    ids=["empty-text", "first-not-user", "not-alternating", "unsigned", "forged", "temp", "open"],
)
def test_messages_refusals(
    fake_llm: FakeLLMServer, messages: Any, extra: dict[str, Any], message: str
) -> None:
    with anthropic_client(fake_llm) as client, pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=messages, **extra)
    assert message in _anthropic_refusal(info.value)


def test_messages_refuses_a_missing_max_tokens(fake_llm: FakeLLMServer) -> None:
    # the SDK cannot leave max_tokens out: send the body as a careless client would
    request = urllib.request.Request(
        f"{fake_llm.anthropic_url}/v1/messages",
        data=json.dumps({"model": "claude-haiku-4-5", "messages": HI}).encode(),
        headers={"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 400
    assert json.loads(info.value.read()) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


def test_validation_can_be_turned_off() -> None:
    with FakeLLMServer(validate=False) as server, openai_client(server) as client:
        out = client.chat.completions.create(model="o3", messages=HI, max_tokens=5)
    assert out.choices[0].message.content == "ok"


# -- the providers send what the APIs take --------------------------------------------------


def test_anthropic_empty_answer_is_reasked_without_an_empty_block(
    fake_llm: FakeLLMServer,
) -> None:
    class Verdict(BaseModel):
        score: int

    fake_llm.script(FakeReply(text=""), FakeReply(json={"score": 2}))
    out = gen(Model(config_for("messages", fake_llm)), "grade", output=Verdict)
    assert out.parsed == Verdict(score=2) and out.attempts == 2
    turns = fake_llm.requests[-1].body["messages"]
    assert [t["role"] for t in turns] == ["user"]  # the empty answer left no turn behind
    assert [b["text"][:10] for b in turns[0]["content"]] == ["grade", "Your answe"]


def test_anthropic_thinking_tool_loop_replays_every_block(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        FakeReply(
            reasoning="plan", redacted=True, tool_calls=(FakeToolCall("bash", {"cmd": "ls"}),)
        ),
        FakeReply(text="done"),
    )
    model = Model(config_for("messages", fake_llm, options={"thinking_budget": 1024}))
    first = gen(model, "go", tools=[BASH])
    assert [r.type for r in first.reasoning_items] == ["thinking", "redacted_thinking"]
    [call] = first.tool_calls
    conversation = [
        UserMessage(content="go"),
        first.assistant_message(),
        ToolMessage(tool_call_id=call.id, content="a.txt"),
    ]
    second = gen(model, conversation, tools=[BASH])
    assert second.text == "done"
    sent = fake_llm.requests[-1].body["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["thinking", "redacted_thinking", "tool_use"]
    assert sent[1]["data"] == first.reasoning_items[1].data


def test_responses_reasoning_items_are_carried_between_turns(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        FakeReply(reasoning="plan", tool_calls=(FakeToolCall("bash", {"cmd": "ls"}),)),
        FakeReply(text="done"),
    )
    model = Model(config_for("responses", fake_llm))
    first = gen(model, "go", tools=[BASH], reasoning_effort="low")
    assert fake_llm.requests[0].body["include"] == ["reasoning.encrypted_content"]
    [item] = first.reasoning_items
    assert item.type == "reasoning" and item.id and item.data and item.summary == ("plan",)
    [call] = first.tool_calls
    conversation = [
        UserMessage(content="go"),
        first.assistant_message(),
        ToolMessage(tool_call_id=call.id, content="a.txt"),
    ]
    assert gen(model, conversation, tools=[BASH]).text == "done"
    sent = fake_llm.requests[-1].body["input"]
    assert [i.get("type") for i in sent[1:]] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent[1] == {
        "type": "reasoning",
        "id": item.id,
        "encrypted_content": item.data,
        "summary": [{"type": "summary_text", "text": "plan"}],
    }


class Part(BaseModel):
    name: str = Field(min_length=1)


class Scored(BaseModel):
    score: float = Field(ge=0, le=1, description="between 0 and 1")
    part: Part = Field(description="the part graded")  # a $ref with a sibling
    note: str | None = None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pydantic_schemas_are_sent_as_each_api_takes_them(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script(FakeReply(json={"score": 0.5, "part": {"name": "x"}, "note": None}))
    out = gen(Model(config_for(protocol, fake_llm)), "grade", output=Scored)
    assert out.parsed == Scored(score=0.5, part=Part(name="x"))
    assert len(fake_llm.requests) == 1  # accepted at once


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_an_open_dict_schema_is_sent_unchanged_and_not_strict(
    fake_llm: FakeLLMServer, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = {
        "type": "object",
        "properties": {"scores": {"type": "object", "additionalProperties": {"type": "number"}}},
        "required": ["scores"],
    }
    request = ModelRequest(
        messages=(UserMessage(content="scores"),),
        output=OutputSchema(name="scores", json_schema=schema, strict=True),
    )
    model = Model(config_for(protocol, fake_llm))

    async def call() -> None:
        async with model:
            await model.api.generate(request)

    run(call())
    body = fake_llm.requests[-1].body
    fmt = body["response_format"]["json_schema"] if protocol == "chat" else body["text"]["format"]
    assert fmt["strict"] is False and fmt["schema"] == schema
    assert "sent without strict mode" in caplog.text


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_a_temperature_the_model_refuses_fails_at_once(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    config = config_for(protocol, fake_llm, options={"api": "responses", "official": True})
    if protocol == "messages":
        config = config_for(protocol, fake_llm)
    with pytest.raises(ModelRequestError, match="temperature"):
        gen(Model(config), "hi", temperature=0.3)
    assert fake_llm.requests == []


# -- loose usage fields and unreadable bodies ---------------------------------------------

PARTIAL_USAGE = {
    "chat": {"prompt_tokens": 7},
    "responses": {"input_tokens": 7, "output_tokens_details": None},
    "messages": {"input_tokens": 7, "output_tokens": None, "cache_read_input_tokens": None},
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("usage", ["absent", "null", "partial"])
def test_loose_usage_reads_as_zeros(fake_llm: FakeLLMServer, protocol: str, usage: str) -> None:
    if usage == "absent":
        reply = FakeReply(text="fine", omit=("usage",))
    elif usage == "null":
        reply = FakeReply(text="fine", override={"usage": None})
    else:
        reply = FakeReply(text="fine", override={"usage": PARTIAL_USAGE[protocol]})
    fake_llm.script(reply)
    model = Model(config_for(protocol, fake_llm))
    out = gen(model, "hi")
    assert out.text == "fine"
    assert len(fake_llm.requests) == 1  # not retried
    expected = 7 if usage == "partial" else 0
    assert out.usage.input_tokens == expected
    assert out.usage.output_tokens == out.usage.cached_input_tokens == 0
    [record] = model.ledger.records
    assert record.outcome == "ok" and record.usage == out.usage


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_page_that_is_not_json_is_retried(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(Fault.html(), FakeReply(text="recovered"))
    out = gen(Model(config_for(protocol, fake_llm)), "hi")
    assert out.text == "recovered"
    assert len(fake_llm.requests) == 2


def test_generate_sends_the_callers_schema_for_each_provider_to_convert(
    fake_llm: FakeLLMServer,
) -> None:
    # Through the public path: an open dict must reach the provider as the caller wrote it
    # (a pre-pass that closed every object would make it accept no key at all).
    schema = {
        "type": "object",
        "properties": {"scores": {"type": "object", "additionalProperties": {"type": "number"}}},
        "required": ["scores"],
    }
    fake_llm.handler = lambda request: FakeReply(json={"scores": {"leaf-1": 0.5}})
    out = gen(Model(config_for("chat", fake_llm)), "scores", output=schema)
    assert out.parsed == {"scores": {"leaf-1": 0.5}}
    sent = fake_llm.requests[-1].body["response_format"]["json_schema"]
    assert sent["schema"] == schema and sent["strict"] is False
