"""What a long tool loop meets at the model layer, through the real SDKs against the fake
server: the context window, unpaired tool calls, empty and cut-off answers, reasoning
parameters on plain models, and prompt caching (refused as the real APIs refuse; never
triggered by the project's own adapters)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from paperbench.errors import ContextLengthError, ModelRequestError
from paperbench.llm import (
    AssistantMessage,
    Model,
    SystemMessage,
    ToolCall,
    ToolDef,
    ToolMessage,
    UserMessage,
    count_message_tokens,
)
from paperbench.llm._anthropic import AnthropicAPI
from paperbench.llm._cache import cache_key
from paperbench.llm._registry import resolve
from paperbench.llm._retry import status_error
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, FakeUsage
from tests.fixtures import anthropic_client, openai_client
from tests.llm.helpers import config_for, gen

PROTOCOLS = ["chat", "responses", "messages"]
BASH = ToolDef(
    name="bash",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
)
HI: Any = [{"role": "user", "content": "hi"}]


def _error(exc: openai.BadRequestError) -> dict[str, Any]:
    assert exc.status_code == 400 and isinstance(exc.body, dict)
    return exc.body


def _anthropic_message(exc: anthropic.BadRequestError) -> str:
    assert exc.status_code == 400 and isinstance(exc.body, dict)
    assert exc.body["error"]["type"] == "invalid_request_error"
    return str(exc.body["error"]["message"])


# -- the context window ------------------------------------------------------------------


def test_context_windows_are_refused_with_each_providers_shape() -> None:
    windows = {"gpt-4o": 50, "o3": 50, "claude-haiku-4-5": 50}
    long: Any = [{"role": "user", "content": "word " * 200}]
    with (
        FakeLLMServer(context_windows=windows) as server,
        openai_client(server) as client,
        anthropic_client(server) as claude,
    ):
        with pytest.raises(openai.BadRequestError) as chat:
            client.chat.completions.create(model="gpt-4o-2024-08-06", messages=long)
        error = _error(chat.value)
        assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
        assert error["message"] == (
            "This model's maximum context length is 50 tokens. However, your messages resulted "
            "in 205 tokens. Please reduce the length of the messages."
        )
        with pytest.raises(openai.BadRequestError) as responses:
            client.responses.create(model="o3", input=long)
        error = _error(responses.value)
        assert error["code"] == "context_length_exceeded"
        assert error["message"].startswith("Your input exceeds the context window of this model.")
        with pytest.raises(anthropic.BadRequestError) as messages:
            claude.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=long)
        assert _anthropic_message(messages.value).startswith("prompt is too long: ")
        assert _anthropic_message(messages.value).endswith(" tokens > 50 maximum")
        # under the window: answered
        assert client.chat.completions.create(model="gpt-4o", messages=HI).choices


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_context_window_refusal_is_a_context_length_error(protocol: str) -> None:
    with FakeLLMServer(context_windows={"gpt-4o": 100, "o3": 100, "claude-haiku-4-5": 100}) as s:
        model = Model(config_for(protocol, s))
        with pytest.raises(ContextLengthError) as info:
            gen(model, "word " * 300)
        assert isinstance(info.value, ModelRequestError)
        assert len(s.requests) == 1  # never retried
        if protocol == "responses":  # the Responses API names no counts
            assert info.value.tokens is None and info.value.limit is None
        else:
            assert info.value.limit == 100 and info.value.tokens is not None
            assert info.value.tokens > 100
        [record] = model.ledger.records
        assert record.outcome == "failed" and record.cost_usd == 0.0


@pytest.mark.parametrize(
    ("message", "tokens", "limit"),
    [
        (
            "This model's maximum context length is 128000 tokens. However, you requested "
            "130512 tokens (129000 in the messages, 1512 in the completion). Please reduce "
            "the length of the messages or completion.",
            130512,
            128000,
        ),
        ("prompt is too long: 210345 tokens > 200000 maximum", 210345, 200000),
        ("Your input exceeds the context window of this model.", None, None),
    ],
)
def test_the_counts_are_read_from_each_wording(
    message: str, tokens: int | None, limit: int | None
) -> None:
    error = status_error(400, message, headers={}, model="m", key_hint="K")
    assert isinstance(error, ContextLengthError)
    assert (error.tokens, error.limit) == (tokens, limit)
    other = status_error(400, "Invalid value for 'content'", headers={}, model="m", key_hint="K")
    assert not isinstance(other, ContextLengthError)


def test_the_servers_count_is_the_model_layers_count_foropenai_client() -> None:
    # a loop that counts its conversation predicts the server's verdict exactly
    call = ToolCall(id="call_1", name="bash", arguments={"cmd": "cat log.txt"})
    history = [
        SystemMessage(content="You replicate papers."),
        UserMessage(content="Train the model " * 20),
        AssistantMessage(content="", tool_calls=(call,)),
        ToolMessage(tool_call_id="call_1", content="loss=0.25 " * 30),
    ]
    exact = count_message_tokens(history, "openai/gpt-4o")
    for window, refused in ((exact, False), (exact - 1, True)):
        with FakeLLMServer(context_windows={"gpt-4o": window}) as server:
            model = Model(config_for("chat", server))
            if refused:
                with pytest.raises(ContextLengthError) as info:
                    gen(model, history)
                assert (info.value.tokens, info.value.limit) == (exact, exact - 1)
            else:
                assert gen(model, history).text == "ok"


# -- tool calls must be answered, answers must have calls ---------------------------------


def _assistant_call(call_id: str) -> dict[str, Any]:
    function = {"name": "bash", "arguments": "{}"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


@pytest.mark.parametrize(
    ("messages", "text", "param"),
    [
        (
            [*HI, {"role": "assistant", "content": None}, {"role": "user", "content": "go"}],
            "Invalid value for 'content': expected a string, got null.",
            "messages.[1].content",
        ),
        (
            [*HI, {"role": "tool", "tool_call_id": "call_x", "content": "out"}],
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
            "message with 'tool_calls'.",
            "messages.[1].role",
        ),
        (
            [*HI, _assistant_call("call_x"), {"role": "user", "content": "go"}],
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            "response messages: call_x",
            "messages.[1].role",
        ),
    ],
    ids=["null-content", "orphan-tool", "unanswered-call"],
)
def test_chat_refuses_unpaired_turns(
    fake_llm: FakeLLMServer, messages: Any, text: str, param: str
) -> None:
    with openai_client(fake_llm) as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gpt-4o", messages=messages)
    error = _error(info.value)
    assert (error["message"], error["param"]) == (text, param)


@pytest.mark.parametrize(
    ("items", "text"),
    [
        (
            [*HI, {"type": "function_call_output", "call_id": "call_x", "output": "o"}],
            "No tool call found for function call output with call_id call_x.",
        ),
        (
            [*HI, {"type": "function_call", "call_id": "call_x", "name": "bash", "arguments": ""}],
            "No tool output found for function call call_x.",
        ),
    ],
    ids=["orphan-output", "unanswered-call"],
)
def test_responses_refuses_unpaired_items(fake_llm: FakeLLMServer, items: Any, text: str) -> None:
    with openai_client(fake_llm) as client, pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="o3", input=items)
    assert _error(info.value)["message"] == text


def test_responses_refuses_a_dangling_reasoning_item(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(reasoning="thinking...", stop="max_tokens"))
    with openai_client(fake_llm) as client:
        first = client.responses.create(
            model="o3", input=HI, store=False, include=["reasoning.encrypted_content"]
        )
        [item] = first.output
        assert item.type == "reasoning" and first.status == "incomplete"
        again: Any = [*HI, item.model_dump(exclude_none=True), {"role": "user", "content": "go"}]
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="o3", input=again, store=False)
    assert _error(info.value)["message"] == (
        f"Item '{item.id}' of type 'reasoning' was provided without its required following item."
    )


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        (
            [
                *HI,
                {"role": "assistant", "content": "a"},
                _tool_result := {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "o"}],
                },
            ],
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_x. Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message.",
        ),
        (
            [
                *HI,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_x", "name": "bash", "input": {}}],
                },
                {"role": "user", "content": "go on"},
            ],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_x. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message.",
        ),
    ],
    ids=["orphan-result", "unanswered-use"],
)
def test_anthropic_refuses_unpaired_blocks(
    fake_llm: FakeLLMServer, messages: Any, text: str
) -> None:
    with anthropic_client(fake_llm) as claude, pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=messages)
    assert _anthropic_message(info.value) == text


def test_reasoning_parameters_are_refused_on_plain_models() -> None:
    with FakeLLMServer(refuse_plain_reasoning=True) as server, openai_client(server) as client:
        with pytest.raises(openai.BadRequestError) as chat:
            client.chat.completions.create(model="gpt-4o", messages=HI, reasoning_effort="low")
        with pytest.raises(openai.BadRequestError) as responses:
            client.responses.create(model="gpt-4.1", input=HI, reasoning={"effort": "low"})
    assert _error(chat.value)["message"] == (
        "Unsupported parameter: 'reasoning_effort' is not supported with this model."
    )
    assert _error(responses.value)["param"] == "reasoning.effort"


def test_reasoning_parameters_on_plain_models_pass_on_a_server_that_ignores_them() -> None:
    with FakeLLMServer(refuse_plain_reasoning=False) as server, openai_client(server) as client:
        assert client.chat.completions.create(model="gpt-4o", messages=HI, reasoning_effort="low")


def test_a_fifth_cache_breakpoint_is_refused(fake_llm: FakeLLMServer) -> None:
    marked = {"type": "ephemeral"}
    system: Any = [{"type": "text", "text": f"part {i}", "cache_control": marked} for i in range(5)]
    with anthropic_client(fake_llm) as claude, pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="claude-haiku-4-5", max_tokens=10, system=system, messages=HI)
    assert _anthropic_message(info.value) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


# -- the adapters send back what the APIs accept ------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_empty_answer_is_sent_back_as_the_api_accepts(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script(FakeReply(text=""), FakeReply(text="second"))
    model = Model(config_for(protocol, fake_llm))
    first = gen(model, [UserMessage(content="q")])
    assert not first.complete and first.text == "" and not first.tool_calls
    history = [UserMessage(content="q"), first.assistant_message(), UserMessage(content="again")]
    assert gen(Model(config_for(protocol, fake_llm)), history).text == "second"
    sent = fake_llm.requests[-1].body
    if protocol == "chat":
        assert sent["messages"][1] == {"role": "assistant", "content": ""}
    elif protocol == "messages":
        # the empty turn is left out; the user turns around it become one turn
        assert [m["role"] for m in sent["messages"]] == ["user"]
        assert [b["text"] for b in sent["messages"][0]["content"]] == ["q", "again"]


def test_a_responses_answer_cut_off_mid_reasoning_is_not_sent_back(
    fake_llm: FakeLLMServer,
) -> None:
    fake_llm.script(FakeReply(reasoning="so far", stop="max_tokens"), FakeReply(text="done"))
    first = gen(Model(config_for("responses", fake_llm)), "q", max_tokens=16)
    assert first.stop_reason == "max_tokens" and len(first.reasoning_items) == 1
    history = [UserMessage(content="q"), first.assistant_message(), UserMessage(content="go")]
    assert gen(Model(config_for("responses", fake_llm)), history).text == "done"
    assert all(i.get("type") != "reasoning" for i in fake_llm.requests[-1].body["input"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("raw", ['{"cmd": "python train.py --ep', '{"cmd": "ls"}'])
def test_a_tool_call_cut_off_is_marked_and_can_be_answered(
    fake_llm: FakeLLMServer, protocol: str, raw: str
) -> None:
    cut = FakeToolCall(name="bash", raw_arguments=raw)
    fake_llm.script(FakeReply(tool_calls=(cut,), stop="length"), FakeReply(text="retrying"))
    out = gen(Model(config_for(protocol, fake_llm)), "train", tools=[BASH], max_tokens=32)
    assert out.stop_reason == "max_tokens" and not out.complete
    [call] = out.tool_calls
    assert call.truncated and call.parse_error  # even when the cut arguments parse
    # the loop refuses to run it and answers with an error: the API accepts that history
    history = [
        UserMessage(content="train"),
        out.assistant_message(),
        ToolMessage(tool_call_id=call.id, content="not run: cut off", is_error=True),
    ]
    assert gen(Model(config_for(protocol, fake_llm)), history, tools=[BASH]).text == "retrying"


# -- prompt caching -----------------------------------------------------------------------

LONG_SYSTEM = "You are an agent that replicates machine-learning papers step by step. " * 200


def _loop(protocol: str, server: FakeLLMServer, steps: int, **config: Any) -> list[Any]:
    """A tool loop of ``steps`` calls sharing a prompt cache key; each call's output."""
    model = Model(config_for(protocol, server, **config))
    history: list[Any] = [SystemMessage(content=LONG_SYSTEM), UserMessage(content="start")]
    outputs = []
    for step in range(steps):
        server.script(FakeReply(tool_calls=(FakeToolCall(name="bash", arguments={"n": step}),)))
        out = gen(model, history, tools=[BASH], prompt_cache_key="run-1")
        outputs.append(out)
        [call] = out.tool_calls
        history += [out.assistant_message(), ToolMessage(tool_call_id=call.id, content="x" * 50)]
    return outputs


def test_anthropic_gets_a_rolling_breakpoint_and_reads_its_cache(fake_llm: FakeLLMServer) -> None:
    outputs = _loop("messages", fake_llm, 3, model="anthropic/claude-haiku-4-5")
    bodies = [r.body for r in fake_llm.requests]
    for body in bodies:
        last = body["messages"][-1]["content"][-1]
        assert last["cache_control"] == {"type": "ephemeral"}
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    first, second, third = (o.usage for o in outputs)
    assert first.cached_input_tokens == 0 and first.cache_write_tokens > 1024
    assert second.cached_input_tokens == first.cache_write_tokens  # the whole first prompt
    assert third.cached_input_tokens == second.cached_input_tokens + second.cache_write_tokens
    # the rolling breakpoint is the last block: nothing after it is left uncached
    assert third.input_tokens == third.cached_input_tokens + third.cache_write_tokens
    costs = [o.cost_usd for o in outputs]
    assert costs[2] < costs[0]  # reading is cheaper than writing


def test_anthropic_keeps_four_breakpoints_with_the_rolling_one(fake_llm: FakeLLMServer) -> None:
    messages: list[Any] = [SystemMessage(content="s", cache=True)]
    for i in range(5):
        messages += [UserMessage(content=f"u{i}", cache=True), AssistantMessage(content=f"a{i}")]
    messages.append(UserMessage(content="last"))
    gen(Model(config_for("messages", fake_llm)), messages, prompt_cache_key="k")
    body = fake_llm.requests[-1].body
    blocks = [*body["system"], *(b for m in body["messages"] for b in m["content"])]
    marked = [b["text"] for b in blocks if "cache_control" in b]
    assert marked == ["u2", "u3", "u4", "last"]  # the rolling one and the latest three


def test_without_a_key_anthropic_gets_no_rolling_breakpoint(fake_llm: FakeLLMServer) -> None:
    cls, target = resolve(config_for("messages", fake_llm), require_key=False)
    api = cls(target)
    assert isinstance(api, AnthropicAPI)
    from paperbench.llm import ModelRequest

    request = ModelRequest(messages=(SystemMessage(content="s"), UserMessage(content="u")))
    params = api.params(request)
    assert "cache_control" not in params["messages"][-1]["content"][-1]
    keyed = api.params(request.model_copy(update={"prompt_cache_key": "k"}))
    assert keyed["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_openai_gets_the_key_and_reports_cached_prefixes(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    options: dict[str, Any] = {"official": True}
    if protocol == "responses":
        options["api"] = "responses"
    outputs = _loop(protocol, fake_llm, 3, options=options)
    assert all(r.body["prompt_cache_key"] == "run-1" for r in fake_llm.requests)
    first, second, third = (o.usage for o in outputs)
    assert first.cached_input_tokens == 0 and first.input_tokens >= 1024
    for usage in (second, third):
        assert usage.cached_input_tokens >= 1024 and usage.cached_input_tokens % 128 == 0
        assert usage.input_tokens - 128 < usage.cached_input_tokens <= usage.input_tokens
    assert outputs[1].cost_usd is not None and outputs[0].cost_usd is not None
    assert outputs[1].cost_usd < outputs[0].cost_usd
    # another key does not share the cache
    fake_llm.script(FakeReply(text="x"))
    other = gen(
        Model(config_for(protocol, fake_llm, options=options)),
        [SystemMessage(content=LONG_SYSTEM), UserMessage(content="start")],
        tools=[BASH],
        prompt_cache_key="run-2",
    )
    assert other.usage.cached_input_tokens == 0


def test_the_prompt_cache_key_reaches_custom_endpoints_only_when_asked(
    fake_llm: FakeLLMServer,
) -> None:
    gen(Model(config_for("chat", fake_llm)), "q", prompt_cache_key="k")
    assert "prompt_cache_key" not in fake_llm.requests[-1].body
    forced = config_for("chat", fake_llm, options={"prompt_cache_key": True})
    gen(Model(forced), "q", prompt_cache_key="k")
    assert fake_llm.requests[-1].body["prompt_cache_key"] == "k"


def test_the_prompt_cache_key_does_not_change_the_response_cache_key() -> None:
    from paperbench.llm import ModelRequest

    request = ModelRequest(messages=(UserMessage(content="q"),))
    keyed = request.model_copy(update={"prompt_cache_key": "run-1"})
    where: dict[str, Any] = {
        "model": "openai/gpt-4o",
        "provider": "openai",
        "base_url": None,
        "options": {},
        "version": None,
    }
    assert cache_key(request=request, **where) == cache_key(request=keyed, **where)
    other = ModelRequest(messages=(UserMessage(content="r"),))
    assert cache_key(request=request, **where) != cache_key(request=other, **where)


def test_a_scripted_usage_still_wins(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text="a", usage=FakeUsage(input=9, cached_input=3, output=2)))
    out = gen(Model(config_for("chat", fake_llm)), "q")
    assert (out.usage.input_tokens, out.usage.cached_input_tokens) == (9, 3)
