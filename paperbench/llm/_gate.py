"""The gate every call to one provider endpoint passes before it is sent.

One :class:`EndpointGate` per endpoint (``ModelAPI.connection_key``) per process holds:

- the connection limit: one semaphore per event loop (asyncio primitives belong to the loop
  that made them), whose size is the ``max_connections`` of its first caller in that loop;
- a shared pause: "resume not before T". A caller that gets ``retry-after`` sets it, and
  every caller of the endpoint waits for it before sending, so that one rate-limit answer
  quiets the whole process instead of each caller finding the limit on its own.

A call takes a slot, waits out any pause, checks its budget, sends, records what happened
and only then gives the slot back (see :meth:`paperbench.llm.Model.generate`), so that the
next caller's budget check sees the cost of the call before it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class EndpointGate:
    """The connection limit and the shared pause of one endpoint."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._resume_at = 0.0
        self._lock = threading.Lock()
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore]
        self._semaphores = weakref.WeakKeyDictionary()

    def semaphore(self, limit: int) -> asyncio.Semaphore:
        """The connection slots in the running loop; the first caller's ``limit`` sets
        their number."""
        loop = asyncio.get_running_loop()
        with self._lock:
            sem = self._semaphores.get(loop)
            if sem is None:
                sem = self._semaphores[loop] = asyncio.Semaphore(limit)
            return sem

    @asynccontextmanager
    async def slot(self, limit: int) -> AsyncIterator[float]:
        """Hold one connection slot; yields the seconds spent waiting for it."""
        sem = self.semaphore(limit)
        started = time.monotonic()
        async with sem:
            yield time.monotonic() - started

    def pause(self, seconds: float) -> None:
        """No caller sends before ``seconds`` from now (a later pause wins)."""
        with self._lock:
            self._resume_at = max(self._resume_at, time.monotonic() + seconds)

    @property
    def paused_for(self) -> float:
        """Seconds until callers may send again (0 when not paused)."""
        with self._lock:
            return max(0.0, self._resume_at - time.monotonic())

    async def wait_open(self) -> float:
        """Wait out the pause, also one set while waiting; returns the seconds waited."""
        waited = 0.0
        while (delay := self.paused_for) > 0:
            await asyncio.sleep(delay)
            waited += delay
        return waited


_GATES: dict[str, EndpointGate] = {}
_GATES_LOCK = threading.Lock()


def endpoint_gate(key: str) -> EndpointGate:
    """The gate every caller of endpoint ``key`` shares in this process."""
    with _GATES_LOCK:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = EndpointGate(key)
        return gate
