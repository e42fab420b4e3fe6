"""A local HTTP server that speaks enough of three model APIs for the official SDKs.

    OpenAI Chat Completions   POST /v1/chat/completions   (base_url: server.openai_url)
    OpenAI Responses          POST /v1/responses          (base_url: server.openai_url)
    Anthropic Messages        POST /v1/messages           (base_url: server.anthropic_url)

and both providers' batch APIs (OpenAI's Files and Batch APIs, Anthropic's Message Batches:
:mod:`paperbench.testing._batches`, test hooks on ``server.batches``), each batched request
answered as if sent alone and recorded with its ``batch``.

It answers from a script (``server.script(FakeReply(...), Fault.rate_limit(0.1), ...)``),
else from a callback (``server.handler = lambda request: FakeReply(...)``), else with a
default reply: the smallest JSON that fits a requested schema, or ``"ok"``. Every request is
recorded (``server.requests``) for assertions. Requests the real APIs refuse (an unknown
parameter, an empty Anthropic text block, a strict schema that breaks OpenAI's rules, a
thinking block sent back changed, a tool call left unanswered, a conversation over the model's
context window, ...) get the real APIs' 400 and error body. Usage is counted from the
request, with simulated prompt caches (OpenAI's automatic prefix cache, Anthropic's
breakpoints: :mod:`paperbench.testing._prompt`). Faults on
demand: any HTTP status with headers (429 with ``retry-after``, 500, 401, ...), a slow
answer, a malformed body, an HTML page, a dropped connection (the request received, no
answer), a reset one (the request never received); a schema mismatch is simply a
:class:`FakeReply` whose ``text`` does not fit.

``"stream": true`` gets the answer as each API streams it (server-sent events rendered from
the same body: :mod:`paperbench.testing._stream`); a refused or faulted streamed request gets
the same JSON error before any event, and :meth:`Fault.stream_cut` and
:meth:`Fault.stream_error` break a stream off mid-way.

It binds to 127.0.0.1 only, serves each request in a thread, and stops promptly even while a
slow answer is pending. Used by this project's tests and benchmarks, and usable to test an
agent or a judge offline::

    with FakeLLMServer() as server:
        server.script(FakeReply(json={"score": 1}))
        config = ModelConfig(model="openai/gpt-4o", base_url=server.openai_url)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from paperbench.llm._limits import default_context_windows
from paperbench.testing._batches import Batches
from paperbench.testing._prompt import PromptCache
from paperbench.testing._rules import Issued, Refusal, check
from paperbench.testing._stream import Event, failure_event, stream_events

Protocol = Literal["chat", "responses", "messages"]


@dataclass(frozen=True)
class FakeToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    """Send these exact argument bytes instead (OpenAI protocols), e.g. invalid JSON or a
    call cut off mid-way (``'{"cmd": "ls -'``). Anthropic gets the parsed object, or ``{}``
    when they do not parse (as its API does for a tool use cut off by ``max_tokens``)."""
    custom: bool = False
    """Responses: a call of a custom (free-form) tool, a ``custom_tool_call`` whose ``input``
    is ``raw_arguments`` (e.g. Codex's ``apply_patch`` with a patch). Other protocols send it
    as a function call."""


@dataclass(frozen=True)
class FakeUsage:
    input: int = 10
    cached_input: int = 0
    cache_write: int = 0
    """Anthropic only: input tokens written to the prompt cache."""
    output: int = 5
    reasoning: int = 0


@dataclass(frozen=True)
class FakeReply:
    """A successful answer. ``json`` is serialised into the text (structured output)."""

    text: str = ""
    json: Any = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    usage: FakeUsage | None = None
    """Default: the request's tokens as the server counts them (see
    :mod:`paperbench.testing._prompt`; below :data:`SMALL_REQUEST` tokens, its JSON size over
    four), with what its simulated prompt cache read and wrote, and the reply's size over four
    for the output."""
    stop: Literal["stop", "max_tokens", "length", "tool_calls"] | None = None
    """Default: ``tool_calls`` with tool calls, else ``stop``. ``max_tokens`` (or its alias
    ``length``) is an answer cut off at the output limit: Chat ``finish_reason: length``,
    Responses ``status: incomplete`` (its function calls ``incomplete`` too), Anthropic
    ``stop_reason: max_tokens``; with ``tool_calls`` (say with cut ``raw_arguments``) it is a
    call cut off mid-way; with only ``reasoning``, a Responses answer cut off mid-reasoning."""
    reasoning: str | None = None
    """Anthropic: a signed thinking block. Responses: a reasoning item with this summary (and
    its encrypted content when the request asks for it). Chat: ``reasoning_content``."""
    redacted: bool = False
    """Anthropic: also a redacted_thinking block, after the thinking block."""
    override: dict[str, Any] = field(default_factory=dict)
    """Top-level fields of the response body to send instead (``None`` sends ``null``), e.g.
    ``{"usage": None}`` or a partial ``usage``, as loosely compatible servers do."""
    omit: tuple[str, ...] = ()
    """Top-level fields of the response body to leave out, e.g. ``("usage",)``."""
    delay: float = 0.0

    def body_text(self) -> str:
        return json.dumps(self.json) if self.json is not None else self.text


@dataclass(frozen=True)
class Fault:
    """A failure to inject. Build one with the class methods."""

    kind: Literal["status", "malformed", "html", "drop", "reset", "cut", "stream_error"] = "status"
    status: int = 500
    message: str = "injected failure"
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0
    after_events: int = 0
    """Streams (``cut``, ``stream_error``): how many events go out before the failure."""
    reply: FakeReply | None = None
    """Streams: the answer whose events go out first (default: a short text)."""

    @classmethod
    def rate_limit(cls, retry_after: float | None = None) -> Fault:
        headers = () if retry_after is None else (("retry-after", f"{retry_after:g}"),)
        return cls(status=429, message="rate limit reached", headers=headers)

    @classmethod
    def server_error(cls, status: int = 500) -> Fault:
        return cls(status=status, message="internal server error")

    @classmethod
    def http(cls, status: int, message: str = "refused") -> Fault:
        return cls(status=status, message=message)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Answer only after ``seconds`` (longer than the client's timeout)."""
        return cls(kind="status", status=200, delay=seconds)

    @classmethod
    def malformed(cls) -> Fault:
        """Status 200 with a body that is not the JSON the SDK expects."""
        return cls(kind="malformed", status=200)

    @classmethod
    def html(cls) -> Fault:
        """Status 200 with an HTML page (a proxy's error page) instead of JSON."""
        return cls(kind="html", status=200)

    @classmethod
    def drop(cls) -> Fault:
        """Close the connection without answering (for a stream too: before any event)."""
        return cls(kind="drop")

    @classmethod
    def reset(cls) -> Fault:
        """Reset the connection before the request is read (a server over its connection
        limit, a keep-alive connection it closed as the request came): the server never
        receives the request, so it is not in ``server.requests``. It is taken by the next
        model request (POST), whatever its route."""
        return cls(kind="reset")

    @classmethod
    def stream_cut(cls, after_events: int = 2, reply: FakeReply | None = None) -> Fault:
        """A streamed answer (of ``reply``) whose connection closes after ``after_events``
        events, without the end of the stream. A request without ``stream`` is dropped."""
        return cls(kind="cut", after_events=after_events, reply=reply)

    @classmethod
    def stream_error(
        cls, after_events: int = 2, reply: FakeReply | None = None, message: str = "Overloaded"
    ) -> Fault:
        """A streamed answer that fails after ``after_events`` events with the API's own
        mid-stream error: Anthropic's ``error`` event (``overloaded_error``), Responses'
        ``response.failed``, a Chat ``data:`` line with an ``error``. A request without
        ``stream`` gets a 529 (Anthropic's overloaded status), or a 500 from OpenAI."""
        return cls(
            kind="stream_error", status=529, message=message, after_events=after_events, reply=reply
        )


@dataclass(frozen=True)
class RecordedRequest:
    protocol: Protocol
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    time: float
    batch: str | None = None
    """The batch the request came in (its id), or ``None`` when sent alone."""
    custom_id: str | None = None

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        """The request asked for a streamed answer (``"stream": true``)."""
        return self.body.get("stream") is True


Handler = Callable[[RecordedRequest], "FakeReply | Fault"]

SMALL_REQUEST = 1024
"""Below this many counted input tokens (and with no prompt-cache activity) the default usage
is the request's JSON size over four; from it on, the counted tokens."""

_ROUTES: dict[str, Protocol] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "messages",
}


class _Server(ThreadingHTTPServer):
    request_queue_size = 128
    """As many waiting connections as a grading opens at once (the default, 5, resets the
    rest: a real API does not)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a closed SDK client resets its idle keep-alive connection;
        a cut stream's reader goes away) is the client's business, as on a real API; any other
        error in a handler is printed as the standard library does."""
        if isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError):
            return
        super().handle_error(request, client_address)


class FakeLLMServer:
    """The server; start it with ``with FakeLLMServer() as server:`` or :meth:`start`.

    With ``validate`` (the default) it refuses, with the real APIs' status and error body, the
    requests the real APIs refuse (see :mod:`paperbench.testing._rules`): a refused request is
    recorded but takes no scripted answer. ``validate=False`` accepts any JSON body, as a
    loosely compatible server would.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        validate: bool = True,
        context_windows: dict[str, int] | None = None,
        refuse_plain_reasoning: bool = True,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fake server binds to loopback only")
        self.validate = validate
        self.context_windows = {**default_context_windows(), **(context_windows or {})}
        """Model name (as requests name it, no provider) -> context window in tokens; a
        dated snapshot falls back to its family. Over it, a request gets the provider's
        context-length refusal (with ``validate``). Default: the model layer's table."""
        self.refuse_plain_reasoning = refuse_plain_reasoning
        """Refuse ``reasoning_effort`` / ``reasoning`` sent to an OpenAI model that does not
        reason (gpt-4o, gpt-4.1, ...), as OpenAI does. ``False`` acts as a server that
        ignores them."""
        self.prompt_cache = PromptCache()
        """The prefixes seen or written, for the simulated prompt caches."""
        self.issued = Issued()
        self._script: deque[FakeReply | Fault] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self.handler: Handler | None = None
        self.requests: list[RecordedRequest] = []
        self.handler_errors: list[str] = []
        """What a raising ``handler`` raised (each such call was answered with a 400)."""
        self.batches = Batches(self._answer_batched, RecordedRequest, lambda: self.url)
        """The batch APIs' files and batches; ``delay`` and the test hooks (``process``,
        ``expire``)."""
        self._httpd = _Server((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    def start(self) -> FakeLLMServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, *items: FakeReply | Fault) -> None:
        """Queue answers; each request takes the next one."""
        with self._lock:
            self._script.extend(items)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.handler = None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def next_id(self) -> int:
        return next(self._ids)

    def context_window(self, model: str) -> int | None:
        """The window the server holds ``model`` to, or ``None`` (not checked)."""
        best = None
        for name, window in self.context_windows.items():
            fits = model == name or model.startswith((name + "-", name + "."))
            if fits and (best is None or len(name) > len(best[0])):
                best = (name, window)
        return best[1] if best else None

    def _refusal_for(self, request: RecordedRequest) -> Refusal | None:
        if not self.validate:
            return None
        window = self.context_window(request.model)
        refusal = check(
            request.protocol,
            request.body,
            self.issued,
            window,
            plain_reasoning=self.refuse_plain_reasoning,
            beta="anthropic-beta" in request.headers,
        )
        if refusal is not None:
            with self._lock:
                self.requests.append(request)
        return refusal

    def _unheard(self) -> bool:
        """Take a scripted :meth:`Fault.reset` if it comes next: the request is not read."""
        with self._lock:
            head = self._script[0] if self._script else None
            if isinstance(head, Fault) and head.kind == "reset":
                self._script.popleft()
                return True
        return False

    def _answer_for(self, request: RecordedRequest) -> FakeReply | Fault:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        if self.handler is not None:
            try:
                return self.handler(request)
            except Exception as exc:
                # A broken test handler must fail the call at once (a 400 is not retried),
                # not drop the connection and keep the client retrying for its whole budget.
                with self._lock:
                    self.handler_errors.append(f"{type(exc).__name__}: {exc}")
                return Fault.http(400, f"the fake server's handler raised {type(exc).__name__}")
        return default_reply(request)

    def _answer_batched(self, request: RecordedRequest) -> tuple[int, dict[str, Any]]:
        """The status and body of the answer to a batch's request, as if it had been sent
        alone (not streamed; a fault that breaks a connection is a 500, or Anthropic's 529)."""
        refusal = self._refusal_for(request)
        if refusal is not None:
            return refusal.status, refusal.body(request.protocol)
        answer = self._answer_for(request)
        if isinstance(answer, Fault) and answer.kind == "status" and answer.status == 200:
            answer = FakeReply(text="late")  # a slow answer
        if isinstance(answer, FakeReply):
            return 200, _render(self, request, answer)
        if answer.kind != "status":
            status = (
                529 if answer.kind == "stream_error" and request.protocol == "messages" else 500
            )
            answer = Fault(status=status, message=answer.message)
        return answer.status, _error_body(request.protocol, answer)

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server stops first; True if it is stopping."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()


def default_reply(request: RecordedRequest) -> FakeReply:
    """The smallest JSON that fits a requested schema, else ``"ok"``."""
    schema = requested_schema(request)
    if schema is not None:
        from paperbench.llm._mock import minimal_instance

        return FakeReply(json=minimal_instance(schema))
    return FakeReply(text="ok")


def requested_schema(request: RecordedRequest) -> dict[str, Any] | None:
    """The JSON Schema a request asks the answer to match, in any of the three protocols."""
    body = request.body
    found: Any = None
    if request.protocol == "chat":
        found = (body.get("response_format") or {}).get("json_schema", {}).get("schema")
    elif request.protocol == "responses":
        found = ((body.get("text") or {}).get("format") or {}).get("schema")
    else:
        found = ((body.get("output_config") or {}).get("format") or {}).get("schema")
    return found if isinstance(found, dict) else None


def _estimate_usage(server: FakeLLMServer, request: RecordedRequest, reply: FakeReply) -> FakeUsage:
    """The usage of ``reply``; the prompt cache sees every answered request (it remembers
    the prefix even when the reply scripts its own usage)."""
    cache = server.prompt_cache.use(request.protocol, request.body)
    if reply.usage is not None:
        return reply.usage
    counted = cache.input
    if counted < SMALL_REQUEST and not cache.read and not cache.written:
        # a small request is billed by its JSON size over four, as before the server counted
        # tokens: tests that price a few calls rely on these numbers
        size = len(json.dumps(request.body.get("messages") or request.body.get("input") or ""))
        counted = size // 4
    return FakeUsage(
        input=max(1, counted),
        cached_input=cache.read,
        cache_write=cache.written,
        output=max(1, len(reply.body_text()) // 4),
    )


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # headers and body go out in two writes: without this, Nagle's algorithm and
            # delayed ACKs add ~40 ms to every answer
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _batch_api(self, method: str) -> bool:
            """Answer a batch API request; False when the path is not one."""
            if not server.batches.owns(path := self.path.split("?")[0]):
                return False
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, data, content_type = server.batches.route(method, path, headers, raw)
            self._send_bytes(status, data, {}, content_type=content_type)
            return True

        def do_GET(self) -> None:
            if self._batch_api("GET"):
                return
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": []})
            else:
                self._send(404, {"error": {"message": "not found", "type": "invalid_request"}})

        def do_POST(self) -> None:
            if self._batch_api("POST"):
                return
            if server._unheard():
                self._reset()
                return
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?")[0]
            protocol = _ROUTES.get(path)
            if protocol is None:
                self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": {"message": "body is not JSON", "type": "bad"}})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            request = RecordedRequest(protocol, path, headers, body, time.time())
            refusal = server._refusal_for(request)
            if refusal is not None:
                self._send(refusal.status, refusal.body(protocol))
                return
            answer = server._answer_for(request)
            if server._wait(answer.delay):
                return
            if isinstance(answer, Fault):
                self._fault(request, answer)
            elif request.stream:
                body = _render(server, request, answer)
                self._send_stream(stream_events(protocol, body, request.body))
            else:
                self._send(200, _render(server, request, answer))

        def _fault(self, request: RecordedRequest, fault: Fault) -> None:
            protocol = request.protocol
            if fault.kind in ("cut", "stream_error") and request.stream:
                body = _render(server, request, fault.reply or FakeReply(text="partial answer"))
                events = stream_events(protocol, body, request.body)[: fault.after_events]
                if fault.kind == "cut":
                    self._send_stream(events, cut=True)
                else:
                    failure = failure_event(protocol, body, len(events), fault.message)
                    self._send_stream([*events, failure])
                return
            if fault.kind == "stream_error" and protocol != "messages":
                fault = Fault.server_error()
            if fault.kind in ("drop", "cut"):
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault.kind == "malformed":
                self._send_bytes(200, b'{"id": "broken", "choices": [', {})
                return
            if fault.kind == "html":
                page = b"<html><body>502 Bad Gateway</body></html>"
                self._send_bytes(200, page, {}, content_type="text/html")
                return
            if fault.status == 200:  # a slow answer that eventually succeeds
                late = _render(server, request, FakeReply(text="late"))
                if request.stream:
                    self._send_stream(stream_events(protocol, late, request.body))
                else:
                    self._send(200, late)
                return
            self._send(fault.status, _error_body(protocol, fault), dict(fault.headers))

        def _reset(self) -> None:
            """Close the connection with a reset (RST), the request's body unread."""
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()

        def _send_stream(self, events: list[Event], *, cut: bool = False) -> None:
            """Send ``events`` as ``text/event-stream`` in HTTP chunks; ``cut`` closes the
            connection without the final chunk (a stream broken off)."""
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("cache-control", "no-cache")
                for name, value in self._api_headers():
                    self.send_header(name, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for event in events:
                    data = event.encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                    if server._stopping.is_set():
                        cut = True
                        break
                if cut:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:  # the client went away mid-stream
                self.close_connection = True

        def _api_headers(self) -> list[tuple[str, str]]:
            """What each real API sends with every answer: a request id, rate limits and the
            account the key belongs to (OpenAI's organisation and project, Anthropic's
            organisation)."""
            request_id = f"req_{secrets.token_hex(12)}"
            if "anthropic-version" in self.headers:
                return [
                    ("request-id", request_id),
                    ("anthropic-organization-id", "7f0c2a8e-1d4b-4c7a-9e2f-5b6d8a0c1e3f"),
                    ("anthropic-ratelimit-requests-limit", "4000"),
                    ("anthropic-ratelimit-requests-remaining", "3999"),
                ]
            return [
                ("x-request-id", request_id),
                ("openai-organization", "org-fakeoperator"),
                ("openai-project", "proj_FakeOperatorProject"),
                ("openai-version", "2020-10-01"),
                ("openai-processing-ms", "12"),
                ("x-ratelimit-limit-requests", "10000"),
                ("x-ratelimit-remaining-requests", "9999"),
            ]

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            self._send_bytes(status, json.dumps(payload).encode(), headers or {})

        def _send_bytes(
            self,
            status: int,
            data: bytes,
            headers: dict[str, str],
            content_type: str = "application/json",
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(data)))
                for name, value in self._api_headers():
                    self.send_header(name, value)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

    return _Handler


def _error_body(protocol: Protocol, fault: Fault) -> dict[str, Any]:
    kinds = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
    kinds |= {404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}
    kind = kinds.get(fault.status, "api_error")
    if protocol == "messages":
        return {"type": "error", "error": {"type": kind, "message": fault.message}}
    return {"error": {"message": fault.message, "type": kind, "param": None, "code": None}}


def _render(server: FakeLLMServer, request: RecordedRequest, reply: FakeReply) -> dict[str, Any]:
    body = _render_body(server, request, reply)
    body.update(reply.override)
    for name in reply.omit:
        body.pop(name, None)
    return body


def _render_body(
    server: FakeLLMServer, request: RecordedRequest, reply: FakeReply
) -> dict[str, Any]:
    usage = _estimate_usage(server, request, reply)
    text = reply.body_text()
    n = server.next_id()
    stop = reply.stop or ("tool_calls" if reply.tool_calls else "stop")
    if stop == "length":
        stop = "max_tokens"
    model = request.model
    if request.protocol == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": _args(c)},
                }
                for i, c in enumerate(reply.tool_calls)
            ]
        finish = {"stop": "stop", "max_tokens": "length", "tool_calls": "tool_calls"}[stop]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": usage.input,
                "completion_tokens": usage.output,
                "total_tokens": usage.input + usage.output,
                "prompt_tokens_details": {"cached_tokens": usage.cached_input},
                "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
            },
        }
    if request.protocol == "responses":
        output: list[dict[str, Any]] = []
        if reply.reasoning:
            item: dict[str, Any] = {
                "type": "reasoning",
                "id": f"rs_{n}",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
            if "reasoning.encrypted_content" in (request.body.get("include") or []):
                item["encrypted_content"] = f"enc-{n}-{secrets.token_hex(8)}"
                with server.issued.lock:
                    server.issued.encrypted[item["id"]] = item["encrypted_content"]
            output.append(item)
        if text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        output.extend(
            {
                "type": "custom_tool_call",
                "id": f"ctc_{n}_{i}",
                "call_id": f"call_{n}_{i}",
                "name": c.name,
                "input": _args(c),
            }
            if c.custom
            else {
                "type": "function_call",
                "id": f"fc_{n}_{i}",
                "call_id": f"call_{n}_{i}",
                "name": c.name,
                "arguments": _args(c),
                "status": "incomplete" if stop == "max_tokens" else "completed",
            }
            for i, c in enumerate(reply.tool_calls)
        )
        incomplete = stop == "max_tokens"
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage.input,
                "input_tokens_details": {"cached_tokens": usage.cached_input},
                "output_tokens": usage.output,
                "output_tokens_details": {"reasoning_tokens": usage.reasoning},
                "total_tokens": usage.input + usage.output,
            },
        }
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        signature = f"sig-{n}-{secrets.token_hex(8)}"
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
    if reply.redacted:
        content.append({"type": "redacted_thinking", "data": f"redacted-{secrets.token_hex(8)}"})
    thinking = list(content)
    if text:
        content.append({"type": "text", "text": text})
    uses = [
        {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": c.name, "input": _input(c)}
        for i, c in enumerate(reply.tool_calls)
    ]
    content.extend(uses)
    with server.issued.lock:
        for block in thinking:
            if block["type"] == "thinking":
                server.issued.thinking[block["signature"]] = block["thinking"]
            else:
                server.issued.redacted.add(block["data"])
        for use in uses:
            server.issued.turns[str(use["id"])] = thinking
    stop_reason = {"stop": "end_turn", "max_tokens": "max_tokens", "tool_calls": "tool_use"}[stop]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            # Anthropic counts cache reads and writes apart from input_tokens.
            "input_tokens": max(0, usage.input - usage.cached_input - usage.cache_write),
            "cache_read_input_tokens": usage.cached_input,
            "cache_creation_input_tokens": usage.cache_write,
            "output_tokens": usage.output,
            "output_tokens_details": {"thinking_tokens": usage.reasoning},
        },
    }


def _args(call: FakeToolCall) -> str:
    return call.raw_arguments if call.raw_arguments is not None else json.dumps(call.arguments)


def _input(call: FakeToolCall) -> dict[str, Any]:
    if call.raw_arguments is None:
        return call.arguments
    try:
        parsed = json.loads(call.raw_arguments)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}
