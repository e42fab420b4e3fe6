"""``paperbench reproduce``: the reproduction stage from the command line (thin)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import typer
from rich.logging import RichHandler
from rich.markup import escape

from paperbench._console import console, err_console
from paperbench._model_options import from_options, option, with_options
from paperbench._options import Json
from paperbench.reproduce import ReproductionMetadata, reproduce_submission
from paperbench.reproduce._settings import ReproduceSettings, prepare_reproduction

EXIT_NOT_SUCCESS = 3
"""Exit code when the reproduction ran but did not succeed (failed, timed out, no script)."""


def _log_to_stderr() -> None:
    """Show the sandbox's warnings (e.g. running without bubblewrap) on stderr, once."""
    logger = logging.getLogger("paperbench.sandbox")
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=err_console, show_time=False, show_path=False)
        handler.setLevel(logging.WARNING)
        logger.addHandler(handler)


def _reproduce(as_json: bool, **values: Any) -> None:
    _log_to_stderr()
    prepared = prepare_reproduction(from_options(ReproduceSettings, values))
    submission, out_dir = prepared.submission, prepared.out_dir
    # on a terminal a spinner; piped, the result line at the end is the one line of it
    with err_console.status(f"reproducing {submission} (its log: {out_dir}/reproduce.log) ..."):
        meta = asyncio.run(reproduce_submission(submission, out_dir, prepared.config))
    if as_json:
        console.print(json.dumps(meta.model_dump(mode="json"), indent=2), markup=False)
    else:
        _summary(meta, out_dir)
    if meta.status != "success":
        raise typer.Exit(EXIT_NOT_SUCCESS)


def _reproduce_command(as_json: bool = False, **values: Any) -> None:
    """Run a submission's reproduce.sh in a fresh sandbox; write reproduce.log,
    executed.tar.gz and metadata.json. Exit code 0 on success, 3 when the run failed, timed
    out or filled its disk, 1 for bad input.

    --out defaults to <submission>.reproduction beside the input (an archive keeps its
    suffix, e.g. sub.tar.gz.reproduction); it is refused when it exists and is not empty,
    unless --force."""
    _reproduce(as_json, **values)


reproduce = with_options(
    _reproduce_command, ReproduceSettings, after=[option("as_json", Json, False)]
)
"""``paperbench reproduce``: :func:`paperbench.run_reproduction` from the command line, its
arguments made from :class:`~paperbench.reproduce.ReproduceSettings`."""


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
