"""``paperbench sandbox gc`` and ``paperbench images build|list``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from paperbench._console import console, err_console, is_piped, printable, warning
from paperbench._options import Json
from paperbench.sandbox._heartbeat import HEARTBEAT_S, Heartbeat
from paperbench.sandbox._images import DEFAULT_IMAGES, IMAGES, ImageOptions

app = typer.Typer(help="Manage sandboxes: reap what crashed runs left behind.")
images_app = typer.Typer(
    help="Build and list the sandbox images (paperbench-agent, -reproducer, -rcb)."
)


def _field_help(name: str) -> str:
    return (ImageOptions.model_fields[name].description or "").strip()


@app.command()
def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Remove every paperbench container, network and volume, also live ones "
            "(local sandboxes are only ever removed once their owner is gone).",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Remove what crashed runs left behind: Docker containers, networks and volumes whose
    creating process is gone (found by their ``paperbench.*`` labels), and local sandbox
    workspaces, cgroups and capped disks (loop-mounted images) whose owner is gone, and host
    firewall rules of filtered networks that are gone. Images are kept."""
    from paperbench.sandbox._gc import reap_all

    orphans, unavailable = reap_all(dry_run=dry_run, everything=everything)
    if unavailable is not None:
        warning(unavailable)
    if as_json:
        console.print_json(json.dumps([o.model_dump() for o in orphans]))
        return
    if not orphans:
        console.print("nothing to reap")
        return
    table = Table(title="would remove" if dry_run else "reaped")
    for col in ("kind", "name", "owner", "created", "reason", "result"):
        table.add_column(col)
    for o in orphans:
        result = "dry run" if dry_run else ("removed" if o.removed else f"[red]{o.error}[/]")
        table.add_row(o.kind, o.name, o.owner, o.created, o.reason, result)
    console.print(table)
    if any(o.error for o in orphans):
        raise typer.Exit(1)


class BuildLog:
    """An image build's lines (each step as it starts) on ``console``. On a terminal a status
    line shows the latest and each is printed dim; piped, where a status line prints
    nothing, each is a plain line with the time so far, and a step that says nothing for
    ``interval`` seconds gets a line saying it is still running (a large image's package
    install runs for minutes)."""

    def __init__(self, console: Console, interval: float = HEARTBEAT_S) -> None:
        self.console = console
        self._beat = Heartbeat(self._print, interval) if is_piped(console) else None
        self._status: Any = None

    def _print(self, line: str) -> None:
        self.console.print(Text(printable(line)), soft_wrap=True)

    def __call__(self, line: str) -> None:
        if self._beat is not None:
            self._beat(line)
        else:
            self._status.update(Text(printable(line)))
            self.console.print(Text(printable(line), style="dim"))

    def __enter__(self) -> BuildLog:
        if self._beat is not None:
            self._beat.__enter__()
        else:
            self._status = self.console.status("building images")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._beat is not None:
            self._beat.__exit__()
        else:
            self._status.__exit__(None, None, None)


@images_app.command("build")
def build(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="NAME",
            help=f"These images (default: {', '.join(DEFAULT_IMAGES)}; also: "
            f"{', '.join(n for n in IMAGES if n not in DEFAULT_IMAGES)}).",
            show_default=False,
        ),
    ] = None,
    ca_bundle: Annotated[
        Path | None,
        typer.Option("--ca-bundle", exists=True, dir_okay=False, help=_field_help("ca_bundle")),
    ] = None,
    base_image: Annotated[
        str | None, typer.Option("--base-image", help=_field_help("base_image"))
    ] = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help=_field_help("rebuild"))] = False,
    proxy_from_host: Annotated[
        bool,
        typer.Option(
            "--proxy-from-host",
            help="Pass this shell's HTTP(S)_PROXY / NO_PROXY to the build.",
        ),
    ] = False,
    as_json: Json = False,
) -> None:
    """Build the sandbox images; skips those whose inputs did not change."""
    from paperbench.sandbox._images import ensure_images
    from paperbench.sandbox._images import proxy_from_host as host_proxy

    unknown = [name for name in names or () if name not in IMAGES]
    if unknown:
        raise typer.BadParameter(
            f"unknown image {unknown[0]!r}: give one of {', '.join(IMAGES)}", param_hint="NAME"
        )
    opts = ImageOptions(
        ca_bundle=ca_bundle,
        base_image=base_image,
        rebuild=rebuild,
        proxy_env=host_proxy() if proxy_from_host else {},
    )
    started = time.monotonic()
    with BuildLog(err_console) as log:
        tags = ensure_images(tuple(names or DEFAULT_IMAGES), opts, log=log)
    elapsed = time.monotonic() - started
    if as_json:
        console.print_json(json.dumps({"images": tags, "seconds": round(elapsed, 1)}))
        return
    table = Table(title=f"images ({elapsed:.0f}s)")
    table.add_column("image")
    table.add_column("tag")
    for name, tag in tags.items():
        table.add_row(name, tag)
    console.print(table)


@images_app.command("list")
def list_images(as_json: Json = False) -> None:
    """The paperbench images in the engine."""
    from paperbench.sandbox._docker import connect
    from paperbench.sandbox._images import describe

    rows = describe(connect())
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="paperbench images")
    for col in ("tags", "id", "size (MB)", "kind"):
        table.add_column(col)
    for row in rows:
        table.add_row(", ".join(row["tags"]), row["id"], str(row["size_mb"]), row["kind"])
    console.print(table)
