"""The HTML report of an RCB run: ``OUT/report/index.html`` (the scores per paper and
overall, beside published ones when given; errors, cost, broken and not-run problems) and
``OUT/report/problems/<paper>/<snippet>.html`` per problem (the masked file, each answer as
a diff against the reference, its test and output, an agent's transcript).

The pages use the project report's templates (``paperbench/report/templates``, the ``rcb_``
ones and the shared base), autoescaped (answers and test output are untrusted), styles inline,
no script: they work opened from disk.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from jinja2 import Environment
from pydantic import BaseModel, ValidationError

from paperbench._console import plural
from paperbench._io import atomic_write_text, read_json
from paperbench.errors import InputError, UsageError
from paperbench.rcb._mask import reindent
from paperbench.rcb._models import ProblemRecord, RcbSummary, SampleResult, TestOutcome
from paperbench.rcb._published import PublishedRow
from paperbench.rcb._record import read_problem_record

REPORT_DIR = "report"
"""The report's folder inside a run folder."""
TRANSCRIPT = "transcript.jsonl"
"""An agent-mode sample's transcript, in ``problems/<paper>/<snippet>/agent-<k>/``."""
ANSWER_CHARS = 64_000
"""An answer shown without a reference to diff against is cut after this many characters."""

_M = TypeVar("_M", bound=BaseModel)
_NUMBERED = re.compile(r"^(?:answer|sample|agent)-(\d+)(?:\.json)?$")


class _Answer(BaseModel):
    """answer-<k>.json as the runner writes it: a model's reply (``text``) or what an agent
    left (``code``, how it ended)."""

    text: str | None = None
    code: str | None = None
    status: str | None = None
    limit: str | None = None
    error: str | None = None
    why_none: str | None = None
    steps: int = 0
    seconds: float = 0.0


def _env() -> Environment:
    """The report package's environment, with this report's number formats."""
    from paperbench.report._html import template_environment

    env = template_environment()
    env.filters["pct"] = lambda v: "–" if v is None else f"{100 * v:.1f}%"
    env.filters["num"] = lambda v, d=1: "–" if v is None else f"{v:.{d}f}"
    env.filters["usd"] = lambda v: "–" if v is None else f"${v:.4f}"
    return env


def _load(path: Path, model: type[_M], notes: list[str]) -> _M | None:
    """``path`` as ``model``; None when absent; a file that cannot be read is a note."""
    if not path.is_file():
        return None
    try:
        return model.model_validate(read_json(path))
    except InputError as exc:
        notes.append(str(exc))
    except ValidationError as exc:
        notes.append(f"{path}: not a {model.__name__} ({exc.errors()[0]['msg']})")
    return None


def page_name(snippet: str) -> str:
    """A snippet's page file name (a path separator in a name would make a folder)."""
    return re.sub(r"[/\\]", "_", snippet) + ".html"


@dataclass
class DiffLine:
    """One line of an answer's diff, with its kind (its CSS class)."""

    kind: str
    """``head``, ``hunk``, ``add``, ``del`` or ``ctx``."""
    text: str


def answer_diff(record: ProblemRecord, answer: str) -> list[DiffLine]:
    """``answer`` (re-indented as the run put it in the file) as a unified diff against the
    reference code; empty when they are the same."""
    lines = difflib.unified_diff(
        record.reference.split("\n"),
        reindent(answer, record.indent),
        "reference",
        "answer",
        lineterm="",
    )
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            kind = "head"
        elif line.startswith("@@"):
            kind = "hunk"
        else:
            kind = {"+": "add", "-": "del"}.get(line[:1], "ctx")
        out.append(DiffLine(kind, line))
    return out


@dataclass
class SampleView:
    """One sample of a problem as its page shows it."""

    k: int
    result: SampleResult | None = None
    raw_answer: str | None = None
    """The model's whole answer when it was not tested (answer-<k>.json only)."""
    agent: str | None = None
    """How an agent's run ended (agent mode): status, steps, time, error."""
    diff: list[DiffLine] = field(default_factory=list)
    transcript: list[Any] | None = None
    transcript_file: str = ""
    transcript_total: int = 0
    torn: bool = False
    max_events: int = 0
    """Events shown at most, and an item's text cut after ``item_chars`` (the run page's)."""
    item_chars: int = 0

    @property
    def answer(self) -> str | None:
        """The code put in the snippet's place."""
        return None if self.result is None else self.result.answer


@dataclass
class ProblemView:
    """A problem as its page and the index show it: whatever its folder holds."""

    id: str
    paper: str
    snippet: str
    folder: Path
    href: str
    """The page, relative to index.html."""
    page: Path
    """The page, relative to the report folder."""
    status: str
    """``passed``, ``failed``, ``broken``, ``not runnable``, ``not run`` or ``no result``."""
    record: ProblemRecord | None = None
    empty: TestOutcome | None = None
    samples: list[SampleView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def code_lines(self) -> int | None:
        """The problem's weight, when problem.json recorded it."""
        return None if self.record is None else self.record.code_lines

    @property
    def cost(self) -> float | None:
        """The model cost of the samples tested (None when none had a price)."""
        costs = [
            s.result.cost_usd for s in self.samples if s.result and s.result.cost_usd is not None
        ]
        return sum(costs) if costs else None

    @property
    def error_class(self) -> str | None:
        """Why sample 0 failed (None: it passed or has no result)."""
        first = self.samples[0].result if self.samples else None
        return None if first is None else first.outcome.error_class


def _numbers(folder: Path, samples: int) -> list[int]:
    found = set(range(samples))
    if folder.is_dir():
        for child in folder.iterdir():
            match = _NUMBERED.match(child.name)
            if match:
                found.add(int(match.group(1)))
    return sorted(found)


def _transcript(view: SampleView, path: Path, notes: list[str]) -> None:
    # the report package's reader and items: tolerant of a torn last line, its bad lines noted
    from paperbench.report._files import Problem, read_transcript_events
    from paperbench.report._html import ITEM_CHARS, MAX_EVENTS, transcript_items

    problems: list[Problem] = []
    events, view.torn = read_transcript_events(path, problems)
    notes.extend(str(p) for p in problems)
    view.transcript = transcript_items(events)
    view.transcript_total = len(events)
    view.max_events, view.item_chars = MAX_EVENTS, ITEM_CHARS


def _agent_end(answer: _Answer) -> str:
    said = f"{answer.status}" + (f" ({answer.limit})" if answer.limit else "")
    said += f", {plural(answer.steps, 'step')}, {answer.seconds:.1f} s"
    return said + "".join(f"; {t}" for t in (answer.why_none, answer.error) if t)


def problem_view(out: Path, problem_id: str, summary: RcbSummary) -> ProblemView:
    """What a problem's page shows, read from its folder (whatever is there)."""
    paper, _, snippet = problem_id.partition("/")
    folder = out / "problems" / paper / snippet
    notes: list[str] = []
    record = None
    try:
        record = read_problem_record(folder)
    except InputError as exc:
        notes.append(str(exc))
    view = ProblemView(
        id=problem_id,
        paper=paper,
        snippet=snippet,
        folder=folder,
        href=f"problems/{quote(paper)}/{quote(page_name(snippet))}",
        page=Path("problems", paper, page_name(snippet)),
        status="no result",
        record=record,
        empty=_load(folder / "empty.json", TestOutcome, notes),
        notes=notes,
    )
    for k in _numbers(folder, summary.samples):
        sample = SampleView(k, result=_load(folder / f"sample-{k}.json", SampleResult, notes))
        answer = _load(folder / f"answer-{k}.json", _Answer, notes)
        if answer is not None and answer.status is not None:
            sample.agent = _agent_end(answer)
        if sample.result is None:
            raw = None if answer is None else answer.text or answer.code
            sample.raw_answer = None if raw is None else raw[:ANSWER_CHARS]
        elif record is not None and sample.answer is not None:
            sample.diff = answer_diff(record, sample.answer)
        transcript = folder / f"agent-{k}" / TRANSCRIPT
        if transcript.is_file():
            sample.transcript_file = f"agent-{k}/{TRANSCRIPT}"
            _transcript(sample, transcript, notes)
        view.samples.append(sample)
    first = view.samples[0].result if view.samples else None
    if problem_id in summary.not_runnable:
        view.status = "not runnable"
    elif problem_id in summary.broken:
        view.status = "broken"
    elif problem_id in summary.not_run:
        view.status = "not run"
    elif first is not None:
        view.status = "passed" if first.outcome.passed else "failed"
    return view


def problem_ids(out: Path, summary: RcbSummary) -> list[str]:
    """Every problem of the run: its folders, and the broken and not-run ones of the summary
    (a problem never started has no folder), in the order of the summary's papers."""
    ids = set(summary.broken) | set(summary.not_run) | set(summary.not_runnable)
    root = out / "problems"
    if root.is_dir():
        for paper in root.iterdir():
            if paper.is_dir():
                ids.update(f"{paper.name}/{s.name}" for s in paper.iterdir() if s.is_dir())
    order = {score.paper: i for i, score in enumerate(summary.papers)}
    return sorted(ids, key=lambda i: (order.get(i.partition("/")[0], len(order)), i))


@dataclass
class ScoreRow:
    """A row of the scores table: a paper or ``all``, this run's rate and the published
    models' line-weighted and unweighted rates of the same paper."""

    name: str
    problems: int
    lines: int
    line_weighted: float | None
    unweighted: float | None
    pass_at_k: dict[int, float]
    published: list[tuple[float | None, float | None]]


def score_rows(summary: RcbSummary, published: list[PublishedRow]) -> list[ScoreRow]:
    """A row per paper of the run and one for all of them, each published model's rates of
    the same paper beside (its overall rates in the ``all`` row)."""
    rows = []
    for score in summary.papers:
        theirs = [p.papers.get(score.paper) for p in published]
        rows.append(
            ScoreRow(
                name=score.paper,
                problems=score.rate.problems,
                lines=score.rate.lines,
                line_weighted=score.rate.line_weighted,
                unweighted=score.rate.unweighted,
                pass_at_k=score.pass_at_k,
                published=[(r.line_weighted, r.unweighted) if r else (None, None) for r in theirs],
            )
        )
    overall = summary.overall
    rows.append(
        ScoreRow(
            name="all",
            problems=overall.problems,
            lines=overall.lines,
            line_weighted=overall.line_weighted,
            unweighted=overall.unweighted,
            pass_at_k=summary.pass_at_k,
            published=[(p.overall.line_weighted, p.overall.unweighted) for p in published],
        )
    )
    return rows


def read_summary(out: Path) -> RcbSummary:
    """``out/summary.json``.

    Raises:
        UsageError: there is none, or it is not an RCB summary (one line naming the file).
    """
    path = out / "summary.json"
    if not path.is_file():
        raise UsageError(f"{out}: no summary.json; give the folder of an `rcb run` (its --out)")
    try:
        return RcbSummary.model_validate(read_json(path))
    except (InputError, ValidationError) as exc:
        raise UsageError(f"{path}: not an RCB summary ({str(exc).splitlines()[0]})") from None


def write_rcb_report(out: Path, published: list[PublishedRow] | None = None) -> Path:
    """Write ``out/report/index.html`` and a page per problem under ``out/report/problems/``
    for the RCB run in ``out``; returns index.html's path.

    Raises:
        UsageError: ``out`` holds no RCB summary.json.
    """
    summary = read_summary(out)
    rows = list(published or [])
    problems = [problem_view(out, i, summary) for i in problem_ids(out, summary)]
    report = out / REPORT_DIR
    env = _env()
    index = report / "index.html"
    models = sorted(
        [(f"{summary.model} (this run)", summary.overall, True)]
        + [(r.pretty_name, r.overall, False) for r in rows],
        key=lambda m: -(m[1].line_weighted or 0.0),
    )
    atomic_write_text(
        index,
        env.get_template("rcb_index.html").render(
            title=f"RCB: {summary.model}",
            s=summary,
            run=out,
            rows=score_rows(summary, rows),
            published=rows,
            models=models,
            problems=problems,
            no_record=sum(p.record is None for p in problems),
        ),
    )
    template = env.get_template("rcb_problem.html")
    for problem in problems:
        html = template.render(title=f"{problem.id}: RCB {summary.model}", s=summary, p=problem)
        atomic_write_text(report / problem.page, html)
    return index


__all__ = ["REPORT_DIR", "answer_diff", "problem_view", "read_summary", "write_rcb_report"]
