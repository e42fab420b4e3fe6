"""Metrics over a run group: pure functions from the files read (:mod:`._files`) to the
:class:`Summary` that ``summary.json`` holds.

How scores are combined (all in [0, 1]):

- a run's *counted* score is its replication score when ``scored``, 0 when
  ``disqualified`` (that is its score); ``failed``, ``unscored`` and ``missing`` runs (no
  outcome.json) have none: they are counted and listed with their reason, never averaged;
- an (agent, paper) score is the mean over the seeds that have a counted score;
- an agent's score: for each seed, the mean over the papers counted at that seed (a seed
  lacking a paper is *incomplete* and listed, never dropped); then the mean and standard
  error (ddof=1; none with fewer than two seeds) over the seeds that have one;
- the *failures as 0* lower bound is the same computation with every run that has no
  counted score counted as 0, so every seed is complete.

Text addressed to the judge (an attempt to game it, found by the grading) is counted per run
as distinct places (file, line, words), and per agent as places and runs; it changes no score.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench.judge import AddressedFinding
from paperbench.llm import CostLedger, CostRecord, CostTotal
from paperbench.report._files import GroupFiles, Problem, RunFiles
from paperbench.runs import STAGES, GroupConfig

SUMMARY_VERSION = 1

ReportStatus = Literal["scored", "unscored", "disqualified", "failed", "missing"]
COUNTED: frozenset[str] = frozenset({"scored", "disqualified"})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeInfo(_Model):
    """The judge whose scores these are: only scores of the same judge, paper set and mode
    compare."""

    ref: str
    name: str | None = None
    mode: str | None = None
    sha256: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    model_override: str | None = None
    """``--judge-model``: one model for every role instead of the config's."""
    called: dict[str, list[str]] = Field(default_factory=dict)
    """Role → the models its calls named, from the runs' grading cost records (calls
    refused before sending included): what the grading called."""

    def role_models(self) -> dict[str, str]:
        """Role → the model that role was graded with: the models its calls named; for a
        role not called yet, the override when there is one, else the config's."""
        planned = (
            dict(self.models)
            if self.model_override is None
            else dict.fromkeys(self.models, self.model_override)
        )
        return {**planned, **{role: ", ".join(models) for role, models in self.called.items()}}


class JudgeMismatch(_Model):
    """A run graded by another judge than the group's: its score does not compare."""

    run: str
    fields: list[str]
    """The identity fields that differ (``name``, ``sha256``, ``models``, ...)."""
    found: dict[str, Any]


class CostSummary(_Model):
    """Model costs summed in total, by stage, by model and by call label."""

    total: CostTotal = Field(default_factory=CostTotal)
    by_stage: dict[str, CostTotal] = Field(default_factory=dict)
    by_model: dict[str, CostTotal] = Field(default_factory=dict)
    by_label: dict[str, CostTotal] = Field(default_factory=dict)


class RunMetrics(_Model):
    """One run's numbers: its status and counted score, coverage, stages, costs and
    what its files could not give (``problems``)."""

    paper: str
    agent: str
    seed: int
    model: str | None = None
    """The model the rollout ran (its status.json); before a rollout has ended, the one it
    runs (the group's ``--agent-model``, else the agent config's)."""
    status: ReportStatus
    score: float | None = None
    """The counted score: the replication score when scored, 0 when disqualified."""
    partial_score: float | None = None
    code_dev_score: float | None = None
    coverage: float | None = None
    leaves: int = 0
    invalid_leaves: int = 0
    interval: tuple[float, float] | None = None
    failed_stage: str | None = None
    reason: str | None = None
    scores_by_category: dict[str, float] = Field(default_factory=dict)
    stages: dict[str, str] = Field(default_factory=dict)
    """Stage → status, from run.json."""
    hours_by_stage: dict[str, float] = Field(default_factory=dict)
    cost: CostTotal = Field(default_factory=CostTotal)
    addressed_to_judge: list[AddressedFinding] = Field(default_factory=list)
    """Text addressed to the judge in what its graders were shown, one entry per leaf."""
    addressed_places: int = 0
    """Distinct places (file, line, words) of that text: an attempt to game the judge."""
    monitor: Literal["clean", "flagged"] | None = None
    """The blacklist monitor's verdict (monitor.json; None: not scanned). A run flagged
    under ``--monitor-policy flag`` keeps its score and is marked; under ``disqualify`` it
    is disqualified (score 0)."""
    monitor_reason: str | None = None
    """What the monitor found, when it flagged the run."""
    harness_refusals: int = 0
    """Requests the egress proxy refused by the harness's own rule, not the paper's
    blacklist (monitor.json): a command agent's own traffic to its vendor. Never counted."""
    problems: list[Problem] = Field(default_factory=list)
    page: str
    """The run's page in the HTML report, relative to its index.html."""

    @property
    def label(self) -> str:
        """``paper/agent/seed-N``."""
        return f"{self.paper}/{self.agent}/seed-{self.seed}"

    @property
    def flagged(self) -> bool:
        """Whether the monitor flagged the run (disqualified or only marked)."""
        return self.monitor == "flagged"

    @property
    def why(self) -> str | None:
        """Why the run is disqualified or flagged, in one line (None when it is neither)."""
        if self.status == "disqualified":
            return self.reason or self.monitor_reason or "disqualified by the monitor"
        if self.flagged:
            return f"flagged (score kept): {self.monitor_reason or 'see monitor.json'}"
        return None


class NotScored(_Model):
    """A run left out of the means, and why."""

    run: str
    paper: str
    agent: str
    seed: int
    status: ReportStatus
    reason: str


class SeedScore(_Model):
    """An agent's score at one seed: the mean over the papers counted at that seed."""

    seed: int
    mean: float | None
    """Mean over the papers counted at this seed; None when none is."""
    papers: int
    """Papers counted at this seed."""
    missing_papers: list[str] = Field(default_factory=list)
    """Papers of the group without a counted score at this seed."""

    @property
    def complete(self) -> bool:
        return not self.missing_papers


class Estimate(_Model):
    """A mean over seeds with its standard error."""

    mean: float | None = None
    se: float | None = None
    """Standard error over seeds (ddof=1); None with fewer than two seeds."""
    n: int = 0
    """Seeds that went into the mean."""


class PaperScore(_Model):
    """An agent's score on one paper: the mean over the seeds with a counted score."""

    paper: str
    mean: float | None
    """Mean over the seeds with a counted score."""
    scores: list[float | None]
    """Per seed, in seed order; None where the run has no counted score."""
    counted: int
    runs: int


class AgentMetrics(_Model):
    """An (agent config, model that ran) pair's numbers over its runs: the leaderboard row,
    per-seed and per-paper scores, costs and hours. One agent config whose runs ran two
    models is two rows."""

    agent: str
    model: str | None = None
    """The model its runs ran (their status.json), ``None`` for an agent without one."""
    label: str = ""
    """The row's name: the agent, with its model when the agent has several rows."""
    score: Estimate
    failures_as_zero: Estimate
    seeds: list[SeedScore]
    incomplete_seeds: list[int]
    runs: int
    counted: int
    by_status: dict[str, int]
    papers: list[PaperScore]
    scores_by_category: dict[str, float]
    """Mean of each category's score over the agent's scored runs with a grade file."""
    code_dev_score: float | None
    coverage: float | None
    """Mean coverage over the agent's graded runs (scored and unscored)."""
    invalid_leaves: int
    interval: tuple[float, float] | None
    """Mean of the runs' judge-noise interval bounds, over scored runs that have one."""
    interval_runs: int = 0
    addressed_places: int = 0
    """Places of text addressed to the judge, summed over the agent's runs."""
    addressed_runs: int = 0
    """Runs with any text addressed to the judge."""
    flagged_runs: int = 0
    """Runs the blacklist monitor flagged (disqualified, or marked under policy flag)."""
    costs: CostSummary
    hours_by_stage: dict[str, float]


class Summary(_Model):
    """summary.json: every number of ``paperbench report``."""

    version: int = SUMMARY_VERSION
    group: str
    judge: JudgeInfo
    judge_mismatches: list[JudgeMismatch]
    paper_set: str
    papers: list[str]
    mode: str
    resources_provided: bool
    seeds: int
    agents: list[AgentMetrics]
    runs: list[RunMetrics]
    not_scored: list[NotScored]
    costs: CostSummary
    hours_by_stage: dict[str, float]
    problems: list[Problem]
    generated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


# --------------------------------------------------------------------------- helpers


def mean_se(values: list[float]) -> Estimate:
    """Mean and standard error (sample standard deviation, ddof=1, over √n)."""
    if not values:
        return Estimate()
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return Estimate(mean=mean, se=se, n=len(values))


def cost_summary(records: Iterable[CostRecord]) -> CostSummary:
    report = CostLedger(records).report()
    return CostSummary(
        total=report.total,
        by_stage=report.by_stage,
        by_model=report.by_model,
        by_label=report.by_label,
    )


def _hours(runs: Iterable[RunMetrics]) -> dict[str, float]:
    out: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    for run in runs:
        for stage, hours in run.hours_by_stage.items():
            out[stage] = out.get(stage, 0.0) + hours
    return out


def addressed_places(found: Iterable[AddressedFinding]) -> int:
    """Distinct (file, line, words): the same text shown to several leaves counts once."""
    return len({(f.file, f.line, f.text) for f in found})


def run_page(paper: str, agent: str, seed: int) -> str:
    return f"runs/{paper}--{agent}--seed-{seed}.html"


JUDGE_LABEL_PREFIX = "judge_"
"""A judge call's label is its role with this prefix (``judge_grading``), or the role itself
(``parsing``)."""


def called_models(records: Iterable[CostRecord]) -> dict[str, list[str]]:
    """Role → the models its grading calls named, sorted."""
    found: dict[str, set[str]] = {}
    for record in records:
        role = record.label.removeprefix(JUDGE_LABEL_PREFIX)
        found.setdefault(role, set()).add(record.model)
    return {role: sorted(models) for role, models in sorted(found.items())}


def judge_info(config: GroupConfig, grading: Iterable[CostRecord] = ()) -> JudgeInfo:
    """The group's judge, with the models its grading calls named (``grading``: the runs'
    grading cost records)."""
    identity = config.judge.identity
    models = identity.get("models")
    return JudgeInfo(
        ref=config.judge.ref,
        name=identity.get("name"),
        mode=identity.get("mode"),
        sha256=identity.get("sha256"),
        models=dict(models) if isinstance(models, dict) else {},
        model_override=config.judge.model,
        called=called_models(grading),
    )


def _judge_mismatch(config: GroupConfig, run: RunFiles) -> JudgeMismatch | None:
    if run.grade is None:
        return None
    expected, found = config.judge.identity, run.grade.judge
    fields = sorted(k for k in set(expected) | set(found) if expected.get(k) != found.get(k))
    if not fields:
        return None
    return JudgeMismatch(run=run.key.label, fields=fields, found=found)


# --------------------------------------------------------------------------- per run


def _missing_reason(run: RunFiles) -> str:
    if run.outcome_unreadable:
        return "outcome.json is unreadable (see the problems)"
    if run.state is None:
        return "not started (no run.json)"
    for stage in STAGES:
        record = run.state.stages.get(stage)
        if record is not None and record.status in ("running", "pending", "failed"):
            detail = f": {record.detail}" if record.detail else ""
            return f"unfinished: {stage} {record.status}{detail}"
    return "unfinished: no outcome.json"


def planned_model(config: GroupConfig, agent: str) -> str | None:
    """The model a run of ``agent`` is to run: the group's ``--agent-model``, else the
    agent config's."""
    entry = next((a for a in config.agents if a.name == agent), None)
    return config.agent_model or (entry.model if entry is not None else None)


def run_metrics(run: RunFiles, planned: str | None = None) -> RunMetrics:
    """One run's numbers from its outcome.json (``missing`` without one), grade.json,
    run.json, status.json and cost records; ``planned``: the model it is to run, for a
    run whose rollout has not ended."""
    key = run.key
    base: dict[str, Any] = {
        "paper": key.paper,
        "agent": key.agent,
        "seed": key.seed,
        "model": run.rollout.model if run.rollout is not None else planned,
        "page": run_page(key.paper, key.agent, key.seed),
        "problems": list(run.problems),
        "cost": cost_summary([*run.rollout_costs, *run.grading_costs]).total,
        "addressed_to_judge": list(run.addressed_to_judge),
        "addressed_places": addressed_places(run.addressed_to_judge),
    }
    if run.state is not None:
        base["stages"] = {stage: rec.status for stage, rec in run.state.stages.items()}
        base["hours_by_stage"] = {s: rec.seconds / 3600 for s, rec in run.state.stages.items()}
    if run.grade is not None:
        base["scores_by_category"] = dict(run.grade.scores_by_category)
    if run.monitor is not None:
        base["monitor"] = run.monitor.verdict
        base["monitor_reason"] = run.monitor.reason
        base["harness_refusals"] = run.monitor.harness_refusals_total
    outcome = run.outcome
    if outcome is None:
        return RunMetrics(status="missing", reason=_missing_reason(run), **base)
    status: ReportStatus = outcome.status
    score: float | None = None
    reason = outcome.reason
    if status == "disqualified":
        score = 0.0
    elif status == "scored":
        score = outcome.score
        if score is None:  # a contract breach: say so rather than average a guess
            status, reason = "unscored", "outcome.json says scored but holds no score"
    return RunMetrics(
        status=status,
        score=score,
        partial_score=outcome.partial_score,
        code_dev_score=outcome.code_dev_score,
        coverage=outcome.coverage,
        leaves=outcome.leaves,
        invalid_leaves=outcome.invalid_leaves,
        interval=outcome.interval,
        failed_stage=outcome.failed_stage,
        reason=reason,
        **base,
    )


def _not_scored(run: RunMetrics) -> NotScored:
    reason = run.reason or {
        "failed": f"{run.failed_stage or 'a stage'} failed",
        "unscored": "coverage below the judge's threshold",
    }.get(run.status, run.status)
    if run.status == "failed" and run.failed_stage and run.failed_stage not in reason:
        reason = f"{run.failed_stage}: {reason}"
    return NotScored(
        run=run.label,
        paper=run.paper,
        agent=run.agent,
        seed=run.seed,
        status=run.status,
        reason=reason,
    )


# --------------------------------------------------------------------------- per agent


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def agent_metrics(
    config: GroupConfig,
    agent: str,
    runs: list[RunMetrics],
    records: list[CostRecord],
    model: str | None = None,
) -> AgentMetrics:
    """The numbers of an agent's runs that ran ``model`` (every planned run of the row, in
    any state)."""
    by_key = {(r.paper, r.seed): r for r in runs}
    seeds: list[SeedScore] = []
    lower: list[float] = []
    for seed in range(config.seeds):
        counted: list[float] = []
        missing: list[str] = []
        for paper in config.papers:
            run = by_key.get((paper, seed))
            if run is not None and run.status in COUNTED and run.score is not None:
                counted.append(run.score)
            else:
                missing.append(paper)
        seeds.append(
            SeedScore(seed=seed, mean=_mean(counted), papers=len(counted), missing_papers=missing)
        )
        if config.papers:
            lower.append(sum(counted) / len(config.papers))
    papers = []
    for paper in config.papers:
        scores = [
            r.score if r.status in COUNTED else None
            for r in (by_key.get((paper, s)) for s in range(config.seeds))
            if r is not None
        ]
        present = [s for s in scores if s is not None]
        papers.append(
            PaperScore(
                paper=paper,
                mean=_mean(present),
                scores=scores,
                counted=len(present),
                runs=len(scores),
            )
        )
    scored = [r for r in runs if r.status == "scored"]
    categories: dict[str, list[float]] = {}
    for run in scored:
        for category, value in run.scores_by_category.items():
            categories.setdefault(category, []).append(value)
    intervals = [r.interval for r in scored if r.interval is not None]
    by_status = dict.fromkeys(("scored", "disqualified", "unscored", "failed", "missing"), 0)
    for run in runs:
        by_status[run.status] += 1
    return AgentMetrics(
        agent=agent,
        model=model,
        label=agent,
        score=mean_se([s.mean for s in seeds if s.mean is not None]),
        failures_as_zero=mean_se(lower),
        seeds=seeds,
        incomplete_seeds=[s.seed for s in seeds if not s.complete],
        runs=len(runs),
        counted=sum(1 for r in runs if r.status in COUNTED and r.score is not None),
        by_status=by_status,
        papers=papers,
        scores_by_category={k: statistics.fmean(v) for k, v in sorted(categories.items())},
        code_dev_score=_mean([r.code_dev_score for r in scored if r.code_dev_score is not None]),
        coverage=_mean([r.coverage for r in runs if r.coverage is not None]),
        invalid_leaves=sum(r.invalid_leaves for r in runs),
        interval=(
            (statistics.fmean(i[0] for i in intervals), statistics.fmean(i[1] for i in intervals))
            if intervals
            else None
        ),
        interval_runs=len(intervals),
        addressed_places=sum(r.addressed_places for r in runs),
        addressed_runs=sum(1 for r in runs if r.addressed_places),
        flagged_runs=sum(1 for r in runs if r.flagged),
        costs=cost_summary(records),
        hours_by_stage=_hours(runs),
    )


# --------------------------------------------------------------------------- the group


def summarize_group(files: GroupFiles) -> Summary:
    """Every number of the report over a group's files."""
    config = files.config
    runs = [run_metrics(run, planned_model(config, run.key.agent)) for run in files.runs]
    agents = []
    for entry in config.agents:
        models = list(dict.fromkeys(r.model for r in runs if r.agent == entry.name))
        for model in models:
            row = [(f, r) for f, r in zip(files.runs, runs, strict=True) if r.agent == entry.name]
            row = [(f, r) for f, r in row if r.model == model]
            records = [rec for f, _ in row for rec in (*f.rollout_costs, *f.grading_costs)]
            metrics = agent_metrics(config, entry.name, [r for _, r in row], records, model)
            if len(models) > 1:
                metrics.label = f"{entry.name} ({model or 'no model'})"
            agents.append(metrics)
    mismatches = [m for m in (_judge_mismatch(config, run) for run in files.runs) if m]
    all_records = [r for run in files.runs for r in (*run.rollout_costs, *run.grading_costs)]
    return Summary(
        group=config.group,
        judge=judge_info(config, [r for run in files.runs for r in run.grading_costs]),
        judge_mismatches=mismatches,
        paper_set=config.paper_set,
        papers=list(config.papers),
        mode=config.mode,
        resources_provided=config.resources_provided,
        seeds=config.seeds,
        agents=agents,
        runs=runs,
        not_scored=[_not_scored(r) for r in runs if r.status not in COUNTED],
        costs=cost_summary(all_records),
        hours_by_stage=_hours(runs),
        problems=files.problems,
    )
