"""The judge: grades a submission against a paper's rubric tree.

This package holds the model-free half: the judge's view of a submission
(:func:`build_view`), the context each leaf's grader sees (:func:`select_context`, with a
BM25 index instead of a ranking call), judge configs as data (:func:`load_judge_config`,
``judge/*.yaml`` in the catalog) with their identity, content fences, and the prompts
rendered from the catalog's templates. Check leaves are graded without a model, by running
their command in a sandbox (:func:`run_check`, :func:`run_checks`). Text in what a grader is
shown that addresses the grader is found by :func:`find_addressed` and recorded with each leaf
(:class:`AddressedText`).

Votes, agreement and score intervals for judges that take several samples per leaf are in
:func:`majority`, :func:`leaf_agreement` and :func:`bootstrap_interval`; JudgeEval (a judge
config against human-graded gold sets) in :func:`load_gold_set` and :func:`judge_eval`.
rendered from the catalog's templates; and the grading engine (:func:`grade_submission`,
``paperbench grade``) that grades every leaf with a judge config, resumably.
"""

from paperbench.judge._addressed import PATTERNS as ADDRESSED_PATTERNS
from paperbench.judge._addressed import find_addressed
from paperbench.judge._agreement import (
    PASS_THRESHOLD,
    PairAgreement,
    bootstrap_interval,
    config_agreement,
    leaf_agreement,
    majority,
    tree_interval,
)
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
from paperbench.judge._ensemble import AllAgreement, ConfigSummary, EnsembleReport
from paperbench.judge._eval import (
    BinaryMetrics,
    ConfigResult,
    GoldSubmission,
    GradeFn,
    JudgeEvalReport,
    LeafPair,
    PaperCost,
    ShapeMismatchError,
    SubmissionResult,
    binary_metrics,
    by_category,
    compare_trees,
    judge_eval,
    load_gold_set,
    tree_cost,
)
from paperbench.judge._fence import fence
from paperbench.judge._gold import grade_gold
from paperbench.judge._grader import GradeResult, grade_submission, read_result, transform_rubric
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._log import LogExcerpt, cut_log, fold_log
from paperbench.judge._papercoder import (
    Critique,
    LeftOutFile,
    RepoSample,
    RepoScore,
    RepoScoreMode,
    papercoder_prompt,
    papercoder_scores,
    render_repo_score,
    repository_files,
    sample_messages,
)
from paperbench.judge._prompts import (
    CATEGORY_QUESTIONS,
    file_tree,
    grading_messages,
    parsing_messages,
    ranking_messages,
    render,
)
from paperbench.judge._types import (
    ADDRESSED_KEY,
    AddressedFinding,
    AddressedText,
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
    "ADDRESSED_KEY",
    "ADDRESSED_PATTERNS",
    "CATEGORIES",
    "CATEGORY_QUESTIONS",
    "CHECK_LIMITS",
    "PASS_THRESHOLD",
    "AddressedFinding",
    "AddressedText",
    "AllAgreement",
    "BinaryMetrics",
    "Budgets",
    "CallCost",
    "CheckRunner",
    "ConfigResult",
    "ConfigSummary",
    "ContextCategory",
    "ContextFile",
    "Critique",
    "DummyConfig",
    "EnsembleReport",
    "FaithfulConfig",
    "FileKind",
    "GoldSubmission",
    "GradeFn",
    "GradeOptions",
    "GradeResult",
    "GradeSource",
    "InvalidReason",
    "JudgeConfig",
    "JudgeEvalReport",
    "JudgeIdentity",
    "LeafContext",
    "LeafGrade",
    "LeafPair",
    "LeftOut",
    "LeftOutFile",
    "LoadedJudge",
    "LogExcerpt",
    "LogView",
    "ModelSettings",
    "PairAgreement",
    "PaperCost",
    "PromptFiles",
    "RandomConfig",
    "RepoSample",
    "RepoScore",
    "RepoScoreMode",
    "ReproductionSummary",
    "RoleModel",
    "Roles",
    "SampleGrade",
    "ShapeMismatchError",
    "SimpleConfig",
    "SubmissionIndex",
    "SubmissionResult",
    "SubmissionView",
    "ViewFile",
    "ViewLimits",
    "binary_metrics",
    "bootstrap_interval",
    "build_view",
    "by_category",
    "catalog_dir",
    "catalog_names",
    "classify",
    "compare_trees",
    "config_agreement",
    "cut_log",
    "fence",
    "file_tree",
    "find_addressed",
    "fold_log",
    "grade_gold",
    "grade_submission",
    "grading_messages",
    "judge_eval",
    "leaf_agreement",
    "load_gold_set",
    "load_judge_config",
    "majority",
    "papercoder_prompt",
    "papercoder_scores",
    "parsing_messages",
    "ranking_messages",
    "read_result",
    "render",
    "render_repo_score",
    "repository_files",
    "run_check",
    "run_checks",
    "sample_messages",
    "select_context",
    "tokenize",
    "transform_rubric",
    "tree_cost",
    "tree_interval",
]
