from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest
from tests.judge.conftest import llm_env  # noqa: F401  (a fixture used here)
from tests.judge.scripted import ScriptedJudge


def request_key(request: RecordedRequest) -> str:
    body = {k: v for k, v in request.body.items() if k != "metadata"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class CountingJudge:
    """A scripted judge (every criterion 1) that records which requests it answered, and
    can hold every request from a given one on (so that a kill lands while one waits)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.answered: list[str] = []
        self.held = threading.Event()
        self.release = threading.Event()
        self.hold_after: int | None = None
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> FakeReply:
        with self.lock:
            hold = self.hold_after is not None and len(self.answered) >= self.hold_after
        if hold:
            self.held.set()
            self.release.wait(60)
            return FakeReply(text="too late: the caller is gone")
        reply = ScriptedJudge(lambda text: 1.0)(request)
        assert isinstance(reply, FakeReply)
        with self.lock:
            self.answered.append(request_key(request))
        return FakeReply(json=reply.json, delay=self.delay)


@pytest.fixture
def judge_server(llm_env: Path) -> Iterator[tuple[FakeLLMServer, CountingJudge]]:  # noqa: F811
    judge = CountingJudge()
    with FakeLLMServer() as server:
        server.handler = judge
        yield server, judge
        judge.release.set()
