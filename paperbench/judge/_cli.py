"""``paperbench grade`` and ``paperbench judge-eval`` (thin: flags, engine calls, printing).

``grade`` grades one submission with one or several judge configs (the engine:
:func:`~paperbench.judge.grade_ensemble`, or :func:`~paperbench.judge.grade_papercoder` for
``--style papercoder``); ``judge-eval`` measures judge configs against human-graded gold sets
(:func:`~paperbench.judge.judge_eval`). Both say why a judging failed (invalid leaves by
reason, with the first message of each) and exit 1 when nothing could be graded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Literal

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
from paperbench._io import atomic_write_text
from paperbench._options import (
    DEFAULT_LEAVES_AT_ONCE,
    DEFAULT_MAX_CONNECTIONS,
    BaseUrl,
    Batch,
    CodeDev,
    Concurrency,
    DataDir,
    Json,
    MaxConnections,
    Model,
    Out,
    Paper,
    ResourcesProvided,
    Sandbox,
    parse_concurrency,
)
from paperbench.errors import UsageError
from paperbench.judge._config import DummyConfig, LoadedJudge, RandomConfig, load_judge_config
from paperbench.judge._ensemble import ensemble_tables, format_interval, grade_ensemble
from paperbench.judge._eval import GradeFn, JudgeEvalReport, judge_eval, load_gold_set
from paperbench.judge._grader import GradeResult
from paperbench.judge._job import GradeOptions, ModelSettings, missing_keys
from paperbench.judge._types import LeafGrade
from paperbench.judge._view import build_view
from paperbench.llm import ModelConfig
from paperbench.llm._batch import BatchCounts, batch_progress
from paperbench.papers import PaperSource

GRADE_STAGES = {"leaves": DEFAULT_LEAVES_AT_ONCE}
EVAL_STAGES = {"submissions": 2, "leaves": DEFAULT_LEAVES_AT_ONCE}
CATEGORY_COLUMNS = {
    "Code Development": "F1 dev",
    "Code Execution": "F1 exec",
    "Result Analysis": "F1 res",
}
_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

JudgeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--judge",
        metavar="CONFIG",
        show_default=False,
        help="A judge config: a catalog name (simple, simple-faithful, dummy, random) or a "
        "YAML file (default: simple). Repeat to compare configs.",
    ),
]


# --- checks of the flags -----------------------------------------------------------------


def _check_ensemble(judges: list[LoadedJudge], style: str) -> None:
    """Several configs: each needs its own plain folder name, and only rubric grading."""
    if style == "papercoder":
        raise UsageError("--judge: --style papercoder takes one judge config; give --judge once")
    seen: set[str] = set()
    for loaded in judges:
        name = loaded.identity.name
        if not _FOLDER_NAME.fullmatch(name):
            raise UsageError(
                f"--judge {loaded.path}: its name {name!r} is not a plain folder name (letters, "
                "digits, '.', '_', '-'); set `name:` in the config"
            )
        if name in seen:
            raise UsageError(
                f"--judge {name}: given twice; each config grades into OUT/<judge-name>/, so "
                "give each config once (or give a copy another `name:`)"
            )
        seen.add(name)


def _warn_missing_keys(judges: list[LoadedJudge], settings: ModelSettings) -> None:
    missing = sorted(
        {
            key
            for loaded in judges
            if not isinstance(loaded.config, DummyConfig | RandomConfig)
            for key in missing_keys(loaded, settings)
        }
    )
    for name in missing:
        warning(
            f"{name} is not set: the leaves that need a model will be invalid (not graded); "
            f"set {name} in the environment or a .env file, or pass --base-url for a local "
            "server (cached answers are still used)"
        )


def _probe_servers(judges: list[LoadedJudge], settings: ModelSettings) -> None:
    """One request to each server the judges will call, before the fan-out of leaves: a
    server that does not answer fails the command at once (see :mod:`paperbench.llm._probe`).
    A batched judge's servers must also serve the batch API (refused in one line if not)."""
    from paperbench.llm._probe import probe_batch_routes, probe_servers

    flag = "--base-url" if settings.base_url else "--model" if settings.model else "--judge"
    servers = [
        (flag, ModelConfig(model=settings.model or model, base_url=settings.base_url))
        for loaded in judges
        for model in loaded.identity.models.values()
    ]
    asyncio.run(probe_servers(servers))
    batched = [
        (flag, ModelConfig(model=settings.model or model, base_url=settings.base_url))
        for loaded in judges
        if settings.batch or getattr(loaded.config, "batch", False)
        for model in loaded.identity.models.values()
    ]
    if batched:
        asyncio.run(probe_batch_routes(batched))


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
        if self._bar is not None:
            if self._batch_task is None:
                self._batch_task = self._bar.add_task(line, total=None, extra="")
            self._bar.update(self._batch_task, description=line)
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


def grade(
    submission: Annotated[
        Path, typer.Argument(help="The submission: a folder or a .tar/.tar.gz file.")
    ],
    paper: Paper,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            metavar="CONFIG",
            show_default=False,
            help="A judge config: a catalog name (simple, simple-faithful, dummy, random) or a "
            "YAML file (default: simple). Give it several times to grade with each config "
            "into OUT/<judge-name>/ and compare their verdicts (OUT/agreement.json).",
        ),
    ] = ["simple"],  # noqa: B006 (typer copies it)
    data_dir: DataDir = None,
    executed: Annotated[
        Path | None,
        typer.Option(help="The output folder of `paperbench reproduce` for this submission."),
    ] = None,
    log: Annotated[
        Path | None,
        typer.Option(help="A reproduce.log to show (default: the one of --executed, if any)."),
    ] = None,
    model: Model = None,
    base_url: BaseUrl = None,
    max_connections: MaxConnections = DEFAULT_MAX_CONNECTIONS,
    code_dev: CodeDev = False,
    resources_provided: ResourcesProvided = False,
    max_depth: Annotated[
        int | None,
        typer.Option(min=1, help="Grade subtrees below this depth as one unit (root: 1)."),
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(min=1, help="Verdicts per leaf, majority vote (default: the config's)."),
    ] = None,
    style: Annotated[
        Literal["rubric", "papercoder"],
        typer.Option(help="rubric: grade the rubric tree; papercoder: 1-5 repository scores."),
    ] = "rubric",
    reference: Annotated[
        Path | None,
        typer.Option(help="With --style papercoder: a reference implementation to compare."),
    ] = None,
    sandbox: Sandbox = "auto",
    out: Out = None,
    concurrency: Concurrency = None,
    batch: Batch = False,
    as_json: Json = False,
) -> None:
    """Grade a submission against its paper's rubric with a judge; write grading/grade.json,
    grading/leaves.jsonl (one line per leaf as it is graded) and grading/costs.jsonl into
    --out (default: grade-PAPER-JUDGE; rerun with the same folder to resume). With several
    --judge, each config writes those under OUT/<judge-name>/ and OUT/agreement.json compares
    them. Check leaves run in a sandbox: against --executed, or with --code-dev against the
    submission itself. --concurrency takes leaves=N (leaves or batches graded at once,
    default 16). Exits 1 when no leaf that needs a model could be graded."""
    stages = parse_concurrency(concurrency, GRADE_STAGES)
    if reference is not None and style != "papercoder":
        raise UsageError("--reference: only with --style papercoder")
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if not submission.exists() and executed is None:
        raise UsageError(f"SUBMISSION {submission}: not found; give a folder or a .tar.gz file")
    judges = [load_judge_config(name) for name in judge or ["simple"]]
    if len(judges) > 1:
        _check_ensemble(judges, style)
    the_paper = PaperSource.resolve(data_dir).load(paper)
    the_paper.require_usable(texts_only=True)  # the texts the judge reads: no LFS pointer
    settings = ModelSettings(
        model=model,
        base_url=base_url,
        concurrency=stages["leaves"],
        max_connections=max_connections,
        batch=batch,
    )
    view = build_view(submission, executed, log=log)
    label = "+".join(j.identity.name for j in judges)
    out_dir = out or Path(f"grade-{the_paper.id}-{label}")
    _probe_servers(judges, settings)
    if style == "papercoder":
        _papercoder(view, the_paper, judges[0], settings, reference, out_dir, as_json, samples)
        return
    _warn_missing_keys(judges, settings)
    from paperbench.sandbox import SandboxConfig

    options = GradeOptions(
        code_dev=code_dev, resources_provided=resources_provided, max_depth=max_depth
    )
    progress = _GradeProgress()
    with progress.running(), batch_progress(progress.batches):
        results, report = asyncio.run(
            grade_ensemble(
                view,
                the_paper,
                judges,
                out_dir=out_dir,
                options=options,
                samples=samples,
                settings=settings,
                sandbox=SandboxConfig(backend=sandbox),
                on_leaf=progress.leaf,
                on_start=progress.start,
            )
        )
    if report is None:
        result = results[0]
        if as_json:
            summary = result.model_dump(mode="json", exclude={"graded_task_tree"})
            summary["addressed_to_judge"] = [
                f.model_dump(mode="json") for f in result.addressed_to_judge()
            ]
            console.print_json(json.dumps(summary))
        else:
            print_table(_table(result, out_dir))
        _say_failures(results)
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
    _say_failures(results)


def _papercoder(
    view: object,
    paper: object,
    judge: LoadedJudge,
    settings: ModelSettings,
    reference: Path | None,
    out_dir: Path,
    as_json: bool,
    samples: int | None,
) -> None:
    from paperbench.judge._papercoder import grade_papercoder, render_repo_score

    if getattr(judge.config, "roles", None) is None:
        raise UsageError("--style papercoder: needs a judge with a grading model (not dummy)")
    ref_view = build_view(reference) if reference is not None else None
    score = asyncio.run(
        grade_papercoder(
            view,  # type: ignore[arg-type]
            paper,  # type: ignore[arg-type]
            judge,
            out_dir=out_dir,
            settings=settings,
            reference=ref_view,
            samples=samples,
        )
    )
    if as_json:
        console.print_json(score.model_dump_json())
    else:
        console.print(render_repo_score(score))


# --- judge-eval ----------------------------------------------------------------------------


def load_grade_fn(work: Path, settings: ModelSettings | None = None) -> GradeFn:
    """The grading engine's :func:`grade_gold`, its resumable folders under ``work``."""
    from paperbench.judge._gold import grade_gold

    return functools.partial(grade_gold, out_root=work, settings=settings)


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


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out}: the folder is not empty; give a new or empty folder")


def judge_eval_command(
    judge: JudgeOption = ["simple"],  # noqa: B006 (typer copies it)
    gold: Annotated[
        str,
        typer.Option(
            metavar="examples|DIR",
            help="'examples' (this repository's gold-graded examples) or a folder: "
            "PaperBench's data/judge_eval, a data directory holding judge_eval/, or a folder "
            "of <paper>/<name>/ examples.",
        ),
    ] = "examples",
    data_dir: DataDir = None,
    paper: Annotated[
        list[str] | None,
        typer.Option("--paper", metavar="ID", help="Only this paper's gold submissions."),
    ] = None,
    model: Model = None,
    base_url: BaseUrl = None,
    max_connections: MaxConnections = DEFAULT_MAX_CONNECTIONS,
    concurrency: Concurrency = None,
    batch: Batch = False,
    out: Out = None,
    as_json: Json = False,
) -> None:
    """Measure judge configs against human-graded gold submissions (JudgeEval): accuracy,
    macro precision, recall and F1 of the leaf verdicts, pooled and per category; invalid
    leaves counted apart (by reason, on stderr); requests, tokens, dollars and wall time.
    --concurrency takes submissions=N (gradings at once, default 2) and leaves=N (leaves
    each grading sends at once, default 16). --out writes report.json and every predicted
    tree (<judge>/<paper>/<name>/grade.json) to a new or empty folder. Exits 1 when a judge
    config could grade no leaf."""
    stages = parse_concurrency(concurrency, EVAL_STAGES)
    if out is not None:
        _check_out(out)
    judges = [load_judge_config(name) for name in judge or ["simple"]]
    golds = load_gold_set(gold, data_dir=data_dir, papers=paper)
    settings = ModelSettings(
        model=model,
        base_url=base_url,
        concurrency=stages["leaves"],
        max_connections=max_connections,
        batch=batch,
    )
    _warn_missing_keys(judges, settings)
    _probe_servers(judges, settings)
    total = len(golds) * len(judges)
    finished = 0

    def done(judge_name: str, gold_name: str) -> None:
        nonlocal finished
        finished += 1
        err_console.print(
            Text(f"[{finished}/{total}] graded {printable(gold_name)} with {printable(judge_name)}")
        )

    with contextlib.ExitStack() as stack:
        # the engine's per-leaf records: kept beside the report with --out, else temporary
        work = (
            out / "gradings"
            if out is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pb-judge-eval-")))
        )
        grade_fn = load_grade_fn(work, settings)
        report = asyncio.run(
            judge_eval(
                golds,
                judges,
                grade_fn,
                concurrency=stages["submissions"],
                out=out,
                progress=done,
            )
        )
    text = report.model_dump_json(indent=2)
    if out is not None:
        atomic_write_text(out / "report.json", text + "\n")
    if as_json:
        console.print(json.dumps(json.loads(text), indent=2), markup=False)
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
