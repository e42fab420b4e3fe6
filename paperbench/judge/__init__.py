"""The judge: grades a submission against a paper's rubric tree.

What another judge or the run pipeline needs, and nothing of the judge's insides:

- the judge's view of a submission: :func:`build_view` → :class:`SubmissionView` (with
  :class:`ViewLimits`);
- judge configs as data (``judge/*.yaml`` in the catalog, or a YAML file anywhere):
  :func:`load_judge_config` → :class:`LoadedJudge` (its :class:`JudgeIdentity` and one of
  :class:`SimpleConfig`, :class:`FaithfulConfig`, :class:`DummyConfig`,
  :class:`RandomConfig`, the union :data:`JudgeConfig`); :func:`catalog_names`;
  :func:`missing_keys` says which API keys a config's models lack;
- the grading engine: :func:`grade_submission` (every leaf, resumably, into
  ``OUT/grading/``) with :class:`GradeOptions` and :class:`ModelSettings`, giving a
  :class:`GradeResult` (read back with :func:`read_result`), one :class:`LeafGrade` per leaf;
  several configs on one submission with :func:`grade_ensemble` (:class:`EnsembleReport`);
  PaperCoder-style 1–5 repository scores with :func:`grade_papercoder` (:class:`RepoScore`);
- JudgeEval, a judge config against human-graded gold sets: :func:`load_gold_set`
  (:class:`GoldSubmission`), :func:`judge_eval` (:class:`JudgeEvalReport`) with
  :func:`grade_gold` as its :data:`GradeFn`;
- one grading and one JudgeEval as ``paperbench grade`` / ``paperbench judge-eval`` and
  :func:`paperbench.grade` / :func:`paperbench.judge_eval` take them: :class:`GradeSettings`
  (giving a :class:`Grading`) and :class:`JudgeEvalSettings`;
- what a report reads in a graded tree: :data:`ADDRESSED_KEY` (:class:`AddressedFinding`)
  and :data:`PASS_THRESHOLD`.

The modules behind these (context selection, prompts, fences, logs, checks, agreement
statistics) are private; tests import them directly.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.judge._agreement import PASS_THRESHOLD
    from paperbench.judge._config import (
        DummyConfig,
        FaithfulConfig,
        JudgeConfig,
        JudgeIdentity,
        LoadedJudge,
        RandomConfig,
        SimpleConfig,
        catalog_names,
        load_judge_config,
    )
    from paperbench.judge._ensemble import EnsembleReport, grade_ensemble
    from paperbench.judge._eval import (
        GoldSubmission,
        GradeFn,
        JudgeEvalReport,
        judge_eval,
        load_gold_set,
    )
    from paperbench.judge._gold import grade_gold
    from paperbench.judge._grader import GradeResult, grade_submission, read_result
    from paperbench.judge._job import GradeOptions, ModelSettings, missing_keys
    from paperbench.judge._papercoder import RepoScore, grade_papercoder
    from paperbench.judge._settings import GradeSettings, Grading, JudgeEvalSettings
    from paperbench.judge._types import ADDRESSED_KEY, AddressedFinding, LeafGrade
    from paperbench.judge._view import SubmissionView, ViewLimits, build_view

__all__ = [
    "ADDRESSED_KEY",
    "PASS_THRESHOLD",
    "AddressedFinding",
    "DummyConfig",
    "EnsembleReport",
    "FaithfulConfig",
    "GoldSubmission",
    "GradeFn",
    "GradeOptions",
    "GradeResult",
    "GradeSettings",
    "Grading",
    "JudgeConfig",
    "JudgeEvalReport",
    "JudgeEvalSettings",
    "JudgeIdentity",
    "LeafGrade",
    "LoadedJudge",
    "ModelSettings",
    "RandomConfig",
    "RepoScore",
    "SimpleConfig",
    "SubmissionView",
    "ViewLimits",
    "build_view",
    "catalog_names",
    "grade_ensemble",
    "grade_gold",
    "grade_papercoder",
    "grade_submission",
    "judge_eval",
    "load_gold_set",
    "load_judge_config",
    "missing_keys",
    "read_result",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
