"""Helpers shared by the model-provider tests."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from paperbench.llm import Model, ModelConfig, ModelOutput
from paperbench.testing import FakeLLMServer

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine with a bound on its time (no test may hang)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=30)

    return asyncio.run(bounded())


def fast(model: str, base_url: str | None, **kwargs: Any) -> ModelConfig:
    """A config with short timeouts and retry waits, for tests."""
    settings: dict[str, Any] = {
        "timeout_s": 5.0,
        "retry_initial_s": 0.01,
        "retry_max_s": 0.05,
        "max_retry_wait_s": 2.0,
    }
    settings.update(kwargs)
    return ModelConfig(model=model, base_url=base_url, **settings)


PROVIDERS = {
    "chat": ("openai/gpt-4o", "openai_url", {}),
    "responses": ("openai/o3", "openai_url", {"options": {"api": "responses"}}),
    "messages": ("anthropic/claude-haiku-4-5", "anthropic_url", {}),
}


def config_for(protocol: str, server: FakeLLMServer, **kwargs: Any) -> ModelConfig:
    """A fast config that talks ``protocol`` (chat, responses, messages) to ``server``."""
    model, attr, extra = PROVIDERS[protocol]
    model = kwargs.pop("model", model)
    return fast(model, getattr(server, attr), **{**extra, **kwargs})


def gen(model: Model, *args: Any, **kwargs: Any) -> ModelOutput:
    """``model.generate(...)`` in its own event loop, closing the client in that loop."""

    async def call() -> ModelOutput:
        try:
            return await model.generate(*args, **kwargs)
        finally:
            await model.aclose()

    return run(call())
