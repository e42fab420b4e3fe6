"""Close an async resource when the event loop that made it shuts down.

An SDK client belongs to the loop that made it. A :class:`~paperbench.llm.Model` used in two
successive ``asyncio.run`` calls makes a client in each; without this, the first one's open
connections are only found by the garbage collector after their loop has closed, which
prints "unclosed transport" and "Event loop is closed" at exit.

``asyncio.run`` (and every loop runner that follows the async-generator hooks of PEP 525)
finalises the async generators still open on its loop before closing it
(``loop.shutdown_asyncgens()``). :func:`close_at_loop_end` starts one such generator, parked
at its ``yield``, whose ``finally`` awaits the close: the close then runs inside the loop,
as its last work.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable


async def _closer(close: Callable[[], Awaitable[object]]) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        await close()


def close_at_loop_end(close: Callable[[], Awaitable[object]]) -> AsyncGenerator[None, None]:
    """Arrange for ``await close()`` when the running loop shuts down. Must be called from a
    coroutine running on that loop. Keep the returned generator referenced for as long as
    the resource lives (if it is garbage-collected first, the loop closes the resource then).
    """
    agen = _closer(close)
    # The first step registers the generator with the running loop (its firstiter hook)
    # and runs it to its ``yield``, which needs no awaiting: drive it by hand.
    step = agen.asend(None)
    try:
        step.send(None)
    except StopIteration:
        pass
    else:  # pragma: no cover - _closer yields at once
        raise AssertionError("the closer did not stop at its yield")
    return agen
