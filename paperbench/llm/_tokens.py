"""Token counting for context budgets, offline.

If ``tiktoken`` is installed *and* its vocabulary file is already in its local cache
(``TIKTOKEN_CACHE_DIR``, ``DATA_GYM_CACHE_DIR`` or the temp-dir default), OpenAI models are
counted exactly. Nothing here ever downloads: without the cached vocabulary, and for every
other provider, the count is an approximation:

    tokens ≈ ceil(utf8_bytes / 4)            OpenAI-style BPE (o200k/cl100k) and unknown models
    tokens ≈ ceil(utf8_bytes / 3.5)          Anthropic models (Claude's tokenizer is denser)

On English prose and source code these land within about 15% of the real count and err on
the high side for code; treat them as a budget, not a bill (the provider's usage is the bill).
Each chat message adds 4 tokens of framing.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

from paperbench.llm._types import Message

MESSAGE_OVERHEAD = 4

_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def _encoding_for(model: str) -> str:
    name = model.partition("/")[2] or model
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4")):
        return "o200k_base"
    return "cl100k_base"


def _tiktoken_cache_dir() -> Path:
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path(tempfile.gettempdir()) / "data-gym-cache"


@lru_cache(maxsize=4)
def _exact_counter(encoding: str) -> Callable[[str], int] | None:
    """tiktoken's encoder if its vocabulary is cached locally, else ``None`` (no download)."""
    try:
        import tiktoken  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    url = _ENCODING_URLS[encoding]
    cached = _tiktoken_cache_dir() / hashlib.sha1(url.encode()).hexdigest()
    if not cached.is_file():
        return None
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception:  # a corrupt cache file or an old tiktoken: fall back
        return None
    return lambda text: len(enc.encode(text, disallowed_special=()))


def token_count_kind(model: str) -> str:
    """``exact`` when ``model``'s tokenizer is at hand, else ``estimate``."""
    if model.startswith("openai/") and _exact_counter(_encoding_for(model)) is not None:
        return "exact"
    return "estimate"


def count_tokens(text: str, model: str = "openai/gpt-4o") -> int:
    """Tokens in ``text`` for ``model`` (``provider/model``); see the module docs."""
    if model.startswith("openai/"):
        counter = _exact_counter(_encoding_for(model))
        if counter is not None:
            return counter(text)
    size = len(text.encode("utf-8"))
    divisor = 3.5 if model.startswith("anthropic/") else 4.0
    return math.ceil(size / divisor)


def count_message_tokens(messages: Iterable[Message], model: str = "openai/gpt-4o") -> int:
    """Tokens of a conversation: each message's text, tool calls and framing."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + count_tokens(message.content, model)
        for call in getattr(message, "tool_calls", ()):
            total += count_tokens(call.name, model) + count_tokens(str(call.arguments), model)
    return total


def max_output_tokens(model: str) -> int | None:
    """The largest output limit ``model`` accepts, when known."""
    return None
