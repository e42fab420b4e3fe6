"""The judge: grades a submission against a paper's rubric tree.

This package holds the model-free half: the judge's view of a submission
(:func:`build_view`), the context each leaf's grader sees (:func:`select_context`, with a
BM25 index instead of a ranking call), judge configs as data (:func:`load_judge_config`,
``judge/*.yaml`` in the catalog) with their identity, content fences, and the prompts
rendered from the catalog's templates; and the grading engine (:func:`grade_submission`,
``paperbench grade``) that grades every leaf with a judge config, resumably.
"""

from paperbench.judge._config import (
    Budgets,
    DummyConfig,
    FaithfulConfig,
    JudgeConfig,
    JudgeIdentity,
    LoadedJudge,
    PromptFiles,
    RandomConfig,
    RoleModel,
    Roles,
    SimpleConfig,
    catalog_dir,
    catalog_names,
    load_judge_config,
)
from paperbench.judge._context import (
    CATEGORIES,
    ContextCategory,
    ContextFile,
    LeafContext,
    LeftOut,
    SubmissionIndex,
    select_context,
    tokenize,
)
from paperbench.judge._fence import fence
from paperbench.judge._gold import grade_gold
from paperbench.judge._grader import GradeResult, grade_submission, read_result, transform_rubric
from paperbench.judge._job import GradeOptions, ModelSettings, majority
from paperbench.judge._log import LogExcerpt, cut_log, fold_log
from paperbench.judge._prompts import (
    CATEGORY_QUESTIONS,
    file_tree,
    grading_messages,
    parsing_messages,
    ranking_messages,
    render,
)
from paperbench.judge._types import (
    CallCost,
    GradeSource,
    InvalidReason,
    LeafGrade,
    SampleGrade,
)
from paperbench.judge._view import (
    FileKind,
    LogView,
    ReproductionSummary,
    SubmissionView,
    ViewFile,
    ViewLimits,
    build_view,
    classify,
)

__all__ = [
    "CATEGORIES",
    "CATEGORY_QUESTIONS",
    "Budgets",
    "CallCost",
    "ContextCategory",
    "ContextFile",
    "DummyConfig",
    "FaithfulConfig",
    "FileKind",
    "GradeOptions",
    "GradeResult",
    "GradeSource",
    "InvalidReason",
    "JudgeConfig",
    "JudgeIdentity",
    "LeafContext",
    "LeafGrade",
    "LeftOut",
    "LoadedJudge",
    "LogExcerpt",
    "LogView",
    "ModelSettings",
    "PromptFiles",
    "RandomConfig",
    "ReproductionSummary",
    "RoleModel",
    "Roles",
    "SampleGrade",
    "SimpleConfig",
    "SubmissionIndex",
    "SubmissionView",
    "ViewFile",
    "ViewLimits",
    "build_view",
    "catalog_dir",
    "catalog_names",
    "classify",
    "cut_log",
    "fence",
    "file_tree",
    "fold_log",
    "grade_gold",
    "grade_submission",
    "grading_messages",
    "load_judge_config",
    "majority",
    "parsing_messages",
    "ranking_messages",
    "read_result",
    "render",
    "select_context",
    "tokenize",
    "transform_rubric",
]
