"""The grade function judge evaluations call: one gold submission, one judge config."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

from paperbench.judge._config import LoadedJudge
from paperbench.judge._eval import COST_KEY
from paperbench.judge._grader import COSTS_JOURNAL, grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._types import CallCost
from paperbench.judge._view import build_view
from paperbench.llm import CostLedger, read_cost_journal
from paperbench.papers import PaperSource
from paperbench.rubric import GradedTaskNode, TaskNode


class GoldLike(Protocol):
    """What :func:`grade_gold` reads of a gold submission (JudgeEval's ``GoldSubmission``)."""

    @property
    def paper_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def submission(self) -> Path: ...
    @property
    def log(self) -> Path | None: ...
    @property
    def data_dir(self) -> Path | None: ...
    def rubric(self) -> TaskNode: ...


def gold_out_dir(root: Path, gold: GoldLike, judge: LoadedJudge) -> Path:
    """A folder per (gold submission, judge identity), so a rerun resumes it."""
    tag = hashlib.sha256(judge.identity.sha256.encode()).hexdigest()[:12]
    return root / gold.name.replace("/", "__") / f"{judge.identity.name}-{tag}"


async def grade_gold(
    gold: GoldLike,
    judge: LoadedJudge,
    *,
    out_root: Path,
    settings: ModelSettings | None = None,
    options: GradeOptions | None = None,
) -> GradedTaskNode:
    """Grade a gold submission's rubric (the gold tree without its grades) with ``judge``;
    results and resumable state go to ``out_root/<gold>/<judge>-<hash>/grading/``."""
    paper = PaperSource.resolve(gold.data_dir).load(gold.paper_id)
    view = build_view(gold.submission, log=gold.log)
    out = gold_out_dir(out_root, gold, judge)
    result = await grade_submission(
        view,
        paper,
        judge,
        out_dir=out,
        rubric=gold.rubric(),
        settings=settings,
        options=options,
    )
    tree = result.tree()
    # the whole grading's cost on the root, where JudgeEval reads it (``tree_cost``)
    metadata = {**(tree.judge_metadata or {}), COST_KEY: _grading_cost(out).model_dump()}
    return tree.model_copy(update={"judge_metadata": metadata})


def _grading_cost(out_dir: Path) -> CallCost:
    """What the grading in ``out_dir`` cost, from its ``costs.jsonl`` (earlier attempts of a
    resumed grading included)."""
    total = CostLedger(read_cost_journal(out_dir / "grading" / COSTS_JOURNAL)).report().total
    return CallCost(
        requests=total.requests,
        unanswered=total.unanswered,
        input_tokens=total.usage.input_tokens,
        cached_input_tokens=total.usage.cached_input_tokens,
        output_tokens=total.usage.output_tokens,
        cost_usd=None if total.unpriced_calls else total.cost_usd,
        cache_hits=total.cache_hits,
        attempts=total.sent,
    )
