"""Usage and stop reason read from an answer as it passes: a JSON body, or the server-sent
events of a stream (Anthropic ``message_start`` + ``message_delta``, Responses
``response.completed`` / ``response.incomplete``, a Chat usage chunk when the request asked
for ``stream_options.include_usage``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from paperbench.gateway._shapes import Protocol
from paperbench.llm import StopReason, Usage
from paperbench.llm._answers import (
    ANTHROPIC_STOP,
    CHAT_STOP,
    anthropic_usage,
    chat_usage,
    responses_usage,
)

_ANTHROPIC_STOP: dict[str, StopReason] = {**ANTHROPIC_STOP, "pause_turn": "stop"}
"""A paused turn (a long server tool) is the agent's to continue; it ended this answer."""
_RESPONSES_END = ("response.completed", "response.incomplete")
_RESPONSES_FAILED = ("response.failed", "error")


def _responses_stop(response: dict[str, Any]) -> StopReason:
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details") or {}
        return "content_filter" if details.get("reason") == "content_filter" else "max_tokens"
    kinds = {item.get("type") for item in response.get("output") or [] if isinstance(item, dict)}
    return "tool_calls" if kinds & {"function_call", "custom_tool_call"} else "stop"


@dataclass
class AnswerFacts:
    """What the gateway learnt from one answer."""

    usage: Usage | None = None
    """``None`` when the answer did not say (a Chat stream without ``include_usage``)."""
    stop_reason: StopReason | None = None
    complete: bool = False
    """The answer ended as the protocol ends one (a JSON body, a stream's last event)."""
    error: str | None = None
    """An error the answer carried (a stream's error event)."""


def read_json_answer(protocol: Protocol, body: bytes) -> AnswerFacts:
    """The facts of a complete JSON answer."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return AnswerFacts(error="the answer is not JSON")
    if not isinstance(data, dict):
        return AnswerFacts(error="the answer is not a JSON object")
    facts = AnswerFacts(complete=True)
    u = data.get("usage")
    if protocol == "messages":
        facts.usage = anthropic_usage(u) if isinstance(u, dict) else None
        facts.stop_reason = _ANTHROPIC_STOP.get(str(data.get("stop_reason")), "unknown")
    elif protocol == "chat":
        facts.usage = chat_usage(u) if isinstance(u, dict) else None
        choices = data.get("choices") or [{}]
        finish = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
        facts.stop_reason = CHAT_STOP.get(str(finish), "unknown")
    else:
        facts.usage = responses_usage(u) if isinstance(u, dict) else None
        facts.stop_reason = _responses_stop(data)
    return facts


class StreamTap:
    """Reads server-sent events as their bytes pass (fed chunk by chunk, cut anywhere) and
    keeps the usage, stop reason, end and error of the stream."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.facts = AnswerFacts()
        self._buffer = b""
        self._anthropic: dict[str, Any] = {}

    def feed(self, chunk: bytes) -> None:
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *events, self._buffer = buffer.split(b"\n\n")
        for event in events:
            self._event(event)

    def _event(self, raw: bytes) -> None:
        name = ""
        data: list[bytes] = []
        for line in raw.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip().decode("utf-8", "replace")
        if not data:
            return
        text = b"\n".join(data)
        if self.protocol == "chat" and text.strip() == b"[DONE]":
            self.facts.complete = True
            return
        if self.protocol == "messages" and name not in (
            "message_start",
            "message_delta",
            "message_stop",
            "error",
        ):
            return
        if self.protocol == "responses" and name not in (*_RESPONSES_END, *_RESPONSES_FAILED):
            return
        try:
            payload = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if isinstance(payload, dict):
            getattr(self, f"_{self.protocol}")(payload)

    def _messages(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            usage = (event.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                self._anthropic.update(usage)
                self.facts.usage = anthropic_usage(self._anthropic)
        elif kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict):
                self._anthropic.update({k: v for k, v in usage.items() if v is not None})
                self.facts.usage = anthropic_usage(self._anthropic)
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop is not None:
                self.facts.stop_reason = _ANTHROPIC_STOP.get(str(stop), "unknown")
        elif kind == "message_stop":
            self.facts.complete = True
        elif kind == "error":
            self.facts.error = _message(event.get("error")) or "an error event"

    def _responses(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        response = event.get("response")
        if kind in _RESPONSES_END and isinstance(response, dict):
            u = response.get("usage")
            self.facts.usage = responses_usage(u) if isinstance(u, dict) else None
            self.facts.stop_reason = _responses_stop(response)
            self.facts.complete = True
        elif kind == "response.failed":
            error = response.get("error") if isinstance(response, dict) else None
            self.facts.error = _message(error) or "response.failed"
        elif kind == "error":
            self.facts.error = _message(event) or "an error event"

    def _chat(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            self.facts.error = _message(chunk.get("error")) or "an error chunk"
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.facts.usage = chat_usage(usage)
        choices = chunk.get("choices") or []
        finish = (
            choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
        )
        if finish is not None:
            self.facts.stop_reason = CHAT_STOP.get(str(finish), "unknown")


def _message(error: Any) -> str | None:
    if isinstance(error, dict):
        message = error.get("message")
        return str(message) if message is not None else None
    return None


def upstream_message(body: bytes) -> str:
    """The message of an upstream error body (either shape), else its first bytes."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        message = _message(data.get("error"))
        if message:
            return message[:500]
    return body[:200].decode("utf-8", "replace")
