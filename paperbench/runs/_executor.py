"""Executors: how the runs of a group are worked on. ``LocalExecutor`` runs them in this
process's event loop, with a limit on the runs in each stage at once; the Ray executor
(:mod:`paperbench.runs._ray`) spreads them over a cluster."""

from __future__ import annotations

import asyncio
from typing import Protocol

from paperbench.errors import UsageError
from paperbench.llm import LocalCoordinator, set_coordinator
from paperbench.runs._config import STAGE_CONCURRENCY, ExecutorSettings
from paperbench.runs._pipeline import RunSpec, run_stages
from paperbench.runs._spend import group_spent
from paperbench.runs._store import RunOutcome

DEFAULT_CONCURRENCY: dict[str, int] = STAGE_CONCURRENCY


class Executor(Protocol):
    """How a group's runs are worked on."""

    async def run(self, specs: list[RunSpec]) -> list[RunOutcome]:
        """Work on every run; one outcome per spec, in order."""
        ...

    def close(self) -> None:
        """Release what the executor holds (a Ray runtime it started)."""
        ...


def build_executor(settings: ExecutorSettings) -> Executor:
    """The executor ``settings`` ask for, ready to work (a Ray cluster joined now).

    Raises:
        UsageError: ``ray_address`` without ``ray``, or Ray not installed.
        ExecutorUnavailableError: the Ray cluster cannot be joined.
    """
    if settings.kind == "local":
        if settings.ray_address is not None:
            raise UsageError("--ray-address: only with --executor ray")
        return LocalExecutor(settings.concurrency)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(
            "--executor ray: Ray is not installed; install it with pip install 'paperbench[ray]'"
        ) from None
    from paperbench.runs._ray import RayExecutor

    executor = RayExecutor(address=settings.ray_address)
    executor.connect()
    return executor


class LocalExecutor:
    """Every run in this process's event loop; stages limited by ``concurrency``."""

    def __init__(self, concurrency: dict[str, int] | None = None) -> None:
        self.concurrency = {**DEFAULT_CONCURRENCY, **(concurrency or {})}

    def close(self) -> None:
        """Nothing to release."""

    async def run(self, specs: list[RunSpec]) -> list[RunOutcome]:
        slots = {
            stage: asyncio.Semaphore(n)
            for stage, n in self.concurrency.items()
            if stage in DEFAULT_CONCURRENCY
        }

        async def one(spec: RunSpec) -> RunOutcome:
            outcome = await run_stages(spec, slots=slots)
            assert outcome is not None  # every stage was asked for
            return outcome

        budget = specs[0].config.budget_usd if specs else None
        if budget is None:
            return list(await asyncio.gather(*(one(spec) for spec in specs)))
        # The group's budget, shared by every run's model calls; a resumed group counts
        # what its runs spent before.
        spent = await asyncio.to_thread(group_spent, [spec.folder for spec in specs])
        previous = set_coordinator(LocalCoordinator(budget_usd=budget, spent_usd=spent))
        try:
            return list(await asyncio.gather(*(one(spec) for spec in specs)))
        finally:
            set_coordinator(previous)
