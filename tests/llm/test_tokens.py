"""Token counts: exact for OpenAI models offline, a density-aware estimate for the others;
and the table of context windows and output limits."""

from __future__ import annotations

import base64
import random

import pytest

from paperbench.llm import (
    AssistantMessage,
    ToolCall,
    UserMessage,
    context_window,
    count_message_tokens,
    count_tokens,
    max_output_tokens,
    token_count_kind,
)
from paperbench.llm._tokens import _ranks_from_package, estimate_tokens
from paperbench.llm._types import ReasoningItem

# Counts from tiktoken's own encodings (o200k_base for gpt-4o/gpt-5, cl100k_base for gpt-4).
KNOWN = [
    ("Hello, world!", 4, 4),
    ("The quick brown fox jumps over the lazy dog.", 10, 10),
    ("def f(x):\n    return x ** 2\n", 11, 11),
    ("<|endoftext|> is text here", 10, 10),  # special tokens are plain text here
    ("naïve café 日本語", 6, 8),
]


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN)
def test_openai_counts_are_exact(text: str, o200k: int, cl100k: int) -> None:
    assert count_tokens(text, "openai/gpt-4o") == o200k
    assert count_tokens(text, "openai/gpt-5-mini") == o200k
    assert count_tokens(text, "openai/gpt-4") == cl100k


def test_which_models_get_exact_counts() -> None:
    assert token_count_kind("openai/gpt-4o") == "exact"
    assert token_count_kind("anthropic/claude-sonnet-4-5") == "estimate"
    assert token_count_kind("vllm/qwen3") == "estimate"
    assert token_count_kind("openai/qwen3-32b") == "estimate"  # behind a compatible server
    assert count_tokens("word " * 40, "openai/qwen3-32b") == estimate_tokens("word " * 40)


def test_the_bundled_vocabulary_must_have_tiktokens_hash() -> None:
    load = _ranks_from_package("cl100k_base")
    with pytest.raises(ValueError, match="tiktoken expects"):
        load("https://example.invalid/cl100k_base.tiktoken", expected_hash="0" * 64)


def _samples() -> dict[str, str]:
    rng = random.Random(7)
    prose = (
        "Replicating a paper means reading its method closely, writing the training code, "
        "and checking each reported number against a run of your own. "
    ) * 40
    code = (
        "def train(model, loader, epochs=10):\n"
        "    for epoch in range(epochs):\n"
        "        for batch in loader:\n"
        "            loss = model.step(batch)\n"
        "        print(f'epoch {epoch}: loss={loss:.4f}')\n"
    ) * 40
    blob = base64.b64encode(rng.randbytes(6000)).decode()
    numbers = "\n".join(
        f"step {i} loss={rng.random():.6f} lr={rng.random() * 1e-3:.3e}" for i in range(300)
    )
    return {"prose": prose, "code": code, "base64": blob, "numbers": numbers}


@pytest.mark.parametrize("kind", ["prose", "code", "base64", "numbers"])
def test_the_estimate_tracks_the_exact_count(kind: str) -> None:
    text = _samples()[kind]
    exact = count_tokens(text, "openai/gpt-4o")
    estimate = estimate_tokens(text)
    assert 0.8 * exact <= estimate <= 1.25 * exact, (estimate, exact)


def test_dense_text_is_counted_far_above_bytes_over_four() -> None:
    blob = _samples()["base64"]
    quarter = len(blob) / 4
    assert count_tokens(blob, "openai/gpt-4o") > 2 * quarter  # the truth
    assert count_tokens(blob, "anthropic/claude-sonnet-4-5") > 2 * quarter
    assert count_tokens(blob, "vllm/any") > 2 * quarter


def test_claude_is_counted_higher_than_o200k() -> None:
    text = _samples()["prose"]
    assert count_tokens(text, "anthropic/claude-sonnet-4-5") > estimate_tokens(text)


def test_messages_count_reasoning_and_tool_call_json() -> None:
    model = "openai/gpt-4o"
    plain = AssistantMessage(content="done")
    call = ToolCall(id="c1", name="bash", arguments={"cmd": "ls -la /work"})
    with_call = AssistantMessage(content="done", tool_calls=(call,))
    thinking = ReasoningItem(type="reasoning", id="rs_1", summary=("plan",), text="plan")
    opaque = ReasoningItem(type="reasoning", id="rs_2", data="x" * 400)
    with_reasoning = AssistantMessage(content="done", reasoning_items=(thinking, opaque))
    base = count_message_tokens([plain], model)
    assert base == 4 + count_tokens("done", model)
    assert count_message_tokens([with_call], model) == base + count_tokens(
        "bash", model
    ) + count_tokens('{"cmd": "ls -la /work"}', model)
    assert count_message_tokens([with_reasoning], model) == base + count_tokens("plan", model) + 100
    signed = ReasoningItem(type="thinking", text="hmm", signature="s" * 80)
    claude = "anthropic/claude-sonnet-4-5"
    assert (
        count_message_tokens(
            [UserMessage(content="q"), AssistantMessage(content="a", reasoning_items=(signed,))],
            claude,
        )
        == 8
        + count_tokens("q", claude)
        + count_tokens("a", claude)
        + count_tokens("hmm", claude)
        + 20
    )


def test_limits_table() -> None:
    assert max_output_tokens("openai/gpt-4o") == 16_384
    assert max_output_tokens("openai/gpt-4o-2024-08-06") == 16_384
    assert max_output_tokens("openai/gpt-5-mini") == 128_000
    assert max_output_tokens("anthropic/claude-sonnet-4-5-20250929") == 64_000
    assert max_output_tokens("anthropic/claude-opus-4-1") == 32_000
    assert context_window("openai/gpt-4o") == 128_000
    assert context_window("anthropic/claude-haiku-4-5") == 200_000
    assert context_window("vllm/qwen3") is None
    assert max_output_tokens("openai/gpt-4o1") is None  # not a dated gpt-4o
