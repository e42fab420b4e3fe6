"""What an agent is given and what it must do: the contract between the rollout stage and
every agent (our tool loops, the PaperCoder pipeline, later external coding agents).

An agent gets a :class:`RunContext` — a started sandbox holding the paper in /home/paper and
an empty git repository in /home/submission, the instructions, a model (or none), the
transcript to append to, and the limits — and must leave its work in /home/submission. It
returns an :class:`AgentOutcome`; the rollout stage snapshots, packs and records the rest.
"""

from __future__ import annotations

import abc
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from paperbench.agents._resources import RunResources
from paperbench.agents._transcript import TranscriptEvent
from paperbench.errors import InputError
from paperbench.llm import CostLedger, Model, ReasoningEffort, takes_reasoning_effort
from paperbench.sandbox import HostService, Sandbox

PAPER_DIR = "/home/paper"
"""Where the paper, its addendum and blacklist are in the agent's sandbox."""
SUBMISSION_DIR = "/home/submission"
"""The folder the agent must leave its repository in (``reproduce.sh`` at its root)."""
INSTRUCTIONS_PATH = "/home/instructions.txt"
"""Where the agent's instructions are in its sandbox."""

LimitKind = Literal["wall_time", "steps", "tokens", "dollars"]
"""Which limit ended a rollout."""
OutcomeStatus = Literal["submitted", "limit", "error", "cancelled"]
"""How a rollout ended: the agent submitted, a limit was reached, an error, or cancelled."""


class AgentLimits(BaseModel):
    """When a rollout stops. ``None``: no limit of that kind."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_time_s: float | None = Field(default=12 * 3600, gt=0)
    steps: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    """Input + output tokens over every model call of the run."""
    dollars: float | None = Field(default=None, gt=0)
    exclude_retry_wait: bool = True
    """Do not count time the model layer spent waiting on provider retries (429/5xx) against
    ``wall_time_s`` (as PaperBench's time limit does). ``False`` counts it."""


class LimitReached(Exception):
    """Raised by :meth:`LimitTracker.check` when a limit is reached."""

    def __init__(self, kind: LimitKind, detail: str) -> None:
        super().__init__(f"{kind} limit reached: {detail}")
        self.kind: LimitKind = kind


@dataclass
class LimitTracker:
    """Counts what a run has used, including what earlier (crashed) attempts used."""

    limits: AgentLimits
    ledger: CostLedger
    used_s: float = 0.0
    """Wall time used before this attempt (from the transcript, on resume)."""
    steps: int = 0
    retry_wait_s: float = 0.0
    """Seconds spent waiting on provider retries, when those do not count."""
    started: float = field(default_factory=time.monotonic)

    def elapsed_s(self) -> float:
        counted = time.monotonic() - self.started
        if self.limits.exclude_retry_wait:
            counted -= self.retry_wait_s
        return self.used_s + max(0.0, counted)

    def remaining_s(self) -> float | None:
        if self.limits.wall_time_s is None:
            return None
        return max(0.0, self.limits.wall_time_s - self.elapsed_s())

    def tokens(self) -> int:
        return self.ledger.report().total.usage.total_tokens

    def check(self) -> None:
        """Raise :class:`LimitReached` for the first limit reached, if any."""
        lim = self.limits
        if lim.wall_time_s is not None and self.elapsed_s() >= lim.wall_time_s:
            raise LimitReached("wall_time", f"{self.elapsed_s():.0f}s of {lim.wall_time_s:g}s")
        if lim.steps is not None and self.steps >= lim.steps:
            raise LimitReached("steps", f"{self.steps} of {lim.steps}")
        if lim.tokens is not None and (used := self.tokens()) >= lim.tokens:
            raise LimitReached("tokens", f"{used} of {lim.tokens}")
        if lim.dollars is not None and (spent := self.ledger.spent()) >= lim.dollars:
            raise LimitReached("dollars", f"${spent:.2f} of ${lim.dollars:g}")


_EVENTS: TypeAdapter[TranscriptEvent] = TypeAdapter(TranscriptEvent)


class TranscriptWriter:
    """Appends events to ``transcript.jsonl``, one line each, flushed and synced per event."""

    def __init__(
        self, path: Path, listener: Callable[[TranscriptEvent], None] | None = None
    ) -> None:
        self.path = path
        self.listener = listener
        """Told of each event once it is written (e.g. to show a rollout's progress)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = path.open("a", encoding="utf-8")
        self._redact: list[tuple[str, str]] = []

    def redact(self, secrets: dict[str, str]) -> None:
        """Write ``[NAME]`` wherever the value of a variable of ``secrets`` (name → value,
        e.g. the agent's keys) would appear, e.g. in the output of a command that prints it."""
        for name, value in secrets.items():
            if len(value) >= 4:
                self._redact.append((json.dumps(value, ensure_ascii=False)[1:-1], f"[{name}]"))
        self._redact.sort(key=lambda pair: -len(pair[0]))

    def append(self, event: TranscriptEvent) -> None:
        line = event.model_dump_json() + "\n"
        for value, mark in self._redact:
            line = line.replace(value, mark)
        with self._lock:
            self._file.write(line)
            self._file.flush()
            os.fsync(self._file.fileno())
        if self.listener is not None:
            self.listener(event)

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_transcript(path: Path) -> list[TranscriptEvent]:
    """The events of a transcript. A last line cut short by a crash is dropped (it was the
    event in flight); any other bad line is an error naming the file and the line."""
    if not path.exists():
        return []
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read the transcript: {exc.strerror}", file=path) from None
    events: list[TranscriptEvent] = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(_EVENTS.validate_json(line))
        except ValueError as exc:
            if number - 1 == last and not line.endswith("}"):
                break  # the event in flight when the process died
            first = str(exc).splitlines()[0]
            try:
                json.loads(line)
            except json.JSONDecodeError:
                first = "not JSON"
            raise InputError(
                f"line {number}: not a transcript event ({first})", file=path
            ) from None
    return events


@dataclass
class RunContext:
    """What an agent is given for one rollout."""

    sandbox: Sandbox
    model: Model | None
    """The model the agent calls (its ledger is the run's); ``None`` for agents that need none."""
    instructions: str
    transcript: TranscriptWriter
    limits: LimitTracker
    paper_id: str
    seed: int = 0
    code_dev: bool = False
    history: list[TranscriptEvent] = field(default_factory=list)
    """Events from earlier attempts of this run (empty unless resumed)."""
    resumed: bool = False
    """The environment was restarted from the last snapshot: tell the agent."""
    run_dir: Path | None = None
    """The run's folder on the host, for artifacts an agent saves (e.g. PaperCoder's plan)."""
    resources: RunResources = field(default_factory=RunResources)
    """GPUs, CPUs, memory, disk, hours and the names of the environment's variables (its
    keys), e.g. for the instructions' notes (:meth:`RunResources.notes`)."""


class AgentOutcome(BaseModel):
    """How an agent's run ended."""

    model_config = ConfigDict(extra="forbid")

    status: OutcomeStatus
    limit: LimitKind | None = None
    error: str | None = None
    summary: str = ""


@dataclass
class AgentSetup:
    """What an agent is told before its sandbox starts (:meth:`Agent.prepare`)."""

    out_dir: Path
    """The run's folder on the host."""
    transcript: TranscriptWriter
    limits: LimitTracker


class Agent(abc.ABC):
    """Anything that works in the sandbox and leaves /home/submission."""

    name: str = "agent"

    @abc.abstractmethod
    async def run(self, ctx: RunContext) -> AgentOutcome:
        """Work until done or a limit; raise nothing for a limit (return ``status="limit"``)."""

    async def prepare(self, setup: AgentSetup) -> tuple[HostService, ...]:
        """Before the sandbox starts (once per attempt): start what the agent needs on the
        host; the host services its sandbox must reach (none by default)."""
        return ()

    async def release(self) -> None:  # noqa: B027  (nothing to release by default)
        """After the attempt: stop what :meth:`prepare` started."""

    def blacklist(self) -> tuple[str, ...]:
        """URLs the sandbox's egress proxy refuses for this agent, besides the paper's: the
        harness's own rule (``SandboxSpec.harness_blacklist``), whose refusals the monitor
        lists apart and never counts as blacklist hits."""
        return ()


def effort_for(model: str, effort: ReasoningEffort | None) -> ReasoningEffort | None:
    """``effort`` unless ``model`` is one that refuses a reasoning effort (an agent config's
    effort is for its own model; ``--model openai/gpt-4o`` in its place gets none)."""
    return effort if takes_reasoning_effort(model) else None
