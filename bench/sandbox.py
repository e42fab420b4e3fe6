"""Sandbox speed: paperbench's Docker backend vs the docker CLI, and its local backend vs a
plain subprocess, measured in the same run.

    .venv/bin/python bench/sandbox.py [--quick] [--local-only] [--disk-only] [--step-only]
        [--docker-only]

Rows: container start → first exec (ours as root and with commands run as the unprivileged
user, and the CLI's ``docker run -d`` + ``docker exec``, interleaved round by round after one
warm-up round); exec round trip (``true``; one ``docker exec`` per command); snapshot of a
500 MB folder (ours: ``Sandbox.snapshot`` → tar.gz; CLI: ``docker cp ... - | gzip -1``).
Medians. The CLI is used only as the comparison. Needs a Docker engine and the images (built
if missing). One more row: start → first exec with ``network=full`` (a bridge network of its
own, closed to the host by firewall rules) against the CLI on Docker's default bridge.

Second table, the local backend (bubblewrap): start → first exec and the exec round trip with
network ``none`` and ``full``, against a plain ``subprocess`` running the same command (no
sandbox: the floor). Run it at two commits to see what a change to the isolation costs: with
``PYTHONPATH`` set, the code measured is the one it names (e.g. a worktree of another commit),
else this checkout's.

Agent step table: what one agent step costs on top of the model call in a Docker sandbox: a
trivial tool command run as an agent's tools run it (a string, so ``bash -lc``; as the
unprivileged user; the tools' output limit), median and p90 over many steps, against ``docker
exec`` of the same command by the CLI (at a commit that still has the in-container exec
server, its row too).

Third table, the Docker backend's disk caps (the reproduction's default cap, 50 GB): start →
first exec and stop, per sandbox, uncapped against each way of capping (``storage_opt``, where
the engine supports it; ``loop-overlay``; ``loop-ext4``), interleaved round by round after a
warm-up round, with the host disk each capped sandbox takes when idle (its ext4 image's blocks)
and the time to write 200 MB (``dd ... conv=fsync``) through the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

if not os.environ.get("PYTHONPATH"):  # else the code PYTHONPATH names (another commit's)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperbench.sandbox._base import SandboxLimits, SandboxSpec
from paperbench.sandbox._docker import DockerBackend, DockerSandbox, connect
from paperbench.sandbox._images import ensure_images

LABELS = {"paperbench.run": "bench-sandbox"}
CLI_LABEL = ["--label", "paperbench.managed=true", "--label", "paperbench.run=bench-sandbox"]


def cli(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(fn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


def timed_sync(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def local_table(quick: bool) -> None:
    """The local backend against a plain subprocess running the same command."""
    from paperbench.sandbox import LocalBackend

    n_start, n_exec = (3, 20) if quick else (7, 50)
    rows: list[tuple[str, float, float, str]] = []

    def plain() -> None:
        subprocess.run(["true"], check=True)

    floor = median_ms(timed_sync(plain, n_exec))
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(Path(tmp), isolation="bwrap")
        for network in ("none", "full"):
            spec = SandboxSpec(image="host", network=network, workdir="/home/submission")

            async def start_first(spec: SandboxSpec = spec) -> None:
                sb = await backend.start(spec)
                try:
                    r = await sb.exec(["true"], timeout=30)
                    assert r.exit_code == 0, r
                finally:
                    await sb.stop()

            await start_first()  # warm-up
            start = median_ms(await timed(start_first, n_start))
            rows.append((f"start → first exec, network={network}", start, floor, f"n={n_start}"))
            box = await backend.start(spec)
            try:
                await box.exec(["true"], timeout=30)
                ours = await timed(lambda b=box: b.exec(["true"], timeout=30), n_exec)
            finally:
                await box.stop()
            name = f"exec round trip (true), network={network}"
            rows.append((name, median_ms(ours), floor, f"n={n_exec}"))
    table = Table(title="Local sandbox (bubblewrap): paperbench vs a plain subprocess (medians)")
    table.add_column("measure")
    table.add_column("paperbench (ms)", justify="right")
    table.add_column("subprocess (ms)", justify="right")
    table.add_column("ours / plain", justify="right")
    table.add_column("notes")
    for name, a, b, note in rows:
        table.add_row(name, f"{a:.1f}", f"{b:.1f}", f"{a / b:.1f}", note)
    Console(width=max(Console().width, 120)).print(table)


WRITE_200MB = "dd if=/dev/zero of=/var/tmp/w bs=1M count=200 conv=fsync status=none"
"""A write through each cap (``/var`` is writable under all of them), flushed to the disk."""


class _LayersElsewhere(DockerBackend):
    """Caps with ``loop-ext4`` (as when the image's layers are not on this host)."""

    async def _image_layers(self, sb: DockerSandbox) -> tuple[list[str] | None, str]:
        return None, "forced by the benchmark"


async def disk_table(quick: bool) -> None:
    """Start and stop per sandbox: uncapped against each disk cap the engine allows."""
    from paperbench.reproduce import DEFAULT_DISK_MB

    n = 3 if quick else 7
    logging.getLogger("paperbench.sandbox").setLevel(logging.ERROR)  # loop-ext4's warning
    image = ensure_images(("paperbench-reproducer",))["paperbench-reproducer"]
    client = connect()
    uncapped = SandboxSpec(image=image, labels=LABELS, limits=SandboxLimits())
    capped = SandboxSpec(image=image, labels=LABELS, limits=SandboxLimits(disk_mb=DEFAULT_DISK_MB))
    probe = DockerBackend(client=client)
    sb = await probe.start(capped)
    storage_opt = sb.disk_cap == "storage_opt"
    await sb.stop()
    overlay = DockerBackend(client=client)
    ext4 = _LayersElsewhere(client=client)
    overlay._storage_opt_ok = ext4._storage_opt_ok = False  # the loop caps even where it works
    kinds: list[tuple[str, DockerBackend, SandboxSpec]] = [("uncapped", probe, uncapped)]
    if storage_opt:
        kinds.append(("storage_opt", probe, capped))
    kinds += [("loop-overlay", overlay, capped), ("loop-ext4", ext4, capped)]
    starts: dict[str, list[float]] = {k: [] for k, _, _ in kinds}
    stops: dict[str, list[float]] = {k: [] for k, _, _ in kinds}
    disk_mb: dict[str, list[float]] = {k: [] for k, _, _ in kinds}
    writes: dict[str, list[float]] = {k: [] for k, _, _ in kinds}
    for round_ in range(n + 1):  # the first round warms up and is not counted
        for kind, backend, spec in kinds:
            t = time.perf_counter()
            sb = await backend.start(spec)
            await sb.exec(["true"], timeout=30)
            started = time.perf_counter() - t
            if sb.disk_cap not in (None, kind):
                raise SystemExit(f"asked for {kind}, got {sb.disk_cap}")
            if sb.disk_folder is not None:
                img = sb.disk_folder / "disk.img"
                disk_mb[kind].append(img.stat().st_blocks * 512 / 1e6)
            t = time.perf_counter()
            r = await sb.exec(WRITE_200MB, timeout=120)
            wrote = time.perf_counter() - t
            if r.exit_code != 0:
                raise SystemExit(f"{kind}: writing 200 MB failed: {r.stderr}")
            t = time.perf_counter()
            await sb.stop()
            if round_:
                starts[kind].append(started)
                stops[kind].append(time.perf_counter() - t)
                writes[kind].append(wrote)
    table = Table(title=f"Docker sandbox disk caps ({DEFAULT_DISK_MB // 1024} GB), medians, n={n}")
    for col in ("cap", "start → first exec (ms)", "vs uncapped", "stop (ms)", "vs uncapped"):
        table.add_column(col, justify="left" if col == "cap" else "right")
    table.add_column("host disk, idle (MB)", justify="right")
    table.add_column("write 200 MB (ms)", justify="right")
    table.add_column("vs uncapped", justify="right")
    base_start, base_stop = median_ms(starts["uncapped"]), median_ms(stops["uncapped"])
    base_write = median_ms(writes["uncapped"])
    for kind, _, _ in kinds:
        a, b, w = median_ms(starts[kind]), median_ms(stops[kind]), median_ms(writes[kind])
        used = f"{statistics.median(disk_mb[kind]):.1f}" if disk_mb[kind] else "-"
        table.add_row(
            kind,
            f"{a:.0f}",
            f"{a / base_start:.2f}",
            f"{b:.0f}",
            f"{b / base_stop:.2f}",
            used,
            f"{w:.0f}",
            f"{w / base_write:.2f}",
        )
    if not storage_opt:
        table.caption = "storage_opt: not supported by this engine (no XFS data root with pquota)"
    Console(width=max(Console().width, 120)).print(table)


AGENT_STEP = "cd /home/submission && ls -la && echo done"
"""A trivial agent step: what the tools send for a look at the submission folder."""


def p90_ms(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[-1] * 1000


def exec_paths(client: object) -> list[tuple[str, DockerBackend]]:
    """The Docker backend's exec paths, by name: one ``docker exec`` per command, and the
    in-container exec server at the commits that still have it."""
    if "fast_exec" in inspect.signature(DockerBackend).parameters:
        make: Callable[..., DockerBackend] = DockerBackend
        return [
            ("exec server", make(client=client, fast_exec=True)),
            ("docker exec", make(client=client, fast_exec=False)),
        ]
    return [("docker exec", DockerBackend(client=client))]


async def step_table(quick: bool) -> None:
    """The overhead of one agent step on each exec path: median and p90."""
    from paperbench.agents._config import ToolSettings

    tool_limit = ToolSettings().output_chars * 4  # as the tools ask
    n = 30 if quick else 100
    image = ensure_images(("paperbench-agent",))["paperbench-agent"]
    client = connect()
    spec = SandboxSpec(image=image, labels=LABELS, limits=SandboxLimits(), user="sandbox")
    rows: list[tuple[str, list[float]]] = []
    boxes = [(name, await b.start(spec)) for name, b in exec_paths(client)]
    cid = cli(
        "run", "-d", *CLI_LABEL, "--network", "none", "--entrypoint", "sleep", image, "infinity"
    ).strip()
    try:
        samples: dict[str, list[float]] = {name: [] for name, _ in boxes}
        samples["docker CLI"] = []
        for _, sb in boxes:  # warm-up
            r = await sb.exec(AGENT_STEP, timeout=60, output_limit=tool_limit)
            assert r.exit_code == 0 and r.stdout.endswith("done\n"), r
        for _ in range(n):  # interleaved: load from elsewhere weighs on all alike
            for name, sb in boxes:
                t = time.perf_counter()
                await sb.exec(AGENT_STEP, timeout=60, output_limit=tool_limit)
                samples[name].append(time.perf_counter() - t)
            samples["docker CLI"] += timed_sync(
                lambda: cli("exec", "-u", "1000:1000", cid, "bash", "-lc", AGENT_STEP), 1
            )
        rows = list(samples.items())
    finally:
        for _, sb in boxes:
            await sb.stop()
        cli("rm", "-f", cid)
    table = Table(title=f"Docker agent step overhead: bash -lc {AGENT_STEP!r} as uid 1000, n={n}")
    for col in ("exec path", "median (ms)", "p90 (ms)", "min (ms)", "max (ms)"):
        table.add_column(col, justify="left" if col == "exec path" else "right")
    for name, s in rows:
        table.add_row(
            name,
            f"{median_ms(s):.1f}",
            f"{p90_ms(s):.1f}",
            f"{min(s) * 1000:.1f}",
            f"{max(s) * 1000:.1f}",
        )
    Console(width=max(Console().width, 120)).print(table)


async def main(
    quick: bool,
    local_only: bool,
    disk_only: bool = False,
    step_only: bool = False,
    docker_only: bool = False,
) -> None:
    if disk_only:
        await disk_table(quick)
        return
    if step_only:
        await step_table(quick)
        return
    if not docker_only:
        await local_table(quick)
        if local_only:
            return
        await disk_table(quick)
        await step_table(quick)
    n_start, n_exec, n_snap = (3, 20, 1) if quick else (7, 50, 3)
    image = ensure_images(("paperbench-reproducer",))["paperbench-reproducer"]
    client = connect()
    backend = DockerBackend(client=client)
    spec = SandboxSpec(image=image, labels=LABELS, limits=SandboxLimits())
    rows: list[tuple[str, float, float, str]] = []

    # start → first exec: ours (as root, as the user) and the CLI's, interleaved so that load
    # from elsewhere on the machine weighs on all three alike
    def cli_start() -> None:
        cid = cli(
            "run",
            "-d",
            *CLI_LABEL,
            "--network",
            "none",
            "--memory",
            "8192m",
            "--pids-limit",
            "1024",
            "--entrypoint",
            "sleep",
            image,
            "infinity",
        ).strip()
        cli("exec", cid, "true")
        pending_rm.append(cid)

    async def ours_start(b: DockerBackend, s: SandboxSpec = spec) -> None:
        sb = await b.start(s)
        await sb.exec(["true"], timeout=30)
        pending_stop.append(sb)

    as_user = spec.model_copy(update={"user": "sandbox"})
    root_ms: list[float] = []
    user_ms: list[float] = []
    cli_start_ms: list[float] = []
    pending_rm: list[str] = []
    pending_stop: list[DockerSandbox] = []
    for _ in range(n_start + 1):  # the first round warms up and is not counted
        root_ms += await timed(lambda: ours_start(backend), 1)
        cli_start_ms += timed_sync(cli_start, 1)
        user_ms += await timed(lambda: ours_start(backend, as_user), 1)
        for sb in pending_stop:
            await sb.stop()
        for cid in pending_rm:
            cli("rm", "-f", cid)
        pending_stop.clear()
        pending_rm.clear()
    start_cli = median_ms(cli_start_ms[1:])
    rows.append(
        (
            "start → first exec",
            median_ms(root_ms[1:]),
            start_cli,
            f"n={n_start}; CLI: docker run -d + docker exec",
        )
    )
    rows.append(
        (
            "start → first exec, user: sandbox",
            median_ms(user_ms[1:]),
            start_cli,
            "uid 1000 set up after the start",
        )
    )

    # network=full: ours on a bridge of its own behind host firewall rules, the CLI on the
    # default bridge
    full_spec = spec.model_copy(update={"network": "full"})

    async def ours_full() -> None:
        sb = await backend.start(full_spec)
        try:
            await sb.exec(["true"], timeout=30)
        finally:
            await sb.stop()

    def cli_full() -> None:
        cid = cli("run", "-d", *CLI_LABEL, "--entrypoint", "sleep", image, "infinity").strip()
        try:
            cli("exec", cid, "true")
        finally:
            cli("rm", "-f", cid)

    await ours_full()  # warm-up
    full_ms = await timed(ours_full, n_start)
    cli_full_ms = timed_sync(cli_full, n_start)
    rows.append(
        (
            "start → first exec → stop, network=full",
            median_ms(full_ms),
            median_ms(cli_full_ms),
            "CLI: default bridge, run + exec + rm",
        )
    )

    # exec round trip
    sb = await backend.start(spec)
    cid = cli(
        "run", "-d", *CLI_LABEL, "--network", "none", "--entrypoint", "sleep", image, "infinity"
    ).strip()
    try:
        await sb.exec(["true"], timeout=30)
        ours = await timed(lambda: sb.exec(["true"], timeout=30), n_exec)
        theirs = timed_sync(lambda: cli("exec", cid, "true"), n_exec)
        rows.append(("exec round trip (true)", median_ms(ours), median_ms(theirs), f"n={n_exec}"))

        # snapshot of a 500 MB folder (25 × 20 MB of random bytes)
        make = (
            "mkdir -p /home/big && for i in $(seq 1 25); do head -c 20M /dev/urandom "
            "> /home/big/f$i; done"
        )
        await sb.exec(make, timeout=300)
        cli("exec", cid, "bash", "-c", make)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            ours = await timed(lambda: sb.snapshot("/home/big", out / "ours.tar.gz"), n_snap)
            theirs = timed_sync(
                lambda: subprocess.run(
                    f"docker cp {cid}:/home/big - | gzip -1 > {out}/cli.tar.gz",
                    shell=True,
                    check=True,
                ),
                n_snap,
            )
            size = (out / "ours.tar.gz").stat().st_size / 1e6
        rows.append(
            (
                "snapshot 500 MB folder",
                median_ms(ours),
                median_ms(theirs),
                f"n={n_snap}, {size:.0f} MB tar.gz",
            )
        )
    finally:
        await sb.stop()
        cli("rm", "-f", cid)

    # reproduction overhead: a trivial reproduce.sh, end to end
    from paperbench.reproduce import ReproduceConfig, reproduce_submission
    from paperbench.sandbox._base import NetworkPolicy
    from paperbench.sandbox._select import SandboxConfig

    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        (sub / "reproduce.sh").write_text("#!/bin/bash\necho ok > result.txt\n")
        config = ReproduceConfig(
            sandbox=SandboxConfig(backend="docker"),
            image=image,
            network=NetworkPolicy.NONE,
            labels=LABELS,
        )
        ours = []
        for i in range(n_start):
            t = time.perf_counter()
            meta = await reproduce_submission(sub, Path(tmp) / f"out{i}", config)
            ours.append(time.perf_counter() - t)
            assert meta.status == "success", meta
        theirs = timed_sync(
            lambda: cli(
                "run",
                "--rm",
                *CLI_LABEL,
                "--network",
                "none",
                "-v",
                f"{sub}:/home/submission",
                "-w",
                "/home/submission",
                "--entrypoint",
                "bash",
                image,
                "reproduce.sh",
            ),
            n_start,
        )
    rows.append(
        (
            "reproduction, trivial reproduce.sh",
            median_ms(ours),
            median_ms(theirs),
            f"n={n_start}; CLI: docker run --rm -v",
        )
    )

    table = Table(title="Docker sandbox: paperbench vs docker CLI (medians)")
    table.add_column("measure")
    table.add_column("paperbench (ms)", justify="right")
    table.add_column("docker CLI (ms)", justify="right")
    table.add_column("ours / CLI", justify="right")
    table.add_column("notes")
    for name, a, b, note in rows:
        table.add_row(name, f"{a:.1f}" if a < 20 else f"{a:.0f}", f"{b:.0f}", f"{a / b:.2f}", note)
    Console(width=max(Console().width, 120)).print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--local-only", action="store_true", help="only the local backend")
    parser.add_argument("--disk-only", action="store_true", help="only the disk caps table")
    parser.add_argument("--step-only", action="store_true", help="only the agent step table")
    parser.add_argument("--docker-only", action="store_true", help="only the docker CLI table")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.local_only, args.disk_only, args.step_only, args.docker_only))
