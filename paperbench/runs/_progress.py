"""The live display of a group: each run's stage, leaves graded and dollars so far.

It reads the run store (run.json, grading/leaves.jsonl, costs.jsonl, grading/costs.jsonl),
so it shows the same thing whichever executor works on the runs and wherever they run.
Files are read incrementally: a poll reads only what was appended since the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from paperbench.runs._pipeline import PAUSED, load_outcome, load_state
from paperbench.runs._store import GROUP_LOG, STAGES, RunFolder, RunKey

MAX_ROWS = 16
"""Runs shown one per row at most; beyond, the active ones and counts."""


@dataclass
class _Tail:
    """Bytes of an append-only file read so far."""

    offset: int = 0
    lines: int = 0
    usd: float = 0.0


@dataclass
class _RunView:
    key: RunKey
    folder: Path
    leaves: _Tail = field(default_factory=_Tail)
    costs: _Tail = field(default_factory=_Tail)
    grading_costs: _Tail = field(default_factory=_Tail)
    stage: str = "pending"
    status: str = ""
    started: float | None = None


def _read_tail(path: Path, tail: _Tail, *, costs: bool) -> None:
    try:
        with path.open("rb") as f:
            f.seek(tail.offset)
            data = f.read()
    except OSError:
        return
    end = data.rfind(b"\n") + 1  # a record in flight is read on the next poll
    for line in data[:end].splitlines():
        tail.lines += 1
        if costs:
            with contextlib.suppress(ValueError, AttributeError):
                tail.usd += float(json.loads(line).get("cost_usd") or 0.0)
    tail.offset += end


class GroupProgress:
    """Polls the store of a group's runs and renders a rich table."""

    def __init__(self, group_dir: Path, keys: list[RunKey]) -> None:
        self.group_dir = group_dir
        self.runs = [_RunView(key=k, folder=k.folder(group_dir)) for k in keys]
        self.started = time.monotonic()
        log = group_dir / GROUP_LOG
        self.log_start = log.stat().st_size if log.is_file() else 0
        """Where the group's log ended when this display began: a resume prints only the
        lines of its own work, not those of the runs before it."""

    def poll(self) -> None:
        for run in self.runs:
            outcome = load_outcome(run.folder)
            if outcome is not None:
                run.stage, run.status = "finished", outcome.status
                if outcome.status == "failed" and (outcome.reason or "").startswith(PAUSED):
                    run.status = PAUSED  # resumable: it goes on when the group runs again
            elif RunFolder(run.folder).run_file.is_file():
                state = load_state(run.folder, run.key)
                running = [s for s in STAGES if state.stages[s].status == "running"]
                failed = [s for s in STAGES if state.stages[s].status == "failed"]
                done = [s for s in STAGES if state.stages[s].status in ("done", "skipped")]
                if running:
                    run.stage, run.status = running[0], "running"
                elif failed:
                    run.stage, run.status = failed[0], "failed"
                elif done:
                    run.stage, run.status = done[-1], "done"
            files = RunFolder(run.folder)
            _read_tail(files.grading_leaves, run.leaves, costs=False)
            _read_tail(files.rollout_costs, run.costs, costs=True)
            _read_tail(files.grading_costs, run.grading_costs, costs=True)

    def usd(self, run: _RunView) -> float:
        return run.costs.usd + run.grading_costs.usd

    def render(self) -> RenderableType:
        active = [r for r in self.runs if r.status == "running"]
        shown = self.runs if len(self.runs) <= MAX_ROWS else active[:MAX_ROWS]
        table = Table(box=None, pad_edge=False, show_edge=False)
        table.add_column("run", overflow="fold")
        table.add_column("stage")
        table.add_column("leaves", justify="right")
        table.add_column("$", justify="right")
        for run in shown:
            style = {
                "failed": "red",
                "disqualified": "red",
                "running": "cyan",
                PAUSED: "yellow",
            }.get(run.status, "")
            stage = run.stage if run.stage == "pending" else f"{run.stage} {run.status}"
            table.add_row(
                run.key.label,
                Text(stage, style=style),
                str(run.leaves.lines) if run.leaves.lines else "-",
                f"{self.usd(run):.4f}",
            )
        line = Text(self.render_line())
        return Group(table, line) if shown else line

    def render_line(self) -> str:
        """One line: runs finished by status, running, dollars and time so far."""
        finished = [r for r in self.runs if r.stage == "finished"]
        active = [r for r in self.runs if r.status == "running"]
        counts: dict[str, int] = {}
        for run in finished:
            counts[run.status] = counts.get(run.status, 0) + 1
        total = sum(self.usd(r) for r in self.runs)
        elapsed = time.monotonic() - self.started
        return (
            f"{len(finished)}/{len(self.runs)} runs finished"
            + "".join(f", {n} {status}" for status, n in sorted(counts.items()))
            + f"; {len(active)} running; ${total:.4f} so far; {elapsed:.0f} s"
        )

    async def show(self, console: Console, until: asyncio.Future[Any]) -> None:
        """Refresh the display every half second until ``until`` is done; piped, print each
        new line of the group's log instead (a line per stage a run begins or ends)."""
        if not console.is_terminal and not console.is_jupyter:
            await self._lines(console, until)
            return
        with Live(self.render(), console=console, refresh_per_second=2, transient=False) as live:
            while not until.done():
                await asyncio.sleep(0.5)
                await asyncio.to_thread(self.poll)
                live.update(self.render())
            self.poll()
            live.update(self.render())

    async def _lines(self, console: Console, until: asyncio.Future[Any]) -> None:
        log = _Tail(offset=self.log_start)
        path = self.group_dir / GROUP_LOG

        def new_lines() -> list[str]:
            if not path.is_file():
                return []
            with path.open("rb") as f:
                f.seek(log.offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            log.offset += end
            return data[:end].decode("utf-8", "replace").splitlines()

        while True:
            done = until.done()
            for line in await asyncio.to_thread(new_lines):
                console.print(line, markup=False, highlight=False)
            if done:
                break
            await asyncio.sleep(0.5)
        self.poll()
        console.print(self.render_line(), markup=False, highlight=False)
