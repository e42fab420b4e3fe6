"""``paperbench monitor RUN``: the blacklist monitor from the command line (thin)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from paperbench._console import console, print_table, printable, warning
from paperbench.agents._base import read_transcript
from paperbench.agents._monitor import (
    NETWORK_LOG_FILE,
    REPORT_FILE,
    TRANSCRIPT_FILE,
    MonitorPolicy,
    MonitorReport,
    monitor_run,
    paper_rules,
    write_report,
)
from paperbench.agents._transcript import StartEvent
from paperbench.errors import InputError, UsageError
from paperbench.papers import PaperSource
from paperbench.sandbox import Blacklist, read_blacklist

PRINTED_HITS = 40
"""Hits shown on the console; monitor.json lists them all (up to MAX_HITS)."""
EXIT_FLAGGED = 3
"""Exit code when the run is flagged (a blacklisted address was found)."""


def _paper_of_run(run: Path) -> str:
    """The paper id the run's transcript starts with."""
    for event in read_transcript(run / TRANSCRIPT_FILE):
        if isinstance(event, StartEvent):
            return event.paper_id
    raise UsageError(
        f"{run / TRANSCRIPT_FILE}: no start event names the paper; pass --paper ID or "
        "--blacklist FILE"
    )


def _paper_files(
    run: Path, paper_id: str | None, data_dir: Path | None
) -> tuple[Blacklist, dict[str, str]]:
    """The paper's blacklist, and the texts of the files the agent was given (their echoes
    in tool outputs are listed, not counted)."""
    if paper_id is None:
        paper_id = _paper_of_run(run)
    paper = PaperSource.resolve(data_dir).load(paper_id)
    rules, echoes, warnings = paper_rules(paper)
    for line in warnings:
        warning(line)
    return rules, echoes


def _print(report: MonitorReport) -> None:
    if report.hits:
        table = Table("where", "field", "rule", "found")
        for hit in report.hits[:PRINTED_HITS]:
            where = f"{hit.source}:{hit.line}" + (f" step {hit.step}" if hit.step else "")
            field = (hit.event + "." if hit.event else "") + (hit.field or "")
            if hit.verdict:
                field += f" ({hit.verdict})"
            if hit.echo_of:
                field += f" (echo of {hit.echo_of}, not counted)"
            table.add_row(where, field, printable(hit.rule), printable(hit.url))
        print_table(table)
        if report.hits_total > PRINTED_HITS:
            more = report.hits_total - PRINTED_HITS
            console.print(f"… {more} more hits in {report.run}/{REPORT_FILE}")
    if report.unreadable_reasoning:
        warning(
            f"{report.unreadable_reasoning} reasoning items are encrypted and were not scanned "
            "(the agent's messages, tool calls and requests were)"
        )
    if report.verdict == "clean":
        echoes = report.hits_total - report.counted
        console.print(
            f"clean: no blacklisted address in {report.transcript_events} events"
            f" and {report.network_entries} network requests"
            + (f" ({echoes} hits in tool outputs echo the paper's files)" if echoes else "")
        )
    else:
        action = "disqualified" if report.disqualify else "flagged"
        console.print(f"{action}: {printable(report.reason or '')}")


def monitor(
    run: Annotated[Path, typer.Argument(help="The run folder a rollout wrote.")],
    paper: Annotated[
        str | None,
        typer.Option("--paper", help="Paper id whose blacklist to use (default: the run's paper)."),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help="PaperBench data directory (default: PAPERBENCH_DATA_DIR, else the bundled "
            "papers).",
        ),
    ] = None,
    blacklist: Annotated[
        Path | None,
        typer.Option("--blacklist", help="A blacklist file to use instead of the paper's."),
    ] = None,
    policy: Annotated[
        MonitorPolicy,
        typer.Option(
            help="What a hit means: disqualify (the run scores 0 with the reason) or flag "
            "(recorded only)."
        ),
    ] = "disqualify",
    as_json: Annotated[bool, typer.Option("--json", help="Print monitor.json.")] = False,
) -> None:
    """Scan a run's transcript and network log for blacklisted addresses; write monitor.json.

    Exit 0 when clean, 3 when flagged (whatever the policy), 1 on bad input.
    """
    if not run.is_dir():
        raise InputError("not a folder; give the run folder a rollout wrote", file=run)
    if not (run / TRANSCRIPT_FILE).is_file():
        raise InputError(f"no {TRANSCRIPT_FILE}; give the run folder a rollout wrote", file=run)
    if blacklist is not None and paper is not None:
        raise UsageError("give --blacklist FILE or --paper ID, not both")
    if blacklist is not None:
        try:
            rules = read_blacklist(blacklist)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        echoes = {"blacklist.txt": blacklist.read_text(encoding="utf-8")}
    else:
        rules, echoes = _paper_files(run, paper, data_dir)
    if not (run / NETWORK_LOG_FILE).is_file():
        warning(f"{run / NETWORK_LOG_FILE}: no network log; only the transcript is scanned")
    report = monitor_run(run, rules, policy=policy, echoes=echoes)
    try:
        write_report(report, run)
    except OSError as exc:
        raise InputError(f"cannot write {REPORT_FILE}: {exc.strerror}", file=run) from None
    if as_json:
        console.print(report.model_dump_json(indent=2), markup=False, highlight=False)
    else:
        _print(report)
    if report.verdict == "flagged":
        raise typer.Exit(EXIT_FLAGGED)
