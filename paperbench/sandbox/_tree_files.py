"""Single files and whole-tree removal under a folder untrusted code may still be changing,
by the rule of :mod:`paperbench.sandbox._tree`: no link is ever followed, an entry in the way of
a write is removed first, and nothing recurses."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

from paperbench.sandbox._tree import (
    _MODE_MASK,
    _O_CREATE,
    _O_DIR,
    _Folder,
    _normalise,
    _open_regular,
    _split,
)


def write_file_beneath(
    root: Path, rel: str, data: bytes, *, owner: tuple[int, int] | None = None, mode: int = 0o644
) -> None:
    """Write ``data`` at ``rel`` under the folder ``root`` without following any link: missing
    folders are made, and a link or file at ``rel`` is removed first.

    Raises:
        OSError: a folder is at ``rel``, or the write failed.
        ValueError: ``rel`` is not a relative path inside ``root``.
    """
    clean, reason = _normalise(rel)
    if not clean:
        raise ValueError(f"{rel!r}: {reason or 'not a file path'}")
    out = _Folder(root, owner)
    try:
        parent, name = _split(clean)
        dfd = out.dir_fd(parent)
        if not out._clear(dfd, name):
            raise IsADirectoryError(f"{rel}: is a folder")
        fd = os.open(name, _O_CREATE, 0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode & _MODE_MASK)
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)
    finally:
        out.close()


def copy_file_beneath(
    root: Path, rel: str, src: Path, *, owner: tuple[int, int] | None = None
) -> None:
    """Copy the host file ``src`` (trusted) to ``rel`` under ``root`` as
    :func:`write_file_beneath` writes.

    Raises:
        OSError: a folder is at ``rel``, or the copy failed.
    """
    clean, reason = _normalise(rel)
    if not clean:
        raise ValueError(f"{rel!r}: {reason or 'not a file path'}")
    out = _Folder(root, owner)
    try:
        with open(src, "rb") as handle:
            st = os.fstat(handle.fileno())
            out.write(clean, handle, st.st_size, st.st_mode, st.st_mtime)
    finally:
        out.close()


def open_dir_beneath(root: Path, rel: str) -> int:
    """A descriptor of the folder ``rel`` under ``root``, reached without following links;
    the caller closes it.

    Raises:
        FileNotFoundError: no such folder (or a link or file is in the way).
    """
    clean, reason = _normalise(rel)
    if clean is None:
        raise ValueError(f"{rel!r}: {reason}")
    fd = os.open(root, _O_DIR)
    for part in clean.split("/") if clean else []:
        try:
            nxt = os.open(part, _O_DIR, dir_fd=fd)
        except OSError:
            os.close(fd)
            raise FileNotFoundError(rel) from None
        os.close(fd)
        fd = nxt
    return fd


def make_dirs_beneath(root: Path, rel: str, *, owner: tuple[int, int] | None = None) -> None:
    """``mkdir -p`` of ``rel`` under ``root``, never through a link (one in the way is removed).

    Raises:
        OSError: a file system error.
    """
    clean, reason = _normalise(rel)
    if clean is None:
        raise ValueError(f"{rel!r}: {reason}")
    out = _Folder(root, owner)
    try:
        out.dir_fd(clean)
    finally:
        out.close()


def open_file_beneath(root: Path, rel: str) -> IO[bytes]:
    """The regular file ``rel`` under ``root``, opened without following any link.

    Raises:
        FileNotFoundError: no such file (or a link is in the way).
        IsADirectoryError: ``rel`` is a folder.
        OSError: not a regular file, or unreadable.
    """
    clean, reason = _normalise(rel)
    if not clean:
        raise ValueError(f"{rel!r}: {reason or 'not a file path'}")
    parent, name = _split(clean)
    fd = open_dir_beneath(root, parent)
    try:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(rel) from None
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(rel)
        if stat.S_ISLNK(st.st_mode):
            raise FileNotFoundError(f"{rel}: a link (not followed)")
        return _open_regular(name, fd)
    finally:
        os.close(fd)


def read_file_beneath(root: Path, rel: str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of the file ``rel`` under ``root``
    (:func:`open_file_beneath`)."""
    with open_file_beneath(root, rel) as handle:
        return handle.read(max_bytes + 1)


def copy_out_beneath(root: Path, rel: str, dest: Path, max_bytes: int | None) -> int:
    """Copy the file ``rel`` under ``root`` (:func:`open_file_beneath`) to the host path
    ``dest`` (a link there is replaced), at most ``max_bytes``; return the bytes copied."""
    with open_file_beneath(root, rel) as src:
        st = os.fstat(src.fileno())
        dest.parent.mkdir(parents=True, exist_ok=True)
        out = _Folder(dest.parent)
        try:
            budget = st.st_size if max_bytes is None else min(st.st_size, max_bytes)
            return out.write(dest.name, src, budget, st.st_mode, st.st_mtime)
        finally:
            out.close()


def remove_tree(path: Path) -> None:
    """``rm -rf path`` without following links and without recursion (a tree thousands of
    folders deep is fine), opening up folders made unreadable. Holds one folder descriptor at
    a time: it climbs back with ``..`` and checks it came back to the same folder.

    Raises:
        OSError: an entry cannot be removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    fd = _open_dir_opening_up(os.open(path.parent, _O_DIR), path.name, close_parent=True)
    # Per level: (the folder's identity, its name in its parent, the names left to visit).
    stack: list[tuple[tuple[int, int], str, list[str]]] = [
        (_identity(fd), path.name, sorted(os.listdir(fd), reverse=True))
    ]
    try:
        while stack:
            _, name, left = stack[-1]
            if left:
                child = left.pop()
                try:
                    cst = os.stat(child, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(cst.st_mode):
                    os.unlink(child, dir_fd=fd)
                    continue
                sub = _open_dir_opening_up(fd, child, close_parent=False)
                os.close(fd)
                fd = sub
                stack.append((_identity(fd), child, sorted(os.listdir(fd), reverse=True)))
                continue
            stack.pop()
            parent = os.open("..", _O_DIR, dir_fd=fd)
            os.close(fd)
            fd = parent
            if stack and _identity(fd) != stack[-1][0]:
                raise OSError(f"{path}: a folder moved while it was removed")
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_dir_opening_up(parent: int, name: str, *, close_parent: bool) -> int:
    """Open folder ``name`` (never a link); a folder without permissions gets ``0o700``."""
    try:
        try:
            return os.open(name, _O_DIR, dir_fd=parent)
        except PermissionError:
            handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            try:
                os.chmod(f"/proc/self/fd/{handle}", 0o700)
            finally:
                os.close(handle)
            return os.open(name, _O_DIR, dir_fd=parent)
    finally:
        if close_parent:
            os.close(parent)
