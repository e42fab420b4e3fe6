"""The gate every call to one provider endpoint passes before it is sent.

One :class:`EndpointGate` per endpoint (``ModelAPI.connection_key``) per process holds:

- the connection limit: one semaphore per event loop (asyncio primitives belong to the loop
  that made them), whose size is the ``max_connections`` of its first caller in that loop;
- a shared pause, "resume not before T": a caller that gets ``retry-after`` sets it, and
  every caller of the endpoint waits for it before sending, so that one rate-limit answer
  quiets the whole process instead of each caller finding the limit on its own;
- a send window, so that the callers do not all send at once when a pause ends (they would
  mostly meet the limit again): the requests in flight are at most the window, which halves
  on a rate-limit answer (once per round: not again for requests sent before the cut) and
  grows by one per window's worth of answers, up to the connection limit. This is TCP's
  additive-increase/multiplicative-decrease; without rate limits the window stays at the
  connection limit and costs nothing.

The pause and the window are what ``ModelConfig.shared_backoff`` turns on (the default).
A call takes a slot, then a place in the window, waits out any pause, checks its budget,
sends, records what happened and only then gives its place back (see
:meth:`paperbench.llm.Model.generate`), so that the next caller's budget check sees the cost
of the call before it.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class _Window:
    """The send window of one endpoint in one event loop."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = float(limit)
        self.in_flight = 0
        self.cut_at = -math.inf
        self.changed = asyncio.Condition()

    def open(self) -> bool:
        return self.in_flight < max(1, int(self.size))


class EndpointGate:
    """The connection limit, the shared pause and the send window of one endpoint."""

    def __init__(self, key: str) -> None:
        self.key = key
        self._resume_at = 0.0
        self._lock = threading.Lock()
        self._per_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[asyncio.Semaphore, _Window]
        ] = weakref.WeakKeyDictionary()

    def _state(self, limit: int) -> tuple[asyncio.Semaphore, _Window]:
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._per_loop.get(loop)
            if state is None:
                state = self._per_loop[loop] = (asyncio.Semaphore(limit), _Window(limit))
            return state

    def semaphore(self, limit: int) -> asyncio.Semaphore:
        """The connection slots in the running loop; the first caller's ``limit`` sets
        their number."""
        return self._state(limit)[0]

    @property
    def window(self) -> float:
        """The send window in the running loop (the connection limit until a 429)."""
        return self._state(1)[1].size

    @asynccontextmanager
    async def slot(self, limit: int) -> AsyncIterator[float]:
        """Hold one connection slot; yields the seconds spent waiting for it."""
        sem = self.semaphore(limit)
        started = time.monotonic()
        async with sem:
            yield time.monotonic() - started

    @asynccontextmanager
    async def sending(self, limit: int) -> AsyncIterator[float]:
        """Hold a place in the send window; yields the seconds spent waiting for it."""
        window = self._state(limit)[1]
        started = time.monotonic()
        async with window.changed:
            await window.changed.wait_for(window.open)
            window.in_flight += 1
        try:
            yield time.monotonic() - started
        finally:
            async with window.changed:
                window.in_flight -= 1
                window.changed.notify_all()

    def answered(self) -> None:
        """An answer came: the window grows by one per window's worth of answers."""
        window = self._state(1)[1]
        window.size = min(float(window.limit), window.size + 1.0 / window.size)

    def rate_limited(self, sent_at: float, retry_after: float | None) -> None:
        """A request sent at ``sent_at`` (``time.monotonic()``) met the rate limit: halve
        the window (unless it was already cut after that request left) and pause every
        caller for ``retry_after`` seconds."""
        window = self._state(1)[1]
        if sent_at > window.cut_at:
            window.size = max(1.0, window.size / 2)
            window.cut_at = time.monotonic()
        if retry_after is not None:
            self.pause(retry_after)

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
