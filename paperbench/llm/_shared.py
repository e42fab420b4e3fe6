"""State shared by every process of a group of runs: the group's budget, connection slots
per endpoint and the ``retry-after`` pause.

The per-process :class:`~paperbench.llm._gate.EndpointGate` keeps ``max_connections`` per
process; when a group's runs are spread over several processes (or machines), a
:class:`Coordinator` installed in each of them (:func:`set_coordinator`) keeps the limits of
the whole group. Every attempt of :meth:`paperbench.llm.Model.generate`, once it holds its
process's slot, asks the coordinator for a :class:`Grant`:

    acquire(endpoint, limit)  wait for one of the group's ``limit`` slots of the endpoint,
                              then for any pause of the endpoint; the grant says whether
                              the group's budget was already spent (then nothing is sent)
    release(grant, cost)      after the attempt is recorded: add its cost, free the slot
    pause(endpoint, seconds)  a ``retry-after`` answer: every process's callers wait

So the group's budget is passed by at most the cost of the attempts in flight, which are at
most ``limit`` per endpoint. Two implementations share one core (:class:`CoordinatorState`):
:class:`LocalCoordinator` in one process and event loop, and :class:`RayCoordinator`, a
client of a named, detached Ray actor that every worker of the group looks up by name.

A slot is a lease: one whose holder died without releasing it (a killed worker) is taken
back after ``lease_s``, which is longer than a request may take.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

NAMESPACE = "paperbench"
"""The Ray namespace of the coordinator actors."""


class Grant(BaseModel):
    """One slot of an endpoint, held by one attempt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ticket: str
    endpoint: str
    waited_s: float = 0.0
    """Seconds spent waiting for the slot and for the endpoint's pause."""
    refused: str | None = None
    """Why the attempt must not be sent (the group's budget is spent), or ``None``."""


class GroupSpend(BaseModel):
    """What the group has spent and may spend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spent_usd: float
    budget_usd: float | None
    in_flight: dict[str, int]
    """Slots held now, per endpoint."""


class Coordinator(ABC):
    """The state every process of a group shares (see the module's docstring)."""

    @abstractmethod
    async def acquire(self, endpoint: str, limit: int, *, lease_s: float) -> Grant:
        """Wait for one of the group's ``limit`` slots of ``endpoint`` (the first caller's
        ``limit`` sets their number) and for the endpoint's pause to end. The slot is held
        until :meth:`release`, or ``lease_s`` if its holder never releases it."""

    @abstractmethod
    async def release(self, grant: Grant, cost_usd: float | None) -> None:
        """Add the attempt's cost (``None``: unknown, not counted) and free its slot."""

    @abstractmethod
    async def pause(self, endpoint: str, seconds: float) -> None:
        """No caller of ``endpoint`` in any process sends before ``seconds`` from now."""

    @abstractmethod
    async def spend(self) -> GroupSpend:
        """The money spent so far, the budget and the slots in use."""


class _Endpoint:
    """The slots and the pause of one endpoint, in the coordinator's event loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.holders: dict[str, float] = {}
        """Ticket → the time (``time.monotonic()``) its lease ends."""
        self.resume_at = 0.0
        self.changed = asyncio.Condition()

    def reclaim(self, now: float) -> None:
        for ticket, until in list(self.holders.items()):
            if until <= now:
                del self.holders[ticket]

    def next_expiry(self) -> float | None:
        return min(self.holders.values(), default=None)


class CoordinatorState:
    """The coordinator's state and logic, in one event loop (the Ray actor's or the local
    executor's). Its methods are those of :class:`Coordinator`, with the ticket chosen by
    the caller so that a caller cancelled while waiting can give its slot back."""

    def __init__(self, budget_usd: float | None = None, spent_usd: float = 0.0) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = spent_usd
        self._endpoints: dict[str, _Endpoint] = {}
        self._abandoned: set[str] = set()

    def _endpoint(self, endpoint: str, limit: int) -> _Endpoint:
        state = self._endpoints.get(endpoint)
        if state is None:
            state = self._endpoints[endpoint] = _Endpoint(limit)
        return state

    async def acquire(self, ticket: str, endpoint: str, limit: int, lease_s: float) -> Grant:
        state = self._endpoint(endpoint, limit)
        started = time.monotonic()
        async with state.changed:
            while True:
                if ticket in self._abandoned:
                    self._abandoned.discard(ticket)
                    return Grant(ticket=ticket, endpoint=endpoint, refused="abandoned")
                now = time.monotonic()
                state.reclaim(now)
                if len(state.holders) < state.limit:
                    break
                expiry = state.next_expiry()
                timeout = None if expiry is None else max(0.0, expiry - now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.changed.wait(), timeout)
            state.holders[ticket] = time.monotonic() + lease_s
        # The slot is held while the pause is waited out, as in one process.
        while (delay := state.resume_at - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        if ticket in self._abandoned:
            await self.release(ticket, endpoint, 0.0)
            return Grant(ticket=ticket, endpoint=endpoint, refused="abandoned")
        if ticket in state.holders:  # the lease runs from the send
            state.holders[ticket] = time.monotonic() + lease_s
        refused = None
        if self.budget_usd is not None and self.spent_usd >= self.budget_usd:
            refused = (
                f"the group's budget is exhausted (${self.spent_usd:.4f} spent of "
                f"${self.budget_usd:g}); raise --budget-dollars to continue"
            )
        return Grant(
            ticket=ticket,
            endpoint=endpoint,
            waited_s=time.monotonic() - started,
            refused=refused,
        )

    async def release(self, ticket: str, endpoint: str, cost_usd: float | None) -> None:
        if cost_usd:
            self.spent_usd += cost_usd
        state = self._endpoints.get(endpoint)
        if state is None or ticket not in state.holders:
            # Not granted yet: its caller gave up waiting (the acquire is still queued).
            self._abandoned.add(ticket)
            return
        async with state.changed:
            del state.holders[ticket]
            state.changed.notify_all()

    async def pause(self, endpoint: str, seconds: float) -> None:
        state = self._endpoints.get(endpoint)
        if state is not None:
            state.resume_at = max(state.resume_at, time.monotonic() + seconds)

    async def spend(self) -> GroupSpend:
        return GroupSpend(
            spent_usd=self.spent_usd,
            budget_usd=self.budget_usd,
            in_flight={key: len(state.holders) for key, state in self._endpoints.items()},
        )


class LocalCoordinator(Coordinator):
    """The coordinator of a group run in one process and one event loop (the local
    executor installs one for ``--budget-usd``)."""

    def __init__(self, budget_usd: float | None = None, spent_usd: float = 0.0) -> None:
        self._state = CoordinatorState(budget_usd, spent_usd)

    async def acquire(self, endpoint: str, limit: int, *, lease_s: float) -> Grant:
        ticket = uuid.uuid4().hex
        try:
            return await self._state.acquire(ticket, endpoint, limit, lease_s)
        except asyncio.CancelledError:
            await asyncio.shield(self._state.release(ticket, endpoint, 0.0))
            raise

    async def release(self, grant: Grant, cost_usd: float | None) -> None:
        await self._state.release(grant.ticket, grant.endpoint, cost_usd)

    async def pause(self, endpoint: str, seconds: float) -> None:
        await self._state.pause(endpoint, seconds)

    async def spend(self) -> GroupSpend:
        return await self._state.spend()


def endpoint_id(connection_key: str) -> str:
    """How an endpoint is named to the coordinator: the provider, the host and a hash of the
    whole key, never the base URL itself (it may hold credentials)."""
    provider, _, base_url = connection_key.partition("|")
    host = (urlsplit(base_url).hostname or "") if base_url else "default"
    digest = hashlib.sha256(connection_key.encode()).hexdigest()[:12]
    return f"{provider}|{host}|{digest}"


def actor_name(group: str, key: str = "") -> str:
    """The name of a group's coordinator actor (``key`` tells apart groups of one name)."""
    return f"paperbench-coordinator-{group}" + (f"-{key}" if key else "")


class RayCoordinator(Coordinator):
    """A client of the group's coordinator actor (a detached, named async Ray actor).

    :meth:`create` makes the actor (in the driver, on its node); workers get it with
    :meth:`lookup`, or receive a pickled client, which looks the actor up again by name.
    """

    def __init__(self, name: str, handle: Any, namespace: str = NAMESPACE) -> None:
        self.name = name
        self.namespace = namespace
        self._handle = handle

    @classmethod
    def create(
        cls,
        name: str,
        *,
        budget_usd: float | None,
        spent_usd: float = 0.0,
        namespace: str = NAMESPACE,
    ) -> RayCoordinator:
        """A new actor named ``name`` (one left by an earlier driver is replaced), placed on
        this process's node so that losing another node loses no state."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(name, namespace=namespace))
        node = ray.get_runtime_context().get_node_id()
        actor_class: Any = ray.remote(CoordinatorState)
        handle: Any = actor_class.options(
            name=name,
            namespace=namespace,
            lifetime="detached",
            num_cpus=0,
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
        ).remote(budget_usd, spent_usd)
        client = cls(name, handle, namespace)
        ray.get(handle.spend.remote())  # started, and answering
        return client

    @classmethod
    def lookup(cls, name: str, namespace: str = NAMESPACE) -> RayCoordinator:
        """The client of the running actor ``name`` (ValueError if there is none)."""
        import ray

        return cls(name, ray.get_actor(name, namespace=namespace), namespace)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (_lookup, (self.name, self.namespace))

    def kill(self) -> None:
        """End the actor (its state is gone)."""
        import ray

        ray.kill(self._handle)

    async def acquire(self, endpoint: str, limit: int, *, lease_s: float) -> Grant:
        ticket = uuid.uuid4().hex
        try:
            grant: Grant = await self._handle.acquire.remote(ticket, endpoint, limit, lease_s)
        except asyncio.CancelledError:
            # The actor may grant the slot after this caller has gone: give it back.
            self._handle.release.remote(ticket, endpoint, 0.0)
            raise
        return grant

    async def release(self, grant: Grant, cost_usd: float | None) -> None:
        await self._handle.release.remote(grant.ticket, grant.endpoint, cost_usd)

    async def pause(self, endpoint: str, seconds: float) -> None:
        await self._handle.pause.remote(endpoint, seconds)

    async def spend(self) -> GroupSpend:
        spend: GroupSpend = await self._handle.spend.remote()
        return spend


def _lookup(name: str, namespace: str) -> RayCoordinator:
    return RayCoordinator.lookup(name, namespace)


_CURRENT: Coordinator | None = None
_CURRENT_LOCK = threading.Lock()


def set_coordinator(coordinator: Coordinator | None) -> Coordinator | None:
    """Install ``coordinator`` for every model call of this process (``None``: remove it);
    returns the one it replaces."""
    global _CURRENT
    with _CURRENT_LOCK:
        previous, _CURRENT = _CURRENT, coordinator
    return previous


def current_coordinator() -> Coordinator | None:
    """The coordinator installed in this process, if any."""
    with _CURRENT_LOCK:
        return _CURRENT
