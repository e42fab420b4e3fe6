"""The group's coordinator as a Ray actor: worker processes calling one (fake) provider
share its budget and its connection limit. A real local Ray runtime, the real SDK, and the
fake server counting the requests it answers at once."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from paperbench.llm import PriceTable, RayCoordinator, Usage
from paperbench.testing import FakeLLMServer, FakeReply, FakeUsage, RecordedRequest

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

USAGE = FakeUsage(input=10_000, output=1_000)
LIMIT = 3
CALLS = 12  # per worker


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """A local Ray runtime with two CPUs (two worker processes), in its own folder."""
    temp = tempfile.mkdtemp(prefix="pbr", dir="/tmp")  # short: Ray's socket paths
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=temp,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


class Concurrency:
    """Counts the requests the server is answering at once (server side)."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.now = 0
        self.peak = 0
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> FakeReply:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.hold_s)
        with self._lock:
            self.now -= 1
        return FakeReply(text="ok", usage=USAGE)


def _calls(base_url: str, coordinator: Any, start_at: float) -> tuple[int, list[str]]:
    """In a worker process: CALLS calls at once, each process allowed LIMIT connections of
    its own; returns the process id and what each call ended with."""
    import asyncio
    import os
    import time

    from paperbench.llm import Model, ModelConfig, set_coordinator

    set_coordinator(coordinator)
    config = ModelConfig(
        model="openai/gpt-4o",
        base_url=base_url,
        max_connections=LIMIT,
        timeout_s=10.0,
        max_retry_wait_s=5.0,
    )

    async def many() -> list[str]:
        async with Model(config) as model:
            calls = [model.generate(f"q{i}") for i in range(CALLS)]
            results = await asyncio.gather(*calls, return_exceptions=True)
        return [type(result).__name__ for result in results]

    time.sleep(max(0.0, start_at - time.time()))  # both workers start together
    try:
        return os.getpid(), asyncio.run(many())
    finally:
        set_coordinator(None)


def _run_workers(server: FakeLLMServer, coordinator: RayCoordinator | None) -> list[str]:
    task = ray.remote(num_cpus=1)(_calls)
    start_at = time.time() + 2.0
    refs = [task.remote(server.openai_url, coordinator, start_at) for _ in range(2)]
    done = ray.get(refs, timeout=90)
    pids = {pid for pid, _ in done}
    assert len(pids) == 2, "the calls ran in one process"
    return [outcome for _, outcomes in done for outcome in outcomes]


def _price_of_one_call() -> float:
    cost = PriceTable.load().cost("openai/gpt-4o", Usage(input_tokens=10_000, output_tokens=1_000))
    assert cost is not None and cost > 0
    return cost


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def test_processes_share_the_group_budget_and_connection_limit(
    ray_runtime: None, server: FakeLLMServer
) -> None:
    counter = Concurrency(hold_s=0.2)
    server.handler = counter
    worth = 7
    name = f"test-coordinator-{os.getpid()}"
    coordinator = RayCoordinator.create(name, budget_usd=worth * _price_of_one_call())
    try:
        outcomes = _run_workers(server, coordinator)
        spend = ray.get(ray.get_actor(name, namespace=coordinator.namespace).spend.remote())
    finally:
        coordinator.kill()
    paid = len(server.requests)
    assert worth <= paid <= worth + LIMIT
    assert outcomes.count("ModelOutput") == paid
    assert outcomes.count("BudgetExhaustedError") == 2 * CALLS - paid
    assert counter.peak <= LIMIT
    assert spend.spent_usd == pytest.approx(paid * _price_of_one_call())
    assert set(spend.in_flight.values()) == {0}


def test_without_the_coordinator_the_limit_is_per_process(
    ray_runtime: None, server: FakeLLMServer
) -> None:
    """The same workers with nothing shared: each keeps its own limit, so together they
    pass it, and nothing stops them spending."""
    counter = Concurrency(hold_s=0.2)
    server.handler = counter
    outcomes = _run_workers(server, None)
    assert outcomes.count("ModelOutput") == 2 * CALLS == len(server.requests)
    assert counter.peak > LIMIT


def test_a_pickled_client_finds_the_actor_by_name(ray_runtime: None) -> None:
    import pickle

    coordinator = RayCoordinator.create(f"test-lookup-{os.getpid()}", budget_usd=None)
    try:
        copy = pickle.loads(pickle.dumps(coordinator))
        assert copy.name == coordinator.name
        spend = ray.get(copy._handle.spend.remote())
        assert spend.budget_usd is None and spend.spent_usd == 0
    finally:
        coordinator.kill()
