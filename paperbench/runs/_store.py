"""The run store on disk (docs/design.md, "The run store"): what a group of runs leaves and
how to read it. :class:`GroupFolder` and :class:`RunFolder` name every file; no other module
writes a run folder's file names.

::

    runs/<group>/
      group.json                  GroupConfig: what was asked; a resume compares it
      group.log                   the group's log (one line per stage change of any run)
      summary.json                written by ``paperbench report``
      report/                     the static HTML report (index.html, runs/*.html)
      <paper>/<agent>/seed-<n>/   one run
        run.json                  RunState: each stage's status and times (rewritten as it goes)
        run.log                   the run's log, appended line by line
        config.json status.json transcript.jsonl costs.jsonl network.jsonl snapshots/
        submission.tar.gz         the rollout's files (status.json last: it marks completion)
        monitor.json              the blacklist monitor's report (its completion marker)
        reproduction/             metadata.json (last: completion), executed.tar.gz,
                                  reproduce.log
        grading/                  leaves.jsonl, costs.jsonl, grade.json, costs.json,
                                  complete.json (last)
        outcome.json              RunOutcome: the run's result, written last of all

Every file is written whole and atomically or appended line by line; each stage writes its
completion marker last, so a run killed at any moment is resumed at the finest grain stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paperbench._io import atomic_write_text, read_json
from paperbench.agents._resources import AgentResources, ResolvedResources
from paperbench.agents._rollout_files import DEFAULT_SNAPSHOT_EVERY_S
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS
from paperbench.sandbox import SandboxConfig
from paperbench.sandbox._internal_nets import IPNetwork

GROUP_FILE = "group.json"
GROUP_LOG = "group.log"
SUMMARY_FILE = "summary.json"
REPORT_DIR = "report"
RUN_FILE = "run.json"
RUN_LOG = "run.log"
OUTCOME_FILE = "outcome.json"
MONITOR_FILE = "monitor.json"
REPRODUCTION_DIR = "reproduction"
GRADING_DIR = "grading"


@dataclass(frozen=True)
class RunFolder:
    """The files of one run folder, ``<group>/<paper>/<agent>/seed-<n>/``."""

    path: Path

    @property
    def run_file(self) -> Path:
        """run.json: :class:`RunState`."""
        return self.path / RUN_FILE

    @property
    def log(self) -> Path:
        """run.log: the run's log, appended line by line."""
        return self.path / RUN_LOG

    @property
    def outcome(self) -> Path:
        """outcome.json: :class:`RunOutcome`, written last of all."""
        return self.path / OUTCOME_FILE

    @property
    def rollout_config(self) -> Path:
        """config.json: the rollout's configuration; there once a rollout began."""
        return self.path / "config.json"

    @property
    def rollout_status(self) -> Path:
        """status.json: the rollout's end (its completion marker)."""
        return self.path / "status.json"

    @property
    def submission(self) -> Path:
        """submission.tar.gz: what the agent left in /home/submission."""
        return self.path / "submission.tar.gz"

    @property
    def rollout_costs(self) -> Path:
        """costs.jsonl: the rollout's model calls, one record a line."""
        return self.path / "costs.jsonl"

    @property
    def monitor(self) -> Path:
        """monitor.json: the blacklist monitor's report (its completion marker)."""
        return self.path / MONITOR_FILE

    @property
    def reproduction(self) -> Path:
        """reproduction/: reproduce.log, executed.tar.gz, metadata.json (written last)."""
        return self.path / REPRODUCTION_DIR

    @property
    def reproduction_metadata(self) -> Path:
        """reproduction/metadata.json: the reproduction's result (its completion marker)."""
        return self.reproduction / "metadata.json"

    @property
    def grading(self) -> Path:
        """grading/: leaves.jsonl, costs.jsonl, grade.json, costs.json, complete.json."""
        return self.path / GRADING_DIR

    @property
    def grading_complete(self) -> Path:
        """grading/complete.json: the grading's completion marker."""
        return self.grading / "complete.json"

    @property
    def grading_leaves(self) -> Path:
        """grading/leaves.jsonl: one line per leaf as it is graded."""
        return self.grading / "leaves.jsonl"

    @property
    def grading_costs(self) -> Path:
        """grading/costs.jsonl: the judge's model calls, one record a line."""
        return self.grading / "costs.jsonl"


STORE_VERSION = 2

StageName = Literal["rollout", "monitor", "reproduction", "grading"]
STAGES: tuple[StageName, ...] = ("rollout", "monitor", "reproduction", "grading")
"""The stages of a run, in order."""

StageStatus = Literal["pending", "running", "done", "failed", "skipped"]
"""``done``: the stage's completion marker is written (its own result may still be an
error, e.g. a reproduce.sh that failed); ``failed``: the stage could not finish and the run
stops there; ``skipped``: not run, because the group asked so (``--skip-reproduction``,
Code-Dev) or an earlier stage ended the run (disqualified)."""

RunStatus = Literal["scored", "unscored", "disqualified", "failed"]
"""``scored``: graded with enough coverage; ``unscored``: graded, coverage below the judge's
threshold (the partial score is kept apart); ``disqualified``: the monitor found blacklisted
access and the policy disqualifies (score 0, said why); ``failed``: a stage failed and the
run has no grade."""

Mode = Literal["full", "code-dev"]

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def safe_name(value: str, what: str) -> str:
    """``value`` when it is a plain folder name, else ValueError naming ``what``."""
    if not _SAFE_NAME.fullmatch(value) or value in {".", ".."}:
        raise ValueError(
            f"{what} {value!r} is not a plain folder name (letters, digits, '.', '_', '-')"
        )
    return value


def now() -> datetime:
    return datetime.now(UTC)


class AgentEntry(BaseModel):
    """One agent of the group: the name its runs are filed under and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Folder name of its runs (the config's stem or ``name:``)."""
    ref: str
    """What was given to ``--agent``: a catalog name or a YAML file."""
    identity: dict[str, Any] | None = None
    """The config's name, type and sha256 over it and its prompts."""
    model: str | None = None
    resources: ResolvedResources | None = None
    """Its sandbox's resources: the config's ``resources:`` under the group's flags (the
    environment's names only). Its runs' reproductions get the same GPUs, CPUs, memory, disk
    and image."""


class JudgeEntry(BaseModel):
    """The judge of the group: scores compare only when this matches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ref: str
    identity: dict[str, Any]
    """``JudgeIdentity``: name, mode, sha256 of config and prompts, models per role."""
    model: str | None = None
    """``--judge-model``: one model for every role instead of the config's."""
    base_url: str | None = None
    key_set: bool = True
    """Whether the keys its models need were set when the group started; without them
    the leaves that need a model are reported not graded."""
    batch: bool = False
    """``--batch``: the judge's calls go through the providers' batch APIs."""


class LimitOverrides(BaseModel):
    """The group's limits over each agent config's own (``None``: the config's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int | None = Field(default=None, ge=1)
    wall_time_s: float | None = Field(default=None, gt=0)
    dollars: float | None = Field(default=None, gt=0)
    tokens: int | None = Field(default=None, ge=1)

    def given(self) -> dict[str, Any]:
        """The limits set, as fields of :class:`~paperbench.agents.AgentLimits`."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class GroupReproduction(BaseModel):
    """How the group's submissions are reproduced (the rest comes from each run's agent)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float | None = Field(default=None, gt=0)
    """Time of each reproduce.sh over all its attempts (None: the reproduction's default)."""
    allow_uncapped_disk: bool = False
    """Run where a disk cap cannot be enforced (said and recorded); holds for the agents'
    sandboxes too, where a disk cap is asked for."""


class GroupConfig(BaseModel):
    """group.json: everything a run needs to be built in any process (never a key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store_version: int = STORE_VERSION
    group: str
    papers: list[str]
    paper_set: str
    """How the papers were chosen: ``bundled``, ``all`` (every paper of a data directory),
    ``split:<name>`` or ``ids``."""
    data_dir: str | None = None
    """The PaperBench data directory the papers come from (``--data-dir`` or
    ``PAPERBENCH_DATA_DIR`` when the group was planned), absolute."""
    papers_root: str | None = None
    """Without a data directory: the folder holding the bundled ``papers/`` and ``rubrics/``."""
    agents: list[AgentEntry]
    seeds: int = Field(ge=1)
    judge: JudgeEntry
    mode: Mode = "full"
    resources_provided: bool = False
    skip_reproduction: bool = False
    monitor_policy: Literal["disqualify", "flag"] = "disqualify"
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """The backend resolved when the group was planned (never ``auto``) and its settings."""
    sandbox_reason: str | None = None
    """Why that backend: ``auto: a Docker engine answers at ...``, or the one asked for."""
    allow_networks: tuple[IPNetwork, ...] = ()
    """Internal ranges the rollouts' and reproductions' sandboxes may reach after all
    (``--allow-network``)."""
    agent_limits: LimitOverrides = Field(default_factory=LimitOverrides)
    """Limits over each agent config's own."""
    agent_model: str | None = None
    agent_base_url: str | None = None
    resources: AgentResources | None = None
    """The resource flags (``--gpus``, ``--cpus``, ``--memory``, ``--disk``, ``--image``,
    ``--agent-env``) over each agent config's ``resources:``; an env file by its absolute
    path (its values are read by each rollout, never stored)."""
    snapshot_every_s: float | None = Field(default=DEFAULT_SNAPSHOT_EVERY_S, gt=0)
    """How often a rollout saves /home/submission (what a resume restarts from)."""
    reproduction: GroupReproduction = Field(default_factory=GroupReproduction)
    budget_usd: float | None = Field(default=None, ge=0)
    """Dollars for the whole group, shared by every run and worker."""
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1)
    concurrency: dict[str, int] = Field(default_factory=dict)
    """Runs in each stage at once, e.g. ``{"rollout": 4, "reproduction": 1, "grading": 8}``."""
    created_at: datetime = Field(default_factory=now)

    @model_validator(mode="before")
    @classmethod
    def _version_1(cls, data: Any) -> Any:
        """A group.json of store version 1 (untyped sections) read as version 2."""
        if not isinstance(data, dict) or data.get("store_version", 1) != 1:
            return data
        data = dict(data)
        old = data.get("reproduction") or {}
        if isinstance(old, dict) and ("limits" in old or "timeout_s" in old):
            limits = old["limits"] if isinstance(old.get("limits"), dict) else {}
            data["reproduction"] = {
                "timeout_s": old.get("timeout_s"),
                "allow_uncapped_disk": bool(limits.get("allow_uncapped_disk")),
            }
        if data.get("agent_limits") is None:
            data.pop("agent_limits", None)
        data["store_version"] = STORE_VERSION
        return data

    def comparable(self) -> dict[str, Any]:
        """What a resume must match: everything but when it was made and how fast it runs."""
        return self.model_dump(
            mode="json",
            exclude={"created_at", "concurrency", "max_connections", "sandbox_reason"},
        )


class RunKey(BaseModel):
    """One (paper, agent, seed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper: str
    agent: str
    seed: int = Field(ge=0)

    @property
    def label(self) -> str:
        return f"{self.paper}/{self.agent}/seed-{self.seed}"

    def folder(self, group_dir: Path) -> Path:
        """The run's folder in ``group_dir``."""
        return group_dir / self.paper / self.agent / f"seed-{self.seed}"

    def files(self, group_dir: Path) -> RunFolder:
        """The run's files in ``group_dir``."""
        return RunFolder(self.folder(group_dir))


class StageRecord(BaseModel):
    """One stage of a run in run.json: its status, times and attempts."""

    model_config = ConfigDict(extra="forbid")

    status: StageStatus = "pending"
    started_at: datetime | None = None
    finished_at: datetime | None = None
    seconds: float = 0.0
    """Time spent in the stage, summed over every attempt (a resume adds to it)."""
    waited_s: float = 0.0
    """Time spent waiting for one of the stage's slots before it began, summed over attempts."""
    attempts: int = 0
    detail: str | None = None
    """One line: the stage's result (e.g. ``reproduce.sh exit 0``) or why it failed/skipped."""


class RunState(BaseModel):
    """run.json: where a run is, rewritten atomically at each stage change."""

    model_config = ConfigDict(extra="forbid")

    key: RunKey
    stages: dict[StageName, StageRecord] = Field(
        default_factory=lambda: {stage: StageRecord() for stage in STAGES}
    )
    host: str | None = None
    """The machine (node) that last worked on the run."""
    updated_at: datetime = Field(default_factory=now)


class RunOutcome(BaseModel):
    """outcome.json: the run's result, written last of all (the run's completion marker)."""

    model_config = ConfigDict(extra="forbid")

    key: RunKey
    status: RunStatus
    score: float | None = None
    """The replication score (None unless ``scored``; 0 when ``disqualified``)."""
    partial_score: float | None = None
    """The graded tree's root score whatever the coverage (invalid leaves count 0)."""
    code_dev_score: float | None = None
    coverage: float | None = None
    invalid_leaves: int = 0
    leaves: int = 0
    interval: tuple[float, float] | None = None
    """The judge-noise interval of the score (several samples per leaf), if any."""
    failed_stage: StageName | None = None
    reason: str | None = None
    """Why failed, disqualified or unscored, in one line."""
    cost_usd: float | None = None
    """Every stage's model cost (None when a model had no price)."""
    finished_at: datetime = Field(default_factory=now)


def write_model(path: Path, model: BaseModel) -> None:
    """A model as indented JSON, atomically."""
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


def read_group(group_dir: Path) -> GroupConfig:
    """group.json of ``group_dir``.

    Raises:
        InputError: missing or not a group file (the file and JSON path named).
    """
    from paperbench._io import json_path
    from paperbench.errors import InputError

    path = group_dir / GROUP_FILE
    if not path.is_file():
        raise InputError(
            f"no {GROUP_FILE}: not a run group; give a folder `paperbench run` wrote "
            "(runs/<group>)",
            file=group_dir,
        )
    data = read_json(path)
    try:
        return GroupConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(f"{json_path(first['loc'])}: {first['msg']}", file=path) from None


def run_keys(config: GroupConfig) -> list[RunKey]:
    """Every (paper, agent, seed) of the group, in a stable order."""
    return [
        RunKey(paper=paper, agent=agent.name, seed=seed)
        for paper in config.papers
        for agent in config.agents
        for seed in range(config.seeds)
    ]
