"""How the fake server sizes a request, and the prompt caches it simulates.

A request is read as a sequence of *segments* in the order the provider builds its prompt
(tools, then the system prompt, then each message or content block), each with its token
count: OpenAI models counted exactly (:func:`paperbench.llm.count_tokens`), Anthropic models
with the estimate. The sum is the request's input tokens, checked against the model's
context window and reported as usage.

Prompt caches, as the providers document them:

- OpenAI: a prompt of 1024 tokens or more is cached automatically; a later request reads
  the longest prefix already seen (per ``prompt_cache_key`` when given), in 128-token
  increments from 1024, reported as ``cached_tokens``.
- Anthropic: only prefixes ending at a ``cache_control`` breakpoint are written, when long
  enough (1024 tokens; 2048 for Haiku models); a later request reads the longest written
  prefix that ends at one of its breakpoints or up to 20 blocks before one. ``input_tokens``
  is then only the rest after the last breakpoint, reported apart from
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``.

Segments are compared whole (a prefix ends at a segment boundary), which is how tool loops
grow their prompts.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from paperbench.llm._tokens import MESSAGE_OVERHEAD, count_tokens

OPENAI_MIN_CACHED = 1024
OPENAI_CACHE_STEP = 128
ANTHROPIC_LOOKBACK = 20


@dataclass(frozen=True)
class Segment:
    tokens: int
    key: str
    """A canonical form of the segment, for prefix matching."""
    breakpoint: bool = False
    """Anthropic: the block carries ``cache_control``."""


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _text(value: Any) -> str:
    """The text of a content field: a string, or the text of a list of parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(part) for part in value)
    if isinstance(value, dict):
        for name in ("text", "thinking", "output", "content"):
            if name in value:
                return _text(value[name])
    return ""


def segments(protocol: str, body: dict[str, Any]) -> list[Segment]:
    """The request as counted segments (see the module docs)."""
    model = str(body.get("model", ""))
    qualified = ("anthropic/" if protocol == "messages" else "openai/") + model

    def count(text: str) -> int:
        return count_tokens(text, qualified)

    out: list[Segment] = []
    for tool in body.get("tools") or []:
        cached = isinstance(tool, dict) and "cache_control" in tool
        out.append(Segment(count(_dump(tool)), _dump(tool), cached))
    if protocol == "chat":
        for message in body.get("messages") or []:
            tokens = MESSAGE_OVERHEAD + count(_text(message.get("content")))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                tokens += count(str(function.get("name", "")))
                tokens += count(str(function.get("arguments", "")))
            out.append(Segment(tokens, _dump(message)))
        return out
    if protocol == "responses":
        if body.get("instructions"):
            text = str(body["instructions"])
            out.append(Segment(MESSAGE_OVERHEAD + count(text), _dump(text)))
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for item in items or []:
            kind = item.get("type", "message")
            if kind in ("function_call", "custom_tool_call"):
                tokens = count(str(item.get("name", ""))) + count(
                    str(item.get("arguments", item.get("input", "")))
                )
            elif kind in ("function_call_output", "custom_tool_call_output"):
                tokens = MESSAGE_OVERHEAD + count(_text(item.get("output")))
            elif kind == "reasoning":
                summary = "\n".join(_text(s) for s in item.get("summary") or [])
                opaque = len(str(item.get("encrypted_content") or ""))
                tokens = count(summary) + math.ceil(opaque / 4)
            else:
                tokens = MESSAGE_OVERHEAD + count(_text(item.get("content")))
            out.append(Segment(tokens, _dump(item)))
        return out
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for block in system or []:
        out.append(Segment(count(_text(block)), _dump(block), "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        first = True
        for block in content or []:
            tokens = _anthropic_block_tokens(block, count) + (MESSAGE_OVERHEAD if first else 0)
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            key = _dump({"role": message.get("role"), "block": plain})
            out.append(Segment(tokens, key, "cache_control" in block))
            first = False
    return out


def _anthropic_block_tokens(block: dict[str, Any], count: Any) -> int:
    kind = block.get("type")
    if kind == "tool_use":
        return int(count(str(block.get("name", ""))) + count(_dump(block.get("input", {}))))
    if kind == "thinking":
        return int(
            count(str(block.get("thinking", "")))
            + math.ceil(len(str(block.get("signature") or "")) / 4)
        )
    if kind == "redacted_thinking":
        return math.ceil(len(str(block.get("data") or "")) / 4)
    return int(count(_text(block)))


def request_tokens(protocol: str, body: dict[str, Any]) -> int:
    """The input tokens of a request: the sum of its segments."""
    return sum(s.tokens for s in segments(protocol, body))


@dataclass(frozen=True)
class CacheUsage:
    input: int
    """All input tokens, cached ones included."""
    read: int = 0
    written: int = 0


def _chain(seed: str, parts: list[Segment]) -> list[str]:
    """The hash of each prefix: ``[h(seg0), h(seg0 seg1), ...]``."""
    hashes: list[str] = []
    digest = hashlib.sha256(seed.encode())
    for part in parts:
        digest.update(b"\x00" + part.key.encode())
        hashes.append(digest.copy().hexdigest())
    return hashes


@dataclass
class PromptCache:
    """The prefixes the server has seen (OpenAI) or written (Anthropic)."""

    openai: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    anthropic: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def use(self, protocol: str, body: dict[str, Any]) -> CacheUsage:
        """Look the request up, remember it, and say what it read and wrote."""
        parts = segments(protocol, body)
        cumulative: list[int] = []
        total = 0
        for part in parts:
            total += part.tokens
            cumulative.append(total)
        model = str(body.get("model", ""))
        if protocol == "messages":
            return self._anthropic(model, parts, cumulative)
        key = f"{model}\x00{body.get('prompt_cache_key') or ''}"
        hashes = _chain(key, parts)
        with self.lock:
            seen = self.openai[key]
            hit = max((i for i, h in enumerate(hashes) if h in seen), default=-1)
            if total >= OPENAI_MIN_CACHED:
                seen.update(hashes)
        prefix = cumulative[hit] if hit >= 0 else 0
        cached = 0
        if prefix >= OPENAI_MIN_CACHED:
            cached = prefix // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP
        return CacheUsage(input=total, read=cached)

    def _anthropic(self, model: str, parts: list[Segment], cumulative: list[int]) -> CacheUsage:
        total = cumulative[-1] if cumulative else 0
        minimum = 2048 if "haiku" in model else 1024
        hashes = _chain(model, parts)
        points = [i for i, part in enumerate(parts) if part.breakpoint]
        with self.lock:
            hit = -1
            for point in points:
                for i in range(point, max(-1, point - ANTHROPIC_LOOKBACK), -1):
                    if hashes[i] in self.anthropic:
                        hit = max(hit, i)
                        break
            writable = [p for p in points if cumulative[p] >= minimum]
            self.anthropic.update(hashes[p] for p in writable)
        read = cumulative[hit] if hit >= 0 else 0
        last = max(writable, default=-1)
        written = cumulative[last] - read if last > hit else 0
        return CacheUsage(input=total, read=read, written=written)
