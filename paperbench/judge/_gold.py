"""The grade function judge evaluations call: one gold submission, one judge config."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

from paperbench.judge._config import LoadedJudge
from paperbench.judge._grader import grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._view import build_view
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
    result = await grade_submission(
        view,
        paper,
        judge,
        out_dir=gold_out_dir(out_root, gold, judge),
        rubric=gold.rubric(),
        settings=settings,
        options=options,
    )
    return result.tree()
