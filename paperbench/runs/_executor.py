"""Executors: how the runs of a group are worked on. ``LocalExecutor`` runs them in this
process's event loop, with a limit on the runs in each stage at once; the Ray executor
(:mod:`paperbench.runs._ray`) spreads them over a cluster."""

from __future__ import annotations

import asyncio
from typing import Protocol

from paperbench.llm import LocalCoordinator, set_coordinator
from paperbench.runs._pipeline import RunSpec, run_stages
from paperbench.runs._spend import group_spent
from paperbench.runs._store import RunOutcome

DEFAULT_CONCURRENCY: dict[str, int] = {
    "rollout": 4,
    "reproduction": 2,
    "grading": 4,
}
"""Runs in each stage at once, unless the group says otherwise. Set ``reproduction`` to the
number of GPUs divided by the GPUs one reproduction takes."""


class Executor(Protocol):
    async def run(self, specs: list[RunSpec]) -> list[RunOutcome]:
        """Work on every run; one outcome per spec, in order."""
        ...


class LocalExecutor:
    """Every run in this process's event loop; stages limited by ``concurrency``."""

    def __init__(self, concurrency: dict[str, int] | None = None) -> None:
        self.concurrency = {**DEFAULT_CONCURRENCY, **(concurrency or {})}

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
