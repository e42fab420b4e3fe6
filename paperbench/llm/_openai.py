"""``openai/...`` and OpenAI-compatible servers, through the official ``openai`` SDK.

Chat Completions by default; the Responses API for OpenAI's reasoning models (o-series,
gpt-5, codex) on OpenAI's own endpoint, or whenever ``options: {api: responses}`` asks.
OpenAI's own endpoint is any base URL on api.openai.com (or one declared with
``options: {official: true}``). An OpenAI-compatible server (vLLM, Ollama, LiteLLM,
OpenRouter) is any other host, always reached through Chat Completions unless told
otherwise; it gets ``max_tokens`` instead of ``max_completion_tokens`` (except for OpenAI's
reasoning models, which refuse ``max_tokens`` wherever they are served) and a placeholder key
when none is set. Responses are stateless (``store: false``): a reasoning model's reasoning
items come back encrypted and are sent back, in order, with the next turn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

import openai
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import BaseModel, ConfigDict

from paperbench.errors import ModelRequestError
from paperbench.llm._answers import CHAT_STOP, chat_usage, responses_usage
from paperbench.llm._registry import (
    BatchState,
    SDKModelAPI,
    Target,
    batch_error,
    cut_calls,
    parse_options,
)
from paperbench.llm._retry import TransientError, connection_reason, status_error
from paperbench.llm._schema import openai_schema
from paperbench.llm._types import (
    AssistantMessage,
    ModelOutput,
    ModelRequest,
    ReasoningItem,
    StopReason,
    SystemMessage,
    ToolCall,
    ToolMessage,
)

_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")


class OpenAIOptions(BaseModel):
    """``ModelConfig.options`` for ``openai/...`` models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Literal["auto", "chat", "responses"] = "auto"
    """``auto``: Responses for reasoning models on OpenAI's endpoint, else Chat Completions."""
    prompt_cache_key: bool | None = None
    """Send a ``prompt_cache_key``: the call's own (``generate(prompt_cache_key=...)``), else
    one derived from the messages marked ``cache=True`` (the shared prefix), so calls sharing
    it reach the same prompt cache. Default: on OpenAI's endpoint only (other servers may
    refuse the parameter); ``true`` sends it to any server."""
    official: bool | None = None
    """The base URL serves OpenAI's own API (a gateway or proxy in front of it): use OpenAI's
    parameter names and the Responses API for reasoning models. Default: only for a base URL
    on api.openai.com; any other host is an OpenAI-compatible server."""


class OpenAIAPI(SDKModelAPI[openai.AsyncOpenAI]):
    key_env: ClassVar[str | None] = "OPENAI_API_KEY"
    base_url_env: ClassVar[str | None] = "OPENAI_BASE_URL"
    official_hosts: ClassVar[tuple[str, ...]] = ("api.openai.com",)

    client_class = openai.AsyncOpenAI

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.options = parse_options(OpenAIOptions, target)

    @property
    def custom_endpoint(self) -> bool:
        """True for an OpenAI-compatible server, False for OpenAI's own API."""
        if self.options.official is not None:
            return not self.options.official
        return self.target.custom_endpoint

    @property
    def reasoning_model(self) -> bool:
        return self.target.model_name.startswith(_REASONING_PREFIXES)

    @property
    def protocol(self) -> str:
        if self.options.api != "auto":
            return self.options.api
        return "responses" if not self.custom_endpoint and self.reasoning_model else "chat"

    def _cache_key(self, request: ModelRequest) -> str | None:
        wanted = self.options.prompt_cache_key
        if wanted is None:
            wanted = not self.custom_endpoint
        if not wanted:
            return None
        if request.prompt_cache_key is not None:
            return request.prompt_cache_key
        marked = [i for i, m in enumerate(request.messages) if getattr(m, "cache", False)]
        if not marked:
            return None
        prefix = [m.model_dump(mode="json") for m in request.messages[: marked[-1] + 1]]
        digest = hashlib.sha256(json.dumps(prefix, sort_keys=True).encode()).hexdigest()
        return f"pb-{digest[:40]}"

    def _check(self, request: ModelRequest) -> None:
        thinks = self.reasoning_model and request.reasoning_effort != "none"
        if request.temperature is not None and thinks and not self.custom_endpoint:
            raise ModelRequestError(
                f"{self.target.model}: reasoning models do not accept a temperature; "
                "remove it from the call or the model's configuration"
            )

    def request_params(self, request: ModelRequest) -> tuple[str, dict[str, Any]]:
        """The API route and body of ``request`` (a batch line's ``url`` and ``body``)."""
        self._check(request)
        if self.protocol == "responses":
            return "/v1/responses", self._responses_params(request)
        return "/v1/chat/completions", self._chat_params(request)

    async def generate(self, request: ModelRequest) -> ModelOutput:
        route, params = self.request_params(request)
        if route == "/v1/responses":
            return self._responses_output(await self._send(self.client.responses.create, params))
        return self._chat_output(await self._send(self.client.chat.completions.create, params))

    # -- Batch API ----------------------------------------------------------------------

    async def _call(self, call: Callable[..., Awaitable[Any]], *args: Any, **kw: Any) -> Any:
        try:
            return await call(*args, **kw)
        except openai.APIError as exc:
            raise _translate(exc, self.target) from exc

    async def probe_batches(self) -> None:
        """Raise :class:`ModelRequestError` when the server has no Batch API routes."""
        await self._call(self.client.batches.list, limit=1)

    async def submit_batch(self, route: str, lines: list[tuple[str, dict[str, Any]]]) -> str:
        """Upload the JSONL of ``lines`` (custom_id, body) and create its batch: its id."""
        data = "".join(
            json.dumps({"custom_id": cid, "method": "POST", "url": route, "body": body}) + "\n"
            for cid, body in lines
        ).encode()
        file = await self._call(
            self.client.files.create, file=("batch.jsonl", data), purpose="batch"
        )
        batch = await self._call(
            self.client.batches.create,
            input_file_id=file.id,
            endpoint=route,
            completion_window="24h",
        )
        return str(batch.id)

    async def batch_state(self, batch_id: str) -> BatchState:
        batch = await self._call(self.client.batches.retrieve, batch_id)
        errors = (
            [e.message or e.code or "" for e in (batch.errors.data or [])] if batch.errors else []
        )
        counts = batch.request_counts
        return BatchState(
            status=batch.status,
            ended=batch.status in ("completed", "failed", "expired", "cancelled"),
            error="; ".join(e for e in errors if e) or None,
            done=counts.completed + counts.failed if counts is not None else 0,
        )

    async def batch_results(self, batch_id: str) -> dict[str, ModelOutput | Exception]:
        """Each answered request's output, or the error it failed with (a request left
        unanswered by an expired or cancelled batch is not in it)."""
        batch = await self._call(self.client.batches.retrieve, batch_id)
        out: dict[str, ModelOutput | Exception] = {}
        for file_id in (batch.output_file_id, batch.error_file_id):
            if not file_id:
                continue
            content = await self._call(self.client.files.content, file_id)
            for raw in content.text.splitlines():
                if raw.strip():
                    line = json.loads(raw)
                    result = self._batch_line(line, batch.endpoint)
                    if result is not None:
                        out[str(line["custom_id"])] = result
        return out

    def _batch_line(self, line: dict[str, Any], route: str) -> ModelOutput | Exception | None:
        response = line.get("response")
        error = line.get("error") or {}
        if response is None:
            if error.get("code") in ("batch_expired", "batch_cancelled"):
                return None
            return ModelRequestError(f"{self.target.model}: {error.get('message') or error}")
        body = response.get("body") or {}
        status = int(response.get("status_code") or 0)
        if status != 200:
            inner = body.get("error", body) if isinstance(body, dict) else {}
            message = str(inner.get("message") or body) if isinstance(inner, dict) else str(body)
            code = inner.get("code") if isinstance(inner, dict) else None
            return batch_error(
                status_error(
                    status,
                    message,
                    headers={},
                    model=self.target.model,
                    key_hint="OPENAI_API_KEY",
                    code=code if isinstance(code, str) else None,
                )
            )
        try:
            if route == "/v1/responses":
                return self._responses_output(Response.model_validate(body))
            return self._chat_output(ChatCompletion.model_validate(body))
        except (ValueError, TransientError) as exc:
            return batch_error(TransientError(f"malformed batch answer: {exc}"))

    async def _send(self, create: Callable[..., Awaitable[Any]], params: dict[str, Any]) -> Any:
        """One SDK call; its failures mapped to a retry or a refusal. Only the SDK call is
        guarded: an error in reading a parsed response is a bug and propagates."""
        try:
            return await create(**params)
        except openai.APIError as exc:
            raise _translate(exc, self.target) from exc
        except json.JSONDecodeError as exc:
            # A body that is not JSON at all (a proxy hiccup): worth a retry.
            raise TransientError(
                f"malformed response body (not JSON): {exc}", answered=True
            ) from exc

    def _schema(self, request: ModelRequest) -> tuple[dict[str, Any], bool] | None:
        if request.output is None:
            return None
        return openai_schema(
            request.output.json_schema, strict=request.output.strict, model=self.target.model
        )

    # -- Chat Completions ---------------------------------------------------------------

    def _chat_params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.target.model_name,
            "messages": [_chat_message(m) for m in request.messages],
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        schema = self._schema(request)
        if request.output is not None and schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.output.name,
                    "schema": schema[0],
                    "strict": schema[1],
                },
            }
        if request.max_tokens is not None:
            # OpenAI's reasoning models refuse max_tokens wherever they are served (a gateway
            # or proxy too); other models on a compatible server may know only max_tokens
            plain = self.custom_endpoint and not self.reasoning_model
            key = "max_tokens" if plain else "max_completion_tokens"
            params[key] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.reasoning_effort is not None:
            params["reasoning_effort"] = request.reasoning_effort
        cache_key = self._cache_key(request)
        if cache_key is not None:
            params["prompt_cache_key"] = cache_key
        return params

    def _chat_output(self, response: Any) -> ModelOutput:
        if not isinstance(response, ChatCompletion):
            raise TransientError(
                f"malformed response: not a chat completion: {_peek(response)}", answered=True
            )
        if not response.choices or response.choices[0].message is None:
            raise TransientError("malformed response: no choices", answered=True)
        choice = response.choices[0]
        message = choice.message
        calls = [
            _tool_call(c.id, c.function.name, c.function.arguments)
            for c in message.tool_calls or []
            if c.type == "function" and c.function is not None
        ]
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        usage = chat_usage(response.usage)
        stop: StopReason = CHAT_STOP.get(choice.finish_reason or "", "unknown")
        if message.refusal and not message.content:
            stop = "content_filter"
        return ModelOutput(
            model=self.target.model,
            text=message.content or "",
            tool_calls=cut_calls(calls, stop),
            reasoning=reasoning if isinstance(reasoning, str) else None,
            stop_reason=stop,
            usage=usage,
        )

    # -- Responses ----------------------------------------------------------------------

    def _responses_params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.target.model_name,
            "input": [item for m in request.messages for item in _responses_items(m)],
            "store": False,
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": False,
                }
                for t in request.tools
            ]
        schema = self._schema(request)
        if request.output is not None and schema is not None:
            params["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": request.output.name,
                    "schema": schema[0],
                    "strict": schema[1],
                }
            }
        if request.max_tokens is not None:
            params["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.reasoning_effort is not None:
            params["reasoning"] = {"effort": request.reasoning_effort, "summary": "auto"}
        if self.reasoning_model or request.reasoning_effort is not None:
            # store is false, so the reasoning comes back encrypted and is sent back with
            # the next turn (see _responses_items)
            params["include"] = ["reasoning.encrypted_content"]
        cache_key = self._cache_key(request)
        if cache_key is not None:
            params["prompt_cache_key"] = cache_key
        return params

    def _responses_output(self, response: Any) -> ModelOutput:
        if not isinstance(response, Response) or response.output is None:
            raise TransientError(
                f"malformed response: not a response object: {_peek(response)}", answered=True
            )
        texts: list[str] = []
        reasoning: list[ReasoningItem] = []
        calls: list[ToolCall] = []
        refused = False
        for item in response.output:
            if item.type == "message":
                for part in item.content or []:
                    if part.type == "output_text":
                        texts.append(part.text or "")
                    elif part.type == "refusal":
                        refused = True
            elif item.type == "function_call":
                calls.append(_tool_call(item.call_id, item.name, item.arguments))
            elif item.type == "reasoning":
                summary = tuple(s.text or "" for s in item.summary or [])
                reasoning.append(
                    ReasoningItem(
                        type="reasoning",
                        id=item.id,
                        summary=summary,
                        text="\n".join(summary),
                        data=item.encrypted_content,
                    )
                )
        usage = responses_usage(response.usage)
        stop: StopReason = "tool_calls" if calls else "stop"
        if response.status == "incomplete":
            reason = response.incomplete_details.reason if response.incomplete_details else None
            stop = "content_filter" if reason == "content_filter" else "max_tokens"
        if refused and not texts:
            stop = "content_filter"
        return ModelOutput(
            model=self.target.model,
            text="".join(texts),
            tool_calls=cut_calls(calls, stop),
            reasoning="\n".join(r.text for r in reasoning if r.text) or None,
            reasoning_items=reasoning,
            stop_reason=stop,
            usage=usage,
        )


def _peek(value: Any) -> str:
    return " ".join(repr(value)[:120].split())


def _tool_call(call_id: str, name: str, arguments: Any) -> ToolCall:
    if not isinstance(arguments, str):
        return ToolCall(id=call_id, name=name, parse_error="arguments are not a JSON string")
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return ToolCall(id=call_id, name=name, parse_error=f"arguments are not JSON: {exc.msg}")
    if not isinstance(args, dict):
        return ToolCall(id=call_id, name=name, parse_error="arguments are not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=args)


def _chat_message(message: Any) -> dict[str, Any]:
    if isinstance(message, AssistantMessage):
        # an empty answer goes back as "" (the API refuses null content without tool calls)
        content = message.content or (None if message.tool_calls else "")
        out: dict[str, Any] = {"role": "assistant", "content": content}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in message.tool_calls
            ]
        return out
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    return {"role": message.role, "content": message.content}


def _responses_items(message: Any) -> list[dict[str, Any]]:
    if isinstance(message, AssistantMessage):
        # the turn's reasoning items first, in order (store is false: only items carrying
        # their encrypted content can be sent back), then its text and function calls; a
        # turn cut off while reasoning (nothing after its reasoning) sends nothing, since
        # the API refuses a reasoning item without the item it belongs to
        if not message.content and not message.tool_calls:
            return []
        items: list[dict[str, Any]] = [
            {
                "type": "reasoning",
                "id": r.id,
                "encrypted_content": r.data,
                "summary": [{"type": "summary_text", "text": text} for text in r.summary],
            }
            for r in message.reasoning_items
            if r.type == "reasoning" and r.id and r.data
        ]
        if message.content:
            items.append({"role": "assistant", "content": message.content})
        items.extend(
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": json.dumps(c.arguments),
            }
            for c in message.tool_calls
        )
        return items
    if isinstance(message, ToolMessage):
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id,
                "output": message.content,
            }
        ]
    role = "developer" if isinstance(message, SystemMessage) else "user"
    return [{"role": role, "content": message.content}]


def _translate(exc: openai.APIError, target: Target) -> Exception:
    """Map an SDK error to a retryable :class:`TransientError` or a one-line refusal."""
    model = target.model
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(f"no answer within {target.config.timeout_s:g}s")
    if isinstance(exc, openai.APIConnectionError):
        where = target.base_url or "the OpenAI API"
        return TransientError(f"cannot reach {where}: {connection_reason(exc)}")
    if isinstance(exc, openai.APIStatusError):
        return status_error(
            exc.status_code,
            _error_message(exc),
            headers=exc.response.headers,
            model=model,
            key_hint="OPENAI_API_KEY",
            code=_error_code(exc),
        )
    return TransientError(f"malformed response: {exc}", answered=True)


def _error_code(exc: openai.APIStatusError) -> str | None:
    body = exc.body
    inner = body.get("error", body) if isinstance(body, dict) else None
    code = inner.get("code") if isinstance(inner, dict) else None
    return code if isinstance(code, str) else None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return exc.message
