"""``paperbench reproduce``: the reproduction stage from the command line (thin)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.logging import RichHandler
from rich.markup import escape

from paperbench._console import console, err_console, warning
from paperbench._options import (
    AllowNetwork,
    AllowUncappedDisk,
    AllowUnsandboxed,
    Cpus,
    Disk,
    Gpus,
    Image,
    Json,
    Memory,
    Network,
    Out,
    ReproduceTimeout,
    Sandbox,
    parse_networks,
)
from paperbench.errors import UsageError
from paperbench.reproduce import (
    DEFAULT_DISK_MB,
    ReproduceConfig,
    ReproductionMetadata,
    default_out_dir,
    reproduce_submission,
)
from paperbench.sandbox import GpuRequest, NetworkPolicy, SandboxConfig, SandboxUserKind
from paperbench.sandbox._internal_nets import describe

_DEFAULTS = ReproduceConfig()
EXIT_NOT_SUCCESS = 3
"""Exit code when the reproduction ran but did not succeed (failed, timed out, no script)."""


def _log_to_stderr() -> None:
    """Show the sandbox's warnings (e.g. running without bubblewrap) on stderr, once."""
    logger = logging.getLogger("paperbench.sandbox")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=err_console, show_time=False, show_path=False)
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: exists and is not a folder; give another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise UsageError(
            f"--out {out_dir}: the folder exists and is not empty; pass --force to overwrite "
            "the reproduction's files in it, or give another --out"
        )


def reproduce(
    submission: Annotated[
        Path, typer.Argument(help="A submission folder or a .tar / .tar.gz / .tgz archive.")
    ],
    out: Out = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write into an --out folder that is not empty.")
    ] = False,
    sandbox: Sandbox = "auto",
    allow_unsandboxed: AllowUnsandboxed = False,
    reproduce_timeout: ReproduceTimeout = None,
    image: Image = None,
    retries: Annotated[
        int,
        typer.Option(
            min=0,
            help=f"Salvage retries, each in a new sandbox, after a run that fails within "
            f"{_DEFAULTS.salvage_window_s:.0f} s.",
        ),
    ] = _DEFAULTS.salvage_retries,
    cpus: Cpus = None,
    memory: Memory = None,
    disk: Disk = None,
    allow_uncapped_disk: AllowUncappedDisk = False,
    gpus: Gpus = None,
    network: Network = None,
    allow_network: AllowNetwork = None,
    sandbox_user: Annotated[
        SandboxUserKind,
        typer.Option(
            help="Who runs reproduce.sh: root (the sandbox's own superuser, as PaperBench runs "
            "it) or sandbox (an unprivileged user who owns the submission)."
        ),
    ] = _DEFAULTS.user,
    as_json: Json = False,
) -> None:
    """Run a submission's reproduce.sh in a fresh sandbox; write reproduce.log, executed.tar.gz
    and metadata.json. Exit code 0 on success, 3 when the run failed, timed out or filled its
    disk, 1 for bad input.

    --out defaults to <submission>.reproduction beside the input (an archive keeps its suffix,
    e.g. sub.tar.gz.reproduction); it is refused when it exists and is not empty, unless
    --force."""
    _log_to_stderr()
    allow_networks = parse_networks(allow_network)
    chosen = NetworkPolicy(network) if network is not None else _DEFAULTS.network
    if allow_networks and chosen is NetworkPolicy.NONE:
        raise UsageError("--allow-network: the sandbox has no network (--network none)")
    out_dir = out or default_out_dir(submission)
    _check_out_dir(out_dir, force)
    if allow_networks:
        warning(describe(allow_networks))
    limits = _DEFAULTS.limits
    config = ReproduceConfig(
        timeout_s=reproduce_timeout or _DEFAULTS.timeout_s,
        salvage_retries=retries,
        image=image,
        sandbox=SandboxConfig(backend=sandbox, allow_unsandboxed=allow_unsandboxed),
        limits=limits.model_copy(
            update={
                "cpus": cpus if cpus is not None else limits.cpus,
                "memory_mb": memory if memory is not None else limits.memory_mb,
                "disk_mb": disk if disk is not None else limits.disk_mb or DEFAULT_DISK_MB,
                "allow_uncapped_disk": allow_uncapped_disk,
            }
        ),
        gpu=GpuRequest(count=gpus) if gpus else None,
        network=chosen,
        allow_networks=allow_networks,
        user=sandbox_user,
    )
    # on a terminal a spinner; piped, the result line at the end is the one line of it
    with err_console.status(f"reproducing {submission} (its log: {out_dir}/reproduce.log) ..."):
        meta = asyncio.run(reproduce_submission(submission, out_dir, config))
    if as_json:
        console.print(json.dumps(meta.model_dump(mode="json"), indent=2), markup=False)
    else:
        _summary(meta, out_dir)
    if meta.status != "success":
        raise typer.Exit(EXIT_NOT_SUCCESS)


def _summary(meta: ReproductionMetadata, out_dir: Path) -> None:
    colour = "green" if meta.status == "success" else "red"
    changed = meta.changed_files
    console.print(
        f"[bold {colour}]{meta.status}[/]  exit code {meta.exit_code}  "
        f"{meta.wall_time_s:.1f} s  attempts {len(meta.attempts)}  "
        f"sandbox {meta.sandbox_backend or '-'} ({meta.sandbox_image or '-'}), "
        f"isolation {meta.isolation or '-'}, user {meta.user or '-'}, "
        f"disk cap {meta.disk_cap_mb or '-'} MB ({meta.disk_cap or '-'})"
    )
    console.print(
        f"files: {len(changed.created)} created, {len(changed.modified)} modified, "
        f"{len(changed.deleted)} deleted; {len(meta.files_left_out)} left out of executed.tar.gz"
    )
    if meta.error:
        console.print(f"[red]{escape(meta.error)}[/]", markup=True)
    for hint in meta.hints:
        console.print(f"hint: {hint}", markup=False)
    console.print(f"results in {out_dir}", markup=False)
