"""The model gateway: an HTTP server on the host that speaks the provider APIs an agent
calls (Anthropic Messages, OpenAI Responses and Chat Completions, streamed or not), forwards
each request to the run's upstream with the key held on the host, and records every request
and answer (cost ledger, gateway.jsonl, a callback). The agent gets only a per-run token.

    /anthropic/v1/messages                 POST  (ANTHROPIC_BASE_URL = gateway.anthropic_base_url)
    /anthropic/v1/messages/count_tokens    POST  passed through, not recorded as a cost
    /anthropic/v1/models[/{model}]         GET   passed through
    /openai/v1/responses                   POST  (OPENAI_BASE_URL = gateway.openai_base_url)
    /openai/v1/chat/completions            POST
    /openai/v1/models[/{model}]            GET   passed through

Nothing else reaches the provider (:mod:`paperbench.gateway._routes`: the table, matched on
the raw path); the agent gets the answer's content type, request id, retry hints and rate
limits, never the headers naming the operator's organisation or project.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import aiohttp
from aiohttp import web

from paperbench.errors import BudgetExhaustedError
from paperbench.gateway._call import BODY_CAP, CallLog, GatewayCall, kept_body
from paperbench.gateway._replay import ReplayStore, StoredAnswer, replay_key
from paperbench.gateway._routes import NoRoute, family_of, match_route
from paperbench.gateway._shapes import (
    Family,
    auth_error,
    budget_error,
    error_body,
    model_error,
)
from paperbench.gateway._upstream import Upstream, passed_headers, upstream_for
from paperbench.gateway._usage import AnswerFacts, StreamTap, read_json_answer, upstream_message
from paperbench.gateway._verdict import UpstreamRecord
from paperbench.llm import CallOutcome, CostLedger, CostRecord, ModelConfig, PriceTable, Usage

log = logging.getLogger("paperbench.gateway")

_NO_RETRY = {"x-should-retry": "false", "content-type": "application/json"}
"""On the gateway's own refusals: the SDKs would otherwise retry a 429 or a 5xx."""

OnCall = Callable[[GatewayCall], None]


class ModelGateway:
    """The gateway of one rollout; use it as ``async with ModelGateway(...) as gateway:``.

    ``anthropic`` and ``openai`` are the run's model configs (either may be ``None``): each
    is resolved as :mod:`paperbench.llm` resolves a model (base URL and key from the config,
    the environment or a ``.env``), and requests of that provider go there with that key.
    Every model request is checked against ``allowed_models`` (names as requests give them,
    ``claude-sonnet-4-5``, or with the provider, ``anthropic/claude-sonnet-4-5``; ``None``
    allows any) and against the ``ledger``'s budget caps, then recorded in the ledger (label
    ``gateway``, stage ``stage``), in ``log_dir/gateway.jsonl`` and through ``on_call``.
    With ``replay``, complete answers are kept under ``log_dir/replay/`` and an identical
    request is answered from there at no cost.

    Raises (on construction): :class:`~paperbench.errors.ConfigError`,
    :class:`~paperbench.errors.MissingKeyError` and the other resolution errors.
    """

    def __init__(
        self,
        *,
        anthropic: ModelConfig | None = None,
        openai: ModelConfig | None = None,
        log_dir: str | Path,
        ledger: CostLedger | None = None,
        stage: str | None = "rollout",
        allowed_models: set[str] | None = None,
        on_call: OnCall | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        replay: bool = True,
        prices: PriceTable | None = None,
    ) -> None:
        self._upstreams: dict[Family, Upstream] = {}
        if anthropic is not None:
            self._upstreams["anthropic"] = upstream_for("anthropic", anthropic)
        if openai is not None:
            self._upstreams["openai"] = upstream_for("openai", openai)
        self.log_dir = Path(log_dir)
        self.ledger = ledger if ledger is not None else CostLedger()
        self.stage = stage
        self.allowed_models = set(allowed_models) if allowed_models is not None else None
        self.on_call = on_call
        self.host = host
        self.port = port
        self.token = secrets.token_urlsafe(32)
        """The per-run token the agent sends as its API key; the only one accepted."""
        self.exhausted: str | None = None
        """Why the budget refused a request, once it has; the run then ends as
        ``budget_exhausted``."""
        self.exhausted_event = asyncio.Event()
        """Set when :attr:`exhausted` is."""
        self.upstream = UpstreamRecord()
        """What the upstream answered to the last model calls: whether an agent that gave up
        did so for a cause outside it (:meth:`UpstreamRecord.error`)."""
        self._prices = {
            family: prices or PriceTable.load(up.config.prices_path)
            for family, up in self._upstreams.items()
        }
        self._replay = ReplayStore(self.log_dir / "replay") if replay else None
        self._log = CallLog(self.log_dir / "gateway.jsonl")
        self._token = self.token.encode()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._url: str | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._pending: dict[str, StoredAnswer] = {}
        """Answers being written to the replay store (found there before they are on disk)."""

    # -- life cycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://host:port`` of the running gateway."""
        if self._url is None:
            raise RuntimeError("the gateway is not running: use `async with ModelGateway(...)`")
        return self._url

    @property
    def anthropic_base_url(self) -> str:
        """What an Anthropic client's base URL (``ANTHROPIC_BASE_URL``) is set to."""
        return f"{self.url}/anthropic"

    @property
    def openai_base_url(self) -> str:
        """What an OpenAI client's base URL (``OPENAI_BASE_URL``) is set to."""
        return f"{self.url}/openai/v1"

    async def start(self) -> Self:
        """Bind and serve (what ``async with`` does)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
            auto_decompress=True,
            trust_env=False,
        )
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{path:.*}", self._handle)  # routes: _routes.py
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.port = int(port)
        shown = f"[{host}]" if ":" in str(host) else str(host)
        self._url = f"http://{shown}:{self.port}"
        return self

    async def close(self) -> None:
        """Stop serving, finish the replay writes in flight, close the log."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._log.close()
        self._url = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- requests --------------------------------------------------------------------------

    def _authorized(self, request: web.Request, family: Family) -> bool:
        given = ""
        if family == "anthropic":
            given = request.headers.get("x-api-key", "")
        bearer = request.headers.get("authorization", "")
        if not given and bearer[:7].lower() == "bearer ":
            given = bearer[7:].strip()
        return hmac.compare_digest(given.encode(), self._token)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        target = request.raw_path  # as sent: nothing decoded, nothing normalised
        family = family_of(target)
        call = GatewayCall(method=request.method, route=target, status=0, outcome="ok")
        if not self._authorized(request, family):
            status, body = auth_error(family)
            return self._refuse(call, started, status, body, "unauthorized", "wrong or no token")
        found = match_route(family, request.method, target)
        if isinstance(found, NoRoute):
            body = error_body(family, found.status, found.message)
            return self._refuse(call, started, found.status, body, "refused", found.message)
        protocol = found.route.protocol
        data = await request.read()
        upstream = self._upstreams.get(family)
        parsed = _parse(data) if protocol is not None else {}
        asked = str(parsed.get("model", "")) if parsed is not None else ""
        call.protocol = protocol
        if parsed and len(data) <= BODY_CAP:
            call.request = parsed  # parsed once
        else:
            call.request, call.request_cut_at = kept_body(data, as_json=protocol is None)
        if upstream is None:
            why = f"no {family} model is configured for this run"
            status, body = model_error(family, asked or "-", why)
            return self._refuse(call, started, status, body, "failed", why, ledger=bool(protocol))
        url = upstream.url(found.tail, found.query)
        if protocol is None:
            return await self._forward(request, call, upstream, url, data, started, None)
        if parsed is None:
            body = error_body(family, 400, "the request body is not a JSON object")
            return self._refuse(call, started, 400, body, "failed", "body not JSON", ledger=True)
        call.model = upstream.model_id(asked or "-")
        call.stream = parsed.get("stream") is True
        if not self._allowed(asked, upstream):
            why = "not a model this run may use"
            status, body = model_error(family, asked, why)
            return self._refuse(call, started, status, body, "failed", why, ledger=True)
        key = replay_key(request.method, request.path_qs, data) if self._replay else None
        call.replay_key = key
        if key is not None and self._replay is not None:
            stored = self._pending.get(key)
            if stored is None and key in self._replay:
                stored = await asyncio.to_thread(self._replay.get, key)
            if stored is not None:
                return await self._replayed(request, call, stored, started)
        try:
            self.ledger.check_budget(call.model, self.stage)
        except BudgetExhaustedError as exc:
            self.exhausted = self.exhausted or str(exc)
            self.exhausted_event.set()
            status, body = budget_error(family)
            return self._refuse(call, started, status, body, "budget_exhausted", str(exc), True)
        return await self._forward(request, call, upstream, url, data, started, parsed)

    def _allowed(self, asked: str, upstream: Upstream) -> bool:
        if self.allowed_models is None:
            return True
        return asked in self.allowed_models or upstream.model_id(asked) in self.allowed_models

    def _refuse(
        self,
        call: GatewayCall,
        started: float,
        status: int,
        body: bytes,
        outcome: Any,
        error: str,
        ledger: bool = False,
        tried: bool = False,
    ) -> web.Response:
        """Answer with the gateway's own error; recorded, and in the ledger as unsent, or
        with ``tried`` as an attempt sent upstream that got no HTTP answer (a refused or
        dropped connection: not billed; a timeout: the cost unknown)."""
        call.status, call.outcome, call.error = status, outcome, error
        call.answer, call.answer_cut_at = kept_body(body, as_json=True)
        call.latency_s = time.perf_counter() - started
        if ledger:
            call.cost_usd = None if tried and status == 504 else 0.0
            self._ledger_add(call, sent=tried, answered=not tried)
        self._finish(call)
        return web.Response(status=status, body=body, headers=_NO_RETRY)

    async def _replayed(
        self, request: web.Request, call: GatewayCall, stored: StoredAnswer, started: float
    ) -> web.StreamResponse:
        headers = passed_headers(stored.headers)  # also from a store an older gateway wrote
        response = web.StreamResponse(status=stored.status, headers=headers)
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            await response.write(stored.body)
            await response.write_eof()
        call.status, call.outcome = stored.status, "cache_hit"
        call.usage, call.cost_usd, call.saved_usd = Usage(), 0.0, stored.cost_usd
        call.stop_reason = stored.stop_reason
        call.answer, call.answer_cut_at = kept_body(stored.body, as_json=not call.stream)
        call.latency_s = time.perf_counter() - started
        self._ledger_add(call, sent=False)
        self._finish(call)
        self.upstream.note(call, family_of(call.route), reached=True, message="")
        return response

    async def _forward(
        self,
        request: web.Request,
        call: GatewayCall,
        upstream: Upstream,
        url: str,
        data: bytes,
        started: float,
        parsed: dict[str, Any] | None,
    ) -> web.StreamResponse:
        """Send the request on and stream the answer back as it comes; record it."""
        assert self._session is not None
        family = upstream.family
        timeout_s = upstream.config.timeout_s
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=min(timeout_s, 30.0), sock_read=timeout_s
        )
        model_call = parsed is not None
        try:
            upstream_response = await self._session.request(
                request.method,
                url,
                data=data if data or request.method != "GET" else None,
                headers=upstream.headers(request.headers),  # type: ignore[arg-type]
                timeout=timeout,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            status = 504 if isinstance(exc, TimeoutError) else 502
            what = "timed out" if status == 504 else f"failed: {type(exc).__name__}: {exc}"
            message = f"the gateway's request to the {family} API {what}"
            body = error_body(family, status, message)
            response = self._refuse(
                call, started, status, body, "failed", message, model_call, tried=True
            )
            if model_call:
                self.upstream.note(call, family, reached=False, message=message)
            return response
        async with upstream_response:
            return await self._relay(request, call, upstream, upstream_response, started, parsed)

    async def _relay(
        self,
        request: web.Request,
        call: GatewayCall,
        upstream: Upstream,
        answer: aiohttp.ClientResponse,
        started: float,
        parsed: dict[str, Any] | None,
    ) -> web.StreamResponse:
        headers = passed_headers(answer.headers.items())
        response = web.StreamResponse(status=answer.status, reason=answer.reason, headers=headers)
        await response.prepare(request)
        is_stream = answer.content_type == "text/event-stream"
        protocol = call.protocol
        tap = StreamTap(protocol) if is_stream and protocol is not None else None
        chunks: list[bytes] = []
        cut: str | None = None
        client_gone = False
        try:
            async for chunk in answer.content.iter_any():
                chunks.append(chunk)
                if tap is not None:
                    tap.feed(chunk)
                try:
                    await response.write(chunk)
                except ConnectionError:
                    client_gone = True
                    break
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            cut = f"the {upstream.family} API's answer broke off: {type(exc).__name__}: {exc}"
        if cut is not None:
            # end the client's stream as the upstream's ended: cut, with no last chunk
            if request.transport is not None:
                request.transport.close()
        elif not client_gone:
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
        call.latency_s = time.perf_counter() - started
        call.status = answer.status
        body = b"".join(chunks)
        call.answer, call.answer_cut_at = kept_body(body, as_json=not is_stream)
        if parsed is None:  # listing models, counting tokens: no cost
            call.outcome = "passed" if answer.status < 400 else "failed"
            self._finish(call)
            return response
        assert protocol is not None
        if answer.status >= 400:
            facts = AnswerFacts(error=f"upstream {answer.status}: {upstream_message(body)}")
        elif tap is not None:
            facts = tap.facts
        else:
            facts = read_json_answer(protocol, body)
        self._settle(call, upstream, facts, cut, client_gone, parsed)
        message = upstream_message(body) if answer.status >= 400 else call.error or ""
        self.upstream.note(
            call, upstream.family, reached=True, message=message, client_gone=client_gone
        )
        if call.outcome == "ok" and call.replay_key is not None and self._replay is not None:
            stored = StoredAnswer(
                status=answer.status,
                headers=list(headers.items()),
                body=body,
                model=call.model or "",
                usage=call.usage,
                cost_usd=call.cost_usd,
                stop_reason=call.stop_reason,
            )
            key = call.replay_key
            self._pending[key] = stored
            task = asyncio.create_task(asyncio.to_thread(self._replay.put, key, stored))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)
            task.add_done_callback(lambda _: self._pending.pop(key, None))
        return response

    def _settle(
        self,
        call: GatewayCall,
        upstream: Upstream,
        facts: AnswerFacts,
        cut: str | None,
        client_gone: bool,
        parsed: dict[str, Any],
    ) -> None:
        """Outcome, usage and cost of a forwarded model call; into the ledger and the log."""
        call.usage, call.stop_reason = facts.usage, facts.stop_reason
        if facts.usage is not None:
            call.cost_usd = self._prices[upstream.family].cost(call.model or "", facts.usage)
        elif call.status >= 400:
            call.cost_usd = 0.0  # a refusal is not billed
        errors: list[str] = []
        if call.status >= 400 or facts.error is not None:
            call.outcome = "failed"
            errors.append(facts.error or f"upstream {call.status}")
        elif cut is not None or client_gone or not facts.complete:
            call.outcome = "incomplete"
            errors.append(
                cut
                or ("the client went away mid-answer" if client_gone else "")
                or "the answer ended before its last event"
            )
        else:
            call.outcome = "ok"
        if facts.usage is None and call.status < 400:
            errors.append(_unknown_usage(call, parsed))
        call.error = "; ".join(errors) or None
        self._ledger_add(call, sent=True)
        self._finish(call)

    def _ledger_add(self, call: GatewayCall, *, sent: bool, answered: bool = True) -> None:
        outcome = cast(CallOutcome, call.outcome)  # never "unauthorized" nor "passed" here
        self.ledger.add(
            CostRecord(
                model=call.model or "-",
                label="gateway",
                stage=self.stage,
                outcome=outcome,
                usage=call.usage or Usage(),
                cost_usd=call.cost_usd,
                saved_usd=call.saved_usd,
                latency_s=call.latency_s,
                stop_reason=call.stop_reason,
                error=call.error,
                sent=sent,
                answered=answered,
            )
        )

    def _finish(self, call: GatewayCall) -> None:
        self._log.write(call)
        if self.on_call is not None:
            try:
                self.on_call(call)
            except Exception:
                log.exception("the gateway's on_call callback raised (the call is in the log)")


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _unknown_usage(call: GatewayCall, parsed: dict[str, Any]) -> str:
    if call.protocol == "chat" and call.stream:
        options = parsed.get("stream_options") or {}
        if not (isinstance(options, dict) and options.get("include_usage")):
            return (
                "usage unknown: the chat stream did not ask for "
                "stream_options.include_usage (cost unknown)"
            )
    return "usage unknown: the answer gave none (cost unknown)"
