"""Fixtures for the agent tests: a fake model server, a clean environment, and a helper that
runs an agent in a real local-bubblewrap sandbox with a RunContext built directly."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from paperbench.agents import (
    SUBMISSION_DIR,
    AgentLimits,
    LimitTracker,
    RunContext,
    TranscriptEvent,
    TranscriptWriter,
    read_transcript,
)
from paperbench.llm import CostLedger, Model, ModelConfig
from paperbench.sandbox import LocalBackend, NetworkPolicy, Sandbox, SandboxBackend, SandboxSpec
from paperbench.testing import FakeLLMServer

# the Docker backend's session fixtures: engine, images
from tests.fixtures import clean_env, fake_llm  # noqa: F401
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    sweep,
)

T = TypeVar("T")

PROVIDERS = {
    "chat": ("openai/gpt-4o", "openai_url"),
    "messages": ("anthropic/claude-haiku-4-5", "anthropic_url"),
}


def model_for(protocol: str, server: FakeLLMServer, **kwargs: Any) -> Model:
    """A model talking ``protocol`` (chat, messages) to ``server``, with short timeouts."""
    name, attr = PROVIDERS[protocol]
    settings: dict[str, Any] = {
        "timeout_s": 5.0,
        "retry_initial_s": 0.01,
        "retry_max_s": 0.05,
        "max_retry_wait_s": 2.0,
        "api_key": "x",
    }
    settings.update(kwargs)
    return Model(ModelConfig(model=name, base_url=getattr(server, attr), **settings))


def run(coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
    """Run one coroutine with a bound on its time (no test may hang)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout=timeout)

    return asyncio.run(bounded())


async def wait_for_file(sandbox: Sandbox, path: str, timeout: float = 60) -> None:
    """Until ``path`` is in the sandbox and not empty (polled), or an AssertionError after
    ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (await sandbox.exec(f"test -s {path}", timeout=30)).exit_code != 0:
        assert asyncio.get_running_loop().time() < deadline, f"no {path} after {timeout:g} s"
        await asyncio.sleep(0.1)


@dataclass
class Rig:
    """What a test gets inside :func:`with_context`."""

    ctx: RunContext
    sandbox: Sandbox
    transcript: Path

    def events(self) -> list[TranscriptEvent]:
        return read_transcript(self.transcript)


async def with_context(
    tmp_path: Path,
    body: Callable[[Rig], Awaitable[T]],
    *,
    model: Model | None = None,
    limits: AgentLimits | None = None,
    history: list[TranscriptEvent] | None = None,
    network: NetworkPolicy = NetworkPolicy.NONE,
    files: dict[str, str] | None = None,
    backend: SandboxBackend | None = None,
    image: str = "host",
) -> T:
    """Start a local-bubblewrap sandbox with /home/paper and a git repo in /home/submission,
    build a RunContext on it and run ``body``; the sandbox is always stopped."""
    backend = backend or LocalBackend(tmp_path / "ws", isolation="bwrap")
    spec = SandboxSpec(image=image, network=network, workdir="/home", labels=TEST_LABELS)
    sandbox = await backend.start(spec)
    transcript = tmp_path / "run" / "transcript.jsonl"
    writer = TranscriptWriter(transcript)
    try:
        await sandbox.write_file("/home/paper/paper.md", b"# A paper\n\nline two\n")
        for path, text in (files or {}).items():
            await sandbox.write_file(path, text.encode())
        await sandbox.exec(f"mkdir -p {SUBMISSION_DIR} && git init -q {SUBMISSION_DIR}", timeout=30)
        ledger = model.ledger if model is not None else CostLedger()
        ctx = RunContext(
            sandbox=sandbox,
            model=model,
            instructions="Replicate the paper.",
            transcript=writer,
            limits=LimitTracker(limits or AgentLimits(), ledger),
            paper_id="p",
            history=list(history or []),
            resumed=bool(history),
            run_dir=tmp_path / "run",
        )
        return await body(Rig(ctx=ctx, sandbox=sandbox, transcript=transcript))
    finally:
        writer.close()
        if model is not None:
            await model.aclose()
        await sandbox.stop()
