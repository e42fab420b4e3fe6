"""The call path under load: budget caps with hundreds of concurrent calls, the retry clock,
the shared retry-after pause, one ledger record per attempt, and clients closed with their
event loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from typing import ClassVar

import pytest

from paperbench.errors import BudgetExhaustedError, ModelError, ModelUnavailableError
from paperbench.llm import (
    BudgetCaps,
    CostLedger,
    Model,
    ModelAPI,
    ModelOutput,
    ModelRequest,
    PriceTable,
    Usage,
    register_provider,
)
from paperbench.llm._gate import EndpointGate
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, Fault, RecordedRequest
from tests.llm.helpers import config_for, gen, run

USAGE = FakeUsage(input=10_000, output=1_000)


def _price_of_one_call() -> float:
    cost = PriceTable.load().cost("openai/gpt-4o", Usage(input_tokens=10_000, output_tokens=1_000))
    assert cost is not None and cost > 0
    return cost


@pytest.mark.parametrize("connections", [1, 8, 32])
def test_budget_cap_holds_under_concurrency(fake_llm: FakeLLMServer, connections: int) -> None:
    fake_llm.handler = lambda request: FakeReply(text="ok", usage=USAGE, delay=0.005)
    worth = 5
    ledger = CostLedger(caps=BudgetCaps(run_usd=worth * _price_of_one_call()))
    model = Model(config_for("chat", fake_llm, max_connections=connections), ledger=ledger)

    async def many() -> list[ModelOutput | BaseException]:
        async with model:
            calls = [model.generate(f"q{i}", label="judge_grading") for i in range(200)]
            return await asyncio.gather(*calls, return_exceptions=True)

    results = run(many())
    sent = len(fake_llm.requests)
    assert worth <= sent <= worth + connections
    answered = [r for r in results if isinstance(r, ModelOutput)]
    refused = [r for r in results if isinstance(r, BudgetExhaustedError)]
    assert len(answered) == sent and len(refused) == 200 - sent
    report = ledger.report().total
    assert report.budget_exhausted == 200 - sent and report.calls == 200


def test_budget_is_checked_again_before_a_retry(fake_llm: FakeLLMServer) -> None:
    """A call waiting to retry must not be sent once others have spent the budget."""
    fake_llm.script(
        Fault.rate_limit(retry_after=0.3),  # the first call: told to wait
        FakeReply(text="spends it all", usage=FakeUsage(input=1_000_000, output=0)),
    )
    ledger = CostLedger(caps=BudgetCaps(run_usd=1.0))
    config = config_for("chat", fake_llm, shared_backoff=False)
    model = Model(config, ledger=ledger)

    async def two() -> list[ModelOutput | BaseException]:
        async with model:
            first = asyncio.create_task(model.generate("first"))
            while not fake_llm.requests:
                await asyncio.sleep(0.01)
            second = await model.generate("second")
            return [second, *await asyncio.gather(first, return_exceptions=True)]

    second, first = run(two())
    assert isinstance(second, ModelOutput)
    assert isinstance(first, BudgetExhaustedError)
    assert len(fake_llm.requests) == 2
    assert [r.outcome for r in ledger.records] == ["retried", "ok", "budget_exhausted"]


def test_time_in_the_queue_does_not_use_the_retry_budget(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        FakeReply(text="slow", delay=1.0),  # holds the only connection slot for a second
        Fault.server_error(503),
        Fault.server_error(503),
        FakeReply(text="recovered"),
    )
    model = Model(config_for("chat", fake_llm, max_connections=1, max_retry_wait_s=0.5))

    async def both() -> list[ModelOutput]:
        async with model:
            return await asyncio.gather(model.generate("a"), model.generate("b"))

    slow, queued = run(both())
    assert slow.text == "slow" and queued.text == "recovered"
    assert [r.outcome for r in model.ledger.records] == ["ok", "retried", "retried", "ok"]


@pytest.mark.parametrize("shared", [True, False])
def test_retry_after_pauses_every_caller(fake_llm: FakeLLMServer, shared: bool) -> None:
    lock = threading.Lock()

    def first_is_limited(request: RecordedRequest) -> FakeReply | Fault:
        with lock:
            if len(fake_llm.requests) == 1:
                return Fault.rate_limit(retry_after=1.0)
        return FakeReply(text="ok")

    fake_llm.handler = first_is_limited
    config = config_for("chat", fake_llm, max_connections=1, shared_backoff=shared)
    model = Model(config)

    async def many() -> None:
        async with model:
            await asyncio.gather(*(model.generate(f"q{i}") for i in range(4)))

    run(many())
    times = [r.time for r in fake_llm.requests]
    assert len(times) == 5  # four calls, one of them retried once
    second = times[1] - times[0]
    if shared:
        assert second >= 1.0  # the next caller waited out the pause
    else:
        assert second < 1.0  # only the limited call waited


def test_every_attempt_is_recorded(fake_llm: FakeLLMServer) -> None:
    fake_llm.script(
        Fault.rate_limit(retry_after=0.01),
        Fault.drop(),
        FakeReply(text="third time", usage=USAGE),
    )
    model = Model(config_for("chat", fake_llm), stage="grading")
    out = gen(model, "hi", label="judge_grading")
    assert out.text == "third time"
    records = model.ledger.records
    assert [r.outcome for r in records] == ["retried", "retried", "ok"]
    assert len(records) == len(fake_llm.requests)
    assert records[0].cost_usd == 0.0  # a 429 answer is not billed
    assert records[1].cost_usd is None  # no answer: whether it was billed is unknown
    assert records[2].cost_usd == pytest.approx(_price_of_one_call())
    assert records[2].stop_reason == "stop"
    assert all(r.label == "judge_grading" and r.stage == "grading" for r in records)
    total = model.ledger.report().total
    assert total.calls == 1 and total.retried == 2 and total.unpriced_calls == 1


class _BuggyAPI(ModelAPI):
    """A provider with a bug: it raises TypeError after the request went out."""

    key_env: ClassVar[str | None] = None
    calls = 0

    async def generate(self, request: ModelRequest) -> ModelOutput:
        type(self).calls += 1
        raise TypeError("'NoneType' object is not subscriptable")


def test_a_bug_is_not_retried_but_recorded() -> None:
    register_provider("buggy", lambda: _BuggyAPI)
    model = Model("buggy/model", stage="grading")
    with pytest.raises(TypeError, match="not subscriptable"):
        gen(model, "hi", label="judge_grading")
    assert _BuggyAPI.calls == 1
    [record] = model.ledger.records
    assert record.outcome == "failed" and record.cost_usd is None
    assert record.error is not None and "TypeError" in record.error


def test_set_up_errors_are_recorded_and_not_retried() -> None:
    model = Model("openai/gpt-4o")  # no key in the environment
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        gen(model, "hi")
    [record] = model.ledger.records
    assert record.outcome == "failed" and record.cost_usd == 0.0


def test_unreachable_endpoint_gives_up_with_every_attempt_recorded() -> None:
    from tests.llm.helpers import fast

    # 1 s of retries: room for several attempts also on a loaded machine
    model = Model(fast("openai/gpt-4o", "http://127.0.0.1:9/v1", max_retry_wait_s=1.0))
    with pytest.raises(ModelUnavailableError):
        gen(model, "hi")
    *retried, last = model.ledger.records
    assert retried and all(r.outcome == "retried" for r in retried)
    assert last.outcome == "failed" and last.cost_usd is None


_TWO_LOOPS = textwrap.dedent(
    """
    import asyncio, sys
    from paperbench.llm import Model, ModelConfig
    from paperbench.testing import FakeLLMServer

    async def some(model):
        return await asyncio.gather(*(model.generate(f"q{i}") for i in range(4)))

    with FakeLLMServer() as server:
        for name, url in (("openai/gpt-4o", server.openai_url),
                          ("anthropic/claude-haiku-4-5", server.anthropic_url)):
            model = Model(ModelConfig(model=name, base_url=url, api_key="x"))
            asyncio.run(some(model))
            asyncio.run(some(model))
    print("done")
    """
)


@pytest.mark.slow
def test_a_model_used_in_two_event_loops_exits_cleanly() -> None:
    out = subprocess.run(
        [sys.executable, "-W", "default", "-c", _TWO_LOOPS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    assert out.stderr == ""


def test_send_window_halves_once_per_round_and_grows_back() -> None:
    async def scenario() -> list[float]:
        gate = EndpointGate("test-window")
        async with gate.slot(8):
            pass
        sizes = [gate.window]
        before = time.monotonic()
        gate.rate_limited(before, None)
        sizes.append(gate.window)
        gate.rate_limited(before, None)  # sent before the cut: the same round
        sizes.append(gate.window)
        gate.rate_limited(time.monotonic() + 1, None)  # sent after it: a new round
        sizes.append(gate.window)
        for _ in range(100):
            gate.answered()
        sizes.append(gate.window)
        return sizes

    assert run(scenario()) == [8, 4, 4, 2, 8]


def test_after_a_rate_limit_fewer_requests_fly_at_once(fake_llm: FakeLLMServer) -> None:
    lock = threading.Lock()
    state: dict[str, float] = {"now": 0, "limited_at": 0.0}
    after_pause: list[float] = []  # requests in flight as each request after the pause came

    def handler(request: RecordedRequest) -> FakeReply | Fault:
        with lock:
            if len(fake_llm.requests) == 1:
                state["limited_at"] = time.monotonic()
                return Fault.rate_limit(retry_after=0.3)
            state["now"] += 1
            if time.monotonic() > state["limited_at"] + 0.25:
                after_pause.append(state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return FakeReply(text="ok")

    fake_llm.handler = handler
    model = Model(config_for("chat", fake_llm, max_connections=8))

    async def many() -> None:
        async with model:
            await asyncio.gather(*(model.generate(f"q{i}") for i in range(40)))

    run(many())
    assert len(fake_llm.requests) == 41
    # The 429 halved the window to 4; the 7 answers of the first wave grew it to 5.5, so
    # the first requests after the pause go 5 at a time, not 8 (without the window, the
    # other calls would have kept 8 in flight).
    assert after_pause and max(after_pause[:5]) <= 5
