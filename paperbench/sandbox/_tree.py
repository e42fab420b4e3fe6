"""The host's side of the sandbox boundary: every tree, archive or file that comes out of a
sandbox reaches the host through this module, under one rule.

Untrusted trees are submissions, executed submissions, snapshots of a live workspace, logs,
agent outputs and answers. Whatever their source (a folder on the host, a tar stream), they
are read and written here so that host code:

- **never follows a link it did not make**: folders are opened one component at a time
  relative to their parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY``, files with
  ``O_NOFOLLOW``, and an entry in the way of a write is removed first, then created with
  ``O_EXCL``; a folder swapped for a link while it is walked is refused by the kernel;
- **makes links last**: a symbolic link is recreated only after the whole tree exists, and only
  if its target, read component by component from the link's folder, stays inside the tree
  and runs through real folders to a real file or folder (never through another link, so
  chains of links cannot redirect anything); every other link is dropped with a note;
- **refuses special files** (FIFOs, sockets, devices) with a note instead of failing;
- **walks iteratively**: an explicit stack, so no depth reaches Python's recursion limit;
- **caps** the bytes, the entries and the depth (:class:`TreeLimits`, numbers in the README);
  what is over a cap is left out with a note, never read into memory or written to disk;
- **strips** setuid, setgid and sticky bits, and group and other write.

Notes are the :class:`SkippedMember` list of an :class:`ExtractReport` (at most
:data:`MAX_NOTES`, then a count) or the :class:`LeftOutFile` list of an archive written here;
the stages record both in their run files.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench._console import plural
from paperbench.errors import InputError, UnsafeArchiveError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
MAX_NOTES = 1000
"""Notes kept per tree; the rest are counted (``ExtractReport.skipped_more``)."""

_CHUNK = 1 << 20
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_O_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE_MASK = 0o755
"""Kept of a file's mode: no setuid/setgid/sticky, no group or other write."""


class TreeLimits(BaseModel):
    """Caps on one untrusted tree. What is over a cap is left out, with a note."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int | None = Field(default=16 * 1024**3, ge=0)
    """File bytes written in all (16 GiB)."""
    max_entries: int | None = Field(default=500_000, ge=1)
    """Files, folders and links in all."""
    max_depth: int = Field(default=128, ge=1)
    """Folders deep (``a/b/c`` is depth 3)."""
    max_file_bytes: int | None = Field(default=None, ge=0)
    """Per file: larger files are left out, or cut to their head with ``keep_head``."""
    keep_head: bool = False
    """Keep the first ``max_file_bytes`` of a larger file instead of leaving it out."""


DEFAULT_LIMITS = TreeLimits()


class SkippedMember(BaseModel):
    """One entry that was not written as it was, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    reason: str


class ExtractReport(BaseModel):
    """What :func:`safe_extract` (or a download) wrote."""

    model_config = ConfigDict(extra="forbid")

    dest: Path
    source_kind: Literal["archive", "folder"]
    files: int = 0
    bytes: int = 0
    stripped_prefix: str | None = None
    """The single top folder that was removed from every path, if there was one."""
    skipped: list[SkippedMember] = Field(default_factory=list)
    skipped_more: int = 0
    """Notes beyond the first :data:`MAX_NOTES`, counted."""


class LeftOutFile(BaseModel):
    """An entry an archive written here does not hold, and why."""

    model_config = ConfigDict(extra="forbid")

    path: str
    size: int | None = None
    reason: str


def is_archive_path(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(s) for s in ARCHIVE_SUFFIXES)


# --------------------------------------------------------------------------- names and links


def _normalise(name: str) -> tuple[str | None, str | None]:
    """``(relative posix path, None)`` or ``(None, reason)`` for an entry's name."""
    if "\x00" in name:
        return None, "NUL byte in name"
    raw = name.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        return None, "absolute path"
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None, "path with '..'"
    return "/".join(parts), None


def link_problem(rel: str, target: str, kinds: dict[str, str]) -> str | None:
    """Why the link at ``rel`` to ``target`` may not be made, or None.

    ``kinds`` maps every path of the tree that is not a link to ``"dir"`` or ``"file"``. The
    target is followed as the kernel would, one component at a time from the link's folder:
    it must stay inside the tree, pass only through folders, and end at a file or folder.
    """
    if not target:
        return "empty link target"
    if "\x00" in target:
        return "NUL byte in link target"
    if target.startswith("/"):
        return f"link to an absolute path ({target!r})"
    parts = rel.split("/")[:-1]
    comps = [c for c in target.split("/") if c not in ("", ".")]
    for i, comp in enumerate(comps):
        if comp == "..":
            if not parts:
                return f"link pointing outside the tree ({target!r})"
            parts.pop()
            continue
        parts.append(comp)
        kind = kinds.get("/".join(parts))
        if kind is None:
            return f"link to nothing in the tree, or through another link ({target!r})"
        if kind != "dir" and i + 1 < len(comps):
            return f"link through a file ({target!r})"
    return None


# --------------------------------------------------------------------------- entries


Kind = Literal["dir", "file", "symlink", "hardlink", "special"]


@dataclass
class Entry:
    """One entry of a tree being read. ``open`` is valid only until the next entry."""

    rel: str
    kind: Kind
    mode: int = 0o644
    mtime: float = 0.0
    size: int = 0
    target: str = ""
    """A symlink's text, or a hard link's path in the tree."""
    special: str = ""
    """What a special entry is (``FIFO``, ``socket``, ``device file``)."""
    open: Callable[[], IO[bytes]] | None = None


class _NotRegular(OSError):
    pass


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file"
    return "special file"


def _open_regular(name: str, dir_fd: int) -> IO[bytes]:
    fd = os.open(name, _O_READ, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular(f"{name}: no longer a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def folder_entries(
    root: Path | int,
    *,
    exclude_dirs: frozenset[str] = frozenset(),
    on_excluded: Callable[[str], None] | None = None,
    max_depth: int | None = DEFAULT_LIMITS.max_depth + 1,
) -> Iterator[Entry]:
    """Every entry under ``root`` (a path, or an open folder descriptor the caller keeps), in
    sorted order, parents before children, without following any link. Safe on a tree that
    untrusted code is still changing: a folder that becomes a link is not entered. Folders at
    ``max_depth`` are listed but not entered (one descriptor is held per level; the default
    is one level past :class:`TreeLimits`' depth, so that the cut can be noted).

    Raises:
        OSError: ``root`` cannot be opened as a folder.
    """
    top = os.open(root, _O_DIR) if not isinstance(root, int) else os.dup(root)
    stack: list[tuple[int, str, Iterator[str]]] = [(top, "", iter(_listing(top)))]
    try:
        while stack:
            fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(fd)
                stack.pop()
                continue
            child = f"{rel}/{name}" if rel else name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                if name in exclude_dirs:
                    if on_excluded is not None:
                        on_excluded(child)
                    continue
                yield Entry(child, "dir", mode=mode, mtime=st.st_mtime)
                if max_depth is not None and child.count("/") + 1 >= max_depth:
                    continue  # what is deeper is over the cap: not entered
                try:
                    sub = os.open(name, _O_DIR, dir_fd=fd)
                except OSError:
                    continue  # swapped for a link or removed: not entered
                stack.append((sub, child, iter(_listing(sub))))
            elif stat.S_ISREG(mode):
                yield Entry(
                    child,
                    "file",
                    mode=mode,
                    mtime=st.st_mtime,
                    size=st.st_size,
                    open=lambda n=name, d=fd: _open_regular(n, d),  # type: ignore[misc]
                )
            elif stat.S_ISLNK(mode):
                try:
                    target = os.readlink(name, dir_fd=fd)
                except OSError:
                    continue
                yield Entry(child, "symlink", mode=mode, mtime=st.st_mtime, target=target)
            else:
                yield Entry(child, "special", special=_special_kind(mode))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _listing(fd: int) -> list[str]:
    try:
        return sorted(os.listdir(fd))
    except OSError:
        return []


def tar_entries(tar: tarfile.TarFile, *, drop_top: bool = False) -> Iterator[Entry]:
    """The members of ``tar`` (read in order, so a stream works) as entries; names that are
    unsafe come as ``special`` entries with the reason. ``drop_top`` removes the first path
    component (Docker's archives put the folder's own name first)."""

    def name_of(raw: str) -> tuple[str | None, str | None]:
        rel, reason = _normalise(raw)
        if rel is not None and drop_top:
            rel = rel.split("/", 1)[1] if "/" in rel else ""
        return rel, reason

    while True:
        try:
            member = tar.next()
        except (tarfile.TarError, EOFError, OSError, ValueError, KeyError) as exc:
            yield Entry("", "special", special=_read_error(exc))
            return
        if member is None:
            return
        rel, reason = name_of(member.name)
        if rel is None:
            yield Entry(member.name, "special", special=reason or "unsafe name")
            continue
        if not rel:
            continue  # the top folder itself
        mtime = float(member.mtime)
        if member.isdir():
            yield Entry(rel, "dir", mode=member.mode, mtime=mtime)
        elif member.isfile():
            yield Entry(
                rel,
                "file",
                mode=member.mode,
                mtime=mtime,
                size=member.size,
                open=lambda m=member: _member_data(tar, m),  # type: ignore[misc]
            )
        elif member.issym():
            yield Entry(rel, "symlink", mtime=mtime, target=member.linkname.replace("\\", "/"))
        elif member.islnk():
            link_rel, why = name_of(member.linkname)
            if link_rel is None:
                yield Entry(rel, "special", special=f"hard link to an unsafe path ({why})")
            else:
                yield Entry(rel, "hardlink", mode=member.mode, mtime=mtime, target=link_rel)
        elif member.ischr() or member.isblk():
            yield Entry(rel, "special", special="device file")
        elif member.isfifo():
            yield Entry(rel, "special", special="FIFO")
        else:
            yield Entry(rel, "special", special=f"unsupported member type {member.type!r}")


def _member_data(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    data = tar.extractfile(member)
    if data is None:
        raise _NotRegular(f"{member.name}: no data")
    return data


def _read_error(exc: BaseException) -> str:
    if isinstance(exc, tarfile.ReadError):
        return "cannot read archive: not a .tar, .tar.gz or .tgz file (or truncated)"
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"cannot read archive: {first}"


# --------------------------------------------------------------------------- the gate


@dataclass
class _Gate:
    """Applies the caps and keeps the notes for one tree."""

    limits: TreeLimits
    note: Callable[..., None]
    """``note(name, reason, size=None)``: record an entry left out."""
    entries: int = 0
    bytes: int = 0
    full: str | None = None
    kinds: dict[str, str] = field(default_factory=dict)
    links: list[tuple[str, str, float]] = field(default_factory=list)
    depth_noted: bool = False

    def admit(self, entry: Entry) -> bool:
        if self.full is not None:
            return False
        if entry.kind == "special":
            self.note(entry.rel or "<archive>", entry.special)
            return False
        depth = entry.rel.count("/") + 1
        if depth > self.limits.max_depth:
            if not self.depth_noted:
                self.depth_noted = True
                self.note(
                    entry.rel,
                    f"deeper than {self.limits.max_depth} folders: this and everything as deep "
                    "left out",
                )
            return False
        cap = self.limits.max_entries
        if cap is not None and self.entries >= cap:
            self.full = f"over the cap of {plural(cap, 'entry', 'entries')}: the rest left out"
            self.note(entry.rel, self.full)
            return False
        self.entries += 1
        return True

    def file_budget(self, entry: Entry) -> int | None:
        """Bytes to write of a file, or None when it is left out (noted)."""
        size = entry.size
        per_file = self.limits.max_file_bytes
        if per_file is not None and size > per_file:
            if not self.limits.keep_head:
                self.note(entry.rel, f"over the size limit of {plural(per_file, 'byte')}", size)
                return None
            self.note(entry.rel, f"{plural(size, 'byte')}: only the first {per_file} kept")
            size = per_file
        total = self.limits.max_bytes
        if total is not None and self.bytes + size > total:
            self.full = f"over the cap of {plural(total, 'byte')} in all: the rest left out"
            self.note(entry.rel, self.full)
            return None
        return size


def _copy_capped(src: IO[bytes], out: IO[bytes] | int, budget: int) -> int:
    """Copy at most ``budget`` bytes; return how many."""
    done = 0
    while done < budget:
        chunk = src.read(min(_CHUNK, budget - done))
        if not chunk:
            break
        if isinstance(out, int):
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
        else:
            out.write(chunk)
        done += len(chunk)
    return done


# --------------------------------------------------------------------------- writing folders


class _Folder:
    """Writes entries under a folder the host owns, never through a link inside it."""

    def __init__(self, root: Path, owner: tuple[int, int] | None = None, sub: str = "") -> None:
        self.root = root
        self.owner = owner
        self._cache: tuple[str, int] | None = None
        self.fd = os.open(root, _O_DIR)
        if sub:  # a folder below the trusted root, reached without following links
            try:
                fd = self.dir_fd(sub)
                self._cache = None
                os.close(self.fd)
                self.fd = fd
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        self._drop_cache()
        os.close(self.fd)

    def _drop_cache(self) -> None:
        if self._cache is not None:
            os.close(self._cache[1])
            self._cache = None

    def dir_fd(self, rel: str, *, create: bool = True) -> int:
        """A descriptor of folder ``rel`` (``""``: the root), made when missing; a link or
        file in the way is removed when ``create``. Owned by the caller's cache: do not close."""
        if not rel:
            return self.fd
        if self._cache is not None and self._cache[0] == rel:
            return self._cache[1]
        fd = os.dup(self.fd)
        try:
            for name in rel.split("/"):
                nxt = _open_or_make_dir(fd, name, self.owner, create)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        self._drop_cache()
        self._cache = (rel, fd)
        return fd

    def _clear(self, dfd: int, name: str) -> bool:
        """Remove a non-folder at ``name``; False when a folder is there."""
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if stat.S_ISDIR(st.st_mode):
            return False
        os.unlink(name, dir_fd=dfd)
        return True

    def mkdir(self, rel: str) -> None:
        self.dir_fd(rel)

    def write(self, rel: str, src: IO[bytes], budget: int, mode: int, mtime: float | None) -> int:
        """Write a file from ``src`` (at most ``budget`` bytes); return the bytes written.

        Raises:
            IsADirectoryError: a folder is at ``rel``.
        """
        parent, name = _split(rel)
        dfd = self.dir_fd(parent)
        if not self._clear(dfd, name):
            raise IsADirectoryError(rel)
        fd = os.open(name, _O_CREATE, 0o600, dir_fd=dfd)
        try:
            size = _copy_capped(src, fd, budget)
            os.fchmod(fd, (mode & _MODE_MASK) | 0o600)
            if self.owner is not None:
                os.fchown(fd, *self.owner)
            if mtime is not None:
                os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)
        return size

    def symlink(self, rel: str, target: str) -> bool:
        parent, name = _split(rel)
        dfd = self.dir_fd(parent)
        if not self._clear(dfd, name):
            return False
        os.symlink(target, name, dir_fd=dfd)
        if self.owner is not None:
            os.chown(name, *self.owner, dir_fd=dfd, follow_symlinks=False)
        return True

    def open_file(self, rel: str) -> IO[bytes]:
        parent, name = _split(rel)
        return _open_regular(name, self.dir_fd(parent, create=False))


def _split(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return parent, name


def _open_or_make_dir(fd: int, name: str, owner: tuple[int, int] | None, create: bool) -> int:
    try:
        return os.open(name, _O_DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    except (NotADirectoryError, OSError) as exc:
        if not create or isinstance(exc, PermissionError):
            raise
        os.unlink(name, dir_fd=fd)  # a link or a file where a folder goes
    os.mkdir(name, 0o755, dir_fd=fd)
    if owner is not None:
        os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)
    return os.open(name, _O_DIR, dir_fd=fd)


def _fill_folder(
    entries: Iterator[Entry], out: _Folder, gate: _Gate, report: ExtractReport
) -> None:
    """Write ``entries`` into ``out``; links are collected for :func:`_make_links`."""
    for entry in entries:
        if not gate.admit(entry):
            continue
        if entry.kind == "dir":
            parent = entry.rel.rpartition("/")[0]
            if gate.kinds.get(entry.rel) == "file" or gate.kinds.get(parent, "dir") != "dir":
                gate.note(entry.rel, "a file already exists at this path")
                continue
            out.mkdir(entry.rel)
            _record_dirs(gate.kinds, entry.rel)
        elif entry.kind == "symlink":
            gate.links.append((entry.rel, entry.target, entry.mtime))
        elif entry.kind in ("file", "hardlink"):
            _write_one(entry, out, gate, report)


def _record_dirs(kinds: dict[str, str], rel: str) -> None:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        kinds["/".join(parts[:i])] = "dir"


def _write_one(entry: Entry, out: _Folder, gate: _Gate, report: ExtractReport) -> None:
    if entry.kind == "hardlink":
        if gate.kinds.get(entry.target) != "file":
            gate.note(entry.rel, f"hard link to {entry.target!r}, not a file of the tree")
            return
        opener: Callable[[], IO[bytes]] = lambda: out.open_file(entry.target)  # noqa: E731
        with opener() as probe:
            entry.size = os.fstat(probe.fileno()).st_size
    elif entry.open is not None:
        opener = entry.open
    else:
        return
    budget = gate.file_budget(entry)
    if budget is None:
        return
    parent = entry.rel.rpartition("/")[0]
    if parent and gate.kinds.get(parent, "dir") != "dir":
        gate.note(entry.rel, "inside a file")
        return
    try:
        src = opener()
    except OSError as exc:  # gone, swapped for a link or a special file meanwhile
        gate.note(entry.rel, f"changed while read ({exc.strerror or exc})")
        return
    try:
        with src:
            written = out.write(entry.rel, src, budget, entry.mode, entry.mtime or None)
    except IsADirectoryError:
        gate.note(entry.rel, "a folder already exists at this path")
        return
    if parent:
        _record_dirs(gate.kinds, parent)
    gate.kinds[entry.rel] = "file"
    gate.bytes += written
    report.files += 1
    report.bytes += written


def _make_links(out: _Folder, gate: _Gate, prefix: str | None) -> None:
    """Make the collected links that the tree (as it is now, links aside) allows."""
    for rel, target, _ in gate.links:
        if prefix is not None:
            if not rel.startswith(prefix + "/"):
                gate.note(rel, "link outside the stripped top folder")
                continue
            rel = rel[len(prefix) + 1 :]
        if rel in gate.kinds:
            gate.note(rel, f"a {gate.kinds[rel]} already exists at this path")
            continue
        parent = rel.rpartition("/")[0]
        if parent and gate.kinds.get(parent) != "dir":
            gate.note(rel, "inside a link, or a folder that is not in the tree")
            continue
        problem = link_problem(rel, target, gate.kinds)
        if problem is not None:
            gate.note(rel, problem)
            continue
        if out.symlink(rel, target):
            gate.kinds.setdefault(rel, "link")


def _strip_top(out: _Folder, gate: _Gate) -> str | None:
    """Move the contents of a single top folder up; return its name, or None."""
    tops = {rel.split("/", 1)[0] for rel in gate.kinds} | {
        rel.split("/", 1)[0] for rel, _, _ in gate.links
    }
    if len(tops) != 1:
        return None
    top = next(iter(tops))
    if gate.kinds.get(top) != "dir" or not any(r.startswith(top + "/") for r in gate.kinds):
        return None
    hold = f".paperbench-strip-{os.getpid()}"
    os.rename(top, hold, src_dir_fd=out.fd, dst_dir_fd=out.fd)
    hold_fd = os.open(hold, _O_DIR, dir_fd=out.fd)
    try:
        for name in os.listdir(hold_fd):
            os.rename(name, name, src_dir_fd=hold_fd, dst_dir_fd=out.fd)
    finally:
        os.close(hold_fd)
    os.rmdir(hold, dir_fd=out.fd)
    out._drop_cache()
    n = len(top) + 1
    gate.kinds = {rel[n:]: kind for rel, kind in gate.kinds.items() if rel.startswith(top + "/")}
    return top


def _notes(report: ExtractReport, strict: bool, label: str) -> Callable[..., None]:
    def note(name: str, reason: str, size: int | None = None) -> None:
        if strict:
            raise UnsafeArchiveError(
                f"unsafe member {name!r}: {reason}; remove it from the archive", file=label
            )
        if len(report.skipped) < MAX_NOTES:
            report.skipped.append(SkippedMember(name=name, reason=reason))
        else:
            report.skipped_more += 1

    return note


def ingest(
    entries: Iterator[Entry],
    dest: Path,
    report: ExtractReport,
    *,
    limits: TreeLimits = DEFAULT_LIMITS,
    strip_top: bool = False,
    strict: bool = False,
    owner: tuple[int, int] | None = None,
    sub: str = "",
    label: str = "",
) -> ExtractReport:
    """Write ``entries`` under the host folder ``dest`` (or its folder ``sub``, reached and made
    without following links) by the module's rule; links last."""
    if not sub:
        dest.mkdir(parents=True, exist_ok=True)
    gate = _Gate(limits, _notes(report, strict, label or str(dest)))
    out = _Folder(dest, owner, sub)
    try:
        _fill_folder(entries, out, gate, report)
        prefix = _strip_top(out, gate) if strip_top else None
        report.stripped_prefix = prefix
        _make_links(out, gate, prefix)
    finally:
        out.close()
    return report


# --------------------------------------------------------------------------- public: extraction


def safe_extract(
    src: str | Path | IO[bytes],
    dest: str | Path,
    *,
    strip_top: bool = True,
    strict: bool = False,
    limits: TreeLimits = DEFAULT_LIMITS,
) -> ExtractReport:
    """Extract a .tar/.tar.gz/.tgz archive (a path or a file object, streams too), or copy a
    folder (a tree untrusted code may still be changing), into ``dest`` by the module's rule.

    What is left out is listed in the report (``strict=True`` raises at the first instead).
    With ``strip_top``, a single top folder holding everything is removed from every path.

    Raises:
        InputError: ``src`` does not exist or is not a readable archive.
        UnsafeArchiveError: under ``strict``, the first entry left out.
    """
    dest_path = Path(dest)
    label = str(src) if isinstance(src, str | Path) else str(getattr(src, "name", "<archive>"))
    with _entries_of(src, limits, label) as (kind, entries):
        report = ExtractReport(dest=dest_path, source_kind=kind)
        return ingest(
            entries,
            dest_path,
            report,
            limits=limits,
            strip_top=strip_top,
            strict=strict,
            label=label,
        )


@contextlib.contextmanager
def _entries_of(
    src: str | Path | IO[bytes], limits: TreeLimits, label: str
) -> Iterator[tuple[Literal["archive", "folder"], Iterator[Entry]]]:
    """The entries of a folder or an archive (see :func:`safe_extract`)."""
    if isinstance(src, str | Path):
        source = Path(src)
        if not (source.exists() or source.is_symlink()):
            raise InputError("not found: give a folder or a .tar/.tar.gz/.tgz file", file=source)
        if source.is_dir() and not source.is_symlink():
            yield "folder", folder_entries(source, max_depth=limits.max_depth + 1)
            return
    with _open_tar(src, label) as tar:
        yield "archive", tar_entries(tar)


@contextlib.contextmanager
def _open_tar(src: str | Path | IO[bytes], label: str) -> Iterator[tarfile.TarFile]:
    try:
        if isinstance(src, str | Path):
            tar = tarfile.open(src, mode="r:*")  # noqa: SIM115 - closed below
        elif hasattr(src, "seekable") and src.seekable():
            tar = tarfile.open(fileobj=src, mode="r:*")  # noqa: SIM115 - closed below
        else:
            tar = tarfile.open(fileobj=src, mode="r|*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise InputError(_read_error(exc), file=label) from None
    with tar:
        yield tar
