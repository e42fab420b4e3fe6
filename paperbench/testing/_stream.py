"""Server-sent event streams for the fake model server, in each API's wire format.

A streamed answer is rendered from the same response body the server sends without
``stream`` (:func:`paperbench.testing.fake_llm._render`), so a client that assembles the
stream gets back exactly that body:

- Chat Completions: ``data: {chat.completion.chunk}`` lines (a role delta, content or
  ``reasoning_content`` deltas, ``tool_calls`` deltas with the index, id and name first and
  the arguments in pieces, a ``finish_reason`` chunk), a usage chunk with no choices only when
  ``stream_options.include_usage`` is true (every chunk then carries ``usage: null``), then
  ``data: [DONE]``.
- Responses: ``event:``/``data:`` pairs numbered by ``sequence_number``:
  ``response.created``, ``response.in_progress``, for each output item
  ``response.output_item.added`` ... ``response.output_item.done`` (reasoning summaries,
  message content parts with ``output_text`` deltas, function call argument deltas, custom
  tool call input deltas), then
  ``response.completed`` (``response.incomplete`` for an answer cut off) with the usage.
- Anthropic Messages: ``message_start`` (the input usage), for each content block
  ``content_block_start``, its deltas (``text_delta``, ``thinking_delta`` then
  ``signature_delta``, ``input_json_delta`` with ``partial_json`` pieces) and
  ``content_block_stop``, one ``ping``, ``message_delta`` (stop reason, usage) and
  ``message_stop``.

Failures mid-stream, as the APIs send them (:func:`failure_event`): Chat a ``data:`` line
holding an ``error`` object, Responses ``response.failed``, Anthropic an ``error`` event.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

PIECE = 8
"""Characters per delta: texts and arguments arrive in several pieces, as real streams do."""


@dataclass(frozen=True)
class Event:
    """One server-sent event: an optional ``event:`` name and its ``data:`` payload."""

    data: dict[str, Any] | str
    name: str | None = None

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else json.dumps(self.data)
        head = f"event: {self.name}\n" if self.name else ""
        return f"{head}data: {data}\n\n".encode()


def pieces(text: str, size: int = PIECE) -> list[str]:
    """``text`` cut into deltas of ``size`` characters (none for an empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_events(protocol: str, body: dict[str, Any], request: dict[str, Any]) -> list[Event]:
    """The events that stream ``body`` (a complete response of ``protocol``), for the
    request body ``request``."""
    if protocol == "chat":
        options = request.get("stream_options") or {}
        return chat_events(body, include_usage=bool(options.get("include_usage")))
    if protocol == "responses":
        return responses_events(body)
    return messages_events(body)


def failure_event(protocol: str, body: dict[str, Any], after: int, message: str) -> Event:
    """The error a stream sends in place of its event number ``after`` (0-based)."""
    if protocol == "chat":
        error = {"message": message, "type": "server_error", "param": None, "code": None}
        return Event({"error": error})
    if protocol == "responses":
        response = _in_progress(body)
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": message}
        return Event(
            {"type": "response.failed", "sequence_number": after, "response": response},
            "response.failed",
        )
    error = {"type": "overloaded_error", "message": message}
    return Event({"type": "error", "error": error}, "error")


# -- Chat Completions ---------------------------------------------------------------------


def chat_events(body: dict[str, Any], *, include_usage: bool) -> list[Event]:
    """``chat.completion.chunk`` events, then ``[DONE]``."""
    base: dict[str, Any] = {
        "id": body.get("id"),
        "object": "chat.completion.chunk",
        "created": body.get("created"),
        "model": body.get("model"),
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return Event({**base, "choices": [choice]})

    choices = body.get("choices") or [{}]
    message = choices[0].get("message") or {}
    text = message.get("content")
    calls = message.get("tool_calls") or []
    events: list[Event] = []
    role: dict[str, Any] = {"role": "assistant", "content": "" if text else None, "refusal": None}
    if not calls or text or message.get("reasoning_content"):
        events.append(chunk(role))
        role = {}
    for part in pieces(message.get("reasoning_content") or ""):
        events.append(chunk({"reasoning_content": part}))
    for part in pieces(text or ""):
        events.append(chunk({"content": part}))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        head = {
            "index": index,
            "id": call.get("id"),
            "type": "function",
            "function": {"name": function.get("name"), "arguments": ""},
        }
        events.append(chunk({**role, "tool_calls": [head]}))
        role = {}
        for part in pieces(function.get("arguments") or ""):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            )
    events.append(chunk({}, choices[0].get("finish_reason")))
    if include_usage:
        events.append(Event({**base, "choices": [], "usage": body.get("usage")}))
    events.append(Event("[DONE]"))
    return events


# -- Responses ----------------------------------------------------------------------------


def _in_progress(body: dict[str, Any]) -> dict[str, Any]:
    response = {k: copy.deepcopy(v) for k, v in body.items()}
    response.update(status="in_progress", output=[], usage=None, incomplete_details=None)
    return response


def responses_events(body: dict[str, Any]) -> list[Event]:
    """The Responses lifecycle and item events, numbered by ``sequence_number``."""
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        data = {"type": kind, "sequence_number": len(events), **fields}
        events.append(Event(data, kind))

    emit("response.created", response=_in_progress(body))
    emit("response.in_progress", response=_in_progress(body))
    for index, item in enumerate(body.get("output") or []):
        ids = {"item_id": item.get("id"), "output_index": index}
        kind = item.get("type")
        if kind == "message":
            added = {**item, "content": [], "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=added)
            for c_index, part in enumerate(item.get("content") or []):
                at = {**ids, "content_index": c_index}
                text = str(part.get("text", ""))
                empty = {**part, "text": ""}
                if part.get("type") == "output_text":
                    empty["logprobs"] = []
                emit("response.content_part.added", **at, part=empty)
                for delta in pieces(text):
                    emit("response.output_text.delta", **at, delta=delta, logprobs=[])
                emit("response.output_text.done", **at, text=text, logprobs=[])
                emit("response.content_part.done", **at, part=part)
        elif kind == "function_call":
            arguments = str(item.get("arguments", ""))
            added = {**item, "arguments": "", "status": "in_progress"}
            emit("response.output_item.added", output_index=index, item=added)
            for delta in pieces(arguments):
                emit("response.function_call_arguments.delta", **ids, delta=delta)
            emit(
                "response.function_call_arguments.done",
                **ids,
                name=item.get("name"),
                arguments=arguments,
            )
        elif kind == "custom_tool_call":
            text = str(item.get("input", ""))
            emit("response.output_item.added", output_index=index, item={**item, "input": ""})
            for delta in pieces(text):
                emit("response.custom_tool_call_input.delta", **ids, delta=delta)
            emit("response.custom_tool_call_input.done", **ids, input=text)
        elif kind == "reasoning":
            added = {k: v for k, v in item.items() if k != "encrypted_content"}
            emit("response.output_item.added", output_index=index, item={**added, "summary": []})
            for s_index, part in enumerate(item.get("summary") or []):
                at = {**ids, "summary_index": s_index}
                text = str(part.get("text", ""))
                emit("response.reasoning_summary_part.added", **at, part={**part, "text": ""})
                for delta in pieces(text):
                    emit("response.reasoning_summary_text.delta", **at, delta=delta)
                emit("response.reasoning_summary_text.done", **at, text=text)
                emit("response.reasoning_summary_part.done", **at, part=part)
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if body.get("status") == "incomplete" else "response.completed"
    emit(final, response=body)
    return events


# -- Anthropic Messages -------------------------------------------------------------------


def messages_events(body: dict[str, Any]) -> list[Event]:
    """The Messages events: message_start, the content blocks, message_delta, message_stop."""
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append(Event({"type": kind, **fields}, kind))

    usage = dict(body.get("usage") or {})
    start = {k: copy.deepcopy(v) for k, v in body.items()}
    start.update(content=[], stop_reason=None, stop_sequence=None)
    if "usage" in body:
        start["usage"] = {**usage, "output_tokens": 1}
    emit("message_start", message=start)
    for index, block in enumerate(body.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            emit("content_block_start", index=index, content_block={**block, "text": ""})
            if index == 0:
                emit("ping")
            for part in pieces(str(block.get("text", ""))):
                emit("content_block_delta", index=index, delta={"type": "text_delta", "text": part})
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            emit("content_block_start", index=index, content_block=empty)
            for part in pieces(str(block.get("thinking", ""))):
                delta = {"type": "thinking_delta", "thinking": part}
                emit("content_block_delta", index=index, delta=delta)
            delta = {"type": "signature_delta", "signature": block.get("signature", "")}
            emit("content_block_delta", index=index, delta=delta)
        elif kind == "tool_use":
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            arguments = json.dumps(block.get("input") or {})
            for part in pieces(arguments):
                delta = {"type": "input_json_delta", "partial_json": part}
                emit("content_block_delta", index=index, delta=delta)
        else:  # redacted_thinking and other whole blocks
            emit("content_block_start", index=index, content_block=block)
        emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")},
        usage=usage,
    )
    emit("message_stop")
    return events
