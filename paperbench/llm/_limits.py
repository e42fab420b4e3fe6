"""How much a model takes in and gives out: context windows and output limits.

A small table of the providers' published limits, for callers that plan a long tool loop:
:func:`context_window` to keep a conversation inside the window, :func:`max_output_tokens`
to raise ``max_tokens`` after an answer was cut off (``stop_reason == "max_tokens"``). A
dated snapshot (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``) has its family's
limits; an unknown model gets ``None``: the caller decides, nothing is guessed.
"""

from __future__ import annotations

# (name prefix, context window, largest max_tokens), most specific prefix first
_LIMITS: tuple[tuple[str, int, int], ...] = (
    ("openai/gpt-4o-mini", 128_000, 16_384),
    ("openai/gpt-4o", 128_000, 16_384),
    ("openai/gpt-4.1", 1_047_576, 32_768),
    ("openai/gpt-4-turbo", 128_000, 4_096),
    ("openai/gpt-4", 8_192, 8_192),
    ("openai/gpt-3.5-turbo", 16_385, 4_096),
    ("openai/gpt-5", 400_000, 128_000),
    ("openai/codex", 400_000, 128_000),
    ("openai/o1-mini", 128_000, 65_536),
    ("openai/o1-preview", 128_000, 32_768),
    ("openai/o1", 200_000, 100_000),
    ("openai/o3", 200_000, 100_000),
    ("openai/o4-mini", 200_000, 100_000),
    ("anthropic/claude-opus-4-5", 200_000, 64_000),
    ("anthropic/claude-opus-4", 200_000, 32_000),
    ("anthropic/claude-sonnet-4", 200_000, 64_000),
    ("anthropic/claude-haiku-4-5", 200_000, 64_000),
    ("anthropic/claude-3-7-sonnet", 200_000, 64_000),
    ("anthropic/claude-3-5-haiku", 200_000, 8_192),
    ("anthropic/claude-3-5-sonnet", 200_000, 8_192),
)


def _limits(model: str) -> tuple[int, int] | None:
    for prefix, window, output in _LIMITS:
        if model == prefix or model.startswith((prefix + "-", prefix + ".")):
            return window, output
    return None


def context_window(model: str) -> int | None:
    """Tokens of input plus output ``model`` (``provider/model``) takes, or ``None``."""
    found = _limits(model)
    return found[0] if found else None


def max_output_tokens(model: str) -> int | None:
    """The largest ``max_tokens`` ``model`` accepts, or ``None`` when unknown."""
    found = _limits(model)
    return found[1] if found else None


def default_context_windows() -> dict[str, int]:
    """The table's windows by model name without provider (as requests name models)."""
    return {prefix.partition("/")[2]: window for prefix, window, _ in _LIMITS}


_OPENAI_REASONING = ("o1", "o3", "o4", "gpt-5", "codex")


def takes_reasoning_effort(model: str) -> bool:
    """False for an OpenAI model known not to reason (``gpt-4o``, ``gpt-4.1``, ...): OpenAI
    refuses a reasoning effort for it. True for every other model (the provider decides)."""
    provider, _, name = model.partition("/")
    if provider != "openai" or _limits(model) is None:
        return True
    return name.startswith(_OPENAI_REASONING)
