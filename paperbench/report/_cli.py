"""``paperbench report GROUP``: the tables, summary.json and the static HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import console, error, print_table, printable, warning
from paperbench.errors import InputError, UsageError
from paperbench.llm import CostTotal
from paperbench.report._files import read_group_files
from paperbench.report._html import write_html
from paperbench.report._metrics import Estimate, Summary, summarize_group
from paperbench.runs._store import REPORT_DIR, SUMMARY_FILE, write_model


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _estimate(e: Estimate) -> str:
    if e.mean is None:
        return "-"
    return _pct(e.mean) + (f" ± {100 * e.se:.1f}" if e.se is not None else " (1 seed)")


def _usd(total: CostTotal) -> str:
    text = f"${total.cost_usd:.2f}"
    return text + (f" + {total.unpriced_calls} unpriced" if total.unpriced_calls else "")


def _identity_line(s: Summary) -> str:
    judge = s.judge
    models = ", ".join(f"{role} {model}" for role, model in sorted(judge.models.items()))
    line = (
        f"judge {judge.name or judge.ref} (sha256 {(judge.sha256 or '?')[:12]}; {models})"
        f" · papers {s.paper_set} ({len(s.papers)}) · mode {s.mode}"
        f" · resources provided {'yes' if s.resources_provided else 'no'} · seeds {s.seeds}"
    )
    if judge.model_override:
        line += f" · every judge role on {judge.model_override}"
    return line


def _leaderboard(s: Summary) -> Table:
    table = Table(title=f"{s.group}: leaderboard")
    table.add_column("agent", overflow="fold")
    for column in ["score ± SE", "failures as 0", "scored/runs", "coverage", "cost"]:
        table.add_column(column, justify="right", no_wrap=True)
    for a in s.agents:
        counted = f"{a.counted}/{a.runs}"
        if a.incomplete_seeds:
            n = len(a.incomplete_seeds)
            counted += f" ({n} seed{'s' if n != 1 else ''} incomplete)"
        table.add_row(
            Text(printable(a.agent)),
            _estimate(a.score),
            _estimate(a.failures_as_zero),
            counted,
            _pct(a.coverage),
            _usd(a.costs.total),
        )
    return table


def _papers(s: Summary) -> Table:
    table = Table(title="score per paper (counted seeds / runs)")
    table.add_column("paper", overflow="fold")
    for a in s.agents:
        table.add_column(Text(printable(a.agent)), justify="right", no_wrap=True)
    for index, paper in enumerate(s.papers):
        cells = []
        for a in s.agents:
            p = a.papers[index]
            cells.append(f"{_pct(p.mean)} ({p.counted}/{p.runs})")
        table.add_row(Text(printable(paper)), *cells)
    return table


def _not_scored(s: Summary) -> Table:
    table = Table(title=f"runs not scored ({len(s.not_scored)})")
    table.add_column("run", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for n in s.not_scored:
        table.add_row(Text(printable(n.run)), n.status, Text(printable(n.reason)))
    return table


SHOWN_FINDINGS = 3
"""Places of text addressed to the judge listed per run in the terminal (the rest counted)."""


def _addressed(s: Summary) -> Table:
    runs = [r for r in s.runs if r.addressed_places]
    total = sum(r.addressed_places for r in runs)
    table = Table(title=f"text addressed to the judge ({total} places in {len(runs)} runs)")
    table.add_column("run", overflow="fold")
    table.add_column("places", justify="right", no_wrap=True)
    table.add_column("where and what", overflow="fold")
    for run in runs:
        seen: dict[tuple[str, int | None, str], None] = {}
        for f in run.addressed_to_judge:
            seen.setdefault((f.file, f.line, f.text))
        lines = [
            f'{file}:{line if line is not None else "?"} "{text}"'
            for file, line, text in list(seen)[:SHOWN_FINDINGS]
        ]
        if len(seen) > SHOWN_FINDINGS:
            lines.append(f"+{len(seen) - SHOWN_FINDINGS} more (see the run's page)")
        table.add_row(
            Text(printable(run.label)), str(run.addressed_places), Text(printable("; ".join(lines)))
        )
    return table


def _costs(s: Summary) -> Table:
    table = Table(title="costs")
    table.add_column("by", no_wrap=True)
    table.add_column("name", overflow="fold")
    # requests that reached a provider apart from calls refused before sending (no key,
    # budget reached): a run with no key sent nothing, however many calls it tried
    table.add_column("requests sent", justify="right")
    table.add_column("refused unsent", justify="right")
    table.add_column("cost", justify="right", no_wrap=True)
    groups = [("stage", s.costs.by_stage), ("model", s.costs.by_model)]
    groups += [(f"agent {a.agent}", {"total": a.costs.total}) for a in s.agents]
    for by, totals in groups:
        for name, total in sorted(totals.items()):
            table.add_row(
                Text(printable(by)),
                Text(printable(name)),
                str(total.sent),
                str(total.refused),
                _usd(total),
            )
    total = s.costs.total
    table.add_row("all", "total", str(total.sent), str(total.refused), _usd(total))
    return table


def _hours(s: Summary) -> Table:
    table = Table(title="hours by stage")
    table.add_column("agent", overflow="fold")
    for stage in s.hours_by_stage:
        table.add_column(stage, justify="right", no_wrap=True)
    for a in s.agents:
        hours = [f"{a.hours_by_stage.get(stage, 0.0):.2f}" for stage in s.hours_by_stage]
        table.add_row(Text(printable(a.agent)), *hours)
    table.add_row("total", *(f"{h:.2f}" for h in s.hours_by_stage.values()))
    return table


def print_summary(s: Summary) -> None:
    console.print(Text(printable(_identity_line(s))))
    print_table(_leaderboard(s))
    print_table(_papers(s))
    if s.not_scored:
        print_table(_not_scored(s))
    if any(r.addressed_places for r in s.runs):
        print_table(_addressed(s))
    print_table(_costs(s))
    print_table(_hours(s))


def report_command(
    group: Annotated[
        Path, typer.Argument(help="A run group folder that paperbench run wrote (runs/<group>).")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON instead of tables.")
    ] = False,
    html: Annotated[
        bool, typer.Option("--html/--no-html", help="Write the static HTML report.")
    ] = True,
    out: Annotated[
        Path | None,
        typer.Option(help="Where to write the HTML report (default: GROUP/report)."),
    ] = None,
) -> None:
    """Metrics over a run group: a leaderboard (score ± standard error over seeds and a
    failures-as-0 lower bound), scores per paper, runs not scored with their reason, text
    addressed to the judge that the grading found, costs and hours by stage. Writes
    GROUP/summary.json and a static HTML report (index.html and
    one page per run) that works opened from disk. A file that cannot be read is named and
    left out (exit code 1 once everything is written)."""
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder; give a folder for the HTML report")
    files = read_group_files(group)
    summary = summarize_group(files)
    html_dir = out if out is not None else group / REPORT_DIR
    index: Path | None = None
    try:
        write_model(group / SUMMARY_FILE, summary)
        if html:
            index = write_html(summary, files, html_dir)
    except OSError as exc:
        where = exc.filename2 or exc.filename or group
        raise InputError(
            f"cannot write ({exc.strerror}); make the folder writable or give --out elsewhere",
            file=where,
        ) from None
    if as_json:
        console.print(summary.model_dump_json(indent=2), markup=False, soft_wrap=True)
    else:
        print_summary(summary)
    for mismatch in summary.judge_mismatches:
        differ = ", ".join(mismatch.fields)
        warning(
            f"scores not comparable: {mismatch.run} was graded by another judge ({differ} "
            "differ from group.json); regrade it with the group's judge"
        )
    for problem in summary.problems:
        error(str(problem))
    if not as_json:
        console.print(f"summary: {group / SUMMARY_FILE}")
        if index is not None:
            console.print(f"report: {index}")
    if summary.problems:
        count = len(summary.problems)
        warning(
            f"{count} file(s) above could not be read and are left out of the report; "
            f"repair or remove them and run paperbench report {group} again"
        )
        raise typer.Exit(1)
