"""What the group's coordinator adds to each model call: none, in-process, and a Ray actor.

    .venv/bin/python bench/coordinator.py [--calls 400] [--connections 16]

A fake model server (paperbench.testing) answers at once on 127.0.0.1; ``--calls`` calls go
through one ``Model`` (``--connections`` slots) with no coordinator, with a
``LocalCoordinator`` (what the local executor installs for ``--budget-usd``) and with a
``RayCoordinator`` (a named async actor of a local Ray runtime: two round trips per attempt,
one for the slot and one to give it back with the cost), from the driver and from two Ray
worker processes at once. Goal: the actor's round trips stay small beside a real provider's
latency (hundreds of milliseconds), and the group's connection limit holds (the server's
peak of requests at once is at most ``--connections``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from paperbench.llm import (
    Coordinator,
    LocalCoordinator,
    Model,
    ModelConfig,
    RayCoordinator,
    set_coordinator,
)
from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest


class Peak:
    """Counts the requests the server answers at once."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> FakeReply:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.002)
        with self.lock:
            self.now -= 1
        return FakeReply(text="ok")

    def reset(self) -> None:
        with self.lock:
            self.peak = 0


def calls(url: str, n: int, connections: int, coordinator: Coordinator | None) -> list[float]:
    """``n`` calls at once through one Model; each call's latency in seconds."""
    set_coordinator(coordinator)
    config = ModelConfig(model="openai/gpt-4o", base_url=url, max_connections=connections)

    async def many() -> list[float]:
        async with Model(config) as model:

            async def one(i: int) -> float:
                started = time.perf_counter()
                await model.generate(f"q{i}")
                return time.perf_counter() - started

            return list(await asyncio.gather(*(one(i) for i in range(n))))

    try:
        return asyncio.run(many())
    finally:
        set_coordinator(None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    n, connections = args.calls, args.connections
    import ray

    peak = Peak()
    rows: list[tuple[str, int, float, list[float], int]] = []
    with FakeLLMServer() as server, tempfile.TemporaryDirectory(prefix="pbb", dir="/tmp") as tmp:
        server.handler = peak
        url = server.openai_url

        def measure(name: str, processes: int, run: Any) -> None:
            peak.reset()
            started = time.perf_counter()
            latencies = run()
            rows.append((name, processes, time.perf_counter() - started, latencies, peak.peak))

        calls(url, 50, connections, None)  # imports, the SDK client: not timed
        measure("none", 1, lambda: calls(url, n, connections, None))
        measure("LocalCoordinator", 1, lambda: calls(url, n, connections, LocalCoordinator()))
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=tmp)
        try:
            coordinator = RayCoordinator.create("bench-coordinator", budget_usd=None)
            try:
                measure("RayCoordinator", 1, lambda: calls(url, n, connections, coordinator))
                task: Any = ray.remote(num_cpus=1)(calls)

                def two_workers() -> list[float]:
                    refs = [task.remote(url, n // 2, connections, coordinator) for _ in range(2)]
                    return [x for part in ray.get(refs) for x in part]

                def two_workers_alone() -> list[float]:
                    refs = [task.remote(url, n // 2, connections, None) for _ in range(2)]
                    return [x for part in ray.get(refs) for x in part]

                two_workers()  # start the worker processes before timing
                measure("RayCoordinator, 2 workers", 2, two_workers)
                measure("none, 2 workers", 2, two_workers_alone)
            finally:
                coordinator.kill()
        finally:
            ray.shutdown()

    table = Table(title=f"{n} calls, {connections} connections, fake server on 127.0.0.1")
    for column in ("coordinator", "processes", "wall s", "calls/s", "median ms", "p95 ms"):
        table.add_column(column, justify="left" if column == "coordinator" else "right")
    table.add_column("peak at once", justify="right")
    for name, processes, wall, latencies, at_once in rows:
        ordered = sorted(latencies)
        table.add_row(
            name,
            str(processes),
            f"{wall:.2f}",
            f"{len(latencies) / wall:.0f}",
            f"{statistics.median(ordered) * 1000:.1f}",
            f"{ordered[int(len(ordered) * 0.95) - 1] * 1000:.1f}",
            f"{at_once}" + ("" if at_once <= connections else " (over the limit)"),
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
