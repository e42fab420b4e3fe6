"""Reading a submission's files for the judge's view, without ever writing them to disk.

An archive or a folder that came out of a sandbox is read entry by entry through
:func:`paperbench.sandbox.folder_entries` / :func:`~paperbench.sandbox.tar_entries` (no link
followed, no recursion, special files noted): of each file only what the view can show is
held (its first ``max_file_bytes``; of a larger UTF-8 text that is not ASCII, up to four
times as many bytes, so that its head can hold ``max_file_bytes`` characters), within
:data:`VIEW_TEXT_CAP` bytes in all, and a ``reproduce.log`` inside the tree is read as a head
and a tail of at most :data:`LOG_READ_CAP` bytes. At most :data:`VIEW_MAX_FILES` files are
listed and, in a folder, folders at most :data:`VIEW_MAX_DEPTH` deep are entered. A tar bomb
therefore costs the host neither disk nor more memory than those caps. What a cap kept out is
counted and said (:meth:`RawTree.cuts`), never dropped silently.
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
from paperbench.sandbox import Entry, TreeLimits, folder_entries, tar_entries

VIEW_TEXT_CAP = 256 * 1024 * 1024
"""Bytes of file content the view holds in all (256 MiB); files past it are listed, unread."""
VIEW_MAX_FILES = TreeLimits().max_entries or 500_000
"""Files (and links) listed at most, the sandbox's cap on the entries of an untrusted tree;
the rest are counted."""
VIEW_MAX_DEPTH = TreeLimits().max_depth
"""Folders deep a folder is entered (the sandbox's cap); deeper ones are counted, not read."""
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
    not_listed: int = 0
    """Files past :data:`VIEW_MAX_FILES`."""
    unread_over_cap: int = 0
    """Files listed but not read: past :data:`VIEW_TEXT_CAP`."""
    deep_dirs: int = 0
    """Folders more than :data:`VIEW_MAX_DEPTH` deep in a folder source: not entered."""

    def cuts(self) -> list[str]:
        """One line per cap that kept files from the view (none: the view holds them all)."""
        out: list[str] = []
        if self.not_listed:
            out.append(
                f"{plural(self.not_listed, 'file')} past the view's cap of {VIEW_MAX_FILES} "
                "files not listed"
            )
        if self.unread_over_cap:
            out.append(
                f"{plural(self.unread_over_cap, 'file')} listed but not read: past the view's "
                f"cap of {VIEW_TEXT_CAP} bytes of content"
            )
        if self.deep_dirs:
            out.append(
                f"{plural(self.deep_dirs, 'folder')} deeper than {VIEW_MAX_DEPTH} levels not "
                "entered: what they hold is not listed"
            )
        return out


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
        yield folder_entries(source, max_depth=VIEW_MAX_DEPTH + 1)
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
    folder = source.is_dir() and not source.is_symlink()
    held = 0
    logs: dict[str, tuple[bytes, int]] = {}

    def note(text: str) -> None:
        if len(tree.notes) < _MAX_NOTES:
            tree.notes.append(text)

    listed = 0
    with _entries(source) as entries:
        for entry in entries:
            if entry.kind == "special":
                note(f"left out of the view: {entry.rel or source}: {entry.special}")
            elif entry.kind == "dir":
                tree.dirs.add(entry.rel)
                if folder and entry.rel.count("/") + 1 > VIEW_MAX_DEPTH:
                    tree.deep_dirs += 1
            elif listed >= VIEW_MAX_FILES:
                tree.not_listed += 1
            elif entry.kind in ("symlink", "hardlink"):
                listed += 1
                tree.files.append(RawFile(entry.rel, 0, entry.mtime, "symlink", unread="symlink"))
            elif entry.open is not None:
                listed += 1
                raw = RawFile(entry.rel, entry.size, entry.mtime, "file")
                budget = min(entry.size, max_file_bytes)
                if held + budget > VIEW_TEXT_CAP:
                    raw.unread = "over the view's cap"
                    tree.unread_over_cap += 1
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
