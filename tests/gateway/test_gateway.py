"""The model gateway with the real openai and anthropic SDKs in front of it and the fake
model server behind it: forwarding, keys, usage and costs, budget, faults, replay."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import openai
import pytest

from paperbench.errors import ModelAuthError, ModelUnavailableError
from paperbench.gateway import GatewayCall, ModelGateway
from paperbench.llm import BudgetCaps, CostLedger, CostRecord, ModelConfig, PriceTable, Usage
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, Fault

T = TypeVar("T")

ANTHROPIC_KEY = "sk-ant-REAL-host-key-0123456789"
OPENAI_KEY = "sk-REAL-host-key-0123456789"
CLAUDE = "claude-haiku-4-5"
GPT = "gpt-4o"
USAGE = FakeUsage(input=120, output=9)


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=15)

    return asyncio.run(bounded())


@asynccontextmanager
async def gateway(fake: FakeLLMServer, folder: Path, **kwargs: Any) -> AsyncIterator[ModelGateway]:
    settings: dict[str, Any] = {
        "anthropic": ModelConfig(
            model=f"anthropic/{CLAUDE}", base_url=fake.anthropic_url, api_key=ANTHROPIC_KEY
        ),
        "openai": ModelConfig(model=f"openai/{GPT}", base_url=fake.openai_url, api_key=OPENAI_KEY),
        "log_dir": folder / "gateway",
        "ledger": CostLedger(),
        **kwargs,
    }
    async with ModelGateway(**settings) as gw:
        try:
            yield gw
        finally:
            while _OPEN:
                await _OPEN.pop().close()


_OPEN: list[Any] = []
"""The SDK clients of the running test, closed with its gateway."""


def clients(gw: ModelGateway, token: str | None = None) -> tuple[Any, Any]:
    key = token or gw.token
    claude = anthropic.AsyncAnthropic(api_key=key, base_url=gw.anthropic_base_url, max_retries=0)
    gpt = openai.AsyncOpenAI(api_key=key, base_url=gw.openai_base_url, max_retries=0)
    _OPEN.extend((claude, gpt))
    return claude, gpt


async def ask(gw: ModelGateway, protocol: str, stream: bool, **extra: Any) -> tuple[str, Any]:
    """One call through the SDK of ``protocol``: the answer's text and the raw headers and
    body the SDK got."""
    claude, gpt = clients(gw)
    if protocol == "messages":
        kwargs = {"model": CLAUDE, "max_tokens": 64, **extra}
        kwargs.setdefault("messages", [{"role": "user", "content": "hi"}])
        if stream:
            async with claude.messages.stream(**kwargs) as events:
                message = await events.get_final_message()
        else:
            message = await claude.messages.create(**kwargs)
        return "".join(b.text for b in message.content if b.type == "text"), message
    if protocol == "responses":
        kwargs = {"model": GPT, "input": extra.pop("input", "hi"), **extra}
        if stream:
            final = None
            async for event in await gpt.responses.create(stream=True, **kwargs):
                if event.type == "response.completed":
                    final = event.response
            assert final is not None
            return final.output_text, final
        response = await gpt.responses.create(**kwargs)
        return response.output_text, response
    kwargs = {"model": GPT, **extra}
    kwargs.setdefault("messages", [{"role": "user", "content": "hi"}])
    if stream:
        kwargs.setdefault("stream_options", {"include_usage": True})
        text = ""
        async for chunk in await gpt.chat.completions.create(stream=True, **kwargs):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text, None
    completion = await gpt.chat.completions.create(**kwargs)
    return completion.choices[0].message.content or "", completion


def lines(folder: Path) -> list[GatewayCall]:
    text = (folder / "gateway" / "gateway.jsonl").read_text(encoding="utf-8")
    return [GatewayCall.model_validate_json(line) for line in text.splitlines()]


PROTOCOLS = ["messages", "responses", "chat"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_forwarded_with_the_real_key_and_recorded(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str, stream: bool
) -> None:
    fake_llm.script(FakeReply(text="hello from upstream", usage=USAGE))
    seen: list[GatewayCall] = []

    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path, on_call=seen.append) as gw:
            text, _ = await ask(gw, protocol, stream)
            assert text == "hello from upstream"
            return gw

    gw = run(body())
    [request] = fake_llm.requests
    real = ANTHROPIC_KEY if protocol == "messages" else OPENAI_KEY
    sent = request.headers.get("x-api-key") or request.headers.get("authorization", "")
    assert real in sent
    assert gw.token not in json.dumps(request.headers)
    assert request.stream is stream
    [record] = gw.ledger.records
    provider = "anthropic" if protocol == "messages" else "openai"
    model = f"{provider}/{CLAUDE if protocol == 'messages' else GPT}"
    usage = Usage(input_tokens=120, output_tokens=9)
    assert (record.model, record.label, record.stage, record.outcome) == (
        model,
        "gateway",
        "rollout",
        "ok",
    )
    assert record.usage == usage and record.stop_reason == "stop" and record.error is None
    assert record.cost_usd == pytest.approx(PriceTable.load().cost(model, usage))
    assert record.cost_usd > 0
    [call] = lines(tmp_path)
    assert seen == [call]
    assert call.status == 200 and call.stream is stream and call.usage == usage
    assert call.request["model"] in model
    assert "hello f" in json.dumps(call.answer)  # streams are kept raw: text in pieces
    log_text = (tmp_path / "gateway" / "gateway.jsonl").read_text()
    assert real not in log_text and gw.token not in log_text


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_client_never_sees_the_real_key(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str
) -> None:
    real = ANTHROPIC_KEY if protocol == "messages" else OPENAI_KEY

    async def body() -> None:
        async with gateway(fake_llm, tmp_path) as gw:
            claude, gpt = clients(gw)
            for stream in (False, True):
                if protocol == "messages":
                    raw = await claude.messages.with_raw_response.create(
                        model=CLAUDE,
                        max_tokens=16,
                        messages=[{"role": "user", "content": "hi"}],
                        stream=stream,
                    )
                elif protocol == "responses":
                    raw = await gpt.responses.with_raw_response.create(
                        model=GPT, input="hi", stream=stream
                    )
                else:
                    raw = await gpt.chat.completions.with_raw_response.create(
                        model=GPT, messages=[{"role": "user", "content": "hi"}], stream=stream
                    )
                seen = (await raw.http_response.aread()).decode() + json.dumps(dict(raw.headers))
                assert real not in seen and "REAL" not in seen
                assert ("[DONE]" in seen or "event:" in seen) is stream

    run(body())
    assert len(fake_llm.requests) == 2


def test_a_wrong_or_missing_token_is_refused_in_each_providers_shape(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path) as gw:
            claude, gpt = clients(gw, token="not-the-token")
            with pytest.raises(anthropic.AuthenticationError) as refused:
                await claude.messages.create(
                    model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
            assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
            with pytest.raises(openai.AuthenticationError) as wrong:
                await gpt.responses.create(model=GPT, input="hi")
            assert wrong.value.code == "invalid_api_key"
            with pytest.raises(openai.AuthenticationError):
                await gpt.chat.completions.create(
                    model=GPT, messages=[{"role": "user", "content": "hi"}]
                )
            # the real key sent as if it were the token is no better
            _, real = clients(gw, token=OPENAI_KEY)
            with pytest.raises(openai.AuthenticationError):
                await real.models.list()
            return gw

    gw = run(body())
    assert fake_llm.requests == [] and gw.ledger.records == []
    assert {c.outcome for c in lines(tmp_path)} == {"unauthorized"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_past_the_budget_the_agent_gets_the_providers_answer(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str
) -> None:
    spent = CostRecord(model="openai/gpt-4o", label="gateway", stage="rollout", cost_usd=1.0)
    ledger = CostLedger([spent], caps=BudgetCaps(run_usd=0.5))

    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path, ledger=ledger) as gw:
            if protocol == "messages":
                with pytest.raises(anthropic.BadRequestError) as refused:
                    await ask(gw, protocol, False)
                assert "credit balance is too low" in refused.value.message
            else:
                with pytest.raises(openai.RateLimitError) as limited:
                    await ask(gw, protocol, protocol == "chat")
                assert limited.value.code == "insufficient_quota"
            assert gw.exhausted_event.is_set()
            return gw

    gw = run(body())
    assert gw.exhausted is not None and "budget exhausted" in gw.exhausted
    assert fake_llm.requests == []
    record = ledger.records[-1]
    assert (record.outcome, record.sent, record.label) == ("budget_exhausted", False, "gateway")


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.rate_limit(retry_after=1), openai.RateLimitError),
        (Fault.server_error(500), openai.InternalServerError),
    ],
)
def test_upstream_errors_pass_through(
    fake_llm: FakeLLMServer, tmp_path: Path, fault: Fault, error: type[Exception]
) -> None:
    fake_llm.script(fault, Fault.rate_limit())

    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path) as gw:
            with pytest.raises(error) as raised:
                await ask(gw, "responses", False)
            headers = raised.value.response.headers  # type: ignore[attr-defined]
            assert ("retry-after" in headers) is (fault.status == 429)
            with pytest.raises(anthropic.RateLimitError):
                await ask(gw, "messages", False)
            return gw

    gw = run(body())
    first, second = gw.ledger.records
    assert (first.outcome, first.sent, first.cost_usd) == ("failed", True, 0.0)
    assert first.error is not None and f"upstream {fault.status}" in first.error
    assert second.outcome == "failed" and second.model == f"anthropic/{CLAUDE}"


def test_the_upstreams_last_answers_say_whether_an_agent_gave_up_for_a_cause_outside_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A rejected key is the model layer's ModelAuthError, failures at the provider in a row
    its ModelUnavailableError; an answer, or a refusal of what the agent sent, clears it."""
    fake_llm.script(
        Fault.http(401, "Incorrect API key provided"),
        FakeReply(text="ok"),
        Fault.server_error(503),
        Fault.rate_limit(),
        Fault.http(400, "bad input"),
        Fault.http(403, "no access to the model"),
    )
    verdicts: list[Exception | None] = []

    async def body() -> None:
        async with gateway(fake_llm, tmp_path) as gw:
            for n in range(6):  # each a new request (an answered one would be replayed)
                with contextlib.suppress(openai.APIError):
                    await ask(gw, "responses", False, input=f"hi {n}")
                verdicts.append(gw.upstream.error())

    run(body())
    key, answered, down, still_down, refused, denied = verdicts
    assert isinstance(key, ModelAuthError) and key.status == 401
    assert str(key) == (
        f"openai/{GPT}: the API key was rejected (HTTP 401: Incorrect API key provided); "
        "check OPENAI_API_KEY"
    )
    assert answered is None and refused is None
    assert isinstance(down, ModelUnavailableError) and "1 model call in a row" in str(down)
    assert isinstance(still_down, ModelUnavailableError)
    assert "2 model calls in a row failed at the provider (the last: HTTP 429: rate limit" in str(
        still_down
    )
    assert isinstance(denied, ModelAuthError) and denied.status == 403


def test_an_unreachable_upstream_is_a_502_in_the_providers_shape(tmp_path: Path) -> None:
    with FakeLLMServer() as dead:
        pass  # stopped: its port refuses connections

    async def body() -> ModelGateway:
        async with gateway(dead, tmp_path) as gw:
            with pytest.raises(anthropic.InternalServerError) as failed:
                await ask(gw, "messages", False)
            assert failed.value.status_code == 502
            return gw

    gw = run(body())
    [record] = gw.ledger.records
    assert record.outcome == "failed" and "ClientConnectorError" in (record.error or "")
    # tried, but no HTTP answer: an attempt counted apart, not a request nor a refusal
    assert (record.sent, record.answered, record.cost_usd) == (True, False, 0.0)
    total = gw.ledger.report().total
    assert (total.requests, total.unanswered, total.refused) == (0, 1, 0)
    outage = gw.upstream.error()
    assert isinstance(outage, ModelUnavailableError), outage
    assert "1 model call in a row failed at the provider" in str(outage)
    assert "the gateway's request to the anthropic API failed: ClientConnectorError" in str(outage)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_stream_cut_upstream_is_cut_for_the_client_and_recorded_incomplete(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str
) -> None:
    fake_llm.script(Fault.stream_cut(after_events=3, reply=FakeReply(text="x" * 80)))

    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path) as gw:
            failure: Exception | None = None
            try:  # as the SDK reports a cut stream: its own error or its HTTP client's
                await ask(gw, protocol, True)
            except Exception as exc:
                failure = exc
            assert failure is not None
            return gw

    gw = run(body())
    [record] = gw.ledger.records
    assert record.outcome == "incomplete" and record.error
    assert isinstance(gw.upstream.error(), ModelUnavailableError)  # the provider broke it off
    if protocol == "messages":  # message_start carried the input tokens
        assert record.usage.input_tokens > 0
    assert not (tmp_path / "gateway" / "replay").exists() or not any(
        (tmp_path / "gateway" / "replay").iterdir()
    )


def test_a_chat_stream_without_include_usage_has_unknown_usage(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path) as gw:
            text, _ = await ask(gw, "chat", True, stream_options=None)
            assert text == "ok"
            return gw

    gw = run(body())
    [record] = gw.ledger.records
    assert record.outcome == "ok" and record.cost_usd is None
    assert "include_usage" in (record.error or "")
    assert gw.ledger.report().total.unpriced_calls == 1
    assert lines(tmp_path)[0].usage is None


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_answered_request_is_never_paid_twice(
    fake_llm: FakeLLMServer, tmp_path: Path, stream: bool
) -> None:
    fake_llm.script(FakeReply(text="paid once", usage=USAGE))

    async def once(ledger: CostLedger) -> None:
        async with gateway(fake_llm, tmp_path, ledger=ledger) as gw:
            text, _ = await ask(gw, "messages", stream)
            assert text == "paid once"
            if not stream:  # the same gateway again
                text, _ = await ask(gw, "messages", stream)
                assert text == "paid once"

    ledger = CostLedger()
    run(once(ledger))
    run(once(ledger))  # a new gateway on the same folder: a resumed run
    assert len(fake_llm.requests) == 1
    first, *hits = ledger.records
    assert first.outcome == "ok" and first.cost_usd
    assert len(hits) == (3 if not stream else 1)
    for hit in hits:
        assert (hit.outcome, hit.cost_usd, hit.sent) == ("cache_hit", 0.0, False)
        assert hit.saved_usd == pytest.approx(first.cost_usd)
    assert ledger.report().total.cache_hits == len(hits)


def test_a_changed_request_is_not_replayed(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    async def body() -> None:
        async with gateway(fake_llm, tmp_path) as gw:
            await ask(gw, "chat", False, messages=[{"role": "user", "content": "one"}])
            await ask(gw, "chat", False, messages=[{"role": "user", "content": "two"}])

    run(body())
    assert len(fake_llm.requests) == 2


def test_models_outside_the_allowed_set_or_provider_are_refused(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    async def body() -> ModelGateway:
        allowed = {f"anthropic/{CLAUDE}", GPT}
        async with gateway(fake_llm, tmp_path, allowed_models=allowed, openai=None) as gw:
            await ask(gw, "messages", False)
            with pytest.raises(anthropic.NotFoundError) as refused:
                await ask(gw, "messages", False, model="claude-not-allowed")
            assert "claude-not-allowed" in refused.value.message
            with pytest.raises(openai.NotFoundError) as missing:
                await ask(gw, "responses", False)  # no OpenAI upstream in this run
            assert "no openai model is configured" in missing.value.message
            return gw

    gw = run(body())
    assert [r.model for r in fake_llm.requests] == [CLAUDE]
    outcomes = [(r.outcome, r.sent) for r in gw.ledger.records]
    assert outcomes == [("ok", True), ("failed", False), ("failed", False)]


def test_headers_and_query_pass_through_and_models_list(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    async def body() -> None:
        async with gateway(fake_llm, tmp_path) as gw:
            claude, gpt = clients(gw)
            await claude.beta.messages.create(
                model=CLAUDE,
                max_tokens=8,
                messages=[{"role": "user", "content": "hi"}],
                betas=["interleaved-thinking-2025-05-14"],
                extra_query={"beta": "true"},
            )
            page = await gpt.models.list()
            assert page.data == []

    run(body())
    request = fake_llm.requests[0]
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert "anthropic-version" in request.headers and "x-api-key" in request.headers
    assert "authorization" not in request.headers
    calls = lines(tmp_path)
    assert calls[0].route.endswith("/v1/messages?beta=true")
    assert calls[1].outcome == "passed"


def test_an_upstream_timeout_is_a_504(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.script(Fault.slow(3))
    config = ModelConfig(
        model=f"openai/{GPT}", base_url=fake_llm.openai_url, api_key=OPENAI_KEY, timeout_s=0.3
    )

    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path, openai=config) as gw:
            with pytest.raises(openai.InternalServerError) as failed:
                await ask(gw, "chat", False)
            assert failed.value.status_code == 504
            return gw

    gw = run(body())
    [record] = gw.ledger.records
    assert record.outcome == "failed" and "timed out" in (record.error or "")
    # the server had the request and may have billed it: sent, no answer, cost unknown
    assert (record.sent, record.answered, record.cost_usd) == (True, False, None)
    assert len(fake_llm.requests) == 1


@asynccontextmanager
async def gated_upstream(release: asyncio.Event, seen: list[str]) -> AsyncIterator[str]:
    """A tiny Anthropic-shaped upstream whose stream sends ``message_start``, then waits for
    ``release`` before the rest: a gateway that buffered would never show the first event."""
    from aiohttp import web

    async def messages(request: web.Request) -> web.StreamResponse:
        seen.append(request.path_qs)
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        start = {"type": "message_start", "message": {"usage": {"input_tokens": 7}}}
        await response.write(f"event: message_start\ndata: {json.dumps(start)}\n\n".encode())
        await asyncio.wait_for(release.wait(), timeout=5)
        delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
        delta["usage"] = {"output_tokens": 3}
        await response.write(f"event: message_delta\ndata: {json.dumps(delta)}\n\n".encode())
        await response.write(b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
        await response.write_eof()
        return response

    async def count(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        return web.json_response({"input_tokens": 5})

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def test_a_stream_is_relayed_event_by_event_not_buffered(tmp_path: Path) -> None:
    import aiohttp

    seen: list[str] = []

    async def body() -> ModelGateway:
        release = asyncio.Event()
        async with gated_upstream(release, seen) as url:
            config = ModelConfig(model=f"anthropic/{CLAUDE}", base_url=url, api_key=ANTHROPIC_KEY)
            async with (
                ModelGateway(anthropic=config, log_dir=tmp_path / "gw") as gw,
                aiohttp.ClientSession() as session,
            ):
                headers = {"x-api-key": gw.token, "anthropic-version": "2023-06-01"}
                big = {"model": CLAUDE, "max_tokens": 8, "stream": True}
                big["messages"] = [{"role": "user", "content": "y" * 300_000}]
                async with session.post(
                    gw.anthropic_base_url + "/v1/messages?beta=true", json=big, headers=headers
                ) as response:
                    first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 5)
                    assert b"message_start" in first  # arrived while upstream still waits
                    release.set()
                    rest = await response.content.read()
                    assert b"message_stop" in rest
                async with session.post(
                    gw.anthropic_base_url + "/v1/messages/count_tokens",
                    json={"model": CLAUDE, "messages": []},
                    headers=headers,
                ) as counted:
                    assert (await counted.json()) == {"input_tokens": 5}
            return gw

    gw = run(body())
    assert seen == ["/v1/messages?beta=true", "/v1/messages/count_tokens"]
    [record] = gw.ledger.records  # counting tokens costs nothing and is no cost record
    assert record.usage == Usage(input_tokens=7, output_tokens=3) and record.outcome == "ok"
    stream_call, count_call = _calls(tmp_path)
    assert stream_call.request_cut_at == 256 * 1024 and isinstance(stream_call.request, str)
    assert count_call.outcome == "passed" and count_call.status == 200


def _calls(tmp_path: Path) -> list[GatewayCall]:
    text = (tmp_path / "gw" / "gateway.jsonl").read_text(encoding="utf-8")
    return [GatewayCall.model_validate_json(line) for line in text.splitlines()]


def test_concurrent_requests_are_each_recorded(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    async def body() -> ModelGateway:
        async with gateway(fake_llm, tmp_path) as gw:
            # the fake server loads its tokenizer at its first request, once per thread that
            # asks at once (seconds each): warm it up first
            await ask(gw, "chat", False, messages=[{"role": "user", "content": "warm up"}])
            asks = [
                ask(gw, "chat", n % 2 == 0, messages=[{"role": "user", "content": f"q{n}"}])
                for n in range(20)
            ]
            texts = await asyncio.gather(*asks)
            assert [t for t, _ in texts] == ["ok"] * 20
            return gw

    gw = run(body())
    assert len(fake_llm.requests) == 21
    assert [r.outcome for r in gw.ledger.records] == ["ok"] * 21
    assert len(lines(tmp_path)) == 21
