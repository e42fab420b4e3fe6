"""Each provider through its real SDK against the fake server: text, tools, structured
output, usage and cost, and the request each one sends."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from paperbench.llm import (
    AssistantMessage,
    Model,
    ModelConfig,
    SystemMessage,
    ToolCall,
    ToolDef,
    ToolMessage,
    UserMessage,
)
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, FakeUsage
from tests.llm.helpers import config_for, fast, gen

PROTOCOLS = ["chat", "responses", "messages"]

BASH = ToolDef(
    name="bash",
    description="Run a shell command",
    parameters={"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
)


class Grade(BaseModel):
    score: float
    valid: bool
    explanation: str


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_plain_text(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(FakeReply(text="Hello there"))
    model = Model(config_for(protocol, fake_llm))
    out = gen(model, [SystemMessage(content="Be brief."), UserMessage(content="Hi")])
    assert out.text == "Hello there"
    assert out.stop_reason == "stop"
    assert out.tool_calls == []
    assert out.cached is False
    [request] = fake_llm.requests
    assert request.protocol == protocol
    assert request.model == model.config.model_name
    assert "Be brief." in str(request.body)
    assert "Hi" in str(request.body)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tool_calls_round_trip(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(FakeReply(tool_calls=(FakeToolCall("bash", {"cmd": "ls -la"}),)))
    fake_llm.script(FakeReply(text="done"))
    model = Model(config_for(protocol, fake_llm))
    first = gen(model, "list files", tools=[BASH], label="agent_step")
    assert first.stop_reason == "tool_calls"
    [call] = first.tool_calls
    assert call.name == "bash"
    assert call.arguments == {"cmd": "ls -la"}

    conversation = [
        UserMessage(content="list files"),
        first.assistant_message(),
        ToolMessage(tool_call_id=call.id, content="file.txt"),
    ]
    second = gen(model, conversation, tools=[BASH], label="agent_step")
    assert second.text == "done"

    sent_tools, followup = fake_llm.requests[0].body["tools"], fake_llm.requests[1].body
    body = str(followup)
    assert call.id in body and "file.txt" in body
    if protocol == "chat":
        assert sent_tools[0]["function"]["name"] == "bash"
        assert followup["messages"][2] == {
            "role": "tool",
            "tool_call_id": call.id,
            "content": "file.txt",
        }
    elif protocol == "responses":
        assert sent_tools[0]["name"] == "bash"
        kinds = [item.get("type") for item in followup["input"]]
        assert "function_call" in kinds and "function_call_output" in kinds
    else:
        assert sent_tools[0]["input_schema"]["required"] == ["cmd"]
        assert followup["messages"][1]["content"][0]["type"] == "tool_use"
        assert followup["messages"][2]["content"][0]["type"] == "tool_result"


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_tool_call_with_bad_json_arguments_is_reported(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    fake_llm.script(FakeReply(tool_calls=(FakeToolCall("bash", raw_arguments="{not json"),)))
    out = gen(Model(config_for(protocol, fake_llm)), "go", tools=[BASH])
    [call] = out.tool_calls
    assert call.arguments == {}
    assert call.parse_error is not None and "not JSON" in call.parse_error


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_structured_output_pydantic(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(FakeReply(json={"score": 0.75, "valid": True, "explanation": "fine"}))
    model = Model(config_for(protocol, fake_llm))
    out = gen(model, "grade this", output=Grade, label="judge_grading")
    assert isinstance(out.parsed, Grade)
    assert out.parsed.score == 0.75
    body = fake_llm.requests[0].body
    if protocol == "chat":
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema"
        assert fmt["json_schema"]["strict"] is True
        schema = fmt["json_schema"]["schema"]
    elif protocol == "responses":
        assert body["text"]["format"]["type"] == "json_schema"
        schema = body["text"]["format"]["schema"]
    else:
        assert body["output_config"]["format"]["type"] == "json_schema"
        schema = body["output_config"]["format"]["schema"]
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["explanation", "score", "valid"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_structured_output_json_schema(fake_llm: FakeLLMServer, protocol: str) -> None:
    schema = {
        "type": "object",
        "properties": {"rank": {"type": "array", "items": {"type": "string"}}},
        "required": ["rank"],
    }
    fake_llm.script(FakeReply(text='```json\n{"rank": ["a.py", "b.py"]}\n```'))
    out = gen(Model(config_for(protocol, fake_llm)), "rank", output=schema)
    assert out.parsed == {"rank": ["a.py", "b.py"]}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_usage_and_cost(fake_llm: FakeLLMServer, protocol: str) -> None:
    usage = FakeUsage(input=10_000, cached_input=4_000, output=1_000, reasoning=300)
    fake_llm.script(FakeReply(text="x", usage=usage))
    model = Model(config_for(protocol, fake_llm), stage="grading")
    out = gen(model, "hi", label="judge_grading")
    assert out.usage.input_tokens == 10_000
    assert out.usage.cached_input_tokens == 4_000
    assert out.usage.output_tokens == 1_000
    assert out.usage.reasoning_tokens == 300
    price = {
        "chat": (2.50, 1.25, 10.00),
        "responses": (2.00, 0.50, 8.00),
        "messages": (1.00, 0.10, 5.00),
    }[protocol]
    expected = (6_000 * price[0] + 4_000 * price[1] + 1_000 * price[2]) / 1e6
    assert out.cost_usd == pytest.approx(expected)
    [record] = model.ledger.records
    assert record.label == "judge_grading" and record.stage == "grading"
    assert record.cost_usd == pytest.approx(expected)


def test_anthropic_cache_write_is_priced(fake_llm: FakeLLMServer) -> None:
    usage = FakeUsage(input=10_000, cached_input=0, cache_write=8_000, output=0)
    fake_llm.script(FakeReply(text="x", usage=usage))
    out = gen(Model(config_for("messages", fake_llm)), "hi")
    assert out.usage.cache_write_tokens == 8_000
    assert out.cost_usd == pytest.approx((2_000 * 1.00 + 8_000 * 1.25) / 1e6)


def test_anthropic_prompt_caching_marks_the_shared_prefix(fake_llm: FakeLLMServer) -> None:
    model = Model(config_for("messages", fake_llm))
    gen(model, [SystemMessage(content="the paper " * 50), UserMessage(content="q")])
    body = fake_llm.requests[-1].body
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["messages"][0]["content"][0]

    prefix = UserMessage(content="paper and files", cache=True)
    gen(model, [SystemMessage(content="s"), prefix, UserMessage(content="leaf 1")])
    body = fake_llm.requests[-1].body
    assert "cache_control" not in body["system"][0]
    blocks = body["messages"][0]["content"]  # consecutive user turns are merged
    assert blocks[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in blocks[1]


def test_anthropic_extended_thinking_and_effort(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(FakeReply(text="answer", reasoning="let me think"))
    config = config_for("messages", fake_llm, options={"thinking_budget": 2048}, max_tokens=1000)
    model = Model(config)
    out = gen(model, "q", reasoning_effort="high")
    body = fake_llm.requests[-1].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] > 2048
    assert body["output_config"]["effort"] == "high"
    assert out.reasoning == "let me think"
    [item] = out.reasoning_items
    assert item.type == "thinking" and item.text == "let me think" and item.signature
    # the signed thinking block goes back with the next turn, unchanged
    gen(model, [UserMessage(content="q"), out.assistant_message(), UserMessage(content="more")])
    sent = fake_llm.requests[-1].body["messages"][1]["content"][0]
    assert sent == {"type": "thinking", "thinking": "let me think", "signature": item.signature}


def test_openai_reasoning_effort_and_max_tokens(fake_llm: FakeLLMServer) -> None:
    gen(Model(config_for("chat", fake_llm, model="openai/o3-mini")), "q", reasoning_effort="low")
    assert fake_llm.requests[-1].body["reasoning_effort"] == "low"
    gen(Model(config_for("chat", fake_llm)), "q", max_tokens=64)
    # a custom base URL gets the widely supported name
    assert fake_llm.requests[-1].body["max_tokens"] == 64

    # ...but OpenAI's reasoning models refuse max_tokens wherever they are served (the fake
    # server too, as the real API): they get max_completion_tokens behind any base URL
    for model in ("openai/o3-mini", "openai/o4-mini", "openai/gpt-5-mini", "openai/o1"):
        out = gen(Model(config_for("chat", fake_llm, model=model)), "q", max_tokens=64)
        assert out.text, model
        body = fake_llm.requests[-1].body
        assert body["max_completion_tokens"] == 64 and "max_tokens" not in body, model

    fake_llm.script(FakeReply(text="a", reasoning="summary"))
    out = gen(Model(config_for("responses", fake_llm)), "q", reasoning_effort="high")
    body = fake_llm.requests[-1].body
    assert body["reasoning"]["effort"] == "high"
    assert body["store"] is False
    assert out.reasoning == "summary"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_max_tokens_stop_reason(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(FakeReply(text="trunc", stop="max_tokens"))
    out = gen(Model(config_for(protocol, fake_llm)), "q", max_tokens=5)
    assert out.stop_reason == "max_tokens"


def test_openai_picks_responses_for_reasoning_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert Model("openai/o3").api.protocol == "responses"
    assert Model("openai/gpt-5-mini").api.protocol == "responses"
    assert Model("openai/gpt-4o").api.protocol == "chat"
    assert Model("anthropic/claude-haiku-4-5").api.protocol == "messages"
    # an OpenAI-compatible server speaks Chat Completions unless told otherwise
    custom = ModelConfig(model="openai/o3", base_url="http://127.0.0.1:9/v1")
    assert Model(custom).api.protocol == "chat"
    told = ModelConfig(
        model="openai/o3", base_url="http://127.0.0.1:9/v1", options={"api": "responses"}
    )
    assert Model(told).api.protocol == "responses"


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.openai.com/v1",
        "https://api.openai.com/v1/",
        "https://api.openai.com",
        "https://API.openai.com//v1",
        "https://api.openai.com:443/v1",
    ],
)
def test_openai_base_url_variable_on_openai_is_not_custom(
    monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    model = Model("openai/o3")
    assert model.target.custom_endpoint is False
    assert model.api.protocol == "responses"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.example.org/v1")
    assert Model("openai/o3").target.custom_endpoint is True


def test_openai_gateway_declared_official(fake_llm: FakeLLMServer) -> None:
    """A base URL that serves OpenAI's own API (here the fake server, which refuses
    ``max_tokens`` for o-series models as OpenAI does) gets OpenAI's parameter names."""
    config = fast("openai/o3", fake_llm.openai_url, options={"official": True, "api": "chat"})
    gen(Model(config), "q", max_tokens=64)
    body = fake_llm.requests[-1].body
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body


def test_standard_base_url_variables_are_honoured(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.anthropic_url)
    gen(Model(fast("openai/gpt-4o", None)), "a")
    gen(Model(fast("anthropic/claude-haiku-4-5", None)), "b")
    assert [r.protocol for r in fake_llm.requests] == ["chat", "messages"]


def test_named_endpoint(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(f"endpoints:\n  lab: {{base_url: '{fake_llm.openai_url}'}}\n")
    monkeypatch.setenv("PAPERBENCH_ENDPOINTS", str(endpoints))
    out = gen(Model(fast("lab/llama-3.1-8b", None)), "hello", max_tokens=10)
    assert out.text == "ok"
    [request] = fake_llm.requests
    assert request.model == "llama-3.1-8b"
    assert request.body["max_tokens"] == 10
    assert out.cost_usd is None  # not in the price table


def test_keys_go_in_the_authorization_header(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    gen(Model(config_for("chat", fake_llm)), "a")
    gen(Model(config_for("messages", fake_llm)), "b")
    assert fake_llm.requests[0].headers["authorization"] == "Bearer sk-from-env"
    headers = fake_llm.requests[1].headers
    assert "sk-ant-from-env" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


def test_key_from_dotenv(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")
    gen(Model(config_for("chat", fake_llm)), "a")
    assert fake_llm.requests[0].headers["authorization"] == "Bearer sk-from-dotenv"


def test_assistant_message_round_trip() -> None:
    message = AssistantMessage(content="x", tool_calls=(ToolCall(id="1", name="f"),))
    assert AssistantMessage.model_validate_json(message.model_dump_json()) == message


@pytest.mark.parametrize("protocol", ["chat", "responses"])
def test_openai_prompt_cache_key_follows_the_shared_prefix(
    fake_llm: FakeLLMServer, protocol: str
) -> None:
    config = config_for(protocol, fake_llm, options={"prompt_cache_key": True})
    if protocol == "responses":
        config = config_for(
            protocol, fake_llm, options={"api": "responses", "prompt_cache_key": True}
        )
    prefix = [SystemMessage(content="judge"), UserMessage(content="paper " * 100, cache=True)]
    for leaf in ("leaf 1", "leaf 2"):
        gen(Model(config), [*prefix, UserMessage(content=leaf)])
    gen(Model(config), [SystemMessage(content="other"), UserMessage(content="x", cache=True)])
    gen(Model(config), "no marks")
    keys = [r.body.get("prompt_cache_key") for r in fake_llm.requests]
    assert keys[0] is not None and keys[0] == keys[1]
    assert keys[2] not in (None, keys[0])
    assert keys[3] is None


def test_outputs_cached_by_earlier_versions_still_load() -> None:
    from paperbench.llm import ModelOutput

    # an answer cached before reasoning items existed: reasoning_signature, always dumped
    old = '{"model": "anthropic/x", "text": "a", "reasoning": "t", "reasoning_signature": "s"}'
    [item] = ModelOutput.model_validate_json(old).reasoning_items
    assert (item.type, item.text, item.signature) == ("thinking", "t", "s")
    plain = '{"model": "openai/x", "text": "a", "reasoning_signature": null}'
    assert ModelOutput.model_validate_json(plain).reasoning_items == []


def test_the_fake_server_refuses_max_tokens_for_a_reasoning_model_as_openai_does(
    fake_llm: FakeLLMServer,
) -> None:
    import json
    import urllib.error
    import urllib.request

    body = {"model": "o3-mini", "messages": [{"role": "user", "content": "q"}], "max_tokens": 8}
    request = urllib.request.Request(
        f"{fake_llm.openai_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert "max_completion_tokens" in json.loads(refused.value.read())["error"]["message"]
