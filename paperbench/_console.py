"""The consoles every command prints to: results on stdout, errors and progress on stderr."""

from __future__ import annotations

import re

from rich.console import Console
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
