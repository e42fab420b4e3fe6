"""The submission's files before and after a run: manifests, their comparison, and the folders
a reproduction removes first."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from paperbench.reproduce._models import ChangedFiles
from paperbench.sandbox import folder_entries

_HASH_CHUNK = 1 << 20


class FileState(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int
    mtime: float
    digest: str | None
    """sha256 of the content (or of a link's target); None above the hash limit."""


def manifest(root: Path, hash_limit_bytes: int) -> dict[str, FileState]:
    """path → (size, mtime, sha256) of every file and link under ``root``, walked without
    following links and without recursion (:func:`paperbench.sandbox.folder_entries`)."""
    out: dict[str, FileState] = {}
    for entry in folder_entries(root):
        digest: str | None = None
        if entry.kind == "symlink":
            digest = "link:" + hashlib.sha256(entry.target.encode()).hexdigest()
        elif entry.kind == "file" and entry.size <= hash_limit_bytes and entry.open is not None:
            h = hashlib.sha256()
            with entry.open() as handle:
                while chunk := handle.read(_HASH_CHUNK):
                    h.update(chunk)
            digest = h.hexdigest()
        elif entry.kind != "file":
            continue
        out[entry.rel] = FileState(size=entry.size, mtime=entry.mtime, digest=digest)
    return out


def compare(before: dict[str, FileState], after: dict[str, FileState]) -> ChangedFiles:
    def changed(a: FileState, b: FileState) -> bool:
        if a.digest is not None and b.digest is not None:
            return a.digest != b.digest
        return (a.size, int(a.mtime)) != (b.size, int(b.mtime))

    return ChangedFiles(
        created=sorted(set(after) - set(before)),
        modified=sorted(p for p in set(before) & set(after) if changed(before[p], after[p])),
        deleted=sorted(set(before) - set(after)),
    )


def remove_dirs(root: Path, names: tuple[str, ...]) -> list[str]:
    """Remove every folder called one of ``names`` under ``root``; return their paths."""
    removed: list[str] = []
    for dirpath, dirnames, _ in os.walk(root, followlinks=False):
        for d in list(dirnames):
            if d in names:
                full = Path(dirpath) / d
                removed.append(full.relative_to(root).as_posix())
                if full.is_symlink():
                    full.unlink()
                else:
                    shutil.rmtree(full)
                dirnames.remove(d)
    return sorted(removed)


def default_out_dir(submission: Path) -> Path:
    """``<name>.reproduction`` beside the submission; an archive keeps its suffix
    (``sub.tar.gz.reproduction``), so a folder and its tarball never share an output folder."""
    name = submission.name.rstrip("/") or "submission"
    return submission.parent / f"{name}.reproduction"
