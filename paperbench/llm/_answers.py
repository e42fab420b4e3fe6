"""What a provider's answer says of its usage and of why it stopped, read the same way from an
SDK object (the model adapters) or from a decoded JSON body or stream event (the gateway)."""

from __future__ import annotations

from typing import Any

from paperbench.llm._types import StopReason, Usage

ANTHROPIC_STOP: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic Messages' ``stop_reason``, as the project names it."""

CHAT_STOP: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}
"""Chat Completions' ``finish_reason``, as the project names it."""


def usage_count(usage: Any, *names: str) -> int:
    """A token count from a usage object or dict that may lack any field or hold ``None``
    (servers that speak a protocol loosely): 0 for whatever is missing."""
    value = usage
    for name in names:
        value = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
        if value is None:
            return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def anthropic_usage(u: Any) -> Usage:
    """Anthropic's usage; its ``input_tokens`` leave out the cache's reads and writes."""
    read = usage_count(u, "cache_read_input_tokens")
    written = usage_count(u, "cache_creation_input_tokens")
    return Usage(
        input_tokens=usage_count(u, "input_tokens") + read + written,
        cached_input_tokens=read,
        cache_write_tokens=written,
        output_tokens=usage_count(u, "output_tokens"),
        reasoning_tokens=usage_count(u, "output_tokens_details", "thinking_tokens"),
    )


def chat_usage(u: Any) -> Usage:
    """Chat Completions' usage."""
    return Usage(
        input_tokens=usage_count(u, "prompt_tokens"),
        cached_input_tokens=usage_count(u, "prompt_tokens_details", "cached_tokens"),
        output_tokens=usage_count(u, "completion_tokens"),
        reasoning_tokens=usage_count(u, "completion_tokens_details", "reasoning_tokens"),
    )


def responses_usage(u: Any) -> Usage:
    """The Responses API's usage."""
    return Usage(
        input_tokens=usage_count(u, "input_tokens"),
        cached_input_tokens=usage_count(u, "input_tokens_details", "cached_tokens"),
        output_tokens=usage_count(u, "output_tokens"),
        reasoning_tokens=usage_count(u, "output_tokens_details", "reasoning_tokens"),
    )
