"""Fixtures for the agent tests: a fake model server and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from paperbench.testing import FakeLLMServer

_ENV = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "PAPERBENCH_PRICES",
    "PAPERBENCH_ENDPOINTS",
    "PAPERBENCH_DATA_DIR",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No real keys or base URLs, a private cache folder, a test key for the fake server."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-server")
    return tmp_path


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """A fake OpenAI/Anthropic server on 127.0.0.1, stopped after the test."""
    with FakeLLMServer() as server:
        yield server
