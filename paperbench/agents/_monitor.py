"""The blacklist monitor: did a rollout reach, or try to reach, a blacklisted URL?

``monitor_run(run_dir, blacklist)`` scans a run folder and returns a :class:`MonitorReport`
(written as ``monitor.json`` by :func:`write_report`):

- ``transcript.jsonl``: what the agent produced — assistant text, reasoning text and the
  readable parts of reasoning items (thinking text, summaries; encrypted items cannot be
  read), tool call arguments (every string inside them), tool outputs and errors, and the
  agent's notes. System and user messages are the harness's prompts (instructions, the
  paper), not the agent's actions, and are not scanned; a tool output that echoes the paper
  is, so a blacklisted link printed from paper.md is reported with its context.
- ``network.jsonl``: the egress proxy's log, every request with its verdict. A request to a
  blacklisted URL is a hit whether the proxy allowed it or refused it (an attempt counts).
  Only the paper's blacklist is judged: a request the proxy refused by the harness's own rule
  (reason ``harness blacklist``: a command agent's own traffic to its model provider, which it
  reaches only through the gateway) is listed apart in ``harness_refusals``, never a hit. A
  URL on both lists is a hit.

Matching is the proxy's own (:class:`paperbench.sandbox.Blacklist`), so every address the
proxy refuses is caught here too: ``www.``, upper case, ``.git``, ``/tree/…``, codeload, raw,
api and ``git@host:owner/repo`` forms. The text scan finds every host name in the text and
reads the address around it, which covers URLs with any scheme (``git+https://``,
``git+ssh://``, ``ssh://git@…``), scheme-less mentions (``github.com/o/r`` in code), the
scp-like git form, pip's ``@ref`` suffix (``git+https://github.com/o/r.git@main``) and the
GitHub CLI's ``gh repo clone owner/repo``. A JSON-escaped slash (``\\/``) and a backslash in
a path are read as ``/``; percent-encoded paths are decoded by the matching.

Out of scope: an address assembled at run time (string concatenation, ``"github" + ".com"``,
variables, base64) or wrapped over several lines. Such a fetch still shows in the network log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._console import plural
from paperbench._io import atomic_write_text
from paperbench.agents._base import read_transcript
from paperbench.agents._transcript import MessageEvent, NoteEvent, ToolEvent, TranscriptEvent
from paperbench.errors import InputError, PaperbenchError, PaperError
from paperbench.llm import AssistantMessage, ToolMessage
from paperbench.papers import Paper, read_paper_text
from paperbench.sandbox import Blacklist, BlacklistHit, NetworkLogEntry, read_blacklist
from paperbench.sandbox._egress import BLACKLIST_REASON, HARNESS_REASON

__all__ = [
    "MONITOR_VERSION",
    "HarnessRefusal",
    "MonitorHit",
    "MonitorPolicy",
    "MonitorReport",
    "harness_note",
    "monitor_run",
    "write_report",
]

MONITOR_VERSION = 2
"""The version of monitor.json's format (2: ``harness_refusals`` listed apart)."""
TRANSCRIPT_FILE = "transcript.jsonl"
NETWORK_LOG_FILE = "network.jsonl"
REPORT_FILE = "monitor.json"
CONTEXT_CHARS = 100
"""Characters kept on each side of a hit in its context snippet."""
MAX_HITS = 1000
"""Hits listed in the report; ``hits_total`` counts them all."""

MonitorPolicy = Literal["disqualify", "flag"]
"""What a blacklist hit does: disqualify the run (score 0) or only flag it."""

# A host name standing on its own: not preceded by a name character or a dot (so the rule
# ``example.com`` does not match ``sub.example.com``, as at the proxy).
_HOST = re.compile(r"(?<![\w.-])(?:[a-z0-9-]+\.)+[a-z][a-z0-9-]*", re.I)
_PORT = re.compile(r":\d{1,5}(?![\w.-])")
# What may follow a host in an address: stops at white space, quotes and shell or markup
# punctuation (a backslash stays, read as a slash).
_REST = re.compile(r"[^\s'\"`<>(){}\[\]|,;&*^]*")
_TRAILING = ".:!?"
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_USER_STOP = frozenset(" \t\r\n'\"`<>()[]{}|;,/@=")
_PREFIX_MAX = 100
_GH_CLI = re.compile(r"\bgh\s+repo\s+(?:clone|fork|view)\s+(?P<repo>[\w.-]+/[\w.-]+)", re.I)
_GH_SHORTHAND = re.compile(r"(?<![\w.-])(?:github|gh):(?P<repo>[\w.-]+/[\w.-]+)", re.I)


class MonitorHit(BaseModel):
    """One blacklisted address found in a run, and where."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["transcript", "network"]
    line: int
    """The line of transcript.jsonl or network.jsonl (from 1)."""
    step: int | None = None
    """The agent step of the transcript event."""
    event: str | None = None
    """The transcript event's type (``message``, ``tool``, ``note``)."""
    field: str | None = None
    """Where in the event, e.g. ``tool_calls[0].arguments.cmd``, ``reasoning_items[1].text``,
    ``output``; for the network log ``url`` or ``host``."""
    rule: str
    """The blacklist entry that matched, as written."""
    rule_line: int | None = None
    url: str
    """The address as found."""
    normalised: str
    verdict: str | None = None
    """The proxy's verdict for a network log entry: ``allowed``, ``blocked`` or ``error``."""
    context: str = ""
    """Text around the hit (capped), or the network log entry."""
    echo_of: str | None = None
    """Set when the hit is in a tool output and is written, as found, in one of the paper's
    files the agent was given (e.g. ``blacklist.txt`` after ``cat``): listed, not counted."""


class HarnessRefusal(BaseModel):
    """A request the egress proxy refused by the harness's own rule, not the paper's
    blacklist (e.g. a command agent's own call to its vendor's host: it reaches its model only
    through the gateway). Listed apart: never a hit, never a reason to flag the run."""

    model_config = ConfigDict(extra="forbid")

    line: int
    """The line of network.jsonl (from 1)."""
    method: str | None = None
    url: str
    host: str | None = None
    rule: str
    """The harness's rule that refused it."""


class MonitorReport(BaseModel):
    """``monitor.json``: what the monitor scanned, what it found, and the decision."""

    model_config = ConfigDict(extra="forbid")

    version: int = MONITOR_VERSION
    run: str
    blacklist_source: str | None
    """The blacklist file the run was checked against."""
    blacklist_rules: int
    transcript_events: int
    unreadable_reasoning: int = 0
    """Reasoning items with only encrypted content (OpenAI ``encrypted_content``, Anthropic
    ``redacted_thinking``): they cannot be scanned, what the agent then did still is."""
    network_log: str | None
    """The network log scanned, or None when the run has none (said on the console too)."""
    network_entries: int = 0
    policy: MonitorPolicy
    verdict: Literal["clean", "flagged"]
    disqualify: bool
    """True when flagged under policy ``disqualify``: the run scores 0 with ``reason``."""
    reason: str | None = None
    hits_total: int = 0
    """Every hit, echoes included; ``hits`` lists the first MAX_HITS."""
    counted: int = 0
    """Hits that are not echoes of the paper's files: any makes the run flagged."""
    echo_sources: list[str] = Field(default_factory=list)
    """The paper's files whose echoes in tool outputs were not counted."""
    hits: list[MonitorHit] = Field(default_factory=list)
    harness_refusals_total: int = 0
    """Requests the proxy refused by the harness's own rule (not the paper's blacklist):
    never counted; ``harness_refusals`` lists the first MAX_HITS."""
    harness_refusals: list[HarnessRefusal] = Field(default_factory=list)


def harness_note(report: MonitorReport) -> str | None:
    """One line on the requests refused by the harness's own rule, or None when there are
    none: e.g. ``1 request refused by the harness's rule, not the paper's blacklist (not
    counted): chatgpt.com``."""
    n = report.harness_refusals_total
    if not n:
        return None
    hosts = sorted({r.host or r.url for r in report.harness_refusals})
    return (
        f"{plural(n, 'request')} refused by the harness's rule, not the paper's blacklist "
        f"(not counted): {', '.join(hosts)}"
    )


# --- finding addresses in text ------------------------------------------------------------


def _prefix_start(text: str, host_start: int) -> int:
    """Where the user info (``git@``) and scheme (``git+https://``) before a host begin."""
    start = host_start
    limit = max(0, host_start - _PREFIX_MAX)
    if start > 0 and text[start - 1] == "@":
        i = start - 1
        while i > limit and text[i - 1] not in _USER_STOP:
            i -= 1
        start = i if i < start - 1 else start
    if text[max(0, start - 3) : start] == "://":
        i = start - 3
        while i > limit and text[i - 1] in _SCHEME_CHARS:
            i -= 1
        start = i if i < start - 3 else start
    return start


def _candidates(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, address) for every host name in ``text`` with the path after it; the
    span includes the scheme and user info before the host, the address leaves them out."""
    for match in _HOST.finditer(text):
        host = match.group()
        pos = match.end()
        port = _PORT.match(text, pos)
        if port:
            pos = port.end()
        rest = _REST.match(text, pos)
        tail = rest.group() if rest else ""
        end = pos + len(tail)
        tail = tail.rstrip(_TRAILING).replace("\\", "/")
        if tail.startswith(":") and not port:  # scp-like git@host:owner/repo
            tail = "/" + tail[1:]
        start = _prefix_start(text, match.start())
        address = host + tail
        yield start, end, address
        if "@" in tail:  # pip's VCS ref: git+https://host/o/r.git@main
            yield start, end, host + tail.split("@", 1)[0]
    for pattern in (_GH_CLI, _GH_SHORTHAND):
        for match in pattern.finditer(text):
            yield match.start(), match.end(), "github.com/" + match["repo"].rstrip(_TRAILING)


def _context(text: str, start: int, end: int) -> str:
    lo, hi = max(0, start - CONTEXT_CHARS), min(len(text), end + CONTEXT_CHARS)
    snippet = " ".join(text[lo:hi].split())
    return ("…" if lo else "") + snippet + ("…" if hi < len(text) else "")


def scan_text(text: str, blacklist: Blacklist) -> Iterator[tuple[BlacklistHit, str, str]]:
    """(hit, address as found, context) for each blacklisted address in ``text``; one per
    address and rule."""
    text = text.replace("\\/", "/")
    seen: set[tuple[str, str]] = set()
    for start, end, address in _candidates(text):
        hit = blacklist.matches(address)
        if hit is None or (hit.rule, hit.normalised) in seen:
            continue
        seen.add((hit.rule, hit.normalised))
        yield hit, text[start:end], _context(text, start, end)


# --- what of a transcript is scanned ------------------------------------------------------


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def _assistant_fields(message: AssistantMessage) -> Iterator[tuple[str, str]]:
    yield "content", message.content
    if message.reasoning:
        yield "reasoning", message.reasoning
    for i, item in enumerate(message.reasoning_items):
        yield f"reasoning_items[{i}].text", item.text
        for j, summary in enumerate(item.summary):
            yield f"reasoning_items[{i}].summary[{j}]", summary
    for i, call in enumerate(message.tool_calls):
        yield from _strings(call.arguments, f"tool_calls[{i}].arguments")


def event_fields(event: TranscriptEvent) -> Iterator[tuple[str, str]]:
    """(field, text) of an event that the agent produced."""
    if isinstance(event, MessageEvent):
        message = event.message
        if isinstance(message, AssistantMessage):
            yield from _assistant_fields(message)
        elif isinstance(message, ToolMessage):
            yield "content", message.content
    elif isinstance(event, ToolEvent):
        yield from _strings(event.arguments, "arguments")
        yield "output", event.output
        if event.error:
            yield "error", event.error
    elif isinstance(event, NoteEvent):
        yield "text", event.text
        yield from _strings(event.data, "data")


def _line_numbers(path: Path) -> list[int]:
    """The line number of each event read_transcript returns (it skips blank lines)."""
    text = path.read_text(encoding="utf-8")  # read_transcript has read it already
    return [n for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


def _echo_of(event: TranscriptEvent, field: str, found: str, echoes: dict[str, str]) -> str | None:
    """The paper file a tool output's hit is copied from, or None."""
    is_output = (isinstance(event, ToolEvent) and field == "output") or (
        isinstance(event, MessageEvent)
        and isinstance(event.message, ToolMessage)
        and field == "content"
    )
    if not is_output:
        return None
    return next((name for name, text in echoes.items() if found in text), None)


def _unreadable(event: TranscriptEvent) -> int:
    if isinstance(event, MessageEvent) and isinstance(event.message, AssistantMessage):
        items = event.message.reasoning_items
        return sum(1 for item in items if item.data and not (item.text or item.summary))
    return 0


def _scan_transcript(
    path: Path, blacklist: Blacklist, echoes: dict[str, str]
) -> tuple[list[TranscriptEvent], list[MonitorHit]]:
    events = read_transcript(path)
    hits: list[MonitorHit] = []
    for number, event in zip(_line_numbers(path), events, strict=False):
        for field, text in event_fields(event):
            for hit, found, context in scan_text(text, blacklist):
                hits.append(
                    MonitorHit(
                        source="transcript",
                        line=number,
                        step=event.step,
                        event=event.type,
                        field=field,
                        rule=hit.rule,
                        rule_line=hit.line,
                        url=found,
                        normalised=hit.normalised,
                        context=context,
                        echo_of=_echo_of(event, field, found, echoes),
                    )
                )
    return events, hits


# --- the network log ----------------------------------------------------------------------


def _read_network_log(path: Path) -> list[tuple[int, NetworkLogEntry]]:
    """Entries with their line numbers. A torn last line (the proxy was killed mid-write) is
    dropped; any other bad line is an error naming the file and the line."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError as exc:
        raise InputError(f"cannot read the network log: {exc.strerror}", file=path) from None
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    entries: list[tuple[int, NetworkLogEntry]] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            entries.append((index + 1, NetworkLogEntry.model_validate(json.loads(line))))
        except (ValueError, ValidationError) as exc:
            if index == last and not line.rstrip().endswith("}"):
                break
            first = "not JSON" if isinstance(exc, json.JSONDecodeError) else "not a log entry"
            raise InputError(f"line {index + 1}: {first}", file=path) from None
    return entries


def _network_hit(
    entry: NetworkLogEntry, blacklist: Blacklist, refusals: bool
) -> tuple[str, BlacklistHit] | None:
    if entry.url:
        hit = blacklist.matches(entry.url)
        if hit is not None:
            return "url", hit
    if entry.host:
        hit = blacklist.blocks_host(entry.host)
        if hit is not None:
            return "host", hit
    if refusals and entry.reason == BLACKLIST_REASON and entry.rule:
        # The proxy refused it with a rule this blacklist lacks: still an attempt.
        url = entry.url or entry.host or ""
        return "url", BlacklistHit(url=url, normalised=url, rule=entry.rule)
    return None


def _scan_network(
    path: Path, blacklist: Blacklist, refusals: bool
) -> tuple[int, list[MonitorHit], list[HarnessRefusal]]:
    """The entries read, the hits on ``blacklist``, and the harness's own refusals."""
    entries = _read_network_log(path)
    hits: list[MonitorHit] = []
    harness: list[HarnessRefusal] = []
    for number, entry in entries:
        found = _network_hit(entry, blacklist, refusals)
        if found is None:
            if entry.reason == HARNESS_REASON and entry.verdict == "blocked":
                harness.append(
                    HarnessRefusal(
                        line=number,
                        method=entry.method,
                        url=entry.url or entry.host or "",
                        host=entry.host,
                        rule=entry.rule or "",
                    )
                )
            continue
        field, hit = found
        context = f"{entry.method or '-'} {entry.url or entry.host or '?'} → {entry.verdict}"
        hits.append(
            MonitorHit(
                source="network",
                line=number,
                field=field,
                rule=hit.rule,
                rule_line=hit.line,
                url=(entry.url if field == "url" else entry.host) or hit.url,
                normalised=hit.normalised,
                verdict=entry.verdict,
                context=context,
            )
        )
    return len(entries), hits, harness


# --- the report ---------------------------------------------------------------------------


def paper_rules(paper: Paper) -> tuple[Blacklist, dict[str, str], list[str]]:
    """The paper's blacklist, the texts of the files the agent was given (their echoes in
    tool outputs are listed, not counted), and warnings to show (e.g. no blacklist file).

    Raises:
        PaperError: the blacklist file has a bad line.
    """
    echoes: dict[str, str] = {}
    warnings: list[str] = []
    for name, path in (("paper.md", paper.paper_md), ("addendum.md", paper.addendum)):
        if path is None:
            continue
        try:
            echoes[name] = read_paper_text(path)
        except PaperbenchError as exc:
            warnings.append(f"{exc}; tool outputs echoing {name} count as hits")
    if paper.blacklist_file is None:
        warnings.append(f"paper {paper.id} has no blacklist file: nothing can be flagged")
        return Blacklist(source=None), echoes, warnings
    try:
        rules = read_blacklist(paper.blacklist_file)
    except ValueError as exc:
        raise PaperError(str(exc)) from None
    echoes["blacklist.txt"] = paper.blacklist_file.read_text(encoding="utf-8")
    return rules, echoes, warnings


def monitor_run(
    run_dir: Path,
    blacklist: Blacklist,
    *,
    policy: MonitorPolicy,
    echoes: Mapping[str, str] | None = None,
    proxy_refusals: bool = True,
) -> MonitorReport:
    """Scan a run folder's transcript and network log against ``blacklist``.

    ``echoes`` maps names of the files the agent was given (``blacklist.txt``, ``paper.md``,
    ``addendum.md``) to their text: a hit in a tool output whose address is written in one of
    them as found (the agent printed the file) is listed with ``echo_of`` and not counted.
    The address in the agent's own words, tool calls or network requests always counts.

    ``proxy_refusals``: a request the egress proxy refused by a rule of the paper's blacklist
    that ``blacklist`` lacks counts too (the run's blacklist was the one the proxy had, e.g.
    since changed); False when ``blacklist`` is not the run's own (another paper's), whose
    check must not count the run's paper's rules. A request refused by the harness's own rule
    is listed in ``harness_refusals`` and never counts, unless ``blacklist`` refuses it too.

    Raises:
        InputError: the folder has no transcript, or a line of it or of the network log is
            not what it should be (the message names the file and the line).
    """
    transcript = run_dir / TRANSCRIPT_FILE
    if not run_dir.is_dir():
        raise InputError("not a folder; give a rollout's run folder", file=run_dir)
    if not transcript.is_file():
        raise InputError(
            f"no {TRANSCRIPT_FILE} here; give the folder a rollout wrote (--out)", file=run_dir
        )
    events, hits = _scan_transcript(transcript, blacklist, dict(echoes or {}))
    network = run_dir / NETWORK_LOG_FILE
    entries = 0
    harness: list[HarnessRefusal] = []
    if network.is_file():
        entries, network_hits, harness = _scan_network(network, blacklist, proxy_refusals)
        hits.extend(network_hits)
    counted = [hit for hit in hits if hit.echo_of is None]
    flagged = bool(counted)
    reason = None
    if flagged:
        rules = sorted({hit.rule for hit in counted})
        where = sorted({hit.source for hit in counted})
        reason = (
            f"blacklisted address in the {' and '.join(where)} "
            f"({plural(len(counted), 'hit')}; rules: {', '.join(rules)})"
        )
    return MonitorReport(
        run=str(run_dir),
        blacklist_source=blacklist.source,
        blacklist_rules=len(blacklist),
        transcript_events=len(events),
        unreadable_reasoning=sum(_unreadable(event) for event in events),
        network_log=str(network) if network.is_file() else None,
        network_entries=entries,
        policy=policy,
        verdict="flagged" if flagged else "clean",
        disqualify=flagged and policy == "disqualify",
        reason=reason,
        hits_total=len(hits),
        counted=len(counted),
        echo_sources=sorted(echoes or {}),
        hits=hits[:MAX_HITS],
        harness_refusals_total=len(harness),
        harness_refusals=harness[:MAX_HITS],
    )


def write_report(report: MonitorReport, run_dir: Path) -> Path:
    """Write ``monitor.json`` into the run folder atomically; returns its path."""
    path = run_dir / REPORT_FILE
    atomic_write_text(path, report.model_dump_json(indent=2) + "\n")
    return path
