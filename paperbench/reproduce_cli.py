"""``paperbench reproduce``: the reproduction stage from the command line (thin)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.logging import RichHandler
from rich.markup import escape

from paperbench._console import console, err_console
from paperbench.errors import UsageError
from paperbench.reproduce import (
    DEFAULT_DISK_MB,
    ReproduceConfig,
    ReproductionMetadata,
    default_out_dir,
    reproduce_submission,
)
from paperbench.sandbox import GpuRequest, NetworkPolicy, SandboxConfig, SandboxUserKind

_DEFAULTS = ReproduceConfig()
_DEFAULT_DISK_MB = _DEFAULTS.limits.disk_mb or DEFAULT_DISK_MB
EXIT_NOT_SUCCESS = 3
"""Exit code when the reproduction ran but did not succeed (failed, timed out, no script)."""


def _log_to_stderr() -> None:
    """Show the sandbox's warnings (e.g. running without bubblewrap) on stderr, once."""
    logger = logging.getLogger("paperbench.sandbox")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=err_console, show_time=False, show_path=False)
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


def _gpu_request(value: str | None) -> GpuRequest | None:
    """``all``, a count (``2``) or device ids (``0,1`` / ``GPU-uuid``) → a GpuRequest."""
    if value is None:
        return None
    text = value.strip()
    if text == "all":
        return GpuRequest(count=-1)
    if text.isdigit():
        if int(text) < 1:
            raise typer.BadParameter(
                "give a count of at least 1, 'all', or device ids (0,1)", param_hint="--gpus"
            )
        return GpuRequest(count=int(text))
    ids = [part.strip() for part in text.split(",")]
    if not all(ids):
        raise typer.BadParameter(
            "give 'all', a count (2) or comma-separated device ids (0,1)", param_hint="--gpus"
        )
    return GpuRequest(device_ids=ids)


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: exists and is not a folder; give another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise UsageError(
            f"--out {out_dir}: the folder exists and is not empty; pass --force to overwrite "
            "the reproduction's files in it, or give another --out"
        )


def _positive_seconds(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise typer.BadParameter(f"expected a number of seconds > 0, found {value}")
    return value


def reproduce(
    submission: Annotated[
        Path, typer.Argument(help="A submission folder or a .tar / .tar.gz / .tgz archive.")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Output folder (default: <submission>.reproduction beside the input; an "
            "archive keeps its suffix, e.g. sub.tar.gz.reproduction). Refused when it exists "
            "and is not empty, unless --force.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write into an --out folder that is not empty.")
    ] = False,
    sandbox: Annotated[
        Literal["auto", "docker", "local"],
        typer.Option(
            help="Sandbox backend; auto = docker when an engine answers, else local with "
            "bubblewrap (said as a warning)."
        ),
    ] = "auto",
    allow_unsandboxed: Annotated[
        bool,
        typer.Option(
            "--allow-unsandboxed",
            help="Without bubblewrap, run reproduce.sh as PLAIN HOST SUBPROCESSES (host files "
            "and network) instead of refusing. Said loudly and recorded as isolation none.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds for reproduce.sh, over all attempts.", callback=_positive_seconds
        ),
    ] = _DEFAULTS.timeout_s,
    image: Annotated[
        str | None,
        typer.Option(help="Reproducer image tag (docker; default: paperbench's reproducer image)."),
    ] = None,
    retries: Annotated[
        int,
        typer.Option(
            min=0,
            help=f"Salvage retries, each in a new sandbox, after a run that fails within "
            f"{_DEFAULTS.salvage_window_s:.0f} s.",
        ),
    ] = _DEFAULTS.salvage_retries,
    cpus: Annotated[
        float | None,
        typer.Option(min=0.01, help="CPUs for the sandbox (default: no limit)."),
    ] = _DEFAULTS.limits.cpus,
    memory: Annotated[
        int | None,
        typer.Option(min=64, help="Memory limit in MB (no swap)."),
    ] = _DEFAULTS.limits.memory_mb,
    disk: Annotated[
        int,
        typer.Option(
            min=16,
            help="Cap of the sandbox's writable space in MB (a sparse image: only what is "
            "written takes room on the host). A run that fills it ends as disk_full.",
        ),
    ] = _DEFAULT_DISK_MB,
    allow_uncapped_disk: Annotated[
        bool,
        typer.Option(
            "--allow-uncapped-disk",
            help="Run without a disk cap where it cannot be enforced (needs root and loop "
            "devices) instead of refusing. Said and recorded.",
        ),
    ] = False,
    gpus: Annotated[
        str | None,
        typer.Option(help="GPUs for the sandbox (docker): 'all', a count (2) or device ids (0,1)."),
    ] = None,
    network: Annotated[
        NetworkPolicy,
        typer.Option(
            help="Network of the sandbox: full, none, or filtered (only through the egress proxy)."
        ),
    ] = _DEFAULTS.network,
    sandbox_user: Annotated[
        SandboxUserKind,
        typer.Option(
            help="Who runs reproduce.sh: root (the sandbox's own superuser, as PaperBench runs "
            "it) or sandbox (an unprivileged user who owns the submission)."
        ),
    ] = _DEFAULTS.user,
    as_json: Annotated[bool, typer.Option("--json", help="Print metadata.json.")] = False,
) -> None:
    """Run a submission's reproduce.sh in a fresh sandbox; write reproduce.log, executed.tar.gz
    and metadata.json. Exit code 0 on success, 3 when the run failed, timed out or filled its
    disk, 1 for bad input."""
    _log_to_stderr()
    out_dir = out or default_out_dir(submission)
    _check_out_dir(out_dir, force)
    config = ReproduceConfig(
        timeout_s=timeout,
        salvage_retries=retries,
        image=image,
        sandbox=SandboxConfig(backend=sandbox, allow_unsandboxed=allow_unsandboxed),
        limits=_DEFAULTS.limits.model_copy(
            update={
                "cpus": cpus,
                "memory_mb": memory,
                "disk_mb": disk,
                "allow_uncapped_disk": allow_uncapped_disk,
            }
        ),
        gpu=_gpu_request(gpus),
        network=network,
        user=sandbox_user,
    )
    with err_console.status(f"reproducing {submission} ..."):
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
