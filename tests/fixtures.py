"""Fixtures shared by the test packages that call models: a clean environment and a fake
model server. A conftest (or a test module) imports the ones it wants."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from paperbench.testing import FakeLLMServer

MACHINE_ENV = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "PAPERBENCH_PRICES",
    "PAPERBENCH_ENDPOINTS",
    "PAPERBENCH_DATA_DIR",
)
"""What the machine's environment may set that would change what a test sees."""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No keys, no base URLs, a private cache folder, and a working directory with no .env."""
    for name in MACHINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """A fake OpenAI/Anthropic server on 127.0.0.1, stopped after the test."""
    with FakeLLMServer() as server:
        yield server


_SDK_CLIENTS: list[openai.OpenAI | anthropic.Anthropic] = []


def openai_client(server: FakeLLMServer) -> openai.OpenAI:
    """The OpenAI SDK pointed at ``server``, never retrying; closed after the test."""
    client = openai.OpenAI(api_key="sk-test", base_url=server.openai_url, max_retries=0)
    _SDK_CLIENTS.append(client)
    return client


def anthropic_client(server: FakeLLMServer) -> anthropic.Anthropic:
    """The Anthropic SDK pointed at ``server``, never retrying; closed after the test."""
    client = anthropic.Anthropic(api_key="sk-test", base_url=server.anthropic_url, max_retries=0)
    _SDK_CLIENTS.append(client)
    return client


@pytest.fixture(autouse=True)
def close_sdk_clients() -> Iterator[None]:
    """Close the SDK clients a test made: one left to the garbage collector keeps its pooled
    socket open (a cut or dropped stream leaves one mid-answer), and pytest reports the socket
    as an unraisable warning at a random later point."""
    yield
    while _SDK_CLIENTS:
        _SDK_CLIENTS.pop().close()


def reap_killed_run(root: Path, timeout: float = 30.0) -> None:
    """Remove the local workspaces (and their capped disks) a killed run left under ``root``,
    waiting while its last processes die (the reaper leaves a workspace that is in use)."""
    from paperbench.sandbox._local_gc import reap_local_orphans

    deadline = time.monotonic() + timeout
    while any(o.error for o in reap_local_orphans(root)) and time.monotonic() < deadline:
        time.sleep(0.2)
