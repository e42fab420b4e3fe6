"""Safe handling of submission archives: extraction that cannot escape, and tar.gz writing.

Submissions come from agents, so an archive is hostile input. :func:`safe_extract` never writes
outside ``dest``: it refuses ``..`` and absolute paths, links that point outside, device files
and FIFOs, and it resolves every parent folder on disk before writing (so a link extracted
earlier cannot redirect a later file). Each member it leaves out is recorded with its reason;
with ``strict=True`` the first such member raises :class:`UnsafeArchiveError` instead.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench._console import plural
from paperbench._io import atomic_open
from paperbench.errors import InputError, UnsafeArchiveError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")

_COPY_CHUNK = 1 << 20


class SkippedMember(BaseModel):
    """One archive member (or folder entry) that was not extracted, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    reason: str


class ExtractReport(BaseModel):
    """What :func:`safe_extract` wrote."""

    model_config = ConfigDict(extra="forbid")

    dest: Path
    source_kind: Literal["archive", "folder"]
    files: int = 0
    bytes: int = 0
    stripped_prefix: str | None = None
    """The single top folder that was removed from every path, if there was one."""
    skipped: list[SkippedMember] = Field(default_factory=list)


class LeftOutFile(BaseModel):
    """A file :func:`make_tar_gz` did not put in the archive."""

    model_config = ConfigDict(extra="forbid")

    path: str
    size: int | None = None
    reason: str


def is_archive_path(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in ARCHIVE_SUFFIXES)


# --------------------------------------------------------------------------- member checks


def _normalise(name: str) -> tuple[str | None, str | None]:
    """Return ``(relative posix path, None)`` or ``(None, reason)`` for a member name."""
    if "\x00" in name:
        return None, "NUL byte in name"
    raw = name.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        return None, "absolute path"
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None, "path with '..'"
    if not parts:
        return "", None
    return "/".join(parts), None


def _link_target_inside(member_path: str, target: str) -> str | None:
    """Reason a symlink target is unsafe, or None when it stays inside the tree."""
    if not target:
        return "empty link target"
    if target.startswith("/"):
        return f"symlink to absolute path {target!r}"
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_path), target))
    if joined == ".." or joined.startswith("../"):
        return f"symlink pointing outside ({target!r})"
    return None


def _inside(root_real: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real + os.sep)


def _strip_prefix(names: list[tuple[str, bool]]) -> str | None:
    """The single top folder shared by every path, if the top holds nothing else."""
    tops = {n.split("/", 1)[0] for n, _ in names if n}
    if len(tops) != 1:
        return None
    top = next(iter(tops))
    # The top must be a folder: a lone file at the top is not a prefix.
    if any(n == top and not is_dir for n, is_dir in names):
        return None
    if not any(n.startswith(top + "/") for n, _ in names):
        return None
    return top


# --------------------------------------------------------------------------- extraction


class _Writer:
    """Writes into ``dest``, refusing anything whose real path leaves it."""

    def __init__(self, dest: Path, report: ExtractReport, strict: bool, label: str) -> None:
        self.dest = dest
        self.root_real = os.path.realpath(dest)
        self.report = report
        self.strict = strict
        self.label = label

    def skip(self, name: str, reason: str) -> None:
        if self.strict:
            raise UnsafeArchiveError(
                f"unsafe member {name!r}: {reason}; remove it from the archive", file=self.label
            )
        self.report.skipped.append(SkippedMember(name=name, reason=reason))

    def _parent_ok(self, rel: str, name: str) -> Path | None:
        target = self.dest / rel
        parent = target.parent
        if not _inside(self.root_real, str(parent)):
            self.skip(name, "parent folder resolves outside the destination")
            return None
        parent.mkdir(parents=True, exist_ok=True)
        if not _inside(self.root_real, str(parent)):
            self.skip(name, "parent folder resolves outside the destination")
            return None
        return target

    def _clear(self, target: Path, name: str) -> bool:
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.exists():
            self.skip(name, "a folder already exists at this path")
            return False
        return True

    def mkdir(self, rel: str, name: str) -> None:
        if not rel:
            return
        target = self._parent_ok(rel, name)
        if target is None:
            return
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            self.skip(name, "a non-folder already exists at this path")
            return
        target.mkdir(exist_ok=True)

    def file(self, rel: str, name: str, data: IO[bytes], mode: int) -> None:
        target = self._parent_ok(rel, name)
        if target is None or not self._clear(target, name):
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags, 0o600)
        size = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := data.read(_COPY_CHUNK):
                out.write(chunk)
                size += len(chunk)
        # Like tarfile's "data" filter: no setuid/setgid/sticky, no group/other write.
        os.chmod(target, (mode & 0o755) | 0o600)
        self.report.files += 1
        self.report.bytes += size

    def symlink(self, rel: str, name: str, link_target: str) -> None:
        reason = _link_target_inside(rel, link_target)
        if reason:
            self.skip(name, reason)
            return
        target = self._parent_ok(rel, name)
        if target is None:
            return
        resolved = os.path.join(os.path.dirname(target), link_target)
        if not _inside(self.root_real, resolved):
            self.skip(name, f"symlink resolves outside ({link_target!r})")
            return
        if not self._clear(target, name):
            return
        os.symlink(link_target, target)


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, tarfile.ReadError):
        return "cannot read archive: not a .tar, .tar.gz or .tgz file (or truncated)"
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"cannot read archive: {first}"


def _open_tar(src: Path | IO[bytes], label: str) -> tuple[tarfile.TarFile, IO[bytes] | None]:
    spool: IO[bytes] | None = None
    try:
        if isinstance(src, Path):
            return tarfile.open(src, mode="r:*"), None
        fileobj: IO[bytes] = src
        if not (hasattr(src, "seekable") and src.seekable()):
            spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller
            shutil.copyfileobj(src, spool, _COPY_CHUNK)
            spool.seek(0)
            fileobj = spool
        return tarfile.open(fileobj=fileobj, mode="r:*"), spool
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        if spool is not None:
            spool.close()
        raise InputError(_read_error(exc), file=label) from None


def _extract_tar(
    tar: tarfile.TarFile,
    writer: _Writer,
    strip_top: bool,
    max_total_bytes: int | None,
    label: str,
) -> None:
    try:
        members = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise InputError(_read_error(exc), file=label) from None
    kept: list[tuple[str, tarfile.TarInfo]] = []
    total = 0
    for m in members:
        rel, reason = _normalise(m.name)
        if rel is None:
            writer.skip(m.name, reason or "unsafe name")
            continue
        if m.ischr() or m.isblk():
            writer.skip(m.name, "device file")
            continue
        if m.isfifo():
            writer.skip(m.name, "FIFO")
            continue
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            writer.skip(m.name, f"unsupported member type {m.type!r}")
            continue
        if m.isfile():
            total += m.size
            if max_total_bytes is not None and total > max_total_bytes:
                raise UnsafeArchiveError(
                    f"archive expands to more than {plural(max_total_bytes, 'byte')}", file=label
                )
        kept.append((rel, m))
    prefix = _strip_prefix([(r, m.isdir()) for r, m in kept]) if strip_top else None
    writer.report.stripped_prefix = prefix
    by_name = {r: m for r, m in kept}

    def relname(rel: str) -> str:
        if prefix is None:
            return rel
        return "" if rel == prefix else rel[len(prefix) + 1 :]

    for rel, m in kept:
        out = relname(rel)
        if m.isdir():
            writer.mkdir(out, m.name)
        elif m.isfile():
            if not out:
                writer.skip(m.name, "file at the stripped top path")
                continue
            data = tar.extractfile(m)
            if data is None:
                writer.skip(m.name, "no data")
                continue
            with data:
                writer.file(out, m.name, data, m.mode)
        elif m.issym():
            writer.symlink(out, m.name, m.linkname.replace("\\", "/"))
        elif m.islnk():
            link_rel, reason = _normalise(m.linkname)
            source = by_name.get(link_rel) if link_rel else None
            if link_rel is None:
                writer.skip(m.name, f"hard link to unsafe path ({reason})")
            elif source is None or not source.isfile():
                writer.skip(m.name, f"hard link to {m.linkname!r}, not a file in the archive")
            else:
                data = tar.extractfile(source)
                if data is None:
                    writer.skip(m.name, "no data")
                    continue
                with data:  # extracted as an independent copy, never as a link
                    writer.file(out, m.name, data, source.mode)


def _walk_folder(src: Path) -> Iterator[tuple[str, os.stat_result]]:
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, src).replace(os.sep, "/")
            yield rel, os.lstat(full)


def _copy_folder(src: Path, writer: _Writer, strip_top: bool) -> None:
    entries = list(_walk_folder(src))
    base = src
    if strip_top:
        prefix = _strip_prefix([(r, stat.S_ISDIR(st.st_mode)) for r, st in entries])
        if prefix is not None and (src / prefix).is_dir() and not (src / prefix).is_symlink():
            writer.report.stripped_prefix = prefix
            base = src / prefix
            entries = list(_walk_folder(base))
    for rel, st in entries:
        full = base / rel
        if stat.S_ISDIR(st.st_mode):
            writer.mkdir(rel, rel)
        elif stat.S_ISREG(st.st_mode):
            with open(full, "rb") as handle:
                writer.file(rel, rel, handle, st.st_mode)
        elif stat.S_ISLNK(st.st_mode):
            writer.symlink(rel, rel, os.readlink(full))
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            writer.skip(rel, "device file")
        elif stat.S_ISFIFO(st.st_mode):
            writer.skip(rel, "FIFO")
        else:
            writer.skip(rel, "socket or other special file")


def safe_extract(
    src: str | Path | IO[bytes],
    dest: str | Path,
    *,
    strip_top: bool = True,
    strict: bool = False,
    max_total_bytes: int | None = None,
) -> ExtractReport:
    """Extract a .tar/.tar.gz/.tgz archive (path or file object), or copy a folder, into ``dest``.

    Unsafe members are left out and listed in the report (``strict=True`` raises instead).
    With ``strip_top``, a single top folder holding everything is removed from every path.

    Raises:
        InputError: ``src`` does not exist or is not a readable archive.
        UnsafeArchiveError: an unsafe member under ``strict``, or more than ``max_total_bytes``.
    """
    dest_path = Path(dest)
    dest_path.mkdir(parents=True, exist_ok=True)
    label = str(src) if isinstance(src, str | Path) else getattr(src, "name", "<archive>")
    source = Path(src) if isinstance(src, str | Path) else src
    if isinstance(source, Path):
        if not source.exists():
            raise InputError("not found: give a folder or a .tar/.tar.gz/.tgz file", file=source)
        if source.is_dir():
            report = ExtractReport(dest=dest_path, source_kind="folder")
            _copy_folder(source, _Writer(dest_path, report, strict, label), strip_top)
            return report
    report = ExtractReport(dest=dest_path, source_kind="archive")
    tar, spool = _open_tar(source, str(label))
    try:
        with tar:
            _extract_tar(
                tar,
                _Writer(dest_path, report, strict, str(label)),
                strip_top,
                max_total_bytes,
                str(label),
            )
    finally:
        if spool is not None:
            spool.close()
    return report


# --------------------------------------------------------------------------- writing


def make_tar_gz(
    folder: str | Path,
    dest: str | Path,
    max_file_bytes: int | None = None,
    *,
    exclude_dirs: frozenset[str] = frozenset(),
    arc_prefix: str = "",
) -> list[LeftOutFile]:
    """Write ``folder``'s contents as a tar.gz at ``dest`` (atomically); return what was left out.

    ``arc_prefix`` puts every member under that folder (``submission/...``); paths in the
    returned list stay relative to ``folder``.

    Left out: files over ``max_file_bytes``, folders named in ``exclude_dirs``, symlinks that
    point outside ``folder``, and special files (FIFOs, sockets, devices).

    Raises:
        InputError: ``folder`` is not a folder.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError("not a folder", file=root)
    target = Path(dest)
    left_out: list[LeftOutFile] = []

    def arc(rel: str) -> str:
        return f"{arc_prefix}/{rel}" if arc_prefix else rel

    with atomic_open(target) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
        if arc_prefix:
            tar.add(str(root), arcname=arc_prefix, recursive=False)
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            kept_dirs = []
            for d in sorted(dirnames):
                rel = os.path.relpath(os.path.join(dirpath, d), root).replace(os.sep, "/")
                if d in exclude_dirs:
                    left_out.append(LeftOutFile(path=rel + "/", reason="excluded folder"))
                else:
                    kept_dirs.append(d)
            dirnames[:] = kept_dirs
            for name in sorted(kept_dirs) + sorted(filenames):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                st = os.lstat(full)
                if stat.S_ISDIR(st.st_mode):
                    tar.add(full, arcname=arc(rel), recursive=False)
                elif stat.S_ISLNK(st.st_mode):
                    _add_link(tar, root, full, rel, arc(rel), left_out)
                elif stat.S_ISREG(st.st_mode):
                    if max_file_bytes is not None and st.st_size > max_file_bytes:
                        left_out.append(
                            LeftOutFile(
                                path=rel,
                                size=st.st_size,
                                reason=f"over the size limit of {plural(max_file_bytes, 'byte')}",
                            )
                        )
                    else:
                        tar.add(full, arcname=arc(rel), recursive=False)
                else:
                    left_out.append(LeftOutFile(path=rel, reason="special file"))
    return left_out


def _add_link(
    tar: tarfile.TarFile,
    root: Path,
    full: str,
    rel: str,
    arcname: str,
    left_out: list[LeftOutFile],
) -> None:
    link = os.readlink(full)
    reason = _link_target_inside(rel, link)
    if reason is None and not _inside(os.path.realpath(root), full):
        reason = "symlink resolves outside"
    if reason:
        left_out.append(LeftOutFile(path=rel, reason=reason))
    else:
        tar.add(full, arcname=arcname, recursive=False)
