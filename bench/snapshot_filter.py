"""What leaving out files over 10 MB adds to a snapshot, and what pruning keeps on disk.

A submission folder of ``--small-mb`` MB in 1 MB files (half text, half incompressible) and one
``--big-mb`` MB incompressible file is packed as the sandbox packs a snapshot
(``make_tar_gz``), then packed again on the host without the big file
(``without_large_files``, what each rollout snapshot now does). Then a 12-hour run with a
5-minute period (144 snapshots) is pruned with the defaults. Prints two tables; nothing is
asserted. Goal: the re-pack costs less than the snapshot itself once the big file is left out.

    .venv/bin/python bench/snapshot_filter.py [--small-mb 40] [--big-mb 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.agents._snapshots import (
    DEFAULT_KEEP_SNAPSHOTS,
    DEFAULT_SNAPSHOTS_MAX_BYTES,
    to_prune,
    without_large_files,
)
from paperbench.sandbox import make_tar_gz


def _folder(root: Path, small_mb: int, big_mb: int) -> None:
    root.mkdir()
    for i in range(small_mb):
        data = os.urandom(1 << 20) if i % 2 else (f"line {i}\n" * 150_000).encode()[: 1 << 20]
        (root / f"f{i:03d}.bin").write_bytes(data)
    with (root / "checkpoint.pt").open("wb") as f:
        for _ in range(big_mb):
            f.write(os.urandom(1 << 20))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small-mb", type=int, default=40)
    parser.add_argument("--big-mb", type=int, default=200)
    args = parser.parse_args()
    table = Table(title=f"snapshot: {args.small_mb} MB in 1 MB files + one {args.big_mb} MB file")
    for col in ("step", "seconds", "archive MB", "left out"):
        table.add_column(col, justify="right" if col != "step" else "left")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _folder(root / "submission", args.small_mb, args.big_mb)
        raw, kept = root / "raw.tar.gz", root / "kept.tar.gz"
        t0 = time.perf_counter()
        make_tar_gz(root / "submission", raw)
        t1 = time.perf_counter()
        left = without_large_files(raw, kept)
        t2 = time.perf_counter()
        mb = 1 << 20
        table.add_row(
            "pack (as the sandbox)", f"{t1 - t0:.2f}", f"{raw.stat().st_size / mb:.0f}", ""
        )
        table.add_row(
            "re-pack without > 10 MB",
            f"{t2 - t1:.2f}",
            f"{kept.stat().st_size / mb:.0f}",
            ", ".join(f"{f.path} ({f.size // mb} MB)" for f in left),
        )
    prune = Table(title="a 12-hour run, a snapshot every 5 minutes (144), default pruning")
    for col in ("snapshot size MB", "kept", "kept MB", "deleted"):
        prune.add_column(col, justify="right")
    for size_mb in (5, 150, 400):
        sizes = [(Path(f"{i:04d}.tar.gz"), size_mb * mb) for i in range(144)]
        doomed = set(to_prune(sizes, DEFAULT_KEEP_SNAPSHOTS, DEFAULT_SNAPSHOTS_MAX_BYTES))
        left_n = len(sizes) - len(doomed)
        prune.add_row(str(size_mb), str(left_n), str(left_n * size_mb), str(len(doomed)))
    console = Console()
    console.print(table)
    console.print(prune)


if __name__ == "__main__":
    main()
