"""Writing archives of untrusted trees by the rule of :mod:`paperbench.sandbox._tree`: links
last, each checked against the entries written, special files and what is over the caps left
out and listed."""

from __future__ import annotations

import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from paperbench._io import atomic_open
from paperbench.errors import InputError
from paperbench.sandbox._tree import (
    _CHUNK,
    _MODE_MASK,
    DEFAULT_LIMITS,
    MAX_NOTES,
    Entry,
    LeftOutFile,
    TreeLimits,
    _copy_capped,
    _Gate,
    _record_dirs,
    folder_entries,
    link_problem,
    tar_entries,
)


def _write_tar(
    entries: Iterator[Entry],
    tar: tarfile.TarFile,
    limits: TreeLimits,
    left_out: list[LeftOutFile],
    arc_prefix: str = "",
) -> None:
    """Write ``entries`` into ``tar`` by the module's rule: links last, checked against the
    entries written."""

    def note(name: str, reason: str, size: int | None = None) -> None:
        if len(left_out) < MAX_NOTES:
            left_out.append(LeftOutFile(path=name, size=size, reason=reason))

    gate = _Gate(limits, note)

    def arc(rel: str) -> str:
        return f"{arc_prefix}/{rel}" if arc_prefix else rel

    if arc_prefix:
        tar.addfile(_info(arc_prefix, tarfile.DIRTYPE, 0o755, 0))
    hardlinks: list[tuple[str, str, int, float]] = []
    for entry in entries:
        if not gate.admit(entry):
            continue
        if entry.kind == "dir":
            if gate.kinds.get(entry.rel) == "file":
                note(entry.rel, "a file already exists at this path")
                continue
            tar.addfile(_info(arc(entry.rel), tarfile.DIRTYPE, entry.mode, entry.mtime))
            _record_dirs(gate.kinds, entry.rel)
        elif entry.kind == "symlink":
            gate.links.append((entry.rel, entry.target, entry.mtime))
        elif entry.kind == "hardlink":
            hardlinks.append((entry.rel, entry.target, entry.mode, entry.mtime))
        elif entry.kind == "file" and entry.open is not None:
            _tar_file(entry, tar, gate, arc, note)
    for rel, target, mode, mtime in hardlinks:
        if gate.kinds.get(target) != "file" or rel in gate.kinds:
            note(rel, f"hard link to {target!r}, not a file of the tree")
            continue
        info = _info(arc(rel), tarfile.LNKTYPE, mode, mtime)
        info.linkname = arc(target)
        tar.addfile(info)
        gate.kinds[rel] = "file"
    for rel, target, mtime in gate.links:
        problem = "a folder or file already exists at this path" if rel in gate.kinds else None
        problem = problem or link_problem(rel, target, gate.kinds)
        if problem is not None:
            note(rel, problem)
            continue
        info = _info(arc(rel), tarfile.SYMTYPE, 0o777, mtime)
        info.linkname = target
        tar.addfile(info)


def _tar_file(
    entry: Entry,
    tar: tarfile.TarFile,
    gate: _Gate,
    arc: Callable[[str], str],
    note: Callable[..., None],
) -> None:
    budget = gate.file_budget(entry)
    if budget is None or entry.open is None:
        return
    parent = entry.rel.rpartition("/")[0]
    if parent and gate.kinds.get(parent, "dir") != "dir":
        note(entry.rel, "inside a file")
        return
    try:
        src = entry.open()
    except OSError as exc:  # gone, swapped for a link or a special file meanwhile
        note(entry.rel, f"changed while read ({exc.strerror or exc})")
        return
    with src, tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
        size = _copy_capped(src, spool, budget)
        spool.seek(0)
        info = _info(arc(entry.rel), tarfile.REGTYPE, entry.mode, entry.mtime)
        info.size = size
        tar.addfile(info, spool)
    if parent:
        _record_dirs(gate.kinds, parent)
    gate.kinds[entry.rel] = "file"
    gate.bytes += size


def _info(name: str, kind: bytes, mode: int, mtime: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = (mode & _MODE_MASK) | (0o700 if kind == tarfile.DIRTYPE else 0o600)
    if kind == tarfile.SYMTYPE:
        info.mode = 0o777
    info.mtime = int(mtime)
    return info


def make_tar_gz(
    folder: str | Path,
    dest: str | Path,
    max_file_bytes: int | None = None,
    *,
    exclude_dirs: frozenset[str] = frozenset(),
    arc_prefix: str = "",
    limits: TreeLimits = DEFAULT_LIMITS,
) -> list[LeftOutFile]:
    """Write ``folder``'s contents as a tar.gz at ``dest`` (atomically) by the module's rule;
    return what was left out (paths relative to ``folder``).

    ``arc_prefix`` puts every member under that folder (``submission/...``). Left out, besides
    what the rule drops: files over ``max_file_bytes`` and folders named in ``exclude_dirs``.

    Raises:
        InputError: ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir() or root.is_symlink():
        raise InputError("not a folder", file=root)
    if max_file_bytes is not None:
        limits = limits.model_copy(update={"max_file_bytes": max_file_bytes, "keep_head": False})
    left_out: list[LeftOutFile] = []

    def excluded(rel: str) -> None:
        left_out.append(LeftOutFile(path=rel + "/", reason="excluded folder"))

    entries = folder_entries(
        root, exclude_dirs=exclude_dirs, on_excluded=excluded, max_depth=limits.max_depth + 1
    )
    with atomic_open(Path(dest)) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        _write_tar(entries, tar, limits, left_out, arc_prefix)
    return left_out


def repack(
    src: IO[bytes],
    out: IO[bytes],
    *,
    drop_top: bool = False,
    limits: TreeLimits = DEFAULT_LIMITS,
    compress: bool = True,
) -> list[LeftOutFile]:
    """Copy the tar (or tar.gz) stream ``src`` to ``out`` as a tar.gz (or plain tar) by the
    module's rule; return what was left out. ``drop_top`` removes each name's first component.
    """
    left_out: list[LeftOutFile] = []
    mode = "w|gz" if compress else "w|"
    with (
        tarfile.open(fileobj=src, mode="r|*") as tin,
        tarfile.open(fileobj=out, mode=mode, format=tarfile.PAX_FORMAT) as tout,  # type: ignore[call-overload]
    ):
        tout.copybufsize = _CHUNK
        _write_tar(tar_entries(tin, drop_top=drop_top), tout, limits, left_out)
    return left_out
