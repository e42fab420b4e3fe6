"""The consoles every command prints to: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import re

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` safe for a terminal line: control characters (escape sequences, newlines,
    carriage returns) shown as ``\\x1b``-style escapes instead of acting on the terminal."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def error(line: str) -> None:
    """Print one user-facing error line (never a traceback). ``line`` is plain text: square
    brackets stay as written and control characters are escaped."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", printable(line)))


def warning(line: str) -> None:
    """Print one warning line (plain text, like ``error``)."""
    err_console.print(Text.assemble(("warning:", "yellow"), " ", printable(line)))


def is_piped(target: Console | None = None) -> bool:
    """Whether ``target`` (stdout's console by default) writes to a file or a pipe rather
    than a terminal. Asks the stream itself: ``FORCE_COLOR`` or ``TTY_COMPATIBLE`` make rich
    treat a pipe as a terminal (for colours), which must not cut its lines to 80 columns."""
    stream = (target or console).file
    isatty = getattr(stream, "isatty", None)
    try:
        return not (isatty is not None and isatty())
    except ValueError:  # a closed stream
        return True


def _wide(renderable: RenderableType) -> Console:
    """The console to print ``renderable`` on: stdout's on a terminal (long cells fold at
    its width), else one as wide as the renderable's natural width, so that files and pipes
    get whole ids, model names and texts."""
    if not is_piped(console):
        return console
    natural = Measurement.get(console, console.options.update(width=10_000), renderable).maximum
    return Console(file=console.file, width=max(console.width, natural), highlight=False)


def print_table(table: Table) -> None:
    """Print a table on stdout: at the terminal's width on a terminal (long cells fold), at
    its natural width when piped, so files and pipes get whole ids and titles. The title is
    its own line, never wrapped to the table's width."""
    title = table.title
    table.title = None
    target = _wide(table)
    if title:
        target.print(Text(str(title), style="italic"))
    target.print(table)


def print_wide(renderable: RenderableType) -> None:
    """Print a renderable (a tree) on stdout: wrapped at the terminal's width on a terminal,
    one line per item at its natural width when piped (nothing cut)."""
    _wide(renderable).print(renderable, soft_wrap=False)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a word whose plural is not ``word + 's'``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


UNANSWERED_WHY = "a refused, reset or dropped connection, a timeout"
"""What an attempt with no HTTP answer is, for the notes that count such attempts."""


def unanswered_note(count: int) -> str:
    """How a table cell says that ``count`` attempts got no HTTP answer: they are not in the
    requests beside it."""
    return f"+{count} unanswered"


def unanswered_line(who: str, count: int) -> str:
    """The line under a table that explains :func:`unanswered_note`."""
    them, they = ("it", "it is") if count == 1 else ("them", "they are")
    return (
        f"{who}: {plural(count, 'attempt')} got no HTTP answer ({UNANSWERED_WHY}); the "
        f"server may never have received {them}, so {they} not counted as requests"
    )
