"""The consoles every command prints to: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import re

from rich.console import Console
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


def print_table(table: Table) -> None:
    """Print a table on stdout: at the terminal's width on a terminal (long cells fold), at
    its natural width when piped, so files and pipes get whole ids and titles. The title is
    its own line, never wrapped to the table's width."""
    target = console
    if not console.is_terminal:
        natural = Measurement.get(console, console.options.update(width=10_000), table).maximum
        target = Console(file=console.file, width=max(console.width, natural), highlight=False)
    if table.title:
        target.print(Text(str(table.title), style="italic"))
        table.title = None
    target.print(table)


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a word whose plural is not ``word + 's'``."""
    return f"{count} {word if count == 1 else (many or word + 's')}"
