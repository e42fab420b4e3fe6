"""Reading a submission's files for the judge's view, without ever writing them to disk.

An archive or a folder that came out of a sandbox is read entry by entry through
:func:`paperbench.sandbox.folder_entries` / :func:`~paperbench.sandbox.tar_entries` (no link
followed, no recursion, special files noted): of each file only what the view can show is
held (its first ``max_file_bytes``; of a larger UTF-8 text that is not ASCII, up to four
times as many bytes, so that its head can hold ``max_file_bytes`` characters), within
:data:`VIEW_TEXT_CAP` bytes in all, and a ``reproduce.log`` inside the tree is read as a head
and a tail of at most :data:`LOG_READ_CAP` bytes. A tar bomb therefore costs the host neither
disk nor more memory than those caps.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from paperbench._console import plural
from paperbench.errors import InputError
from paperbench.sandbox import Entry, folder_entries, tar_entries

VIEW_TEXT_CAP = 256 * 1024 * 1024
"""Bytes of file content the view holds in all (256 MiB); files past it are listed, unread."""
LOG_READ_CAP = 8 * 1024 * 1024
"""Bytes of a reproduce.log read (8 MiB): its first and last halves, the cut said."""
LOG_NAME = "reproduce.log"
_MAX_NOTES = 200


@dataclass
class RawFile:
    """One entry as read: its content held only up to the caps."""

    path: str
    size: int
    mtime: float
    kind: str
    """``file``, ``symlink`` or ``dir``."""
    data: bytes | None = None
    """The first bytes (``max_file_bytes``, or up to four times as many of a larger file
    that is not ASCII); None when not read."""
    unread: str | None = None


@dataclass
class RawTree:
    files: list[RawFile]
    dirs: set[str]
    notes: list[str]
    log: bytes | None = None
    """A top-level reproduce.log's head and tail (capped), when the tree holds one."""
    log_size: int = 0


def read_capped(handle: IO[bytes], size: int, cap: int = LOG_READ_CAP) -> bytes:
    """At most ``cap`` bytes of a ``size``-byte stream: all of it, or its first and last
    halves around a line that says how much was cut."""
    read = handle.read
    if size <= cap:
        return read(cap + 1)[:cap]
    half = cap // 2
    head = read(half)
    tail = b""
    while chunk := read(1 << 20):
        tail = (tail + chunk)[-half:]
    cut = size - len(head) - len(tail)
    return head + f"\n[... {plural(cut, 'byte')} of the log cut by the view ...]\n".encode() + tail


@contextlib.contextmanager
def _entries(source: Path) -> Iterator[Iterator[Entry]]:
    if source.is_dir() and not source.is_symlink():
        yield folder_entries(source)
        return
    try:
        tar = tarfile.open(source, mode="r:*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise InputError(f"cannot read archive: {first}", file=source) from None
    with tar:
        yield tar_entries(tar)


def read_tree(source: Path, max_file_bytes: int) -> RawTree:
    """Every entry of ``source`` (a folder or a .tar/.tar.gz), a single top folder stripped.

    Raises:
        InputError: ``source`` is not a readable folder or archive.
    """
    tree = RawTree(files=[], dirs=set(), notes=[])
    held = 0
    logs: dict[str, tuple[bytes, int]] = {}

    def note(text: str) -> None:
        if len(tree.notes) < _MAX_NOTES:
            tree.notes.append(text)

    with _entries(source) as entries:
        for entry in entries:
            if entry.kind == "special":
                note(f"left out of the view: {entry.rel or source}: {entry.special}")
            elif entry.kind == "dir":
                tree.dirs.add(entry.rel)
            elif entry.kind in ("symlink", "hardlink"):
                tree.files.append(RawFile(entry.rel, 0, entry.mtime, "symlink", unread="symlink"))
            elif entry.open is not None:
                raw = RawFile(entry.rel, entry.size, entry.mtime, "file")
                budget = min(entry.size, max_file_bytes)
                if held + budget > VIEW_TEXT_CAP:
                    raw.unread = "over the view's cap"
                    note(f"{entry.rel}: not read, over the view's cap of {VIEW_TEXT_CAP} bytes")
                else:
                    try:
                        with entry.open() as handle:
                            if (
                                entry.rel.rsplit("/", 1)[-1] == LOG_NAME
                                and entry.rel.count("/") < 2
                            ):
                                whole = read_capped(handle, entry.size)
                                logs[entry.rel] = (whole, entry.size)
                                raw.data = whole[:budget]
                            else:
                                raw.data = handle.read(budget)
                                if budget < entry.size and held + MAX_CHAR_BYTES * budget <= (
                                    VIEW_TEXT_CAP
                                ):
                                    raw.data += _rest_of_head(handle, raw.data, max_file_bytes)
                        held += len(raw.data)
                    except OSError:
                        raw.unread = "unreadable"
                tree.files.append(raw)
    for f in tree.files:  # archives may leave out their folders' own entries
        parts = f.path.split("/")[:-1]
        tree.dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    prefix = _single_top(tree)
    if prefix is not None:
        n = len(prefix) + 1
        for f in tree.files:
            f.path = f.path[n:]
        tree.dirs = {d[n:] for d in tree.dirs if d.startswith(prefix + "/")}
    top_log = logs.get(f"{prefix}/{LOG_NAME}" if prefix else LOG_NAME)
    if top_log is not None:
        tree.log, tree.log_size = top_log
    return tree


MAX_CHAR_BYTES = 4
"""Bytes of one UTF-8 character at most."""


def _rest_of_head(handle: IO[bytes], data: bytes, chars: int) -> bytes:
    """What more to read of a file whose first bytes are ``data`` so that its head holds
    ``chars`` characters, as PaperBench's text-mode read does: nothing when ``data`` is one
    byte a character (ASCII) or is not UTF-8 text (a NUL, or an invalid byte before the last
    character, which the cut may have split)."""
    text = data.decode("utf-8", errors="replace")
    if len(text) >= chars or b"\x00" in data or "\ufffd" in text[:-1]:
        return b""
    return handle.read((MAX_CHAR_BYTES - 1) * chars)


def _single_top(tree: RawTree) -> str | None:
    tops = {f.path.split("/", 1)[0] for f in tree.files} | {d.split("/", 1)[0] for d in tree.dirs}
    if len(tops) != 1:
        return None
    top = next(iter(tops))
    if top not in tree.dirs or not any(f.path.startswith(top + "/") for f in tree.files):
        return None
    return top


def read_log_file(path: Path) -> tuple[bytes, int]:
    """A log file on the host, capped as :func:`read_capped` caps it, and its size.

    Raises:
        InputError: no such file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"cannot read the log ({exc.strerror})", file=path) from None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        return read_capped(handle, size), size
