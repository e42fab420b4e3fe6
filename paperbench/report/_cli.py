"""``paperbench report GROUP``: the tables, summary.json and the static HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import (
    console,
    error,
    plural,
    print_table,
    printable,
    unanswered_line,
    unanswered_note,
    warning,
)
from paperbench._options import Json, Out
from paperbench.errors import UsageError
from paperbench.llm import CostTotal
from paperbench.report._metrics import Estimate, Summary
from paperbench.report._write import INDEX_FILE, html_dir, summary_path, write_report


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
    roles = judge.role_models()
    models = ", ".join(f"{role} {model}" for role, model in sorted(roles.items()))
    if judge.model_override and all(m == judge.model_override for m in roles.values()):
        models = f"every role on {judge.model_override}"
        if roles:
            config = ", ".join(f"{role} {model}" for role, model in sorted(judge.models.items()))
            models += f", instead of the config's {config}"
    models = f"; {models}" if models else "; calls no model"
    return (
        f"judge {judge.name or judge.ref} (sha256 {(judge.sha256 or '?')[:12]}{models})"
        f" · papers {s.paper_set} ({len(s.papers)}) · mode {s.mode}"
        f" · resources provided {'yes' if s.resources_provided else 'no'} · seeds {s.seeds}"
    )


def _leaderboard(s: Summary) -> Table:
    table = Table(title=f"{s.group}: leaderboard")
    table.add_column("agent", overflow="fold")
    table.add_column("model", overflow="fold")
    columns = ["score ± SE", "failures as 0", "scored/runs", "coverage", "flagged", "cost"]
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    for a in s.agents:
        counted = f"{a.counted}/{a.runs}"
        if a.incomplete_seeds:
            counted += f" ({plural(len(a.incomplete_seeds), 'seed')} incomplete)"
        table.add_row(
            Text(printable(a.agent)),
            Text(printable(a.model or "-")),
            _estimate(a.score),
            _estimate(a.failures_as_zero),
            counted,
            _pct(a.coverage),
            Text(str(a.flagged_runs), style="red") if a.flagged_runs else "-",
            _usd(a.costs.total),
        )
    return table


def _papers(s: Summary) -> Table:
    table = Table(title="score per paper (counted seeds / runs)")
    table.add_column("paper", overflow="fold")
    for a in s.agents:
        table.add_column(Text(printable(a.label or a.agent)), justify="right", overflow="fold")
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


def _flagged(s: Summary) -> Table:
    runs = [r for r in s.runs if r.why is not None]
    table = Table(title=f"runs the monitor flagged ({len(runs)})")
    table.add_column("run", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("why", overflow="fold")
    for run in runs:
        status = run.status + (" (flagged)" if run.status != "disqualified" else "")
        table.add_row(Text(printable(run.label)), status, Text(printable(run.why or "")))
    return table


SHOWN_FINDINGS = 3
"""Places of text addressed to the judge listed per run in the terminal (the rest counted)."""


def _addressed(s: Summary) -> Table:
    runs = [r for r in s.runs if r.addressed_places]
    total = sum(r.addressed_places for r in runs)
    table = Table(
        title=f"text addressed to the judge ({plural(total, 'place')} in "
        f"{plural(len(runs), 'run')})"
    )
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
    table.add_column("by", overflow="fold")
    table.add_column("name", overflow="fold")
    # requests a provider answered apart from calls refused before sending (no key, budget
    # reached): a run with no key sent nothing, however many calls it tried; attempts that
    # got no HTTP answer are shown beside them, not in them
    table.add_column("requests sent", justify="right")
    table.add_column("refused unsent", justify="right")
    table.add_column("cost", justify="right", no_wrap=True)
    groups = [("stage", s.costs.by_stage), ("model", s.costs.by_model)]
    groups += [(f"agent {a.label or a.agent}", {"total": a.costs.total}) for a in s.agents]
    for by, totals in groups:
        for name, total in sorted(totals.items()):
            table.add_row(
                Text(printable(by)),
                Text(printable(name)),
                _requests(total),
                str(total.refused),
                _usd(total),
            )
    total = s.costs.total
    table.add_row("all", "total", _requests(total), str(total.refused), _usd(total))
    if total.unanswered:
        table.caption = unanswered_line("total", total.unanswered)
    return table


def _requests(total: CostTotal) -> str:
    note = f" ({unanswered_note(total.unanswered)})" if total.unanswered else ""
    if total.batched:
        note += f" ({total.batched} batched)"
    return f"{total.requests}{note}"


def _hours(s: Summary) -> Table:
    table = Table(title="hours by stage")
    table.add_column("agent", overflow="fold")
    for stage in s.hours_by_stage:
        table.add_column(stage, justify="right", no_wrap=True)
    for a in s.agents:
        hours = [f"{a.hours_by_stage.get(stage, 0.0):.2f}" for stage in s.hours_by_stage]
        table.add_row(Text(printable(a.label or a.agent)), *hours)
    table.add_row("total", *(f"{h:.2f}" for h in s.hours_by_stage.values()))
    return table


def print_summary(s: Summary) -> None:
    """The report's tables on stdout (the identity of the judge first)."""
    console.print(Text(printable(_identity_line(s))))
    print_table(_leaderboard(s))
    print_table(_papers(s))
    if s.not_scored:
        print_table(_not_scored(s))
    if any(r.why is not None for r in s.runs):
        print_table(_flagged(s))
    if any(r.addressed_places for r in s.runs):
        print_table(_addressed(s))
    print_table(_costs(s))
    print_table(_hours(s))


def show_report(
    summary: Summary, group: Path, *, out: Path | None = None, html: bool = True
) -> bool:
    """Print a written report: its tables, what does not compare, the files that could not
    be read, and where summary.json and the HTML are. True when a file could not be read."""
    print_summary(summary)
    _say_problems(summary, group)
    console.print(f"summary: {summary_path(group)}")
    if html:
        console.print(f"report: {html_dir(group, out) / INDEX_FILE}")
    return bool(summary.problems)


def _say_problems(summary: Summary, group: Path) -> None:
    for mismatch in summary.judge_mismatches:
        differ = ", ".join(mismatch.fields)
        warning(
            f"scores not comparable: {mismatch.run} was graded by another judge ({differ} "
            "differ from group.json); regrade it with the group's judge"
        )
    for problem in summary.problems:
        error(str(problem))
    if summary.problems:
        files = plural(len(summary.problems), "file")
        warning(
            f"{files} above could not be read and are left out of the report; "
            f"repair or remove them and run paperbench report {group} again"
        )


def report_command(
    group: Annotated[
        Path, typer.Argument(help="A run group folder that paperbench run wrote (runs/<group>).")
    ],
    as_json: Json = False,
    html: Annotated[
        bool, typer.Option("--html/--no-html", help="Write the static HTML report.")
    ] = True,
    out: Out = None,
) -> None:
    """Metrics over a run group: a leaderboard (score ± standard error over seeds and a
    failures-as-0 lower bound), scores per paper, runs not scored with their reason, text
    addressed to the judge that the grading found, costs and hours by stage. Writes
    GROUP/summary.json and a static HTML report (index.html and one page per run, in
    GROUP/report or the --out folder) that works opened from disk. A file that cannot be
    read is named and left out (exit code 1 once everything is written)."""
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder; give a folder for the HTML report")
    summary = write_report(group, out, html=html)
    if as_json:
        console.print(summary.model_dump_json(indent=2), markup=False, soft_wrap=True)
        _say_problems(summary, group)
        failed = bool(summary.problems)
    else:
        failed = show_report(summary, group, out=out, html=html)
    if failed:
        raise typer.Exit(1)
