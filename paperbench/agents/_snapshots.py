"""What a rollout keeps of /home/submission: files over :data:`MAX_FILE_BYTES` are left out of
every snapshot (as the instructions say), and old snapshots are pruned so that a long run
does not fill the disk.

Leaving out is done on the host while the archive the sandbox gave is packed again, so it is
the same on every backend. Pruning keeps the newest ``keep`` snapshots, then deletes the
oldest while the total is over ``max_total_bytes``; the newest (the one a resume restores) is
never deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from paperbench._io import atomic_open

if TYPE_CHECKING:
    from paperbench.sandbox import LeftOutFile

DEFAULT_SNAPSHOT_EVERY_S = 600.0
"""Seconds between snapshots of a rollout's /home/submission."""
MAX_FILE_BYTES = 10 * 1024 * 1024
"""Files larger than this (10 MB) are not kept in snapshots nor in submission.tar.gz."""
DEFAULT_KEEP_SNAPSHOTS = 10
DEFAULT_SNAPSHOTS_MAX_BYTES = 2 * 1024**3
"""2 GB of snapshots per run at most (the newest is kept whatever its size)."""


def without_large_files(
    src: Path, dest: Path, max_file_bytes: int = MAX_FILE_BYTES
) -> list[LeftOutFile]:
    """Copy the tar.gz ``src`` into ``dest`` (atomically) without its regular files over
    ``max_file_bytes``, by the host's rule for untrusted trees (links checked against the
    whole tree, special files left out); return what was left out. ``src`` is left in place."""
    from paperbench.sandbox import TreeLimits, repack

    with open(src, "rb") as inp, atomic_open(dest) as out:
        return repack(inp, out, limits=TreeLimits(max_file_bytes=max_file_bytes))


def to_prune(sizes: list[tuple[Path, int]], keep: int, max_total_bytes: int | None) -> list[Path]:
    """Which of the snapshots ``sizes`` (oldest first, with their bytes) to delete: all but the
    newest ``keep``, then the oldest while the rest total more than ``max_total_bytes``.
    The newest is never among them."""
    kept = list(sizes)
    doomed: list[Path] = []
    while len(kept) > max(keep, 1):
        doomed.append(kept.pop(0)[0])
    if max_total_bytes is not None:
        while len(kept) > 1 and sum(size for _, size in kept) > max_total_bytes:
            doomed.append(kept.pop(0)[0])
    return doomed
