"""``paperbench rcb``: ResearchCodeBench task mode. ``rcb list`` shows a problem set."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from paperbench import _entry
from paperbench._console import console, plural, print_table, printable
from paperbench._model_options import from_options, model_flags, option, with_options
from paperbench._options import (
    AllowUnsandboxed,
    Image,
    Json,
    ResumableModel,
    Sandbox,
    parse_concurrency,
    parse_duration,
)
from paperbench.rcb._environment import advice
from paperbench.rcb._html import read_summary, write_rcb_report
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._models import TEST_ENTRY, ProblemSet, RcbSummary, TestOutcome
from paperbench.rcb._published import load_published
from paperbench.rcb._runner import validate
from paperbench.rcb._settings import RCB_DIR_ENV, RcbSettings, papers_flag, rcb_dir
from paperbench.sandbox import SandboxConfig

RcbDir = Annotated[
    Path | None,
    typer.Option(
        "--rcb-dir",
        metavar="DIR",
        help=f"A clone of ResearchCodeBench (or its pset/ folder); default: ${RCB_DIR_ENV}.",
    ),
]
"""The problem set every ``rcb`` command reads (resolve it with :func:`rcb_dir`)."""

app = typer.Typer(
    help="ResearchCodeBench: fill in code from a paper, graded by its unit tests.",
    no_args_is_help=True,
)


def problem_rows(problem_set: ProblemSet) -> list[dict[str, Any]]:
    """One row per problem (snippet), in file order: what ``rcb list --json`` prints."""
    return [
        {
            "paper": s.paper,
            "snippet": s.name,
            "id": s.id,
            "file": s.file,
            "line": s.start + 1,
            "code_lines": s.code_lines,
            "depth": s.depth,
            "parent": s.parent,
            "test": TEST_ENTRY,
        }
        for s in problem_set.snippets
    ]


@app.command("list")
def rcb_list(rcb_dir_opt: RcbDir = None, as_json: Json = False) -> None:
    """The papers of a problem set and their problems: every snippet (nested ones indented
    under their parent), its code lines (its weight) and the test that grades it."""
    problem_set = load_problem_set(rcb_dir(rcb_dir_opt))
    rows = problem_rows(problem_set)
    if as_json:
        console.print(json.dumps(rows, indent=2), markup=False)
        return
    lines = sum(row["code_lines"] for row in rows)
    table = Table(
        title=f"{plural(len(problem_set.papers), 'paper')}, {plural(len(rows), 'problem')}, "
        f"{plural(lines, 'code line')} ({problem_set.root})"
    )
    table.add_column("paper", overflow="fold")
    table.add_column("file", overflow="fold")
    table.add_column("snippet", overflow="fold")
    table.add_column("lines", justify="right", no_wrap=True)
    table.add_column("test", overflow="fold")
    for paper in problem_set.papers:
        mine = [row for row in rows if row["paper"] == paper.id]
        for index, row in enumerate(mine):
            first = index == 0
            table.add_row(
                Text(printable(paper.id)) if first else "",
                Text(printable(f"{row['file']}:{row['line']}")),
                Text("  " * row["depth"] + printable(row["snippet"])),
                str(row["code_lines"]),
                TEST_ENTRY if first else "",
                end_section=index == len(mine) - 1,
            )
        if not mine:
            table.add_row(Text(printable(paper.id)), "-", "(no snippet)", "0", TEST_ENTRY)
    print_table(table)


Papers = Annotated[
    str | None,
    typer.Option(metavar="PAPERS", help="Comma-separated paper ids (default: every paper)."),
]
TestTimeout = Annotated[
    float,
    typer.Option(
        metavar="DURATION",
        parser=parse_duration,
        help="Time limit of one test, e.g. 60 or 2m (a test that hangs fails as timeout).",
    ),
]
At = Annotated[
    list[str] | None,
    typer.Option(
        "--concurrency",
        metavar="STAGE=N",
        help="Tests at once (tests=N, default 4; also one-shot model calls at once) and, with "
        "--mode agent, agents at once (agents=N, default 2): one sandbox each.",
    ),
]


def _sandbox(backend: str, allow_unsandboxed: bool) -> SandboxConfig:
    return SandboxConfig(backend=backend, allow_unsandboxed=allow_unsandboxed)  # type: ignore[arg-type]


@app.command("validate")
def rcb_validate(
    rcb_dir_opt: RcbDir = None,
    papers: Papers = None,
    sandbox: Sandbox = "auto",
    allow_unsandboxed: AllowUnsandboxed = False,
    image: Image = None,
    timeout: TestTimeout = 60.0,
    concurrency: At = None,
    as_json: Json = False,
) -> None:
    """The benchmark's own sanity check, in the sandbox: every paper's test passes with its
    reference code, and fails with each snippet left empty. A problem that breaks either rule
    is listed (exit code 1); `rcb run` leaves out a problem whose empty fill passes."""
    slots = parse_concurrency(concurrency, {"tests": 4})
    rows = asyncio.run(
        validate(
            rcb_dir(rcb_dir_opt),
            sandbox=_sandbox(sandbox, allow_unsandboxed),
            papers=papers_flag(papers),
            image=image,
            timeout_s=timeout,
            concurrency=slots["tests"],
        )
    )
    if as_json:
        console.print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2), markup=False)
    else:
        table = Table(title=f"{plural(len(rows), 'problem')} checked")
        for column in ("problem", "lines", "reference", "empty fill"):
            table.add_column(column, justify="right" if column == "lines" else "left")
        for row in rows:
            table.add_row(
                Text(printable(row.problem)),
                str(row.code_lines),
                _verdict(row.reference, want_pass=True),
                _verdict(row.empty, want_pass=False),
            )
        print_table(table)
        good = sum(r.ok for r in rows)
        console.print(
            f"{good}/{len(rows)} problems sound: references passing "
            f"{sum(r.reference.passed for r in rows)}, empty fills failing "
            f"{sum(not r.empty.passed and r.empty.error_class != 'sandbox_error' for r in rows)}"
        )
        hint = advice(
            [r.reference for r in rows],
            sandbox=_sandbox(sandbox, allow_unsandboxed),
            image=image,
            timeout_s=timeout,
            command="rcb validate",
        )
        if hint:
            console.print(Text(f"for the failing references: {hint}"))
    if any(not r.ok for r in rows):
        raise typer.Exit(1)


def _verdict(outcome: TestOutcome, *, want_pass: bool) -> Text:
    if outcome.error_class == "sandbox_error":
        return Text(f"sandbox error: {outcome.detail or ''}", style="red")
    word = "passes" if outcome.passed else f"fails ({outcome.error_class})"
    good = outcome.passed == want_pass
    return Text(word, style="" if good else "red")


RCB_OPTIONS: dict[str, Any] = {
    "--model": ResumableModel,
    "--rcb-dir": RcbDir,
    "--papers": Papers,
    "--timeout": TestTimeout,
    "--concurrency": At,
}
"""The options ``rcb run`` takes as the other ``rcb`` commands do (over
:data:`paperbench._options.SHARED`), by flag."""


def _as_given(ctx: typer.Context, settings: RcbSettings) -> RcbSettings:
    """``settings`` with only the options given on the command line set (what a resume
    compares with the run's own)."""
    given = [
        path[0] for path, _, flag in model_flags(RcbSettings) if _on_command_line(ctx, flag.param)
    ]
    return RcbSettings.model_validate({name: getattr(settings, name) for name in given})


def _rcb_run(ctx: typer.Context, as_json: bool, **values: Any) -> None:
    result = _entry.rcb_run(_as_given(ctx, from_options(RcbSettings, values)))
    if as_json:
        console.print(result.summary.model_dump_json(indent=2), markup=False)
        return
    _print_summary(result.summary)
    console.print(f"summary: {result.out_dir / 'summary.json'}")
    console.print(f"report: {result.report}")


def _run_command(ctx: typer.Context, as_json: bool = False, **values: Any) -> None:
    _rcb_run(ctx, as_json, **values)


_run_command.__doc__ = (
    "Ask a model for every problem's missing code, put it in the snippet's place and run "
    "the paper's test in a fresh sandbox with no network; write OUT/summary.json with the "
    "line-weighted and plain pass rates. Answers and tests are kept per problem: kill it at "
    "any moment and continue with --resume OUT (the run's own options: an option given that "
    "differs is refused, naming it)."
)
rcb_run = app.command("run")(
    with_options(
        _run_command,
        RcbSettings,
        context=True,
        after=[option("as_json", Json, False)],
        shared=RCB_OPTIONS,
    )
)
"""``paperbench rcb run``: :func:`paperbench.rcb_run` from the command line, its options made
from :class:`~paperbench.rcb.RcbSettings`."""


def _on_command_line(ctx: typer.Context, param: str) -> bool:
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


@app.command("report")
def rcb_report(
    run: Annotated[Path, typer.Argument(help="The folder of an `rcb run` (holds summary.json).")],
    published: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="RCB's published results (their overall_stats.json) to show beside the run.",
        ),
    ] = None,
    as_json: Json = False,
    html: Annotated[
        bool, typer.Option("--html/--no-html", help="Write the static HTML report.")
    ] = True,
) -> None:
    """A run's scores per paper and overall, with the published models' scores beside them
    (the same rates: line-weighted and plain pass rate). Writes RUN/report/index.html and a
    page per problem (the masked file, each answer as a diff against the reference, its test
    and output) that work opened from disk."""
    summary = read_summary(run)
    rows = load_published(published) if published is not None else []
    index = write_rcb_report(run, rows) if html else None
    if as_json:
        data = {
            "run": summary.model_dump(mode="json"),
            "published": [r.model_dump(mode="json") for r in rows],
        }
        console.print(json.dumps(data, indent=2), markup=False)
        return
    _print_summary(summary)
    if rows:
        table = Table(title=f"beside published results ({published})")
        for column in ("model", "line-weighted", "unweighted"):
            table.add_column(column, justify="left" if column == "model" else "right")
        table.add_row(
            Text(f"{summary.model} (this run)", style="bold"),
            _pct(summary.overall.line_weighted),
            _pct(summary.overall.unweighted),
        )
        for row in sorted(rows, key=lambda r: -(r.overall.line_weighted or 0.0)):
            table.add_row(
                Text(printable(row.pretty_name)),
                _pct(row.overall.line_weighted),
                _pct(row.overall.unweighted),
            )
        print_table(table)
    if index is not None:
        console.print(f"report: {index}")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _print_summary(summary: RcbSummary) -> None:
    paper = "with" if summary.with_paper else "without"
    table = Table(title=f"{summary.model} ({summary.mode}, {paper} the paper)")
    for column in ("paper", "problems", "lines", "line-weighted", "unweighted"):
        table.add_column(column, justify="left" if column == "paper" else "right")
    for score in summary.papers:
        rate = score.rate
        table.add_row(
            Text(printable(score.paper)),
            str(rate.problems),
            str(rate.lines),
            _pct(rate.line_weighted),
            _pct(rate.unweighted),
        )
    overall = summary.overall
    table.add_row(
        "all",
        str(overall.problems),
        str(overall.lines),
        _pct(overall.line_weighted),
        _pct(overall.unweighted),
        style="bold",
    )
    print_table(table)
    if summary.errors:
        said = ", ".join(f"{n} {kind}" for kind, n in sorted(summary.errors.items()))
        console.print(f"failed answers by error: {said}")
    if summary.broken:
        names = ", ".join(summary.broken)
        console.print(f"left out as broken (their test passes with the snippet empty): {names}")
    if summary.not_run:
        console.print(
            f"not run yet ({plural(len(summary.not_run), 'problem')}: a model or sandbox "
            f"failure; --resume runs them): {', '.join(summary.not_run[:10])}"
        )
    _print_unrunnable(summary)


def _print_unrunnable(summary: RcbSummary) -> None:
    """The problems that cannot run here, by reason, and the rates' denominator."""
    by_reason: dict[str, list[str]] = {}
    for problem, why in summary.not_runnable.items():
        by_reason.setdefault(why, []).append(problem)
    for why, problems in by_reason.items():
        more = f" and {len(problems) - 10} more" if len(problems) > 10 else ""
        console.print(
            Text(
                f"not runnable in this environment ({plural(len(problems), 'problem')}): "
                f"{printable(why)}: {', '.join(problems[:10])}{more}"
            )
        )
    if summary.environment_advice:
        console.print(Text(f"to run them: {printable(summary.environment_advice)}"))
    if summary.listed is not None and summary.listed != summary.overall.problems:
        console.print(
            f"rates over {summary.overall.problems} of the {summary.listed} problems listed"
        )
