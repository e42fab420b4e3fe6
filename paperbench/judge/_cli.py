"""``paperbench grade`` and ``paperbench judge-eval`` (thin: options, entry point, printing).

``grade`` grades one submission with one or several judge configs (:func:`paperbench.grade`
on :class:`~paperbench.judge.GradeSettings`); ``judge-eval`` measures judge configs against
human-graded gold sets (:func:`paperbench.judge_eval` on
:class:`~paperbench.judge.JudgeEvalSettings`). Both say why a judging failed (invalid leaves by
reason, with the first message of each) and exit 1 when nothing could be graded.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from paperbench import _entry
from paperbench._console import (
    console,
    err_console,
    error,
    plural,
    print_table,
    printable,
    unanswered_line,
    unanswered_note,
    warning,
)
from paperbench._model_options import from_options, option, with_options
from paperbench._options import Json
from paperbench.judge._config import LoadedJudge
from paperbench.judge._ensemble import ensemble_tables, format_interval
from paperbench.judge._eval import JudgeEvalReport
from paperbench.judge._grader import GradeResult
from paperbench.judge._settings import GradeSettings, Grading, JudgeEvalSettings
from paperbench.judge._settings import load_grade_fn as load_grade_fn
from paperbench.judge._types import LeafGrade
from paperbench.llm._batch import BatchCounts, batch_progress

CATEGORY_COLUMNS = {
    "Code Development": "F1 dev",
    "Code Execution": "F1 exec",
    "Result Analysis": "F1 res",
}


# --- what a failed judging says ----------------------------------------------------------


def report_invalid(
    who: str, leaves: int, reasons: Mapping[str, int], messages: Mapping[str, str]
) -> None:
    """On stderr: the invalid leaves by reason, each with its first message."""
    if not reasons:
        return
    total = sum(reasons.values())
    counts = ", ".join(f"{n} {reason}" for reason, n in reasons.items())
    warning(f"{who}: {total} of {plural(leaves, 'leaf', 'leaves')} invalid ({counts})")
    for reason in reasons:
        if reason in messages:
            err_console.print(Text(f"  {reason}: {printable(messages[reason])}"))


# --- progress --------------------------------------------------------------------------


class _GradeProgress:
    """Live progress of a grading on a terminal (leaves graded / total, invalid so far,
    dollars); a line per graded leaf on stderr when piped."""

    def __init__(self) -> None:
        self.live = err_console.is_terminal
        self.total = self.done = self.invalid = 0
        self.usd = 0.0
        self.judge = ""
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._batch_task: TaskID | None = None
        self._batches = ""

    @contextlib.contextmanager
    def running(self) -> Iterator[_GradeProgress]:
        if not self.live:
            yield self
            return
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        with self._bar:
            yield self

    def start(self, judge: LoadedJudge, leaves: int) -> None:
        self.judge, self.total, self.done, self.invalid, self.usd = (
            judge.identity.name,
            leaves,
            0,
            0,
            0.0,
        )
        if self._bar is not None:
            if self._task is not None:
                self._bar.remove_task(self._task)
            self._task = self._bar.add_task(f"grading ({self.judge})", total=leaves, extra="")
        elif leaves:
            err_console.print(f"{self.judge}: {plural(leaves, 'leaf', 'leaves')} to grade")

    def leaf(self, judge: LoadedJudge, grade: LeafGrade) -> None:
        self.done += 1
        self.invalid += not grade.valid
        self.usd += grade.cost.cost_usd or 0.0
        extra = f"{self.invalid} invalid, ${self.usd:.4f}"
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done, extra=extra)
            return
        verdict = f"{grade.score:g}" if grade.valid else f"invalid ({grade.reason})"

        path = ".".join(map(str, grade.path)) or "root"
        err_console.print(
            Text(f"{self.judge}: leaf {self.done}/{self.total} [{path}] {verdict}; {extra}")
        )

    def batches(self, counts: BatchCounts) -> None:
        """Provider batches submitted / in progress / done and their requests answered."""
        line = (
            f"batches: {counts.submitted} submitted, {counts.running} in progress, "
            f"{counts.done} done; {counts.answered} of {counts.requests} requests answered"
        )
        if line == self._batches:
            return
        self._batches = line
        if self._bar is not None:  # the bar: requests answered of those in batches
            done, total = counts.answered, counts.requests
            if self._batch_task is None:
                self._batch_task = self._bar.add_task(line, total=total, completed=done, extra="")
            self._bar.update(self._batch_task, description=line, total=total, completed=done)
            return
        err_console.print(Text(f"{self.judge}: {line}"))


# --- grade ---------------------------------------------------------------------------------


def _table(result: GradeResult, out: Path) -> Table:
    table = Table(title=f"{result.paper_id}: judge {result.judge['name']} ({result.judge['mode']})")
    table.add_column("")
    table.add_column("value", justify="right")
    # the interval is the partial score's (invalid leaves count as 0), so it stands beside the
    # score when there is one and beside the partial score otherwise
    interval = format_interval(result.interval)
    beside = f"  95% interval {interval}" if interval else ""
    score = "unscored" if result.score is None else f"{result.score:.3f}{beside}"
    table.add_row("score", score)
    if result.score is None:
        table.add_row("partial score (not a result)", f"{result.partial_score:.3f}{beside}")
    for category, value in result.scores_by_category.items():
        table.add_row(f"  {category}", f"{value:.3f}")
    table.add_row("coverage", f"{result.coverage:.1%}")
    table.add_row("leaves", str(result.leaves))
    invalid = ", ".join(f"{n} {k}" for k, n in result.invalid_reasons.items())
    table.add_row(
        "invalid leaves", f"{result.invalid_leaves}" + (f" ({invalid})" if invalid else "")
    )
    addressed = {(f.file, f.line, f.text) for f in result.addressed_to_judge()}
    if addressed:
        table.add_row(
            "text addressed to the judge", f"{plural(len(addressed), 'place')} (see grade.json)"
        )
    cost = "unknown (unpriced model)" if result.cost_usd is None else f"${result.cost_usd:.4f}"
    table.add_row("cost", cost)
    requests = str(result.requests)
    if result.unanswered_attempts:
        requests += f" ({unanswered_note(result.unanswered_attempts)})"
    if result.refused_calls:
        requests += f" ({result.refused_calls} more refused before sending)"
    if result.batched_requests:
        requests += f" ({result.batched_requests} in provider batches, at the batch price)"
    table.add_row("requests sent", requests)
    table.add_row(
        "graded now / reused", f"{result.graded_leaves_this_run} / {result.reused_leaves}"
    )
    table.add_row("output", str(out / "grading"))
    return table


def _say_failures(results: list[GradeResult]) -> None:
    """The invalid leaves of each grading by reason; exit 1 when a judging graded nothing."""
    for result in results:
        name = str(result.judge["name"])
        if result.unanswered_attempts:
            warning(unanswered_line(name, result.unanswered_attempts))
        report_invalid(name, result.leaves, result.invalid_reasons, result.invalid_messages)
        for line in result.evidence_warnings():
            warning(f"{name}: {line}")
        if result.unscored_reason:
            warning(f"{name} unscored: {result.unscored_reason}")
    failed = [str(r.judge["name"]) for r in results if r.nothing_graded]
    if failed:
        raise typer.Exit(
            _fail(f"judge {', '.join(failed)}: no leaf that needs a model could be graded")
        )


def _fail(line: str) -> int:
    error(line)
    return 1


def _grade(as_json: bool, **values: Any) -> None:
    settings = from_options(GradeSettings, values)
    progress = _GradeProgress()
    with progress.running(), batch_progress(progress.batches):
        graded = _entry.grade(settings, on_leaf=progress.leaf, on_start=progress.start)
    if graded.repo_score is not None:
        from paperbench.judge._papercoder import render_repo_score

        if as_json:
            console.print_json(graded.repo_score.model_dump_json())
        else:
            console.print(render_repo_score(graded.repo_score))
        return
    _print_grading(graded, as_json)
    _say_failures(graded.results)


def _print_grading(graded: Grading, as_json: bool) -> None:
    report, out_dir = graded.agreement, graded.out_dir
    if report is None:
        result = graded.results[0]
        if as_json:
            summary = result.model_dump(mode="json", exclude={"graded_task_tree"})
            summary["addressed_to_judge"] = [
                f.model_dump(mode="json") for f in result.addressed_to_judge()
            ]
            console.print_json(json.dumps(summary))
        else:
            print_table(_table(result, out_dir))
        return
    if as_json:
        console.print_json(report.model_dump_json())
    else:
        for table in ensemble_tables(report):
            print_table(table)
        console.print(
            f"per-config gradings under {out_dir}/<judge>/grading, agreement in "
            f"{out_dir / 'agreement.json'}"
        )


def grade(as_json: bool = False, **values: Any) -> None:
    """Grade a submission against its paper's rubric with a judge; write grading/grade.json,
    grading/leaves.jsonl (one line per leaf as it is graded) and grading/costs.jsonl into
    --out (default: grade-PAPER-JUDGE; rerun with the same folder to resume). With several
    --judge, each config writes those under OUT/<judge-name>/ and OUT/agreement.json compares
    them. Check leaves run in a sandbox: against --executed, or with --code-dev against the
    submission itself. --concurrency takes leaves=N (leaves or batches graded at once,
    default 16). Exits 1 when no leaf that needs a model could be graded."""
    _grade(as_json, **values)


grade = with_options(grade, GradeSettings, after=[option("as_json", Json, False)])
"""``paperbench grade``: :func:`paperbench.grade` from the command line, its argument and
options made from :class:`~paperbench.judge.GradeSettings`."""


# --- judge-eval ----------------------------------------------------------------------------


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_table(report: JudgeEvalReport) -> Table:
    """One row per judge config: the pooled metrics, F1 per category, invalid leaves,
    requests, tokens and dollars per graded submission, wall time."""
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
    for name in ["requests", "in tok/sub", "$/sub", "wall s"]:
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
            str(result.cost.requests)
            + (f" ({unanswered_note(result.cost.unanswered)})" if result.cost.unanswered else ""),
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
        lines.append(
            f"verdict agreement {a.first} / {a.second}: {found} "
            f"({plural(a.leaves, 'leaf', 'leaves')})"
        )
    return lines


def _judge_eval(as_json: bool, **values: Any) -> None:
    settings = from_options(JudgeEvalSettings, values)

    def done(finished: int, total: int, judge_name: str, gold_name: str) -> None:
        err_console.print(
            Text(f"[{finished}/{total}] graded {printable(gold_name)} with {printable(judge_name)}")
        )

    report = _entry.judge_eval(settings, progress=done, grader=load_grade_fn)
    if as_json:
        console.print(json.dumps(json.loads(report.model_dump_json()), indent=2), markup=False)
    else:
        print_table(report_table(report))
        for line in _agreement_lines(report):
            console.print(Text(line))
    for result in report.configs:
        if result.cost.unanswered:
            warning(unanswered_line(result.judge.name, result.cost.unanswered))
        report_invalid(
            result.judge.name,
            result.overall.leaves,
            result.invalid_reasons,
            result.invalid_messages,
        )
    failed = [r.judge.name for r in report.configs if r.nothing_graded]
    if failed:
        raise typer.Exit(_fail(f"judge {', '.join(failed)}: no leaf could be graded"))


def judge_eval_command(as_json: bool = False, **values: Any) -> None:
    """Measure judge configs against human-graded gold submissions (JudgeEval): accuracy,
    macro precision, recall and F1 of the leaf verdicts, pooled and per category; invalid
    leaves counted apart (by reason, on stderr); requests, tokens, dollars and wall time.
    --concurrency takes submissions=N (gradings at once, default 2) and leaves=N (leaves
    each grading sends at once, default 16). --out writes report.json and every predicted
    tree (<judge>/<paper>/<name>/grade.json) to a new or empty folder. Exits 1 when a judge
    config could grade no leaf."""
    _judge_eval(as_json, **values)


judge_eval_command = with_options(
    judge_eval_command, JudgeEvalSettings, after=[option("as_json", Json, False)]
)
"""``paperbench judge-eval``: :func:`paperbench.judge_eval` from the command line, its options
made from :class:`~paperbench.judge.JudgeEvalSettings`."""
