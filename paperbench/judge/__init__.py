"""The judge: grades a submission against a paper's rubric tree.

This package holds the model-free half: the judge's view of a submission
(:func:`build_view`), the context each leaf's grader sees (:func:`select_context`, with a
BM25 index instead of a ranking call), judge configs as data (:func:`load_judge_config`,
``judge/*.yaml`` in the catalog) with their identity, content fences, and the prompts
rendered from the catalog's templates. Model calls build on these. Check leaves are graded
without a model, by running their command in a sandbox (:func:`run_check`, :func:`run_checks`).
"""

from paperbench.judge._checks import CHECK_LIMITS, CheckRunner, run_check, run_checks
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
    "CHECK_LIMITS",
    "Budgets",
    "CallCost",
    "CheckRunner",
    "ContextCategory",
    "ContextFile",
    "DummyConfig",
    "FaithfulConfig",
    "FileKind",
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
    "grading_messages",
    "load_judge_config",
    "parsing_messages",
    "ranking_messages",
    "render",
    "run_check",
    "run_checks",
    "select_context",
    "tokenize",
]
