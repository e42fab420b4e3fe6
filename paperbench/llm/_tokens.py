"""Token counting for context budgets, offline and never downloading.

OpenAI models are counted **exactly**: ``tiktoken`` is the engine, and its vocabulary (the
``o200k_base`` or ``cl100k_base`` mergeable ranks) is read from the copy shipped inside the
installed ``bpe-openai`` wheel instead of being downloaded. The decompressed file must have
the sha256 that tiktoken itself pins for the encoding, and the split pattern and special
tokens are tiktoken's own (``tiktoken_ext.openai_public``), so the counts are tiktoken's.

Every other provider gets an **estimate** (:func:`token_count_kind` says which a model gets,
so a caller keeps a wider margin for an estimate). Anthropic publishes no offline tokenizer.
A flat ``bytes / 4`` is right for English prose but far too low for dense text: base64 or
hex blobs, numeric logs and mixed-case identifiers split into many short pieces (about 1.5
bytes per token for base64). The estimate therefore splits the text the way BPE
pre-tokenizers do (words, case changes, runs of up to three digits, punctuation runs,
whitespace) and charges each piece by its length: it tracks the exact o200k count within
about 15% on prose, code, base64 and number logs (see ``bench/tokens.py``), and for Claude it
is raised by a further 15% because Claude's tokenizer gives more tokens for the same text.
Treat an estimate as a budget, not a bill (the provider's usage is the bill).

Each chat message adds 4 tokens of framing; reasoning items count too (their readable text
exactly, an opaque signature or encrypted content as ``length / 4``, as the provider bills
it as input), and tool calls count as their name plus their arguments as JSON.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import math
import re
import threading
import types
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from paperbench.errors import ModelError
from paperbench.llm._types import AssistantMessage, Message, ReasoningItem

MESSAGE_OVERHEAD = 4
ANTHROPIC_FACTOR = 1.15
"""Claude's tokenizer gives more tokens than o200k for the same text."""

TokenCountKind = Literal["exact", "estimate"]
"""How tokens are counted: exactly (the provider's tokenizer) or estimated."""

_VOCABULARY_PACKAGE = "bpe_openai"


_OPENAI_FAMILIES = ("gpt-", "o1", "o3", "o4", "codex", "chatgpt")


def _openai_family(model: str) -> bool:
    """An OpenAI model, whose tokenizer is known (``openai/qwen3`` behind a compatible server
    is not one)."""
    provider, _, name = model.partition("/")
    return provider == "openai" and name.startswith(_OPENAI_FAMILIES)


def _encoding_for(model: str) -> str:
    name = model.partition("/")[2] or model
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "codex", "chatgpt")):
        return "o200k_base"
    return "cl100k_base"


def _vocabulary_file(encoding: str) -> Path:
    """The gzipped vocabulary inside the installed package, found without importing it
    (importing ``bpe_openai`` builds its own tokenizers for every encoding)."""
    spec = importlib.util.find_spec(_VOCABULARY_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "data" / f"{encoding}.tiktoken.gz"
        if path.is_file():
            return path
    raise ModelError(
        f"no offline vocabulary for {encoding}: install the '{_VOCABULARY_PACKAGE}' package "
        "(a dependency of paperbench)"
    )


def _ranks_from_package(encoding: str) -> Callable[..., dict[bytes, int]]:
    """A stand-in for tiktoken's ``load_tiktoken_bpe`` that reads the vocabulary shipped in
    the installed package and checks it against the hash tiktoken passes in."""

    def load(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        raw = gzip.decompress(_vocabulary_file(encoding).read_bytes())
        actual = hashlib.sha256(raw).hexdigest()
        if expected_hash is None or actual != expected_hash:
            raise ValueError(
                f"{encoding}: the bundled vocabulary has sha256 {actual}, "
                f"tiktoken expects {expected_hash}"
            )
        return {
            base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)
        }

    return load


_ENCODING_LOCK = threading.Lock()


def _encoding(encoding: str) -> Any:
    """:func:`_build_encoding`, built once: threads asking for it at once (a server's first
    requests) wait for the one build instead of each building it (seconds each)."""
    with _ENCODING_LOCK:
        return _build_encoding(encoding)


@lru_cache(maxsize=4)
def _build_encoding(encoding: str) -> Any:
    """tiktoken's ``Encoding`` for ``encoding``, built offline from the bundled vocabulary.

    tiktoken's own constructor in ``tiktoken_ext.openai_public`` is run with a copy of its
    globals in which the loader reads the package file (nothing in tiktoken is modified),
    so the name, split pattern, special tokens and expected hash are tiktoken's.
    """
    import tiktoken
    import tiktoken_ext.openai_public as public  # type: ignore[import-untyped]

    constructor = getattr(public, encoding)
    offline = types.FunctionType(
        constructor.__code__,
        {**constructor.__globals__, "load_tiktoken_bpe": _ranks_from_package(encoding)},
        constructor.__name__,
    )
    return tiktoken.Encoding(**offline())


def token_count_kind(model: str) -> TokenCountKind:
    """``exact`` when :func:`count_tokens` gives ``model`` the provider's own count (OpenAI's
    models: ``openai/gpt-*``, ``o1``/``o3``/``o4``, ``codex``), ``estimate`` otherwise (keep
    a wider margin then), including other models reached through the ``openai`` provider."""
    return "exact" if _openai_family(model) else "estimate"


# Pieces as BPE pre-tokenizers split text: a word (an optional leading mark, capitals then
# lower case), a run of capitals, up to three digits, a run of punctuation, whitespace.
_PIECES = re.compile(
    r"""[^\r\n\w]?[A-Z]*[a-z]+|[^\r\n\w]?[A-Z]+[a-z]*|[^\W\d_]+|\d{1,3}"""
    r"""| ?[^\s\w]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


_VOWELS = frozenset("aeiouyAEIOUY")


def _word_tokens(piece: str) -> int:
    """A word-like piece (vowels between a quarter and two thirds of its letters) is one token
    per seven letters; a random-looking one (base64, hashes) one per 1.6."""
    letters = len(piece) if piece[0].isalpha() else len(piece) - 1
    if letters <= 2:
        return 1
    vowels = sum(c in _VOWELS for c in piece)
    if 0.25 * letters <= vowels <= 0.67 * letters:
        return 1 + (letters - 1) // 7
    return math.ceil(letters / 1.6)


def estimate_tokens(text: str) -> int:
    """An o200k-like estimate of the tokens of ``text`` (see the module docs)."""
    total = 0
    for piece in _PIECES.findall(text):
        size = len(piece.encode("utf-8"))
        if size > len(piece):  # non-ASCII: about two bytes a token
            total += math.ceil(size / 2)
        elif piece[-1].isalpha():
            total += _word_tokens(piece)
        elif piece.isdigit():
            total += 1
        elif piece.isspace():
            total += 1 if len(piece) < 16 else math.ceil(len(piece) / 16)
        else:
            total += math.ceil(len(piece.strip()) / 2) or 1
    return total


def count_tokens(text: str, model: str = "openai/gpt-4o") -> int:
    """Tokens in ``text`` for ``model`` (``provider/model``): exact for OpenAI models, an
    estimate for the others (see :func:`token_count_kind`)."""
    if not text:
        return 0
    if _openai_family(model):
        return len(_encoding(_encoding_for(model)).encode(text, disallowed_special=()))
    estimate = estimate_tokens(text)
    if model.startswith("anthropic/"):
        return math.ceil(estimate * ANTHROPIC_FACTOR)
    return estimate


def _reasoning_tokens(item: ReasoningItem, model: str) -> int:
    opaque = len(item.signature or "") + len(item.data or "")
    text = item.text or "\n".join(item.summary)
    return count_tokens(text, model) + math.ceil(opaque / 4)


def count_message_tokens(messages: Iterable[Message], model: str = "openai/gpt-4o") -> int:
    """Tokens of a conversation: each message's text, reasoning items, tool calls (name and
    arguments as JSON) and framing."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + count_tokens(message.content, model)
        if isinstance(message, AssistantMessage):
            for item in message.reasoning_items:
                total += _reasoning_tokens(item, model)
            for call in message.tool_calls:
                arguments = json.dumps(call.arguments, ensure_ascii=False)
                total += count_tokens(call.name, model) + count_tokens(arguments, model)
    return total
