"""``paperbench judge-eval``: judge configs over gold sets, a table across configs (thin)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from paperbench._console import console, err_console, print_table, printable
from paperbench._io import atomic_write_text
from paperbench.errors import UsageError
from paperbench.judge._config import load_judge_config
from paperbench.judge._eval import GradeFn, JudgeEvalReport, judge_eval, load_gold_set
from paperbench.papers import DATA_DIR_ENV

CATEGORY_COLUMNS = {
    "Code Development": "F1 dev",
    "Code Execution": "F1 exec",
    "Result Analysis": "F1 res",
}


def load_grade_fn(work: Path) -> GradeFn:
    """The grading engine's :func:`grade_gold`, its resumable folders under ``work``."""
    from paperbench.judge._gold import grade_gold

    return functools.partial(grade_gold, out_root=work)


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_table(report: JudgeEvalReport) -> Table:
    """One row per judge config: the pooled metrics, F1 per category, invalid leaves,
    tokens and dollars per graded submission, wall time."""
    subs = len(report.golds)
    table = Table(
        title=f"JudgeEval: {subs} gold submissions, "
        f"{len({g.paper_id for g in report.golds})} papers, pass = score ≥ "
        f"{report.pass_threshold}"
    )
    table.add_column("judge", overflow="fold", min_width=8)
    for name in ["leaves", "invalid", "acc", "prec", "recall", "F1"]:
        table.add_column(name, justify="right", no_wrap=True)
    categories = [c for c in CATEGORY_COLUMNS if any(c in r.categories for r in report.configs)]
    for category in categories:
        table.add_column(CATEGORY_COLUMNS[category], justify="right", no_wrap=True)
    for name in ["in tok/sub", "$/sub", "wall s"]:
        table.add_column(name, justify="right", no_wrap=True)
    for result in report.configs:
        m = result.overall
        invalid = f"{m.invalid} ({m.invalid_share:.0%})"
        usd = result.cost.cost_usd
        row = [
            Text(printable(result.judge.name)),
            str(m.leaves),
            Text(invalid, style="red") if m.invalid else invalid,
            _num(m.accuracy),
            _num(m.precision),
            _num(m.recall),
            _num(m.f1),
            *[_num(result.categories[c].f1) if c in result.categories else "-" for c in categories],
            f"{result.cost.input_tokens / subs:,.0f}" if subs else "-",
            "?" if usd is None else f"{usd / subs:.4f}" if subs else "-",
            f"{result.wall_time_s:.1f}",
        ]
        table.add_row(*row)
    return table


def _agreement_lines(report: JudgeEvalReport) -> list[str]:
    lines = []
    for a in report.agreement:
        found = "no leaf graded by both" if a.agreement is None else f"{a.agreement:.3f}"
        lines.append(f"verdict agreement {a.first} / {a.second}: {found} ({a.leaves} leaves)")
    return lines


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out}: the folder is not empty; give a new or empty folder")


def judge_eval_command(
    judge: Annotated[
        list[str],
        typer.Option(
            "--judge",
            metavar="CONFIG",
            help="A judge config: a catalog name (simple, simple-faithful, dummy, random) or "
            "a YAML file. Repeat to compare configs.",
        ),
    ],
    gold: Annotated[
        str,
        typer.Option(
            metavar="examples|DIR",
            help="'examples' (this repository's gold-graded examples) or a folder: "
            "PaperBench's data/judge_eval, a data directory holding judge_eval/, or a folder "
            "of <paper>/<name>/ examples.",
        ),
    ] = "examples",
    data_dir: Annotated[
        Path | None,
        typer.Option(
            envvar=DATA_DIR_ENV,
            help="The PaperBench data directory the papers come from (default: the one "
            "holding --gold's judge_eval/, else this repository's papers).",
        ),
    ] = None,
    paper: Annotated[
        list[str] | None,
        typer.Option("--paper", metavar="ID", help="Only this paper's gold submissions."),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Submissions graded at once.")] = 2,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write report.json and every predicted tree (<judge>/<paper>/<name>/"
            "grade.json) to this new or empty folder.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Measure judge configs against human-graded gold submissions (JudgeEval): accuracy,
    macro precision, recall and F1 of the leaf verdicts, pooled and per category; invalid
    leaves counted apart; tokens, dollars and wall time."""
    if out is not None:
        _check_out(out)
    judges = [load_judge_config(name) for name in judge]
    golds = load_gold_set(gold, data_dir=data_dir, papers=paper)

    def done(judge_name: str, gold_name: str) -> None:
        err_console.print(f"graded {printable(gold_name)} with {printable(judge_name)}")

    with contextlib.ExitStack() as stack:
        # the engine's per-leaf records: kept beside the report with --out, else temporary
        work = (
            out / "gradings"
            if out is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pb-judge-eval-")))
        )
        grade = load_grade_fn(work)
        report = asyncio.run(
            judge_eval(golds, judges, grade, concurrency=concurrency, out=out, progress=done)
        )
    text = report.model_dump_json(indent=2)
    if out is not None:
        atomic_write_text(out / "report.json", text + "\n")
    if as_json:
        console.print(json.dumps(json.loads(text), indent=2), markup=False)
        return
    print_table(report_table(report))
    for line in _agreement_lines(report):
        console.print(Text(line))
