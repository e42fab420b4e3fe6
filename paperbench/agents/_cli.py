"""``paperbench rollout`` and ``paperbench monitor``: the agents package's commands (thin: they
parse flags, call the engine, print)."""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from paperbench._console import console, err_console, plural, print_table, printable, warning
from paperbench._model_options import from_options, option, with_options
from paperbench._options import DataDir, Json, OptionalPaper, Out
from paperbench.agents._base import read_transcript
from paperbench.agents._monitor import (
    NETWORK_LOG_FILE,
    REPORT_FILE,
    TRANSCRIPT_FILE,
    MonitorHit,
    MonitorPolicy,
    MonitorReport,
    harness_note,
    monitor_run,
    paper_rules,
    write_report,
)
from paperbench.agents._resources import resources_line
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_files import (
    RolloutPausedError,
    RolloutResult,
    RolloutStatus,
)
from paperbench.agents._rollout_settings import RolloutSettings, prepare_rollout
from paperbench.agents._transcript import ModelCallEvent, StartEvent, ToolEvent, TranscriptEvent
from paperbench.errors import InputError, UsageError
from paperbench.papers import PaperSource
from paperbench.sandbox import (
    Blacklist,
    read_blacklist,
)

EXIT_ERROR = 3
"""Exit code when the rollout ran but ended in an error (the agent or its sandbox failed)."""
EXIT_PAUSED = 4
"""Exit code when the run paused before its end (the model provider stayed unavailable past
its retries, or the sandbox was lost more often than --max-restarts): it is kept without
status.json and goes on with the command printed (the same flags and --resume FOLDER)."""
EXIT_FLAGGED = 3
"""``monitor``'s exit code when the run is flagged (a blacklisted address was found)."""
DEFAULT_RUNS = Path("runs")
PRINTED_HITS = 40
"""Hits shown on the console; monitor.json lists them all (up to MAX_HITS)."""
PRINTED_REASONS = 10
"""Counted hits shown under "why" on the console."""

# Help of run's resource flags (run takes them from here until it takes paperbench._options').
GPU_TYPE_HELP = "What the GPUs are, told to the agent (e.g. 'NVIDIA A10')."
CPUS_HELP = "CPUs for the agent's sandbox (default: the agent config's, else no limit)."
MEMORY_HELP = "Memory limit of the agent's sandbox in MB (default: the agent config's, else 8192)."
DISK_HELP = "Cap of the agent's writable space in MB (default: the agent config's, else none)."
IMAGE_HELP = "The agent's sandbox image (default: the agent config's, else paperbench-agent)."
ENV_HELP = (
    "NAME=value set in the agent's sandbox (repeat for several; over the agent config's env). "
    "Recorded with the group: not for keys (use --agent-env)."
)
AGENT_ENV_HELP = (
    "A dotenv file of keys for the agent's own use (NAME=value lines), set in its sandbox; "
    "the names are recorded, never the values. Instead of the agent config's env_file."
)


def _log_to_stderr() -> None:
    """Show the sandbox's and the model layer's warnings on stderr, once."""
    for name in ("paperbench.sandbox", "paperbench.llm"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, RichHandler) for h in logger.handlers):
            handler = RichHandler(console=err_console, show_time=False, show_path=False)
            handler.setLevel(logging.WARNING)
            logger.addHandler(handler)


# --- rollout ---------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    """``42 s``, ``3m 05s``, ``2h 07m``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


class _Progress:
    """What a rollout has done, read from its transcript events as they are written: live on a
    terminal (step, elapsed time, dollars, tokens), a line per tool run when piped."""

    def __init__(self, title: str, live: bool, out: Console) -> None:
        self.title = title
        self.live = live
        self.out = out
        self.started = time.monotonic()
        self.step = 0
        self.dollars = 0.0
        self.tokens = 0

    def on_event(self, event: TranscriptEvent) -> None:
        if isinstance(event, StartEvent):
            self.step = event.step
        elif isinstance(event, ModelCallEvent):
            self.step = max(self.step, event.step)
            self.dollars += event.cost_usd or 0.0
            self.tokens += event.usage.total_tokens
        elif isinstance(event, ToolEvent):
            self.step = max(self.step, event.step)
            if not self.live:
                elapsed = _duration(time.monotonic() - self.started)
                self.out.print(
                    f"step {event.step}: {printable(event.name)}, {elapsed}, ${self.dollars:.2f}",
                    markup=False,
                    highlight=False,
                )

    def __rich__(self) -> Text:
        elapsed = _duration(time.monotonic() - self.started)
        return Text(
            f"{self.title}: step {self.step} · {elapsed} · ${self.dollars:.2f} · "
            f"{plural(self.tokens, 'token')}"
        )


def _rollout(ctx: typer.Context, as_json: bool, **values: Any) -> None:
    _log_to_stderr()
    prepared = prepare_rollout(from_options(RolloutSettings, values))
    title = f"rollout of {prepared.paper.id}"
    progress = _Progress(title, err_console.is_terminal, err_console)
    call = rollout(
        prepared.paper,
        prepared.agent,
        prepared.options,
        out_dir=prepared.out_dir,
        resume=prepared.resume,
        on_event=progress.on_event,
    )
    try:
        if progress.live:
            with err_console.status(progress):
                result = asyncio.run(call)
        else:
            result = asyncio.run(call)
    except RolloutPausedError as exc:
        again = _resume_command(ctx, prepared.out_dir)
        console.print(
            f"paused ({exc.kind}): {' '.join(exc.reason.split())}; continue with: {again}",
            markup=False,
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_PAUSED) from None
    if as_json:
        console.print(json.dumps(result.status.model_dump(mode="json"), indent=2), markup=False)
    else:
        _summary(result)
    if result.status.status == "error":
        raise typer.Exit(EXIT_ERROR)


def _rollout_command(ctx: typer.Context, as_json: bool = False, **values: Any) -> None:
    _rollout(ctx, as_json, **values)


_rollout_command.__doc__ = (
    "Run an agent on a paper in a fresh sandbox; write the run folder (config.json, "
    "transcript.jsonl, costs.jsonl, snapshots/, submission.tar.gz, status.json last). "
    "Progress goes to stderr: live on a terminal, a line per step when piped. --resume "
    "FOLDER continues a run that did not finish in a new sandbox from its last snapshot; "
    "give it the flags the run was started with (a change is refused). Exit code 0 when "
    "the agent submitted or reached a limit, 3 when it ended in an error, 4 when the run "
    "paused (provider unavailable past its retries, sandbox lost too often): it prints "
    "the command that continues it."
)
rollout_command = with_options(
    _rollout_command, RolloutSettings, context=True, after=[option("as_json", Json, False)]
)
"""``paperbench rollout``: :func:`paperbench.rollout` from the command line, its options made
from :class:`~paperbench.agents.RolloutSettings`."""


def _resume_command(ctx: typer.Context, out_dir: Path) -> str:
    """This command again with the flags it was given and ``--resume FOLDER``."""
    words = ["paperbench", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        if param.param_type_name != "option" or param.name in ("out", "resume", "as_json"):
            continue
        value = ctx.params.get(param.name or "")
        flag_only = bool(getattr(param, "is_flag", False))
        if value is None or value == param.default or (flag_only and not value):
            continue
        flag = param.opts[0]
        if isinstance(value, list | tuple):  # a repeated option: once per value
            if not value:
                continue
            for item in value:
                words += [flag, str(item)]
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # a duration in seconds: 3600, not 3600.0
        words += [flag] if flag_only else [flag, str(getattr(value, "value", value))]
    words += ["--resume", str(out_dir)]
    return shlex.join(words)


def _summary(result: RolloutResult) -> None:
    s: RolloutStatus = result.status
    if result.already_finished:
        console.print("this run had already finished: nothing was run", markup=False)
    colour = {"submitted": "green", "limit": "yellow"}.get(s.status, "red")
    limit = f" ({s.limit})" if s.limit else ""
    cost = f"${s.costs.cost_usd:.2f}" + (
        f" + {plural(s.costs.unpriced_calls, 'unpriced call')}" if s.costs.unpriced_calls else ""
    )
    restarts = f", {plural(s.restarts, 'restart')}" if s.restarts else ""
    console.print(
        f"[bold {colour}]{s.status}{limit}[/]  {plural(s.steps, 'step')}  "
        f"{s.wall_time_s:.0f} s  {plural(s.costs.calls, 'model call')}, "
        f"{plural(s.costs.usage.total_tokens, 'token')}, {cost}  "
        f"{plural(s.attempts, 'attempt')}{restarts}"
    )
    console.print(
        f"agent {escape(s.agent)}, model {escape(s.model or '-')}, sandbox "
        f"{s.sandbox_backend or '-'} ({escape(s.sandbox_image or '-')}), isolation "
        f"{s.isolation or '-'}, network {s.network.value}"
    )
    if s.resources is not None:
        console.print(f"resources: {resources_line(s.resources)}", markup=False)
    if s.error:
        console.print(f"[red]{escape(s.error)}[/]")
    if s.left_out:
        files = ", ".join(f"{f.path} ({f.size} bytes)" for f in s.left_out)
        console.print(f"not kept (over 10 MB): {escape(files)}")
    console.print(f"run folder {result.out_dir}", markup=False)


# --- monitor ---------------------------------------------------------------------------


def _paper_of_run(run: Path) -> str | None:
    """The paper id the run's transcript starts with (None: no start event)."""
    for event in read_transcript(run / TRANSCRIPT_FILE):
        if isinstance(event, StartEvent):
            return event.paper_id
    return None


def _paper_files(paper_id: str, data_dir: Path | None) -> tuple[Blacklist, dict[str, str]]:
    """The paper's blacklist, and the texts of the files the agent was given (their echoes
    in tool outputs are listed, not counted)."""
    the_paper = PaperSource.resolve(data_dir).load(paper_id)
    rules, echoes, warnings = paper_rules(the_paper)
    for line in warnings:
        warning(line)
    return rules, echoes


def _where(hit: MonitorHit) -> str:
    return f"{hit.source}:{hit.line}" + (f" step {hit.step}" if hit.step else "")


def _print_harness_refusals(report: MonitorReport) -> None:
    """The requests the harness's own rule refused, apart from the hits (never counted)."""
    note = harness_note(report)
    if note is None:
        return
    console.print(f"{note}:", markup=False)
    for refusal in report.harness_refusals[:PRINTED_REASONS]:
        console.print(
            f"  network line {refusal.line}: {refusal.method or '-'} {printable(refusal.url)} "
            f"(rule {printable(refusal.rule)})",
            markup=False,
        )
    if report.harness_refusals_total > PRINTED_REASONS:
        more = report.harness_refusals_total - PRINTED_REASONS
        console.print(f"  … {plural(more, 'more')} in {report.run}/{REPORT_FILE}", markup=False)


def _print(report: MonitorReport) -> None:
    _print_harness_refusals(report)
    if report.hits:
        table = Table("where", "field", "rule", "found")
        for hit in report.hits[:PRINTED_HITS]:
            field = (hit.event + "." if hit.event else "") + (hit.field or "")
            if hit.verdict:
                field += f" ({hit.verdict})"
            if hit.echo_of:
                field += f" (echo of {hit.echo_of}, not counted)"
            table.add_row(_where(hit), field, printable(hit.rule), printable(hit.url))
        print_table(table)
        if report.hits_total > PRINTED_HITS:
            more = report.hits_total - PRINTED_HITS
            console.print(f"… {plural(more, 'more hit')} in {report.run}/{REPORT_FILE}")
    if report.unreadable_reasoning:
        n = report.unreadable_reasoning
        are, were = ("is", "was") if n == 1 else ("are", "were")
        warning(
            f"{plural(n, 'reasoning item')} {are} encrypted and {were} not scanned "
            "(the agent's messages, tool calls and requests were)"
        )
    if report.verdict == "clean":
        echoes = report.hits_total - report.counted
        console.print(
            f"clean: no blacklisted address in {plural(report.transcript_events, 'event')}"
            f" and {plural(report.network_entries, 'network request')}"
            + (
                f" ({plural(echoes, 'hit')} in tool outputs echo the paper's files)"
                if echoes
                else ""
            )
        )
        return
    counted = [hit for hit in report.hits if hit.echo_of is None]
    console.print(f"why ({plural(report.counted, 'hit')} counted):", markup=False)
    for hit in counted[:PRINTED_REASONS]:
        what = hit.context or hit.url
        if hit.source == "network":
            what = f"request to {hit.url} ({hit.verdict or 'no verdict'})"
        step = f"step {hit.step}" if hit.step is not None else f"{hit.source} line {hit.line}"
        console.print(
            f"  {step}: rule {printable(hit.rule)} in {hit.event or hit.source}"
            f"{'.' + hit.field if hit.field else ''}: {printable(' '.join(what.split()))}",
            markup=False,
        )
    if len(counted) > PRINTED_REASONS:
        console.print(f"  … {plural(len(counted) - PRINTED_REASONS, 'more hit')}", markup=False)
    action = "disqualified" if report.disqualify else "flagged"
    console.print(f"verdict: {action}: {printable(report.reason or '')}", markup=False)


def monitor(
    run: Annotated[Path, typer.Argument(help="The run folder a rollout wrote.")],
    paper: OptionalPaper = None,
    data_dir: DataDir = None,
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
    out: Out = None,
    as_json: Json = False,
) -> None:
    """Scan a run's transcript and network log for blacklisted addresses (those of the run's
    paper, of --paper ID or of --blacklist FILE); print the hits, why the run is flagged and
    the verdict. monitor.json is written into the run folder (and into --out FOLDER when
    given), except with --paper naming another paper than the run's: then it goes to --out
    FOLDER only, and the run's own verdict is kept.

    Exit 0 when clean, 3 when flagged (whatever the policy), 1 on bad input.
    """
    if not run.is_dir():
        raise InputError("not a folder; give the run folder a rollout wrote", file=run)
    if not (run / TRANSCRIPT_FILE).is_file():
        raise InputError(f"no {TRANSCRIPT_FILE}; give the run folder a rollout wrote", file=run)
    if blacklist is not None and paper is not None:
        raise UsageError("give --blacklist FILE or --paper ID, not both")
    own = _paper_of_run(run)
    if blacklist is not None:
        try:
            rules = read_blacklist(blacklist)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        echoes = {"blacklist.txt": blacklist.read_text(encoding="utf-8")}
    else:
        if paper is None and own is None:
            raise UsageError(
                f"{run / TRANSCRIPT_FILE}: no start event names the paper; pass --paper ID or "
                "--blacklist FILE"
            )
        rules, echoes = _paper_files(paper or own or "", data_dir)
    if not (run / NETWORK_LOG_FILE).is_file():
        warning(f"{run / NETWORK_LOG_FILE}: no network log; only the transcript is scanned")
    the_runs_own = paper is None or paper == own  # (a --blacklist FILE is the user's choice)
    report = monitor_run(run, rules, policy=policy, echoes=echoes, proxy_refusals=the_runs_own)
    folders = ([run] if the_runs_own else []) + ([out] if out is not None else [])
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            write_report(report, folder)
        except OSError as exc:
            raise InputError(f"cannot write {REPORT_FILE}: {exc.strerror}", file=folder) from None
    if not the_runs_own:
        kept = f"written to {out / REPORT_FILE}" if out is not None else "not written"
        warning(
            f"checked against paper {paper}, not the run's own paper ({own or 'unknown'}): "
            f"the run's {REPORT_FILE} is left as it was; this report is {kept}"
        )
    if as_json:
        console.print(report.model_dump_json(indent=2), markup=False, highlight=False)
    else:
        _print(report)
    if report.verdict == "flagged":
        raise typer.Exit(EXIT_FLAGGED)
