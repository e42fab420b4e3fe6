"""The output cap of every backend, and incremental capture: never more than the cap in memory."""

from __future__ import annotations

import asyncio

_READ_CHUNK = 64 * 1024


def cap_text(head: bytes, tail: bytes, total: int, limit: int) -> tuple[str, bool]:
    """The output cap of every backend: a stream's ``head`` and ``tail`` as kept, its
    ``total`` size and the ``limit`` → its text, with the cut said, and whether it was cut."""
    if total <= limit:
        return (head + tail).decode("utf-8", errors="replace"), False
    cut = total - len(head) - len(tail)
    h = head.decode("utf-8", errors="replace")
    t = tail.decode("utf-8", errors="replace")
    unit = "byte" if cut == 1 else "bytes"
    return f"{h}\n[... {cut} {unit} truncated by paperbench ...]\n{t}", True


class HeadTail:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest.

    ``text()`` gives exactly what :func:`cap_output` would give for the whole stream.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 0)
        self.half = self.limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._over = False

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if not self._over:
            self.head += chunk
            if len(self.head) <= self.limit:
                return
            self._over = True
            self.tail = self.head[self.half :]
            del self.head[self.half :]
        else:
            self.tail += chunk
        if len(self.tail) > self.half:
            del self.tail[: len(self.tail) - self.half]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> tuple[str, bool]:
        return cap_text(bytes(self.head), bytes(self.tail), self.total, self.limit)

    def tail_text(self, n: int) -> str:
        """The last ``n`` bytes seen (as far as kept), decoded."""
        data = bytes(self.head) + bytes(self.tail) if not self.truncated else bytes(self.tail)
        return data[-n:].decode("utf-8", errors="replace")


async def drain(stream: asyncio.StreamReader | None, sink: HeadTail) -> None:
    """Read ``stream`` to its end into ``sink``."""
    if stream is None:
        return
    while chunk := await stream.read(_READ_CHUNK):
        sink.feed(chunk)
