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

from paperbench._console import console, err_console
from paperbench.reproduce import (
    ReproduceConfig,
    ReproductionMetadata,
    default_out_dir,
    reproduce_submission,
)
from paperbench.sandbox import SandboxConfig

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
            "--out", help="Output folder (default: <submission>.reproduction beside the input)."
        ),
    ] = None,
    sandbox: Annotated[
        Literal["auto", "docker", "local"],
        typer.Option(help="Sandbox backend; auto = docker when an engine answers, else local."),
    ] = "auto",
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
    as_json: Annotated[bool, typer.Option("--json", help="Print metadata.json.")] = False,
) -> None:
    """Run a submission's reproduce.sh in a fresh sandbox; write reproduce.log, executed.tar.gz
    and metadata.json. Exit code 0 on success, 3 when the run failed or timed out, 1 for bad
    input."""
    _log_to_stderr()
    out_dir = out or default_out_dir(submission)
    config = ReproduceConfig(
        timeout_s=timeout,
        salvage_retries=retries,
        image=image,
        sandbox=SandboxConfig(backend=sandbox),
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
        f"sandbox {meta.sandbox_backend or '-'} ({meta.sandbox_image or '-'})"
    )
    console.print(
        f"files: {len(changed.created)} created, {len(changed.modified)} modified, "
        f"{len(changed.deleted)} deleted; {len(meta.files_left_out)} left out of executed.tar.gz"
    )
    if meta.error:
        console.print(f"[red]{meta.error}[/]", markup=True)
    console.print(f"results in {out_dir}", markup=False)
