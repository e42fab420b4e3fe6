"""What crashed local sandboxes leave behind, and how ``paperbench sandbox gc`` removes it.

Every local workspace (``<root>/paperbench-sbx-*``, root defaulting to the temp folder) holds an
owner file, ``.paperbench-owner.json``: the process that created it (``<host>:<pid>:<start
ticks>``, the format of the Docker labels) and the sandbox's cgroup folders
(``.../paperbench-<suffix>``). ``stop()`` removes both; a process that crashed leaves them.

A workspace is an orphan when its owner file names a process on this host that no longer runs.
It is removed with its cgroups, except when something still uses it: a cgroup with processes
in it, or a process whose working folder is inside the workspace (plain mode without cgroups).
Those are reported, not touched. Folders without an owner file, owners on another host and
cgroups not named in an owner file are never touched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from paperbench.sandbox._disk import unmount_under
from paperbench.sandbox._docker_labels import owner_alive, owner_id
from paperbench.sandbox._gc import Orphan
from paperbench.sandbox._tree_files import remove_tree as _remove_tree

WORKSPACE_PREFIX = "paperbench-sbx-"
OWNER_FILE = ".paperbench-owner.json"
CGROUP_PREFIX = "paperbench-"
_CGROUP_ROOT = Path("/sys/fs/cgroup")


class LocalOwner(BaseModel):
    """The owner file of one local workspace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    """``<host>:<pid>:<start ticks>`` of the process that created the sandbox."""
    created: str
    cgroups: list[str] = []
    """The sandbox's cgroup folders (one per v1 controller, or one v2 folder)."""


def write_owner(workspace: Path, cgroups: Iterable[Path] = ()) -> None:
    """Write (or rewrite) the owner file of ``workspace``."""
    record = LocalOwner(
        owner=owner_id(),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        cgroups=[str(p) for p in cgroups],
    )
    tmp = workspace / f"{OWNER_FILE}.tmp"
    tmp.write_text(record.model_dump_json())
    tmp.replace(workspace / OWNER_FILE)


def read_owner(workspace: Path) -> LocalOwner | None:
    try:
        return LocalOwner.model_validate_json((workspace / OWNER_FILE).read_bytes())
    except (OSError, ValidationError):
        return None


def reap_local_orphans(root: Path | None = None, dry_run: bool = False) -> list[Orphan]:
    """Find (and unless ``dry_run``, remove) the local workspaces under ``root`` (default: the
    temp folder, where ``LocalBackend`` creates them) whose owner process is gone, with their
    empty cgroups. Items still in use are returned with ``error`` set and left alone."""
    root = root or Path(tempfile.gettempdir())
    try:
        candidates = sorted(root.glob(f"{WORKSPACE_PREFIX}*"))
    except OSError:
        return []
    found: list[Orphan] = []
    for workspace in candidates:
        if workspace.is_symlink() or not workspace.is_dir():
            continue
        record = read_owner(workspace)
        if record is None or owner_alive(record.owner) is not False:
            continue
        found += _reap_one(workspace, record, dry_run)
    return found


def _reap_one(workspace: Path, record: LocalOwner, dry_run: bool) -> list[Orphan]:
    def item(kind: Literal["workspace", "cgroup"], path: Path) -> Orphan:
        return Orphan(
            kind=kind,
            id=str(path),
            name=path.name,
            owner=record.owner,
            created=record.created,
            reason="owner process gone",
        )

    cgroups = [Path(p) for p in record.cgroups if _is_our_cgroup(Path(p))]
    items = [item("cgroup", d) for d in cgroups]
    busy = [d for d in cgroups if _cgroup_pids(d)]
    users = _processes_inside(workspace)
    ws = item("workspace", workspace)
    if busy or users:
        why = (
            f"cgroup {busy[0]} still has processes"
            if busy
            else f"process {users[0]} still works inside it"
        )
        return [x.model_copy(update={"error": f"in use: {why}"}) for x in [*items, ws]]
    if dry_run:
        return [*items, ws]
    out = []
    for x, d in zip(items, cgroups, strict=True):
        try:
            d.rmdir()
            out.append(x.model_copy(update={"removed": True}))
        except FileNotFoundError:
            out.append(x.model_copy(update={"removed": True}))
        except OSError as exc:
            out.append(x.model_copy(update={"error": f"cannot remove: {exc.strerror}"}))
    with contextlib.suppress(OSError):
        remove_tree(workspace)
    if workspace.exists():
        out.append(ws.model_copy(update={"error": "cannot remove it completely"}))
    else:
        out.append(ws.model_copy(update={"removed": True}))
    return out


def _is_our_cgroup(path: Path) -> bool:
    """Only folders under the cgroup mount whose name carries our prefix, never a root."""
    try:
        path.relative_to(_CGROUP_ROOT)
    except ValueError:
        return False
    return path.name.startswith(CGROUP_PREFIX) and path.is_dir() and not path.is_symlink()


def _cgroup_pids(path: Path) -> list[int]:
    with contextlib.suppress(OSError, ValueError):
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    return []


def _processes_inside(workspace: Path) -> list[int]:
    """Processes whose working folder or root is inside ``workspace``."""
    inside = str(workspace.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        for link in ("cwd", "root"):
            with contextlib.suppress(OSError):
                target = os.readlink(entry / link)
                if target == inside or target.startswith(inside + os.sep):
                    pids.append(int(entry.name))
                    break
    return pids


def remove_tree(path: Path) -> None:
    """``rm -rf path`` after unmounting the sandbox's capped disk (anything mounted under
    ``path``): no link followed, no recursion, folders the sandbox made unreadable opened up
    (:func:`paperbench.sandbox._tree.remove_tree`)."""
    unmount_under(path)
    with contextlib.suppress(FileNotFoundError):
        _remove_tree(path)
