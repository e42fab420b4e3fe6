"""Overhead of the reproduction stage on a trivial reproduce.sh, local vs docker, same run.

    .venv/bin/python bench/reproduce.py [--repeats 5]

Prints, per backend and with or without the default disk cap (a loop-mounted sparse ext4
image; the Docker root filesystem is then read-only), the median time of the
``bash reproduce.sh`` exec (including the sandbox's own exec start-up: bubblewrap or docker
exec) and of the whole stage
(extract, sandbox start, upload, run, download, manifest, executed.tar.gz, metadata.json);
the first (cold) run is shown apart. Docker is measured only when an engine answers.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.reproduce import ReproduceConfig, reproduce_submission
from paperbench.sandbox import SandboxConfig, docker_engine_answers


async def measure(
    backend: str, sub: Path, out: Path, repeats: int, *, capped: bool
) -> list[tuple[float, float]]:
    cfg = ReproduceConfig(sandbox=SandboxConfig(backend=backend))  # type: ignore[arg-type]
    if not capped:
        cfg = cfg.model_copy(update={"limits": cfg.limits.model_copy(update={"disk_mb": None})})
    rows = []
    for _ in range(repeats + 1):
        t0 = time.monotonic()
        meta = await reproduce_submission(sub, out, cfg)
        assert meta.status == "success", meta.error
        rows.append((meta.wall_time_s, time.monotonic() - t0))
    return rows


async def main(repeats: int) -> None:
    backends = ["local"] + (["docker"] if await docker_engine_answers() else [])
    table = Table(title=f"reproduction stage on `echo hello > out.txt` (median of {repeats})")
    for col in [
        "backend",
        "disk",
        "reproduce.sh ms",
        "stage ms",
        "overhead ms",
        "cold stage ms",
    ]:
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        (sub / "reproduce.sh").write_text("echo hello > out.txt\n")
        for backend in backends:
            for capped in (True, False):
                out = Path(tmp) / f"out-{backend}-{capped}"
                rows = await measure(backend, sub, out, repeats, capped=capped)
                cold, warm = rows[0], rows[1:]
                run = statistics.median(r[0] for r in warm) * 1000
                stage = statistics.median(r[1] for r in warm) * 1000
                table.add_row(
                    backend,
                    "capped" if capped else "uncapped",
                    f"{run:.0f}",
                    f"{stage:.0f}",
                    f"{stage - run:.0f}",
                    f"{cold[1] * 1000:.0f}",
                )
    Console().print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    asyncio.run(main(parser.parse_args().repeats))
