"""How far an ``rcb`` batch is, on stderr: on a terminal one status line updated in place;
piped (a file, CI, ``| tee``), where a status line prints nothing, a plain line per finished
item (which one, how it ended, how many of how many, the time so far)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.text import Text

from paperbench._console import err_console, is_piped, printable
from paperbench.rcb._models import TestOutcome


def verdict(outcome: TestOutcome) -> str:
    """A test's end in a word or three."""
    if outcome.passed:
        return "passed"
    if outcome.error_class == "sandbox_error":
        return "sandbox error"
    return f"failed ({outcome.error_class})"


class Progress:
    """``with Progress("tests", 8) as p: ... p.step("paper/snippet", "passed")``."""

    def __init__(self, what: str, total: int, console: Console | None = None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.console = console or err_console
        self.started = time.monotonic()
        self.piped = is_piped(self.console)
        self._status: Any = None

    def line(self, latest: str = "") -> str:
        """``tests: 3/8 done, 12 s`` and the latest item."""
        elapsed = time.monotonic() - self.started
        said = f"{self.what}: {self.done}/{self.total} done, {elapsed:.0f} s"
        return f"{said}: {latest}" if latest else said

    def __enter__(self) -> Progress:
        if not self.piped and self.total:
            self._status = self.console.status(self.line())
            self._status.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.__exit__(kind, exc, tb)

    def step(self, item: str, how: str) -> None:
        """One more item finished."""
        self.done += 1
        line = self.line(f"{item} {how}")
        if self._status is not None:
            self._status.update(printable(line))
        elif self.piped:
            self.console.print(Text(printable(line)), soft_wrap=True)
