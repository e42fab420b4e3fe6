"""Progress lines of a long step that prints nothing for minutes (an image build's package
install): each line as it comes with the time so far, and, while nothing comes for
``interval`` seconds, a line saying what is still running."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

HEARTBEAT_S = 30.0
"""How long a step may say nothing before a line says it is still running."""


class Heartbeat:
    """``with Heartbeat(print) as say: build(log=say)``: ``say(line)`` passes ``line (12 s)``
    on to the sink; a thread adds ``still <last line> (95 s so far)`` when nothing was said
    for ``interval`` seconds. The sink is called from that thread too, never at once with
    itself."""

    def __init__(self, sink: Callable[[str], None], interval: float = HEARTBEAT_S) -> None:
        self.sink = sink
        self.interval = interval
        self.started = time.monotonic()
        self.last = "starting"
        self.said_at = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)

    def __call__(self, line: str) -> None:
        with self._lock:
            self.last, self.said_at = line, time.monotonic()
            self.sink(f"{line} ({self.said_at - self.started:.0f} s)")

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.interval / 4):
            with self._lock:
                now = time.monotonic()
                if now - self.said_at >= self.interval:
                    self.sink(f"still {self.last} ({now - self.started:.0f} s so far)")
                    self.said_at = now

    def __enter__(self) -> Heartbeat:
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._beat.join()
