"""The static HTML report: ``index.html`` and one page per run under ``runs/``.

Jinja2 templates (``templates/``, autoescaped: transcripts and logs are untrusted text),
everything inline (styles, the SVG chart): no network, and the pages work opened from disk.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from paperbench._console import plural
from paperbench._io import atomic_write_text
from paperbench.agents import (
    EndEvent,
    MessageEvent,
    ModelCallEvent,
    NoteEvent,
    SnapshotEvent,
    StartEvent,
    ToolEvent,
    TranscriptEvent,
)
from paperbench.judge import PASS_THRESHOLD, LeafGrade
from paperbench.llm import AssistantMessage, ToolMessage
from paperbench.report._files import (
    REPRO_LOG_FILE,
    TRANSCRIPT_FILE,
    GroupFiles,
    Problem,
    RunFiles,
    read_capped_text,
    read_grade,
    read_transcript_events,
    run_log_path,
)
from paperbench.report._metrics import RunMetrics, Summary, cost_summary
from paperbench.rubric import GradedTaskNode, iter_nodes

ITEM_CHARS = 4_000
"""A transcript item's text is cut after this many characters (the cut is said)."""
MAX_EVENTS = 2_000
"""Transcript events shown on a run page; the rest are counted."""
LOG_CHARS = 64_000
OPEN_DEPTH = 2
"""Rubric nodes shallower than this are open when the page loads; deeper ones collapsed."""


def template_environment() -> Environment:
    """The report's jinja2 environment (autoescaped, strict; its filters and globals), also
    for other reports made of its templates (the RCB report)."""
    env = Environment(
        loader=PackageLoader("paperbench.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        auto_reload=False,
    )
    env.filters["pct"] = _pct
    env.filters["usd"] = _usd
    env.filters["num"] = _num
    env.filters["shown_files"] = shown_files
    env.globals["plural"] = plural
    return env


def _pct(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _usd(total: Any) -> str:
    """A CostTotal as dollars, with its unpriced calls said."""
    text = f"${total.cost_usd:.2f}"
    if total.unpriced_calls:
        text += f" + {total.unpriced_calls} unpriced"
    return text


def cap(text: str, limit: int = ITEM_CHARS) -> str:
    if len(text) <= limit:
        return text
    more = len(text) - limit
    return text[:limit] + f"\n… {more:,} more character{'' if more == 1 else 's'} not shown"


# --------------------------------------------------------------------------- the chart


@dataclass
class Bar:
    label: str
    y: float
    width: float
    text: str
    err: tuple[float, float] | None
    lower: float | None


@dataclass
class Chart:
    width: int
    height: int
    left: int
    plot: int
    row: int
    bars: list[Bar]
    ticks: list[tuple[float, str]]


def score_chart(summary: Summary) -> Chart:
    """Horizontal bars of each agent's score, the ±SE error bar, and a tick at the
    failures-as-0 lower bound; coordinates in SVG units."""
    left, plot, row = 160, 440, 34
    bars = []
    for index, agent in enumerate(summary.agents):
        mean, se = agent.score.mean, agent.score.se
        err = None
        if mean is not None and se is not None:
            err = (left + plot * max(0.0, mean - se), left + plot * min(1.0, mean + se))
        lower = agent.failures_as_zero.mean
        text = "no score" if mean is None else f"{100 * mean:.1f}%"
        if se is not None:
            text += f" ± {100 * se:.1f}"
        bars.append(
            Bar(
                label=agent.label or agent.agent,
                y=20 + index * row,
                width=plot * (mean or 0.0),
                text=text,
                err=err,
                lower=None if lower is None else left + plot * lower,
            )
        )
    ticks = [(left + plot * t / 4, f"{25 * t}%") for t in range(5)]
    height = 20 + row * max(1, len(bars)) + 24
    return Chart(
        width=left + plot + 120,
        height=height,
        left=left,
        plot=plot,
        row=row,
        bars=bars,
        ticks=ticks,
    )


# --------------------------------------------------------------------------- a run page


@dataclass
class TreeItem:
    """One step of the graded tree as a flat sequence (``open``/``leaf``/``close``), so the
    template needs no recursion however deep the rubric."""

    kind: str
    depth: int = 0
    node: GradedTaskNode | None = None
    leaf: LeafGrade | None = None
    verdict: str = ""
    files: list[str] = field(default_factory=list)


def tree_items(tree: GradedTaskNode, leaves: list[LeafGrade]) -> list[TreeItem]:
    by_path = {tuple(grade.path): grade for grade in leaves}
    items: list[TreeItem] = []
    depth_open = 0
    for path, node in iter_nodes(tree):
        depth = len(path)
        while depth_open > depth:
            items.append(TreeItem(kind="close"))
            depth_open -= 1
        if node.sub_tasks:
            items.append(TreeItem(kind="open", depth=depth, node=node))
            depth_open += 1
            continue
        grade = by_path.get(path)
        files = shown_files(grade) if grade else _metadata_files(node.judge_metadata)
        verdict = "pass" if node.score >= PASS_THRESHOLD else "fail"
        if not node.valid_score:
            verdict = "invalid"
        items.append(
            TreeItem(kind="leaf", depth=depth, node=node, leaf=grade, verdict=verdict, files=files)
        )
    items.extend(TreeItem(kind="close") for _ in range(depth_open))
    return items


def shown_files(grade: LeafGrade) -> list[str]:
    """What a leaf's grader was shown of the submission's files: each path shown whole, then
    each shown in part with its line ranges (``model.py (lines 1-40, 81-120)``); with why
    each was chosen when the grade records it (``model.py [shortlist]``)."""

    def why(path: str) -> str:
        reason = grade.files_why.get(path)
        return f" [{reason}]" if reason else ""

    parts = [
        f"{path} (lines {', '.join(f'{a}-{b}' for a, b in ranges)}){why(path)}"
        for path, ranges in grade.file_lines_shown.items()
    ]
    return [*(f"{path}{why(path)}" for path in grade.files_shown), *parts]


def _metadata_files(metadata: dict[str, Any] | None) -> list[str]:
    if not metadata:
        return []
    for key in ("files_shown", "files", "relevant_files"):
        value = metadata.get(key)
        if isinstance(value, list):
            return [str(v) for v in value]
        if isinstance(value, str):
            return [line for line in value.splitlines() if line.strip()]
    return []


@dataclass
class Item:
    """One transcript event as shown: a kind (CSS class), a title line and a body."""

    kind: str
    title: str
    step: int
    body: str = ""
    parts: list[tuple[str, str]] = field(default_factory=list)
    """(heading, text) of an assistant turn's reasoning and tool calls."""


def transcript_items(events: list[TranscriptEvent]) -> list[Item]:
    items = []
    for event in events[:MAX_EVENTS]:
        step = event.step
        if isinstance(event, MessageEvent):
            msg = event.message
            if isinstance(msg, AssistantMessage):
                parts = []
                if msg.reasoning:
                    parts.append(("reasoning", cap(msg.reasoning)))
                for call in msg.tool_calls:
                    args = json.dumps(call.arguments, indent=1, ensure_ascii=False)
                    parts.append((f"tool call {call.name} ({call.id})", cap(args)))
                items.append(Item("assistant", "assistant", step, cap(msg.content), parts))
            elif isinstance(msg, ToolMessage):
                title = f"tool result {msg.name or ''} ({msg.tool_call_id})"
                items.append(Item("tool-msg", title, step, cap(msg.content)))
            else:
                items.append(Item(msg.role, msg.role, step, cap(msg.content)))
        elif isinstance(event, ToolEvent):
            bits = [f"exit {event.exit_code}" if event.exit_code is not None else ""]
            bits += ["timed out" if event.timed_out else "", f"{event.duration_s:.1f}s"]
            title = f"tool {event.name}: " + ", ".join(b for b in bits if b)
            args = json.dumps(event.arguments, indent=1, ensure_ascii=False)
            body = cap(event.output) + (f"\nerror: {event.error}" if event.error else "")
            items.append(Item("tool", title, step, body, [("arguments", cap(args))]))
        elif isinstance(event, ModelCallEvent):
            cost = "unpriced" if event.cost_usd is None else f"${event.cost_usd:.4f}"
            title = (
                f"model call {event.model}: {event.usage.input_tokens:,} in, "
                f"{event.usage.output_tokens:,} out, {cost}, {event.latency_s:.1f}s"
                + (", cached" if event.cached else "")
            )
            items.append(Item("model-call", title, step))
        elif isinstance(event, NoteEvent):
            items.append(Item("note", f"note: {event.kind}", step, cap(event.text)))
        elif isinstance(event, SnapshotEvent):
            items.append(Item("note", f"snapshot {event.path} ({event.bytes:,} bytes)", step))
        elif isinstance(event, StartEvent):
            title = f"start: {event.agent} on {event.paper_id}, seed {event.seed}"
            if event.resumed:
                title += f" (resumed, start {event.resumed + 1})"
            items.append(Item("note", title, step))
        elif isinstance(event, EndEvent):
            title = f"end: {event.status}" + (f" ({event.limit})" if event.limit else "")
            items.append(Item("end", title, step, event.error or ""))
    return items


@dataclass
class StageRow:
    stage: str
    status: str
    seconds: float
    attempts: int
    detail: str
    started: str
    x: float
    width: float


def stage_rows(run: RunFiles) -> list[StageRow]:
    """The stage timeline: each stage's share of the run's time as a bar."""
    if run.state is None:
        return []
    records = list(run.state.stages.items())
    total = sum(r.seconds for _, r in records) or 1.0
    rows, x = [], 0.0
    for stage, record in records:
        width = 400 * record.seconds / total
        rows.append(
            StageRow(
                stage=stage,
                status=record.status,
                seconds=record.seconds,
                attempts=record.attempts,
                detail=record.detail or "",
                started=record.started_at.isoformat(timespec="seconds")
                if record.started_at
                else "",
                x=x,
                width=width,
            )
        )
        x += width
    return rows


def run_page_context(run: RunFiles, metrics: RunMetrics) -> dict[str, Any]:
    problems: list[Problem] = list(run.problems)
    # read_run has reported the transcript's bad lines already
    events, torn = read_transcript_events(run.folder / TRANSCRIPT_FILE, [])
    log, log_bytes = read_capped_text(run.folder / REPRO_LOG_FILE, LOG_CHARS)
    run_log, _ = read_capped_text(run_log_path(run), LOG_CHARS)
    # read_run has reported their problems
    grade, leaves = read_grade(run.folder, [], check_tree=False)
    tree = None
    if grade is not None:
        # a graded tree that does not validate is reported by read_run
        with contextlib.suppress(ValueError):
            tree = tree_items(grade.tree(), leaves)
    return {
        "run": run,
        "m": metrics,
        "problems": problems,
        "tree": tree,
        "leaves": leaves,
        "view_cuts": grade.view_cuts if grade is not None else [],
        "events": transcript_items(events),
        "events_total": len(events),
        "torn": torn,
        "repro_log": log,
        "repro_log_bytes": log_bytes,
        "run_log": run_log,
        "stages": stage_rows(run),
        "costs": cost_summary([*run.rollout_costs, *run.grading_costs]),
        "max_events": MAX_EVENTS,
        "item_chars": ITEM_CHARS,
        "open_depth": OPEN_DEPTH,
    }


# --------------------------------------------------------------------------- writing


def write_html(summary: Summary, files: GroupFiles, out_dir: Path) -> Path:
    """Write index.html and runs/*.html under ``out_dir``; returns index.html's path."""
    env = template_environment()
    index = out_dir / "index.html"
    atomic_write_text(
        index,
        env.get_template("index.html").render(
            s=summary, chart=score_chart(summary), title=f"paperbench report: {summary.group}"
        ),
    )
    template = env.get_template("run.html")
    for run, metrics in zip(files.runs, summary.runs, strict=True):
        context = run_page_context(run, metrics)
        html = template.render(s=summary, title=f"{metrics.label}: {summary.group}", **context)
        atomic_write_text(out_dir / metrics.page, html)
    return index
