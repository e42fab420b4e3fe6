"""``anthropic/...`` through the official ``anthropic`` SDK (Messages API).

Tool use, structured output (``output_config.format``), prompt caching and extended thinking.
Prompt caching: every message marked ``cache=True`` gets a ``cache_control`` breakpoint (the
last four count, the API's limit); when none is marked, the system prompt gets one, so a
long shared system prefix is cached by default (``options: {prompt_cache: false}`` to stop).
A call with a ``prompt_cache_key`` (a tool loop) also gets a rolling breakpoint on the last
block of the conversation (then the latest three marks are kept), so each step reads what
the step before wrote. A context-window refusal ("prompt is too long") raises
:class:`~paperbench.errors.ContextLengthError`.
Extended thinking: ``options: {thinking_budget: N}``; thinking and redacted_thinking blocks
are kept on the output (``reasoning_items``) and sent back unchanged, in order, so a tool loop
with extended thinking replays as it was sent.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import anthropic
from anthropic.types import Message as AnthropicMessage
from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import ModelRequestError
from paperbench.llm._answers import ANTHROPIC_STOP, anthropic_usage
from paperbench.llm._registry import (
    BatchState,
    SDKModelAPI,
    Target,
    batch_error,
    cut_calls,
    parse_options,
)
from paperbench.llm._retry import TransientError, connection_reason, status_error
from paperbench.llm._schema import anthropic_schema
from paperbench.llm._types import (
    AssistantMessage,
    Message,
    ModelOutput,
    ModelRequest,
    ReasoningItem,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

MAX_BREAKPOINTS = 4
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
"""The HTTP status of each error type, for a request that failed inside a batch."""
_EPHEMERAL = {"type": "ephemeral"}


class AnthropicOptions(BaseModel):
    """``ModelConfig.options`` for ``anthropic/...`` models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_max_tokens: int = Field(default=8192, ge=1)
    """``max_tokens`` when the call sets none (the Messages API requires one)."""
    prompt_cache: bool = True
    thinking_budget: int | None = Field(default=None, ge=1024)
    """Turn extended thinking on with this many thinking tokens."""


class AnthropicAPI(SDKModelAPI[anthropic.AsyncAnthropic]):
    key_env: ClassVar[str | None] = "ANTHROPIC_API_KEY"
    base_url_env: ClassVar[str | None] = "ANTHROPIC_BASE_URL"
    official_hosts: ClassVar[tuple[str, ...]] = ("api.anthropic.com",)

    client_class = anthropic.AsyncAnthropic

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self.options = parse_options(AnthropicOptions, target)

    @property
    def protocol(self) -> str:
        return "messages"

    async def generate(self, request: ModelRequest) -> ModelOutput:
        params = self.params(request)
        try:
            response = await self.client.messages.create(**params)
        except anthropic.APIError as exc:
            raise _translate(exc, self.target) from exc
        except json.JSONDecodeError as exc:
            # A body that is not JSON at all (a proxy hiccup): worth a retry. Only the SDK
            # call is guarded: an error in reading a parsed response is a bug and propagates.
            raise TransientError(
                f"malformed response body (not JSON): {exc}", answered=True
            ) from exc
        if not isinstance(response, AnthropicMessage) or response.content is None:
            peek = " ".join(repr(response)[:120].split())
            raise TransientError(f"malformed response: not a message: {peek}", answered=True)
        return self._output(response)

    def request_params(self, request: ModelRequest) -> tuple[str, dict[str, Any]]:
        return "/v1/messages", self.params(request)

    # -- Message Batches ----------------------------------------------------------------

    async def _call(self, call: Any, *args: Any, **kw: Any) -> Any:
        try:
            return await call(*args, **kw)
        except anthropic.APIError as exc:
            raise _translate(exc, self.target) from exc

    async def probe_batches(self) -> None:
        await self._call(self.client.messages.batches.list, limit=1)

    async def submit_batch(self, route: str, lines: list[tuple[str, dict[str, Any]]]) -> str:
        requests = [{"custom_id": cid, "params": params} for cid, params in lines]
        batch = await self._call(self.client.messages.batches.create, requests=requests)
        return str(batch.id)

    async def batch_state(self, batch_id: str) -> BatchState:
        batch = await self._call(self.client.messages.batches.retrieve, batch_id)
        counts = batch.request_counts
        return BatchState(
            status=batch.processing_status,
            ended=batch.processing_status == "ended",
            done=counts.succeeded + counts.errored + counts.canceled + counts.expired,
        )

    async def batch_results(self, batch_id: str) -> dict[str, ModelOutput | Exception]:
        out: dict[str, ModelOutput | Exception] = {}
        stream = await self._call(self.client.messages.batches.results, batch_id)
        async for line in stream:
            result = line.result
            if result.type == "succeeded":
                out[line.custom_id] = self._output(result.message)
            elif result.type == "errored":
                error = result.error.error
                status = _ERROR_STATUS.get(error.type, 400)
                out[line.custom_id] = batch_error(
                    status_error(
                        status,
                        f"{error.type}: {error.message}",
                        headers={},
                        model=self.target.model,
                        key_hint="ANTHROPIC_API_KEY",
                    )
                )
            # canceled and expired requests have no result: they may be sent again
        return out

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        system, messages = _convert(
            request.messages,
            auto_cache=self.options.prompt_cache,
            rolling=request.prompt_cache_key is not None,
        )
        max_tokens = request.max_tokens or self.options.default_max_tokens
        params: dict[str, Any] = {
            "model": self.target.model_name,
            "messages": messages,
            "max_tokens": max_tokens,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        output_config: dict[str, Any] = {}
        if request.output is not None:
            output_config["format"] = {
                "type": "json_schema",
                "schema": anthropic_schema(request.output.json_schema, model=self.target.model),
            }
        if request.reasoning_effort is not None:
            effort = request.reasoning_effort
            output_config["effort"] = "low" if effort in ("none", "minimal") else effort
        if output_config:
            params["output_config"] = output_config
        if request.temperature is not None:
            # the Messages API of this SDK generation has no sampling parameters
            raise ModelRequestError(
                f"{self.target.model}: the Anthropic Messages API takes no temperature; "
                "remove it from the call or the model's configuration"
            )
        if self.options.thinking_budget is not None:
            budget = self.options.thinking_budget
            params["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if max_tokens <= budget:
                params["max_tokens"] = budget + self.options.default_max_tokens
        return params

    def _output(self, response: AnthropicMessage) -> ModelOutput:
        texts: list[str] = []
        reasoning: list[ReasoningItem] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text or "")
            elif block.type == "tool_use":
                args = block.input if isinstance(block.input, dict) else {}
                error = None if isinstance(block.input, dict) else "input is not a JSON object"
                calls.append(
                    ToolCall(id=block.id, name=block.name, arguments=args, parse_error=error)
                )
            elif block.type == "thinking":
                reasoning.append(
                    ReasoningItem(
                        type="thinking", text=block.thinking or "", signature=block.signature
                    )
                )
            elif block.type == "redacted_thinking":
                reasoning.append(ReasoningItem(type="redacted_thinking", data=block.data))
        usage = anthropic_usage(response.usage)
        stop = ANTHROPIC_STOP.get(response.stop_reason or "", "unknown")
        return ModelOutput(
            model=self.target.model,
            text="".join(texts),
            tool_calls=cut_calls(calls, stop),
            reasoning="\n".join(r.text for r in reasoning if r.text) or None,
            reasoning_items=reasoning,
            stop_reason=stop,
            usage=usage,
        )


def _text_block(text: str, cache: bool) -> list[dict[str, Any]]:
    """A text block, or none for empty text (the API refuses empty text blocks)."""
    if not text:
        return []
    block: dict[str, Any] = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = _EPHEMERAL
    return [block]


def _reasoning_block(item: ReasoningItem) -> dict[str, Any] | None:
    """An Anthropic thinking block to send back exactly as it came, if ``item`` is one."""
    if item.type == "thinking" and item.signature is not None:
        return {"type": "thinking", "thinking": item.text, "signature": item.signature}
    if item.type == "redacted_thinking" and item.data is not None:
        return {"type": "redacted_thinking", "data": item.data}
    return None


def _convert(
    messages: tuple[Message, ...], *, auto_cache: bool, rolling: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """System blocks and alternating user/assistant turns, with cache breakpoints.

    Consecutive messages of one role become one turn; empty text is left out, and a turn left
    with no blocks (an empty assistant answer: no text, no tool calls, no thinking) is
    dropped, so the turns still alternate (the user turns around it become one). An assistant
    turn's thinking blocks go first, each exactly as it came.

    Breakpoints: each message marked ``cache=True`` (else, with ``auto_cache``, the last
    system message); with ``rolling``, also the last block of the conversation, so each step
    of a tool loop reads the prefix the step before wrote. Never more than
    :data:`MAX_BREAKPOINTS` (the API refuses a fifth): the rolling one and the latest marks.
    """
    marked = [i for i, m in enumerate(messages) if getattr(m, "cache", False)]
    if not marked and auto_cache:
        systems = [i for i, m in enumerate(messages) if isinstance(m, SystemMessage)]
        marked = systems[-1:]
    keep = MAX_BREAKPOINTS - 1 if rolling else MAX_BREAKPOINTS
    breakpoints = set(marked[-keep:])

    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            system.extend(_text_block(message.content, i in breakpoints))
        elif isinstance(message, UserMessage):
            add("user", _text_block(message.content, i in breakpoints))
        elif isinstance(message, ToolMessage):
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                result["is_error"] = True
            add("user", [result])
        elif isinstance(message, AssistantMessage):
            blocks = [b for r in message.reasoning_items if (b := _reasoning_block(r))]
            blocks.extend(_text_block(message.content, False))
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            )
            add("assistant", blocks)
    if rolling and turns:
        last = turns[-1]["content"][-1]
        if last.get("type") not in ("thinking", "redacted_thinking"):
            last["cache_control"] = _EPHEMERAL
    return system, turns


def _translate(exc: anthropic.APIError, target: Target) -> Exception:
    if isinstance(exc, anthropic.APITimeoutError):
        return TransientError(f"no answer within {target.config.timeout_s:g}s")
    if isinstance(exc, anthropic.APIConnectionError):
        where = target.base_url or "the Anthropic API"
        return TransientError(f"cannot reach {where}: {connection_reason(exc)}")
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.message
        body = exc.body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = str(body["error"].get("message") or message)
        return status_error(
            exc.status_code,
            message,
            headers=exc.response.headers,
            model=target.model,
            key_hint="ANTHROPIC_API_KEY",
        )
    return TransientError(f"malformed response: {exc}", answered=True)
