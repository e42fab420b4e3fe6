"""State shared by the processes of a group: the group's budget, the connection limit per
endpoint and the retry-after pause, in one process (LocalCoordinator) and in the core both
coordinators share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from paperbench.errors import BudgetExhaustedError
from paperbench.llm import (
    CostLedger,
    LocalCoordinator,
    Model,
    ModelOutput,
    PriceTable,
    Usage,
    current_coordinator,
    set_coordinator,
)
from paperbench.llm._shared import CoordinatorState, Grant, endpoint_id
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, Fault
from tests.llm.helpers import config_for, fast, run

USAGE = FakeUsage(input=10_000, output=1_000)


def _price_of_one_call() -> float:
    cost = PriceTable.load().cost("openai/gpt-4o", Usage(input_tokens=10_000, output_tokens=1_000))
    assert cost is not None and cost > 0
    return cost


@pytest.fixture
def installed() -> Iterator[None]:
    """Whatever a test installs is removed after it."""
    yield
    set_coordinator(None)


def test_group_budget_holds_across_models(fake_llm: FakeLLMServer, installed: None) -> None:
    """Four models, each with its own ledger and no cap of its own, share the group's cap:
    it is passed by at most the attempts in flight."""
    fake_llm.handler = lambda request: FakeReply(text="ok", usage=USAGE, delay=0.005)
    worth, connections = 5, 4
    coordinator = LocalCoordinator(budget_usd=worth * _price_of_one_call())
    set_coordinator(coordinator)
    models = [
        Model(config_for("chat", fake_llm, max_connections=connections), ledger=CostLedger())
        for _ in range(4)
    ]

    async def many() -> list[ModelOutput | BaseException]:
        calls = [m.generate(f"q{i}", label="judge_grading") for m in models for i in range(40)]
        try:
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            for m in models:
                await m.aclose()

    results = run(many())
    sent = len(fake_llm.requests)
    assert worth <= sent <= worth + connections
    refused = [r for r in results if isinstance(r, BudgetExhaustedError)]
    assert len(refused) == 160 - sent
    assert all("group's budget is exhausted" in str(r) for r in refused)
    assert "--budget-dollars" in str(refused[0])
    outcomes = [r.outcome for m in models for r in m.ledger.records]
    assert outcomes.count("budget_exhausted") == 160 - sent
    spend = run(coordinator.spend())
    assert spend.spent_usd == pytest.approx(sent * _price_of_one_call())
    assert spend.in_flight == {endpoint_id(models[0].api.connection_key): 0}


def test_without_a_coordinator_each_model_has_only_its_own_cap(
    fake_llm: FakeLLMServer, installed: None
) -> None:
    """The same calls with nothing installed: every call is sent."""
    fake_llm.handler = lambda request: FakeReply(text="ok", usage=USAGE)
    assert current_coordinator() is None
    models = [Model(config_for("chat", fake_llm, max_connections=4)) for _ in range(2)]

    async def many() -> None:
        await asyncio.gather(*(m.generate(f"q{i}") for m in models for i in range(10)))
        for m in models:
            await m.aclose()

    run(many())
    assert len(fake_llm.requests) == 20


class RecordingCoordinator(LocalCoordinator):
    """A LocalCoordinator that notes the pauses it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses: list[tuple[str, float]] = []
        self.endpoints: list[str] = []

    async def acquire(self, endpoint: str, limit: int, *, lease_s: float) -> Grant:
        self.endpoints.append(endpoint)
        return await super().acquire(endpoint, limit, lease_s=lease_s)

    async def pause(self, endpoint: str, seconds: float) -> None:
        self.pauses.append((endpoint, seconds))
        await super().pause(endpoint, seconds)


def test_a_retry_after_answer_pauses_the_group(fake_llm: FakeLLMServer, installed: None) -> None:
    """A retry-after answer is passed on to the coordinator, and the coordinator holds every
    caller of the endpoint back until it ends."""
    fake_llm.script(Fault.rate_limit(retry_after=0.5), FakeReply(text="ok"))
    coordinator = RecordingCoordinator()
    set_coordinator(coordinator)
    model = Model(config_for("chat", fake_llm))

    async def scenario() -> float:
        async with model:
            call = asyncio.create_task(model.generate("limited"))
            while not coordinator.pauses:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            grant = await coordinator.acquire(
                endpoint_id(model.api.connection_key), 8, lease_s=60.0
            )
            waited = time.monotonic() - started
            await coordinator.release(grant, 0.0)
            assert (await call).text == "ok"
            return waited

    waited = run(scenario())
    assert coordinator.pauses == [(endpoint_id(model.api.connection_key), 0.5)]
    assert waited >= 0.4
    assert len(fake_llm.requests) == 2


def test_state_takes_back_a_slot_whose_holder_never_released_it() -> None:
    """A holder that died (a killed worker) loses its slot when its lease ends."""

    async def scenario() -> float:
        state = CoordinatorState()
        await state.acquire("dead", "endpoint", 1, 0.3)  # never released
        started = time.monotonic()
        grant = await state.acquire("alive", "endpoint", 1, 10.0)
        assert grant.refused is None and grant.waited_s >= 0.25
        return time.monotonic() - started

    assert run(scenario()) >= 0.25


def test_state_gives_back_the_slot_of_a_caller_that_stopped_waiting() -> None:
    async def scenario() -> None:
        coordinator = LocalCoordinator()
        first = await coordinator.acquire("endpoint", 1, lease_s=60.0)
        waiting = asyncio.create_task(coordinator.acquire("endpoint", 1, lease_s=60.0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await coordinator.release(first, 0.0)
        third = await asyncio.wait_for(coordinator.acquire("endpoint", 1, lease_s=60.0), 2)
        assert (await coordinator.spend()).in_flight == {"endpoint": 1}
        await coordinator.release(third, 0.0)
        assert (await coordinator.spend()).in_flight == {"endpoint": 0}

    run(scenario())


def test_state_counts_what_was_spent_before() -> None:
    """A resumed group starts from what its runs already spent."""

    async def scenario() -> str | None:
        state = CoordinatorState(budget_usd=1.0, spent_usd=1.0)
        grant = await state.acquire("t", "endpoint", 4, 60.0)
        await state.release("t", "endpoint", None)
        return grant.refused

    refused = run(scenario())
    assert refused is not None and "$1.0000 spent of $1" in refused


def test_the_coordinator_never_sees_a_base_url(fake_llm: FakeLLMServer, installed: None) -> None:
    """A base URL may hold credentials: the coordinator (another process, maybe another
    machine) gets the provider, the host and a hash."""
    coordinator = RecordingCoordinator()
    set_coordinator(coordinator)
    url = fake_llm.openai_url.replace("http://", "http://user:hunter2@")
    model = Model(fast("openai/gpt-4o", url))

    async def call() -> None:
        async with model:
            await model.generate("hi")

    run(call())
    (endpoint,) = coordinator.endpoints
    assert "hunter2" not in endpoint and "user" not in endpoint
    assert endpoint.startswith("openai|127.0.0.1|")
    other = endpoint_id(model.api.connection_key.replace("hunter2", "other"))
    assert other != endpoint  # still one per base URL
