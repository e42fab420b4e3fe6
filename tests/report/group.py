"""A synthetic run group on disk, built with the store's real models: 2 papers x 2 agents x
3 seeds holding a scored, a disqualified, a failed, an unscored and a missing run.

Scores (``-``: no outcome.json; ``disq``: disqualified by the monitor; ``f``: flagged by
the monitor under policy flag, its score kept)::

               p-alpha                  p-beta
    agent-a    0.6   0.4   0.5          0.2   disq  failed
    agent-b    0.9f  -     0.7          unsc  0.8   0.6

The expected numbers in test_metrics.py are worked out by hand from this table.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paperbench.agents import (
    EndEvent,
    MessageEvent,
    ModelCallEvent,
    MonitorHit,
    MonitorReport,
    NoteEvent,
    RolloutStatus,
    StartEvent,
    ToolEvent,
)
from paperbench.judge import GradeOptions, GradeResult, LeafGrade
from paperbench.llm import (
    AssistantMessage,
    CostRecord,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
)
from paperbench.reproduce import ReproduceConfig, ReproductionMetadata
from paperbench.rubric import GradedTaskNode
from paperbench.runs import (
    AgentEntry,
    GroupConfig,
    JudgeEntry,
    RunKey,
    RunOutcome,
    RunState,
    StageRecord,
)
from paperbench.runs._store import write_model

PAPERS = ["p-alpha", "p-beta"]
AGENTS = ["agent-a", "agent-b"]
SEEDS = 3
JUDGE = {
    "name": "simple",
    "mode": "simple",
    "sha256": "5e1f" + "0" * 60,
    "models": {
        "ranking": "openai/o3-mini",
        "grading": "openai/o3-mini",
        "parsing": "openai/gpt-4o-mini",
    },
}
OTHER_JUDGE = {**JUDGE, "sha256": "beef" + "0" * 60}

LEAF_EXPLANATION = "The training loop matches Algorithm 1 of the paper."
DEEP_LEAF_TEXT = "Temperature scaling is fitted on the held-out split."
TRANSCRIPT_TEXT = "I will start by reading the paper and the addendum."
REPRO_LOG_TEXT = "epoch 3: validation ECE 0.0123"
FLAGGED_REASON = "blacklisted address in the transcript (1 hit; rules: github.com/x/y)"
HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
NOW = datetime(2025, 1, 1, tzinfo=UTC)


MODELS = {"agent-a": "openai/gpt-4o", "agent-b": "anthropic/claude-sonnet-4-5"}
"""Each agent config's model, which its runs ran."""


def group_config(name: str = "g1") -> GroupConfig:
    return GroupConfig(
        group=name,
        papers=PAPERS,
        paper_set="ids",
        agents=[
            AgentEntry(name="agent-a", ref="agents/a.yaml", model=MODELS["agent-a"]),
            AgentEntry(name="agent-b", ref="agent-b", model=MODELS["agent-b"]),
        ],
        seeds=SEEDS,
        judge=JudgeEntry(ref="simple", identity=JUDGE),
        mode="full",
        resources_provided=False,
        created_at=NOW,
    )


def graded_tree(score: float) -> GradedTaskNode:
    """root → two children → (one has) a grandchild subtree → leaves: depth 3."""

    def leaf(req: str, s: float, cat: str, explanation: str) -> dict[str, Any]:
        return {
            "id": req[:8],
            "requirements": req,
            "weight": 1,
            "sub_tasks": [],
            "task_category": cat,
            "finegrained_task_category": None,
            "score": s,
            "valid_score": True,
            "explanation": explanation,
            "judge_metadata": None,
        }

    def inner(req: str, children: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": req[:8],
            "requirements": req,
            "weight": 1,
            "sub_tasks": children,
            "task_category": None,
            "finegrained_task_category": None,
            "score": sum(c["score"] for c in children) / len(children),
            "valid_score": True,
            "explanation": "aggregated",
            "judge_metadata": None,
        }

    deep = inner(
        "Calibration methods are implemented",
        [leaf(DEEP_LEAF_TEXT, score, "Code Development", "Fitted in calibrate.py.")],
    )
    code = inner(
        "The method is implemented",
        [leaf("The training loop is implemented", score, "Code Development", LEAF_EXPLANATION)],
    )
    results = inner(
        "Results are reproduced",
        [deep, leaf("ECE is reported", score, "Result Analysis", "ECE table present.")],
    )
    return GradedTaskNode.model_validate(inner("Replicate the paper", [code, results]))


def _stage(status: str, seconds: float, detail: str | None = None) -> StageRecord:
    return StageRecord(
        status=status,  # type: ignore[arg-type]
        seconds=seconds,
        attempts=1 if status != "pending" else 0,
        started_at=NOW if status != "pending" else None,
        detail=detail,
    )


def _state(key: RunKey, **overrides: StageRecord) -> RunState:
    stages = {
        "rollout": _stage("done", 1800, "submitted"),
        "monitor": _stage("done", 0, "clean"),
        "reproduction": _stage("done", 900, "reproduce.sh exit 0"),
        "grading": _stage("done", 180),
        **overrides,
    }
    return RunState(key=key, stages=stages, updated_at=NOW)  # type: ignore[arg-type]


def _grade(
    paper: str,
    score: float | None,
    categories: dict[str, float],
    *,
    coverage: float = 1.0,
    invalid: int = 0,
    judge: dict[str, Any] | None = None,
) -> GradeResult:
    tree = graded_tree(score if score is not None else 0.3)
    return GradeResult(
        paper_id=paper,
        judge=judge or JUDGE,
        options=GradeOptions(),
        score=score,
        partial_score=score if score is not None else 0.3,
        unscored=score is None,
        unscored_reason=None if score is not None else "coverage 0.50 below 0.90",
        coverage=coverage,
        coverage_threshold=0.9,
        leaves=4,
        invalid_leaves=invalid,
        scores_by_category=categories,
        cost_usd=0.0,
        requests=4,
        input_tokens=1000,
        graded_leaves_this_run=4,
        reused_leaves=0,
        wall_time_s=12.0,
        graded_task_tree=tree.to_dict(),
    )


def _write_costs(folder: Path, rollout: list[CostRecord], grading: list[CostRecord]) -> None:
    if rollout:
        text = "".join(r.model_dump_json() + "\n" for r in rollout)
        (folder / "costs.jsonl").write_text(text, encoding="utf-8")
    if grading:
        text = "".join(r.model_dump_json() + "\n" for r in grading)
        (folder / "grading" / "costs.jsonl").write_text(text, encoding="utf-8")


def _transcript(folder: Path, extra: str = "") -> None:
    events = [
        StartEvent(agent="agent", paper_id="p", time=1.0),
        MessageEvent(message=UserMessage(content=TRANSCRIPT_TEXT + extra), time=2.0, step=1),
        MessageEvent(
            message=AssistantMessage(
                content="Listing files.",
                tool_calls=(ToolCall(id="c1", name="bash", arguments={"cmd": "ls /home/paper"}),),
            ),
            time=3.0,
            step=1,
        ),
        ModelCallEvent(model="openai/gpt-4o", usage=Usage(input_tokens=100), cost_usd=0.1, step=1),
        ToolEvent(tool_call_id="c1", name="bash", arguments={"cmd": "ls"}, output="paper.md\n" * 3),
        MessageEvent(message=ToolMessage(tool_call_id="c1", content="paper.md"), time=4.0, step=1),
        NoteEvent(kind="limit", text="x" * 10_000, step=2),
        EndEvent(status="submitted", step=2),
    ]
    text = "".join(e.model_dump_json() + "\n" for e in events)
    (folder / "transcript.jsonl").write_text(text, encoding="utf-8")


def _full_run(
    group_dir: Path,
    key: RunKey,
    outcome: RunOutcome,
    *,
    grade: GradeResult | None = None,
    state: RunState | None = None,
    leaves: bool = False,
    transcript_extra: str = "",
) -> Path:
    folder = key.folder(group_dir)
    (folder / "grading").mkdir(parents=True, exist_ok=True)
    (folder / "reproduction").mkdir(parents=True, exist_ok=True)
    write_model(folder / "run.json", state or _state(key))
    write_model(folder / "outcome.json", outcome)
    write_model(
        folder / "status.json",
        RolloutStatus(
            status="submitted",
            paper_id=key.paper,
            agent=key.agent,
            model=MODELS.get(key.agent),  # the model the rollout ran
            seed=key.seed,
            started_at=NOW,
            finished_at=NOW,
            network="filtered",  # type: ignore[arg-type]
            steps=2,
        ),
    )
    _transcript(folder, transcript_extra)
    write_model(
        folder / "reproduction" / "metadata.json",
        ReproductionMetadata(
            status="success",
            exit_code=0,
            submission="submission.tar.gz",
            started_at=NOW,
            config=ReproduceConfig(),
            wall_time_s=42.0,
        ),
    )
    (folder / "reproduction" / "reproduce.log").write_text(
        "starting\n" + REPRO_LOG_TEXT + "\n", encoding="utf-8"
    )
    (folder / "run.log").write_text("rollout: done\n", encoding="utf-8")
    if grade is not None:
        write_model(folder / "grading" / "grade.json", grade)
    if leaves and grade is not None:
        tree = grade.tree()
        lines = [
            LeafGrade(
                path=path,
                leaf_id=node.id,
                category=node.task_category or "Subtree",
                score=node.score,
                valid=True,
                explanation=node.explanation,
                source="llm",
                files_shown=["train.py", "calibrate.py"],
            ).model_dump_json()
            for path, node in _leaves_of(tree)
        ]
        (folder / "grading" / "leaves.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _leaves_of(tree: GradedTaskNode) -> list[tuple[tuple[int, ...], GradedTaskNode]]:
    from paperbench.rubric import iter_leaves

    return list(iter_leaves(tree))


def _outcome(key: RunKey, status: str, score: float | None, **fields: Any) -> RunOutcome:
    return RunOutcome(key=key, status=status, score=score, finished_at=NOW, **fields)  # type: ignore[arg-type]


def build_group(root: Path, name: str = "g1") -> Path:
    """The group of the module docstring under ``root/name``; returns its folder."""
    group_dir = root / name
    group_dir.mkdir(parents=True)
    write_model(group_dir / "group.json", group_config(name))

    def key(paper: str, agent: str, seed: int) -> RunKey:
        return RunKey(paper=paper, agent=agent, seed=seed)

    cd, ra = "Code Development", "Result Analysis"
    # agent-a / p-alpha: three scored seeds
    a_alpha = [
        (0.6, {cd: 1.0, ra: 0.2}, 0.7, 1.0, 0, (0.5, 0.7)),
        (0.4, {cd: 0.5, ra: 0.4}, 0.5, 0.95, 1, (0.3, 0.5)),
        (0.5, {cd: 0.5, ra: 0.6}, 0.6, 1.0, 0, None),
    ]
    for seed, (score, cats, code_dev, coverage, invalid, interval) in enumerate(a_alpha):
        k = key("p-alpha", "agent-a", seed)
        _full_run(
            group_dir,
            k,
            _outcome(
                k,
                "scored",
                score,
                partial_score=score,
                code_dev_score=code_dev,
                coverage=coverage,
                invalid_leaves=invalid,
                leaves=4,
                interval=interval,
            ),
            grade=_grade("p-alpha", score, cats, coverage=coverage, invalid=invalid),
            leaves=seed == 0,
            transcript_extra=HOSTILE if seed == 0 else "",
        )
    # the costs: agent-a/p-alpha/seed-0 (rollout + grading, one unpriced), agent-b one record
    _write_costs(
        key("p-alpha", "agent-a", 0).folder(group_dir),
        [
            CostRecord(model="openai/gpt-4o", label="agent_step", cost_usd=0.10),
            CostRecord(model="openai/gpt-4o", label="agent_step", cost_usd=0.05),
        ],
        [
            CostRecord(
                model="openai/o3-mini", label="judge_grading", stage="grading", cost_usd=0.02
            ),
            CostRecord(model="local/x", label="judge_grading", stage="grading", cost_usd=None),
        ],
    )
    # agent-a / p-beta: scored, disqualified, failed
    k = key("p-beta", "agent-a", 0)
    _full_run(
        group_dir,
        k,
        _outcome(k, "scored", 0.2, coverage=0.9, invalid_leaves=2, leaves=4),
        grade=_grade("p-beta", 0.2, {cd: 0.0}, coverage=0.9, invalid=2),
    )
    k = key("p-beta", "agent-a", 1)
    _full_run(
        group_dir,
        k,
        _outcome(k, "disqualified", 0.0, reason="blacklisted URL github.com/x/y in step 3"),
    )
    k = key("p-beta", "agent-a", 2)
    _full_run(
        group_dir,
        k,
        _outcome(
            k,
            "failed",
            None,
            failed_stage="reproduction",
            reason="sandbox error: the engine stopped answering",
        ),
        state=_state(k, reproduction=_stage("failed", 900, "sandbox error")),
    )
    # agent-b / p-alpha: scored, missing (rollout still running), scored
    k = key("p-alpha", "agent-b", 0)
    _full_run(
        group_dir,
        k,
        _outcome(k, "scored", 0.9, coverage=1.0, leaves=4),
        grade=_grade("p-alpha", 0.9, {cd: 1.0}),
    )
    _write_costs(
        k.folder(group_dir),
        [CostRecord(model="anthropic/claude-sonnet-4-5", label="agent_step", cost_usd=0.30)],
        [],
    )
    k = key("p-alpha", "agent-b", 1)
    missing = k.folder(group_dir)
    missing.mkdir(parents=True)
    write_model(
        missing / "run.json",
        _state(
            k,
            rollout=_stage("running", 600),
            monitor=_stage("pending", 0),
            reproduction=_stage("pending", 0),
            grading=_stage("pending", 0),
        ),
    )
    k = key("p-alpha", "agent-b", 2)
    _full_run(
        group_dir,
        k,
        _outcome(k, "scored", 0.7, coverage=1.0, leaves=4),
        grade=_grade("p-alpha", 0.7, {cd: 1.0}),
    )
    # agent-b / p-beta: unscored, scored, scored (the last by another judge)
    k = key("p-beta", "agent-b", 0)
    _full_run(
        group_dir,
        k,
        _outcome(
            k,
            "unscored",
            None,
            partial_score=0.3,
            coverage=0.5,
            invalid_leaves=10,
            leaves=20,
            reason="coverage 0.50 below the judge's threshold 0.90",
        ),
        grade=_grade("p-beta", None, {cd: 0.3}, coverage=0.5, invalid=10),
    )
    k = key("p-beta", "agent-b", 1)
    _full_run(
        group_dir,
        k,
        _outcome(k, "scored", 0.8, coverage=1.0, leaves=4),
        grade=_grade("p-beta", 0.8, {cd: 0.5}),
    )
    k = key("p-beta", "agent-b", 2)
    _full_run(
        group_dir,
        k,
        _outcome(k, "scored", 0.6, coverage=1.0, leaves=4),
        grade=_grade("p-beta", 0.6, {cd: 0.5}, judge=OTHER_JUDGE),
    )
    monitor = MonitorReport(
        run="p-beta/agent-a/seed-1",
        blacklist_source="blacklists/p-beta.txt",
        blacklist_rules=1,
        transcript_events=8,
        network_log=None,
        policy="disqualify",
        verdict="flagged",
        disqualify=True,
        reason="blacklisted URL github.com/x/y in step 3",
        hits_total=1,
        counted=1,
        hits=[
            MonitorHit(
                source="transcript",
                line=5,
                step=3,
                event="tool",
                rule="github.com/x/y",
                url="https://github.com/x/y",
                normalised="github.com/x/y",
                context="git clone https://github.com/x/y",
            )
        ],
    )
    write_model(key("p-beta", "agent-a", 1).folder(group_dir) / "monitor.json", monitor)
    # agent-b / p-alpha / seed-0: flagged under policy flag, its score kept
    flagged = monitor.model_copy(
        update={
            "run": "p-alpha/agent-b/seed-0",
            "policy": "flag",
            "disqualify": False,
            "reason": FLAGGED_REASON,
        }
    )
    write_model(key("p-alpha", "agent-b", 0).folder(group_dir) / "monitor.json", flagged)
    return group_dir


def corrupt(path: Path, text: str = '{"status": "scored",, }') -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def dump(data: Any) -> str:
    return json.dumps(data, indent=2)


def judge_model_override(group_dir: Path, model: str) -> None:
    """The group as graded under ``--judge-model model``: group.json says so and every
    grading call named it."""
    config = json.loads((group_dir / "group.json").read_text())
    config["judge"]["model"] = model
    (group_dir / "group.json").write_text(json.dumps(config))
    for costs in group_dir.rglob("grading/costs.jsonl"):
        records = [CostRecord.model_validate_json(line) for line in costs.read_text().splitlines()]
        text = "".join(
            r.model_copy(update={"model": model}).model_dump_json() + "\n" for r in records
        )
        costs.write_text(text)
