"""Faults injected by the fake server: what is retried, what fails at once, and how."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
import time

import pytest
from pydantic import BaseModel

from paperbench.errors import (
    BudgetExhaustedError,
    MissingKeyError,
    ModelRequestError,
    ModelUnavailableError,
    StructuredOutputError,
    UnknownProviderError,
)
from paperbench.llm import BudgetCaps, CostLedger, Model, ModelConfig
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, Fault, RecordedRequest
from tests.llm.helpers import config_for, fast, gen, run

PROTOCOLS = ["chat", "responses", "messages"]


class Verdict(BaseModel):
    score: int


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_honours_retry_after(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(Fault.rate_limit(retry_after=0.4), FakeReply(text="after the wait"))
    started = time.monotonic()
    # a budget well above the first request's own time (the client's first TLS and
    # connection set-up counts against it, and a loaded machine makes that slow)
    out = gen(Model(config_for(protocol, fake_llm, max_retry_wait_s=10.0)), "hi")
    assert out.text == "after the wait"
    assert time.monotonic() - started >= 0.4  # far above the 0.05 s backoff cap
    assert len(fake_llm.requests) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("fault", "answered"),
    [
        (Fault.server_error(500), True),
        (Fault.server_error(503), True),
        (Fault.malformed(), True),
        (Fault.drop(), False),
        (Fault.reset(), False),
    ],
    ids=["500", "503", "malformed", "dropped", "reset"],
)
def test_transient_faults_are_retried(
    fake_llm: FakeLLMServer, protocol: str, fault: Fault, answered: bool
) -> None:
    fake_llm.script(fault, fault, FakeReply(text="recovered"))
    model = Model(config_for(protocol, fake_llm))
    out = gen(model, "hi")
    assert out.text == "recovered"
    # a reset request never reaches the server; a dropped one does, and gets no answer
    assert len(fake_llm.requests) == (3 if fault.kind != "reset" else 1)
    # every attempt is on the record, and says whether an HTTP answer came
    records = model.ledger.records
    assert [r.answered for r in records] == [answered, answered, True]
    total = model.ledger.report().total
    assert (total.sent, total.requests, total.unanswered) == (3, 1 + 2 * answered, 2 - 2 * answered)
    # the SDK never retries on its own: each attempt the server saw is one of the ledger's
    assert {r.headers.get("x-stainless-retry-count") for r in fake_llm.requests} == {"0"}


@pytest.mark.parametrize("protocol", ["chat", "messages"])
def test_slow_response_times_out_and_is_retried(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.script(Fault.slow(3.0), FakeReply(text="fast now"))
    started = time.monotonic()
    out = gen(Model(config_for(protocol, fake_llm, timeout_s=0.3)), "hi")
    assert out.text == "fast now"
    assert 0.3 <= time.monotonic() - started < 2.5
    assert len(fake_llm.requests) == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retries_exhausted(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.handler = lambda request: Fault.server_error(500)
    model = Model(config_for(protocol, fake_llm, max_retry_wait_s=0.3), stage="grading")
    started = time.monotonic()
    with pytest.raises(ModelUnavailableError) as info:
        gen(model, "hi", label="judge_grading")
    assert time.monotonic() - started < 2.0
    message = str(info.value)
    assert model.config.model in message and "HTTP 500" in message and "attempts" in message
    assert "\n" not in message
    assert len(fake_llm.requests) >= 2
    # one record per attempt sent: the retried ones, then the one that ended the call
    *retried, last = model.ledger.records
    assert len(model.ledger.records) == len(fake_llm.requests)
    assert all(r.outcome == "retried" and "HTTP 500" in (r.error or "") for r in retried)
    assert last.outcome == "failed" and last.label == "judge_grading"
    assert last.error == message
    assert all(r.cost_usd == 0.0 for r in model.ledger.records)  # error answers: not billed
    total = model.ledger.report().total
    assert total.calls == 1 and total.failed == 1 and total.retried == len(retried)


def test_timeouts_exhausted(fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = lambda request: Fault.slow(3.0)
    with pytest.raises(ModelUnavailableError, match=re.escape("no answer within 0.2s")):
        gen(Model(config_for("chat", fake_llm, timeout_s=0.2, max_retry_wait_s=0.1)), "hi")


def test_unreachable_endpoint() -> None:
    config = fast("openai/gpt-4o", "http://127.0.0.1:9/v1", max_retry_wait_s=0.2)
    with pytest.raises(
        ModelUnavailableError, match=re.escape("cannot reach http://127.0.0.1:9/v1")
    ):
        gen(Model(config), "hi")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("status", "cause"),
    [
        (400, "request refused"),
        (401, "API key was rejected"),
        (403, "permission denied"),
        (404, "unknown model or wrong base URL"),
    ],
)
def test_client_errors_fail_at_once(
    fake_llm: FakeLLMServer, protocol: str, status: int, cause: str
) -> None:
    fake_llm.script(Fault.http(status, "model `nope` does not exist"))
    model = Model(config_for(protocol, fake_llm))
    with pytest.raises(ModelRequestError) as info:
        gen(model, "hi")
    message = str(info.value)
    assert message.startswith(model.config.model + ": ")
    assert cause in message and f"HTTP {status}" in message and "does not exist" in message
    assert len(fake_llm.requests) == 1
    if status == 401:
        key = "ANTHROPIC_API_KEY" if protocol == "messages" else "OPENAI_API_KEY"
        assert key in message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_malformed_structured_output_is_reasked(fake_llm: FakeLLMServer, protocol: str) -> None:
    usage = FakeUsage(input=1000, output=100)
    fake_llm.script(
        FakeReply(text="I think the score is 3", usage=usage),
        FakeReply(json={"score": "three"}, usage=usage),
        FakeReply(json={"score": 3}, usage=usage),
    )
    model = Model(config_for(protocol, fake_llm))
    out = gen(model, "grade", output=Verdict, label="judge_grading")
    assert out.parsed == Verdict(score=3)
    assert out.attempts == 3
    assert out.usage.input_tokens == 3000  # every attempt is paid for
    assert len(model.ledger.records) == 3
    last = str(fake_llm.requests[-1].body)
    assert "I think the score is 3" in last and "not valid JSON" in last


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_structured_output_never_valid_fails(fake_llm: FakeLLMServer, protocol: str) -> None:
    fake_llm.handler = lambda request: FakeReply(json={"wrong": True})
    model = Model(config_for(protocol, fake_llm, structured_retries=1))
    with pytest.raises(StructuredOutputError) as info:
        gen(model, "grade", output=Verdict)
    assert "after 2 attempts" in str(info.value) and "$.score" in str(info.value)
    assert len(fake_llm.requests) == 2


def test_budget_exhausted(fake_llm: FakeLLMServer) -> None:
    usage = FakeUsage(input=100_000, output=10_000)  # $0.35 on gpt-4o
    fake_llm.handler = lambda request: FakeReply(text="x", usage=usage)
    ledger = CostLedger(caps=BudgetCaps(run_usd=0.5))
    model = Model(config_for("chat", fake_llm), ledger=ledger, stage="rollout")
    gen(model, "one", label="agent_step")
    gen(model, "two", label="agent_step")
    with pytest.raises(BudgetExhaustedError, match="run budget exhausted"):
        gen(model, "three", label="agent_step")
    assert len(fake_llm.requests) == 2  # no new call started
    outcomes = [r.outcome for r in ledger.records]
    assert outcomes == ["ok", "ok", "budget_exhausted"]
    assert ledger.report().total.budget_exhausted == 1


def test_stage_budget(fake_llm: FakeLLMServer) -> None:
    fake_llm.handler = lambda request: FakeReply(text="x", usage=FakeUsage(100_000, 0, 0, 0))
    ledger = CostLedger(caps=BudgetCaps(stages_usd={"grading": 0.2}))
    grading = Model(config_for("chat", fake_llm), ledger=ledger, stage="grading")
    rollout = Model(config_for("chat", fake_llm), ledger=ledger, stage="rollout")
    gen(grading, "a")
    with pytest.raises(BudgetExhaustedError, match="stage 'grading'"):
        gen(grading, "b")
    gen(rollout, "c")  # another stage still runs
    assert ledger.spent("grading") == pytest.approx(0.25)


def test_missing_key_is_one_clear_line() -> None:
    with pytest.raises(MissingKeyError) as info:
        gen(Model("openai/gpt-4o"), "hi")
    assert str(info.value) == "openai/gpt-4o: set OPENAI_API_KEY (environment or .env)"
    with pytest.raises(MissingKeyError, match="ANTHROPIC_API_KEY"):
        gen(Model("anthropic/claude-haiku-4-5"), "hi")


def test_unknown_provider() -> None:
    with pytest.raises(UnknownProviderError, match="unknown provider 'nosuch'"):
        gen(Model("nosuch/model"), "hi")


def test_concurrency_limit_is_shared(fake_llm: FakeLLMServer) -> None:
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def slow(request: RecordedRequest) -> FakeReply:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return FakeReply(text="ok")

    fake_llm.handler = slow

    async def many() -> None:
        a = Model(config_for("chat", fake_llm, max_connections=3))
        b = Model(config_for("chat", fake_llm, max_connections=3))
        async with a, b:
            calls = [m.generate(f"q{i}") for i in range(6) for m in (a, b)]
            await asyncio.gather(*calls)

    run(many())
    assert len(fake_llm.requests) == 12
    assert state["peak"] == 3


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="provider/model"):
        ModelConfig(model="gpt-4o")
    with pytest.raises(ValueError, match="Extra inputs"):
        ModelConfig(model="openai/gpt-4o", temprature=0.2)  # type: ignore[call-arg]


def test_a_raising_test_handler_fails_the_call_at_once(fake_llm: FakeLLMServer) -> None:
    def broken(request: object) -> FakeReply:
        raise StopIteration

    fake_llm.handler = broken
    with pytest.raises(ModelRequestError, match="handler raised StopIteration"):
        gen(Model(config_for("chat", fake_llm)), "hi")
    assert len(fake_llm.requests) == 1
    assert fake_llm.handler_errors == ["StopIteration: "]


def _dropping_server() -> tuple[socket.socket, threading.Thread]:
    """A server that reads each request and drops the connection (a reset) without an
    answer: the SDKs see an exception with an empty message."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize("model", ["openai/gpt-4o", "anthropic/claude-haiku-4-5"])
def test_a_dropped_connection_says_why(model: str) -> None:
    server, _ = _dropping_server()
    url = f"http://127.0.0.1:{server.getsockname()[1]}" + ("/v1" if "openai" in model else "")
    try:
        with pytest.raises(ModelUnavailableError) as info:
            gen(Model(fast(model, url, max_retry_wait_s=0.2)), "hi")
    finally:
        server.close()
    message = str(info.value)
    reason = message.split(f"cannot reach {url}: ", 1)[1]
    assert reason.strip() and not reason.startswith(("(", ";")), message
    assert "connection" in reason.lower() or "pipe" in reason.lower(), message
