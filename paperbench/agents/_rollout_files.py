"""The files of a run folder (see :mod:`paperbench.agents._rollout`): config.json compared on
resume, status.json written last, costs.jsonl appended per record, and what an interrupted run
has used (read back from its transcript and costs)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._io import read_json
from paperbench.agents._base import (
    AgentLimits,
    LimitKind,
    LimitTracker,
    OutcomeStatus,
    read_transcript,
)
from paperbench.agents._resources import ResolvedResources
from paperbench.agents._snapshots import DEFAULT_KEEP_SNAPSHOTS, DEFAULT_SNAPSHOTS_MAX_BYTES
from paperbench.agents._snapshots import DEFAULT_SNAPSHOT_EVERY_S as DEFAULT_SNAPSHOT_EVERY_S
from paperbench.agents._transcript import NoteEvent, StartEvent, TranscriptEvent
from paperbench.errors import ConfigError, InputError, UsageError
from paperbench.errors import PauseKind as PauseKind
from paperbench.errors import RolloutPausedError as RolloutPausedError
from paperbench.llm import BudgetCaps, CostJournal, CostRecord, CostTotal
from paperbench.sandbox import IsolationKind, LeftOutFile, NetworkPolicy, SandboxConfig
from paperbench.sandbox._internal_nets import IPNetwork

SCHEMA_VERSION = 1
DEFAULT_MAX_RESTARTS = 3


class RolloutConfig(BaseModel):
    """config.json: what a run was asked to do. A resume must ask for the same."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    paper_id: str
    agent: str
    agent_config: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    base_url: str | None = None
    seed: int = 0
    code_dev: bool = False
    network: NetworkPolicy = NetworkPolicy.FILTERED
    allow_networks: tuple[IPNetwork, ...] = ()
    """Internal ranges the agent's sandbox may reach after all (``--allow-network``)."""
    blacklist: list[str] = Field(default_factory=list)
    limits: AgentLimits = Field(default_factory=AgentLimits)
    snapshot_every_s: float | None = DEFAULT_SNAPSHOT_EVERY_S
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    image: str | None = None
    instructions_sha: str = ""
    resources: ResolvedResources = Field(default_factory=ResolvedResources)
    """GPUs, CPUs, memory, disk, image and the environment's names (never its values)."""
    max_restarts: int = Field(default=DEFAULT_MAX_RESTARTS, ge=0)
    """New sandboxes (from the last snapshot) a rollout call starts when its sandbox is lost;
    once they are used up the run is left resumable."""
    keep_snapshots: int = Field(default=DEFAULT_KEEP_SNAPSHOTS, ge=1)
    """The newest snapshots kept; older ones are deleted (each prune is a NoteEvent)."""
    snapshots_max_bytes: int | None = Field(default=DEFAULT_SNAPSHOTS_MAX_BYTES, ge=1)
    """The total size of the snapshots kept; the oldest beyond it are deleted, never the
    newest (None: no cap)."""


NOT_COMPARED = frozenset({"max_restarts", "keep_snapshots", "snapshots_max_bytes"})
"""RolloutConfig fields a resume may change (they decide how a run is kept, not what it
does): config.json then records the resume's values."""


class RolloutStatus(BaseModel):
    """status.json of a rollout, written last."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    status: OutcomeStatus
    limit: LimitKind | None = None
    error: str | None = None
    summary: str = ""
    paper_id: str
    agent: str
    agent_identity: dict[str, Any] | None = None
    """The agent config's name, type and hash over it and its prompts, when loaded from one."""
    model: str | None = None
    seed: int = 0
    code_dev: bool = False
    attempts: int = 1
    """Starts of this run: 1, plus one per resume."""
    steps: int = 0
    wall_time_s: float = 0.0
    """Agent time over every attempt (what the wall-time limit counts)."""
    retry_wait_s: float = 0.0
    """Time spent waiting on provider retries, over every attempt (not counted in
    ``wall_time_s`` when the limits exclude it)."""
    started_at: datetime
    finished_at: datetime
    sandbox_backend: str | None = None
    sandbox_image: str | None = None
    isolation: IsolationKind | None = None
    isolation_reason: str | None = None
    network: NetworkPolicy
    resources: ResolvedResources | None = None
    """What the sandbox was given (the environment's names only)."""
    snapshots: int = 0
    """Snapshots taken over every attempt (pruned ones included)."""
    snapshots_pruned: int = 0
    restarts: int = 0
    """New sandboxes started when one was lost, over every attempt."""
    left_out: list[LeftOutFile] = Field(default_factory=list)
    """Files not kept in submission.tar.gz (over 10 MB): path and size."""
    submission: str | None = None
    """``submission.tar.gz`` when the final submission was saved."""
    submission_bytes: int = 0
    costs: CostTotal = Field(default_factory=CostTotal)


@dataclass
class RolloutResult:
    status: RolloutStatus
    out_dir: Path
    already_finished: bool = False
    """status.json was there before: nothing was run."""


class JournalLedger(CostJournal):
    """The rollout's costs.jsonl (:class:`CostJournal`), which also adds up the time spent
    waiting between a retried attempt and the next one."""

    def __init__(self, path: Path, records: list[CostRecord], caps: BudgetCaps) -> None:
        self._retried_at: dict[tuple[str, str, str | None], float] = {}
        self.earlier_retry_wait_s = 0.0
        """Retry waits in the records given (earlier attempts of the run)."""
        self.tracker: LimitTracker | None = None
        """Gets the retry waits of new records (``retry_wait_s``)."""
        super().__init__(path, records, caps=caps)

    def _retry_wait(self, record: CostRecord) -> float:
        key = (record.model, record.label, record.stage)
        wait = 0.0
        if key in self._retried_at:
            wait = max(0.0, record.time - record.latency_s - self._retried_at.pop(key))
        if record.outcome == "retried":
            self._retried_at[key] = record.time
        return wait

    def add(self, record: CostRecord) -> None:
        super().add(record)
        with self._lock:
            wait = self._retry_wait(record)
            if not self._opened:
                self.earlier_retry_wait_s += wait
            elif self.tracker is not None:
                self.tracker.retry_wait_s += wait


def used_before(history: list[TranscriptEvent]) -> tuple[float, int, int]:
    """(seconds, steps, starts) of the attempts in ``history``: each attempt counts from its
    StartEvent to its last event, less the time its sandbox restarts took."""
    seconds, steps, starts = 0.0, 0, 0
    began: float | None = None
    last = 0.0
    for event in history:
        steps = max(steps, event.step)
        if isinstance(event, NoteEvent) and event.kind == "environment_restarted":
            restart_s = event.data.get("restart_s")
            if isinstance(restart_s, int | float):
                seconds -= float(restart_s)
        if isinstance(event, StartEvent):
            if began is not None:
                seconds += last - began
            began, starts = event.time, starts + 1
        last = event.time
    if began is not None:
        seconds += last - began
    return max(0.0, seconds), steps, starts


def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "$") -> str | None:
    """The JSON path of the first difference between two config dicts, if any."""
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = config_diff(a, b, f"{prefix}.{key}")
            if found:
                return found
        elif a != b:
            return f"{prefix}.{key}"
    return None


def check_out_dir(
    out: Path, config: RolloutConfig, resume: bool, others: Collection[str] = ()
) -> list[TranscriptEvent]:
    """Refuse what cannot be run in ``out``; the history to resume from. ``others`` names
    files another writer keeps in ``out`` (a new run may start beside them)."""
    config_file = out / "config.json"
    if not resume:
        if out.exists() and any(p.name not in others for p in out.iterdir()):
            raise UsageError(
                f"--out {out}: the folder is not empty; continue the run in it with --resume "
                f"{out} (instead of --out), or give another --out"
            )
        return []
    if not config_file.exists():
        raise UsageError(
            f"--resume {out}: no run to resume there (no config.json); start one with --out"
        )
    old = read_json(config_file)
    new = config.model_dump(mode="json")
    if not isinstance(old, dict):
        raise ConfigError("expected an object", file=config_file)
    if "resources" not in old and config.resources == ResolvedResources():
        del new["resources"]  # a run recorded before resources were
    changed = config_diff(
        {k: v for k, v in old.items() if k not in NOT_COMPARED},
        {k: v for k, v in new.items() if k not in NOT_COMPARED},
    )
    if changed:
        raise ConfigError(
            "the configuration differs from the run's (resume with the same flags, or give "
            "another --out)",
            file=config_file,
            path=changed,
        )
    return read_transcript(out / "transcript.jsonl")


def load_status(out_dir: Path) -> RolloutStatus | None:
    """status.json of a run folder, or None when the run has not finished."""
    path = Path(out_dir) / "status.json"
    if not path.exists():
        return None
    try:
        return RolloutStatus.model_validate(read_json(path))
    except ValidationError as exc:
        raise InputError(str(exc.errors()[0]["msg"]), file=path) from None
