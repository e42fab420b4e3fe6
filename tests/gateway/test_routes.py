"""The gateway forwards model calls only. Behind it here is the operator's account, a server
that answers ANY method and path with the account's private data and records each request as
it arrived: an agent's request that climbs out of the model routes (``..`` in any spelling),
names another endpoint or uses another method must never reach it. The allowed routes still
work through the real SDKs, and no answer tells the agent whose account the key belongs to."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web
from pydantic import SecretStr

from paperbench.gateway import ModelGateway
from paperbench.gateway._replay import ReplayStore, StoredAnswer, replay_key
from paperbench.llm import ModelConfig
from paperbench.testing import FakeLLMServer
from tests.gateway.test_gateway import (
    ANTHROPIC_KEY,
    CLAUDE,
    GPT,
    OPENAI_KEY,
    clients,
    gateway,
    lines,
    run,
)

SECRET = "file-OPERATOR-PRIVATE-7431"
ACCOUNT_HEADERS = {
    "openai-organization": "org-operator",
    "openai-project": "proj_operator",
    "anthropic-organization-id": "5b0c2a8e-1d4b-4c7a-9e2f-000000000001",
    "anthropic-workspace-id": "wrkspc_operator",
    "set-cookie": "__cf_bm=operator; path=/; domain=.api.openai.com",
}
"""What the real APIs send that names the operator's account (and a cookie of theirs)."""
AGENT_HEADERS = {
    "x-request-id": "req_openai",
    "request-id": "req_anthropic",
    "x-ratelimit-remaining-requests": "9999",
    "anthropic-ratelimit-requests-remaining": "3999",
}
"""What the agent's SDK may use: request ids and rate limits."""
CONTROL = ("GET", "/openai/v1/models")
"""An allowed request sent after each attack: the account must have seen this one only."""


@asynccontextmanager
async def account() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """The operator's account: its URL and the (method, raw target) of every request."""
    seen: list[tuple[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, request.raw_path))
        await request.read()
        path = request.path
        if path.endswith("/count_tokens"):
            body: dict[str, Any] = {"input_tokens": 5}
        elif path.endswith("/models"):
            body = {"object": "list", "data": [], "has_more": False}
            body |= {"first_id": None, "last_id": None}
        elif "/models/" in path:
            model = path.rsplit("/", 1)[1]
            body = {"id": model, "object": "model", "created": 0, "owned_by": "operator"}
            body |= {"type": "model", "display_name": model, "created_at": "2025-01-01T00:00:00Z"}
        else:  # the account's files, batches, fine-tunes, organisation
            body = {"object": "list", "data": [{"id": SECRET, "filename": "private.jsonl"}]}
        return web.json_response(body, headers={**ACCOUNT_HEADERS, **AGENT_HEADERS})

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", seen
    finally:
        await runner.cleanup()


@asynccontextmanager
async def guarded(tmp_path: Path) -> AsyncIterator[tuple[ModelGateway, list[tuple[str, str]]]]:
    """A gateway whose two upstreams are the operator's account."""
    async with account() as (url, seen):
        key, claude_key = SecretStr(OPENAI_KEY), SecretStr(ANTHROPIC_KEY)
        claude = ModelConfig(model=f"anthropic/{CLAUDE}", base_url=url, api_key=claude_key)
        gpt = ModelConfig(model=f"openai/{GPT}", base_url=f"{url}/v1", api_key=key)
        async with ModelGateway(anthropic=claude, openai=gpt, log_dir=tmp_path / "gateway") as gw:
            yield gw, seen


@asynccontextmanager
async def sdks(
    gw: ModelGateway,
) -> AsyncIterator[tuple[anthropic.AsyncAnthropic, openai.AsyncOpenAI]]:
    """The two SDKs with the run's token, closed afterwards."""
    claude = anthropic.AsyncAnthropic(
        api_key=gw.token, base_url=gw.anthropic_base_url, max_retries=0
    )
    gpt = openai.AsyncOpenAI(api_key=gw.token, base_url=gw.openai_base_url, max_retries=0)
    try:
        yield claude, gpt
    finally:
        await claude.close()
        await gpt.close()


async def send(gw: ModelGateway, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
    """``method target`` exactly as written (no client normalises it), with the run's token;
    the status and the rest of the answer (headers and body)."""
    reader, writer = await asyncio.open_connection(gw.host, gw.port)
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: gateway\r\nx-api-key: {gw.token}\r\n"
        f"Authorization: Bearer {gw.token}\r\nanthropic-version: 2023-06-01\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest


ATTACKS = [
    # climbing out of the OpenAI model route: `..` and `/` in every spelling
    ("GET", "/openai/v1/models/..%2Ffiles"),
    ("GET", "/openai/v1/models/..%2ffiles"),
    ("GET", "/openai/v1/models/%2e%2e/files"),
    ("GET", "/openai/v1/models/%2E%2E%2Ffiles"),
    ("GET", "/openai/v1/models/.%2e/files"),
    ("GET", "/openai/v1/models/%2e./files"),
    ("GET", "/openai/v1/models/../files"),
    ("GET", "/openai/v1/models/./../files"),
    ("GET", "/openai/v1/models/gpt-4o/../../files"),
    ("GET", "/openai/v1/models/..%2F..%2Fv1%2Fbatches"),
    ("GET", "/openai/v1/models%2F..%2Ffiles"),
    ("GET", "/openai/v1/models/%252e%252e%252ffiles"),  # double-encoded
    ("GET", "/openai/v1/models/..%252Ffiles"),
    ("GET", "/openai/v1/models/%25252e%25252e/files"),  # thrice
    ("GET", "/openai/v1/models/..%5Cfiles"),  # backslash, encoded
    ("GET", "/openai/v1/models/..%5cfiles"),
    ("GET", "/openai/v1/models/..\\files"),
    ("GET", "/openai/v1/models/%c0%ae%c0%ae/files"),  # overlong UTF-8
    ("GET", "/openai/v1/models/%u002e%u002e/files"),  # IIS-style
    ("GET", "/openai/v1/models;/../files"),  # matrix parameters
    ("GET", "/openai/v1/models/gpt-4o;x=/../../files"),
    ("GET", "/openai/v1/models/..;/files"),
    ("GET", "/openai/v1/models//files"),  # empty segments
    ("GET", "/openai/v1//files"),
    ("GET", "//openai/v1/files"),
    ("GET", "/openai/v1/models/gpt-4o/content"),  # a segment after the model id
    ("GET", "/openai/v1/models/gpt-4o/"),
    ("GET", "/openai/v1/models/."),
    ("GET", "/openai/v1/models/.."),
    ("GET", "/openai/v1/models/%67pt-4o"),  # an escaped letter: no escape passes
    ("GET", "/openai/v1/models/{model}"),  # the table's own placeholder
    ("GET", "/openai/v1/models/gpt-4o%00"),
    ("GET", "http://gateway/openai/v1/files"),  # absolute-form target
    # the OpenAI account's other endpoints
    ("GET", "/openai/v1/files"),
    ("GET", "/openai/v1/files/file-abc/content"),
    ("GET", "/openai/v1/batches"),
    ("GET", "/openai/v1/fine_tuning/jobs"),
    ("GET", "/openai/v1/organization/projects"),
    ("GET", "/openai/v1/organization/costs"),
    ("GET", "/openai/v1/responses/resp_abc"),  # a stored response
    ("GET", "/openai/v1/chat/completions"),  # the stored chat completions
    ("POST", "/openai/v1/files"),
    ("POST", "/openai/v1/batches"),
    ("POST", "/openai/v1/responses/compact"),
    ("POST", "/openai/v1/responses/..%2Ffiles"),
    # other methods on the allowed paths
    ("HEAD", "/openai/v1/models"),
    ("DELETE", "/openai/v1/models/ft:gpt-4o-mini:operator::abc123"),  # deletes a fine-tune
    ("PUT", "/openai/v1/responses"),
    ("PATCH", "/openai/v1/chat/completions"),
    ("OPTIONS", "/openai/v1/responses"),
    ("GET", "/openai/v1/responses"),
    # the same against Anthropic
    ("GET", "/anthropic/v1/models/..%2Ffiles"),
    ("GET", "/anthropic/v1/models/%2e%2e/files"),
    ("GET", "/anthropic/v1/models/%2e%2e%2fmessages%2fbatches"),
    ("GET", "/anthropic/v1/models/..%252fmessages%252fbatches"),
    ("GET", "/anthropic/v1/models/claude-haiku-4-5/..%2F..%2Forganizations%2Fme"),
    ("GET", "/anthropic/v1/models/..%5Cfiles"),
    ("GET", "/anthropic/v1/models/claude-haiku-4-5;/../../files"),
    ("GET", "/anthropic/v1/messages/..%2Fmessages/batches"),
    ("GET", "/anthropic/%2e%2e/v1/files"),
    ("GET", "/anthropic//v1/files"),
    ("GET", "/anthropic/v1/files"),
    ("GET", "/anthropic/v1/messages/batches"),
    ("GET", "/anthropic/v1/messages/batches/msgbatch_01/results"),
    ("GET", "/anthropic/v1/organizations/me"),
    ("GET", "/anthropic/v1/organizations/api_keys"),
    ("POST", "/anthropic/v1/messages/batches"),
    ("POST", "/anthropic/v1/messages/count_tokens/..%2F..%2Fmessages%2Fbatches"),
    ("DELETE", "/anthropic/v1/models/claude-haiku-4-5"),
    ("HEAD", "/anthropic/v1/models"),
    ("GET", "/anthropic/v1/messages"),
    ("PUT", "/anthropic/v1/messages"),
    ("GET", "/anthropic/models"),
    ("GET", "/anthropic/v1/models/"),
    # outside both prefixes
    ("GET", "/v1/files"),
    ("GET", "/"),
]


@pytest.mark.parametrize(("method", "target"), ATTACKS, ids=[f"{m} {t}" for m, t in ATTACKS])
def test_a_request_outside_the_route_table_never_reaches_the_account(
    tmp_path: Path, method: str, target: str
) -> None:
    async def body() -> tuple[int, bytes, list[tuple[str, str]]]:
        async with guarded(tmp_path) as (gw, seen):
            status, answer = await send(gw, method, target, b"{}" if method == "POST" else b"")
            control, _ = await send(gw, *CONTROL)
            assert control == 200
            return status, answer, list(seen)

    status, answer, seen = run(body())
    assert seen == [("GET", "/v1/models")]  # the control only
    assert status == 404 and SECRET.encode() not in answer
    if method != "HEAD":  # the provider's error shape, as its SDK reads it
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        anthropic_path = target.startswith("/anthropic/")
        assert error["type"] == ("not_found_error" if anthropic_path else "invalid_request_error")
        assert "model calls only" in error["message"]
    refused, _ = lines(tmp_path)
    assert (refused.method, refused.route, refused.status) == (method, target, 404)
    assert refused.outcome == "refused" and refused.protocol is None


QUERIES = [
    ("POST", "/openai/v1/responses?include=file_search_call.results", "include"),
    ("POST", "/openai/v1/chat/completions?api-version=2024-10-21", "api-version"),
    ("GET", "/openai/v1/models?after=ft-abc&purpose=fine-tune", "after"),
    ("GET", "/openai/v1/models/gpt-4o?client_version=1", "client_version"),
    ("POST", "/anthropic/v1/messages?beta=true&workspace_id=wrkspc_other", "workspace_id"),
    ("GET", "/anthropic/v1/models?beta=true&be%74a=true", "be%74a"),
    ("GET", "/anthropic/v1/models/claude-haiku-4-5?limit=1", "limit"),
    ("POST", "/anthropic/v1/messages/count_tokens?beta=true&=x", ""),
]


@pytest.mark.parametrize(("method", "target", "name"), QUERIES, ids=[q[1] for q in QUERIES])
def test_a_query_parameter_the_route_does_not_take_is_refused(
    tmp_path: Path, method: str, target: str, name: str
) -> None:
    model = CLAUDE if target.startswith("/anthropic/") else GPT
    call = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}

    async def body() -> tuple[int, bytes, list[tuple[str, str]]]:
        async with guarded(tmp_path) as (gw, seen):
            data = json.dumps(call).encode() if method == "POST" else b""
            status, answer = await send(gw, method, target, data)
            control, _ = await send(gw, *CONTROL)
            assert control == 200
            return status, answer, list(seen)

    status, answer, seen = run(body())
    assert seen == [("GET", "/v1/models")]
    assert status == 400
    message = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["message"]
    assert f"query parameter {name!r}" in message
    refused, _ = lines(tmp_path)
    assert (refused.route, refused.outcome, refused.protocol) == (target, "refused", None)


PASSED = [
    ("GET", "/anthropic/v1/models?limit=2&after_id=claude-x&beta=true"),
    ("GET", "/anthropic/v1/models/claude-3-5-sonnet@20240620?beta=true"),
    ("GET", "/anthropic/v1/models/anthropic.claude-3-5-sonnet-20240620-v1:0"),
    ("POST", "/anthropic/v1/messages/count_tokens?beta=true"),
    ("GET", "/openai/v1/models?client_version=0.169.0"),
    ("GET", "/openai/v1/models/ft:gpt-4o-mini:my-org::abc123"),
    ("GET", "/openai/v1/models/gpt-4.1+x"),
]


def test_the_allowed_routes_reach_the_account_as_asked(tmp_path: Path) -> None:
    async def body() -> list[tuple[str, str]]:
        async with guarded(tmp_path) as (gw, seen):
            for method, target in PASSED:
                status, answer = await send(gw, method, target, b"{}" if method == "POST" else b"")
                assert status == 200, (target, answer)
            return list(seen)

    seen = run(body())
    expected = [(m, t.removeprefix("/anthropic").removeprefix("/openai")) for m, t in PASSED]
    assert seen == expected
    assert [c.outcome for c in lines(tmp_path)] == ["passed"] * len(PASSED)


def test_the_sdks_list_and_read_models_and_count_tokens_and_see_no_account(
    tmp_path: Path,
) -> None:
    async def body() -> list[dict[str, str]]:
        async with guarded(tmp_path) as (gw, _), sdks(gw) as (claude, gpt):
            got: list[dict[str, str]] = []
            raw: Any
            for raw in (
                await gpt.models.with_raw_response.list(),
                await gpt.models.with_raw_response.retrieve(GPT),
                await gpt.models.with_raw_response.retrieve("ft:gpt-4o-mini:my-org::abc123"),
                await claude.models.with_raw_response.list(limit=2),
                await claude.models.with_raw_response.retrieve(CLAUDE),
                await claude.messages.with_raw_response.count_tokens(
                    model=CLAUDE, messages=[{"role": "user", "content": "hi"}]
                ),
            ):
                parsed = raw.parse()  # the SDK reads the answer (a page, or a coroutine)
                if inspect.isawaitable(parsed):
                    await parsed
                got.append(dict(raw.headers))
            return got

    got = run(body())
    seen_routes = [c.route.partition("?")[0] for c in lines(tmp_path)]
    assert seen_routes == [
        "/openai/v1/models",
        f"/openai/v1/models/{GPT}",
        "/openai/v1/models/ft:gpt-4o-mini:my-org::abc123",
        "/anthropic/v1/models",
        f"/anthropic/v1/models/{CLAUDE}",
        "/anthropic/v1/messages/count_tokens",
    ]
    for headers in got:
        assert not set(ACCOUNT_HEADERS) & set(headers)
        assert set(AGENT_HEADERS) <= set(headers) and headers["content-type"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("protocol", ["messages", "responses", "chat"])
def test_a_model_answer_reaches_the_agent_without_the_accounts_headers(
    fake_llm: FakeLLMServer, tmp_path: Path, protocol: str, stream: bool
) -> None:
    async def call(claude: Any, gpt: Any) -> dict[str, str]:
        messages = [{"role": "user", "content": "hi"}]
        if protocol == "messages":
            raw = await claude.messages.with_raw_response.create(
                model=CLAUDE, max_tokens=8, messages=messages, stream=stream
            )
        elif protocol == "responses":
            raw = await gpt.responses.with_raw_response.create(model=GPT, input="hi", stream=stream)
        else:
            raw = await gpt.chat.completions.with_raw_response.create(
                model=GPT, messages=messages, stream=stream
            )
        await raw.http_response.aread()
        return dict(raw.headers)

    async def body() -> tuple[dict[str, str], dict[str, str]]:
        direct = (  # the fake API itself, as the operator's own client sees it
            anthropic.AsyncAnthropic(api_key="k", base_url=fake_llm.anthropic_url),
            openai.AsyncOpenAI(api_key="k", base_url=fake_llm.openai_url),
        )
        try:
            upstream = await call(*direct)
        finally:
            for client in direct:
                await client.close()
        async with gateway(fake_llm, tmp_path) as gw:
            return upstream, await call(*clients(gw))

    upstream, agent = run(body())
    account = (
        {"anthropic-organization-id"}
        if protocol == "messages"
        else {"openai-organization", "openai-project"}
    )
    assert account <= set(upstream)  # the API names the account ...
    assert not account & set(agent)  # ... the agent does not learn it
    request_id = "request-id" if protocol == "messages" else "x-request-id"
    assert agent[request_id] and agent["content-type"].startswith(
        "text/event-stream" if stream else "application/json"
    )
    assert any(name.startswith(("x-ratelimit-", "anthropic-ratelimit-")) for name in agent)


def test_a_replayed_answer_stored_with_the_accounts_headers_is_sent_without_them(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    request = json.dumps({"model": GPT, "messages": [{"role": "user", "content": "hi"}]}).encode()
    stored = StoredAnswer(  # as a gateway before the header rule stored it
        status=200,
        headers=[("content-type", "application/json"), *ACCOUNT_HEADERS.items()],
        body=b'{"id": "chatcmpl-1", "choices": []}',
        model=f"openai/{GPT}",
        usage=None,
        cost_usd=0.01,
        stop_reason="stop",
    )
    key = replay_key("POST", "/openai/v1/chat/completions", request)
    ReplayStore(tmp_path / "gateway" / "replay").put(key, stored)

    async def body() -> tuple[int, bytes]:
        async with gateway(fake_llm, tmp_path) as gw:
            return await send(gw, "POST", "/openai/v1/chat/completions", request)

    status, answer = run(body())
    head, _, content = answer.partition(b"\r\n\r\n")
    assert status == 200 and b"chatcmpl-1" in content and fake_llm.requests == []
    names = {line.partition(b":")[0].decode().lower() for line in head.split(b"\r\n")}
    assert "content-type" in names and not set(ACCOUNT_HEADERS) & names
    assert lines(tmp_path)[0].outcome == "cache_hit"


def test_the_agent_cannot_choose_the_operators_organisation_or_project(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    async def body() -> None:
        async with gateway(fake_llm, tmp_path) as gw:
            gpt = openai.AsyncOpenAI(
                api_key=gw.token,
                base_url=gw.openai_base_url,
                organization="org-other",
                project="proj_other",
                max_retries=0,
            )
            claude = anthropic.AsyncAnthropic(
                api_key=gw.token,
                base_url=gw.anthropic_base_url,
                default_headers={"anthropic-workspace-id": "wrkspc_other"},
                max_retries=0,
            )
            try:
                await gpt.responses.create(model=GPT, input="hi")
                await claude.messages.create(
                    model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
                )
            finally:
                await gpt.close()
                await claude.close()

    run(body())
    sent = [set(r.headers) for r in fake_llm.requests]
    assert len(sent) == 2
    for names in sent:
        assert not {"openai-organization", "openai-project", "anthropic-workspace-id"} & names
