"""Each package's public names, decided and pinned here (a name added or removed is a change
of the public API: change this list with it), and each of them documented."""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
from pathlib import Path

import pytest

PUBLIC: dict[str, list[str]] = {
    "paperbench": [
        "EvalConfig",
        "Evaluation",
        "GradeSettings",
        "JudgeEvalSettings",
        "RcbSettings",
        "ReproduceSettings",
        "RolloutSettings",
        "__version__",
        "evaluate",
        "evaluate_async",
        "grade",
        "judge_eval",
        "rcb_run",
        "resume",
        "resume_async",
        "rollout",
        "run_reproduction",
    ],
    "paperbench.agents": [
        "Agent",
        "AgentConfig",
        "AgentIdentity",
        "AgentLimits",
        "AgentOutcome",
        "AgentResources",
        "BasicAgent",
        "BasicConfig",
        "DummyAgent",
        "DummyConfig",
        "EndEvent",
        "INSTRUCTIONS_PATH",
        "IterativeAgent",
        "IterativeConfig",
        "LimitKind",
        "LimitReached",
        "LimitTracker",
        "LoadedAgent",
        "MONITOR_VERSION",
        "MessageEvent",
        "ModelCallEvent",
        "MonitorHit",
        "MonitorPolicy",
        "MonitorReport",
        "NoteEvent",
        "OutcomeStatus",
        "PAPER_DIR",
        "PapercoderAgent",
        "PapercoderConfig",
        "ReplayAgent",
        "ReplayConfig",
        "ResolvedResources",
        "RolloutConfig",
        "RolloutOptions",
        "RolloutPausedError",
        "RolloutResult",
        "RolloutSettings",
        "RolloutStatus",
        "RunContext",
        "RunResources",
        "SUBMISSION_DIR",
        "SnapshotEvent",
        "StartEvent",
        "TRANSCRIPT_VERSION",
        "ToolEvent",
        "ToolResult",
        "ToolSet",
        "ToolSettings",
        "TranscriptEvent",
        "TranscriptWriter",
        "instructions_text",
        "load_agent",
        "load_status",
        "monitor_run",
        "read_transcript",
        "resources_from_flags",
        "resources_line",
        "rollout",
        "run_tool",
        "tool_defs",
        "write_report",
    ],
    "paperbench.errors": [
        "OUTSIDE_MODEL_ERRORS",
        "BudgetExhaustedError",
        "ConfigError",
        "ContextLengthError",
        "EgressProxyError",
        "ExecutorUnavailableError",
        "ImageBuildError",
        "IncompleteAnswerError",
        "InputError",
        "LfsPointerError",
        "MissingKeyError",
        "ModelAuthError",
        "ModelError",
        "ModelRequestError",
        "ModelUnavailableError",
        "PaperError",
        "PaperbenchError",
        "ProviderNotInstalledError",
        "RolloutPausedError",
        "RubricError",
        "SandboxError",
        "SandboxLostError",
        "SandboxUnavailableError",
        "StructuredOutputError",
        "UnknownProviderError",
        "UnsafeArchiveError",
        "UsageError",
    ],
    "paperbench.gateway": [
        "GatewayCall",
        "ModelGateway",
    ],
    "paperbench.judge": [
        "ADDRESSED_KEY",
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
        "PASS_THRESHOLD",
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
    ],
    "paperbench.llm": [
        "AssistantMessage",
        "BudgetCaps",
        "CallOutcome",
        "Coordinator",
        "CostJournal",
        "CostLedger",
        "CostRecord",
        "CostReport",
        "CostTotal",
        "Grant",
        "GroupSpend",
        "LABELS",
        "LocalCoordinator",
        "Message",
        "Model",
        "ModelAPI",
        "ModelConfig",
        "ModelOutput",
        "ModelPrice",
        "ModelRequest",
        "OutputSchema",
        "PriceTable",
        "RayCoordinator",
        "ReasoningEffort",
        "ResponseCache",
        "StopReason",
        "SystemMessage",
        "Target",
        "TokenCountKind",
        "ToolCall",
        "ToolDef",
        "ToolMessage",
        "TransientError",
        "Usage",
        "UserMessage",
        "context_window",
        "count_message_tokens",
        "count_tokens",
        "current_coordinator",
        "default_cache_path",
        "max_output_tokens",
        "providers",
        "read_cost_journal",
        "register_provider",
        "set_coordinator",
        "takes_reasoning_effort",
        "token_count_kind",
    ],
    "paperbench.papers": [
        "DATA_DIR_ENV",
        "HOME_ENV",
        "LFS_POINTER_MESSAGE",
        "LFS_POINTER_PREFIX",
        "Layout",
        "Paper",
        "PaperConfig",
        "PaperSource",
        "find_repo_root",
        "is_lfs_pointer",
        "load_data_dir_paper",
        "load_repo_paper",
        "parse_blacklist",
        "read_paper_text",
    ],
    "paperbench.rcb": [
        "PAPERS_FILE",
        "TEST_ENTRY",
        "ErrorClass",
        "Mode",
        "PaperScore",
        "ProblemRecord",
        "ProblemSet",
        "PublishedRow",
        "Rate",
        "RcbJob",
        "RcbPaper",
        "RcbRunOptions",
        "RcbRunResult",
        "RcbSettings",
        "RcbSummary",
        "SampleResult",
        "Snippet",
        "TestOutcome",
        "ValidationRow",
        "extract_code",
        "fill",
        "load_problem_set",
        "load_published",
        "mask",
        "pass_at_k",
        "reference_code",
        "run_rcb",
        "run_test",
        "run_tests",
        "score",
        "validate",
        "write_rcb_report",
    ],
    "paperbench.report": [
        "AgentMetrics",
        "CostSummary",
        "Estimate",
        "GroupFiles",
        "JudgeInfo",
        "JudgeMismatch",
        "NotScored",
        "PaperScore",
        "Problem",
        "RunFiles",
        "RunMetrics",
        "SeedScore",
        "Summary",
        "agent_metrics",
        "html_dir",
        "mean_se",
        "read_group_files",
        "read_run",
        "run_metrics",
        "summarize_group",
        "summary_path",
        "write_report",
    ],
    "paperbench.reproduce": [
        "ARCHIVE_TOP",
        "Attempt",
        "CREATION_TIME_NAME",
        "CRLF_HINT",
        "ChangedFiles",
        "DEFAULT_DISK_MB",
        "LOG_NAME",
        "REPRODUCER_IMAGE",
        "ReproduceConfig",
        "ReproduceSettings",
        "ReproductionMetadata",
        "SCHEMA_VERSION",
        "SUBMISSION_PATH",
        "Status",
        "default_out_dir",
        "reproduce_submission",
        "resolve_image",
    ],
    "paperbench.rubric": [
        "Check",
        "FinegrainedCategory",
        "GradedTaskNode",
        "Issue",
        "LEAF_CATEGORIES",
        "MAX_DEPTH",
        "MAX_WEIGHT",
        "NodePath",
        "RubricStats",
        "TaskCategory",
        "TaskNode",
        "TreeKind",
        "TreeSummary",
        "aggregate",
        "build_schema",
        "code_dev",
        "coverage",
        "cut_at_depth",
        "disqualify",
        "dumps_tree",
        "effective_weights",
        "expand_paths",
        "inspect_file",
        "iter_leaves",
        "iter_nodes",
        "load_graded",
        "load_rubric",
        "load_tree",
        "node_at",
        "outline",
        "path_to_json_path",
        "prior_criteria",
        "rebuild",
        "resources_provided",
        "rubric_stats",
        "score_from_children",
        "summarize",
        "total_stats",
        "tree_depth",
        "validate_data",
        "validate_file",
        "write_tree",
    ],
    "paperbench.runs": [
        "AgentEntry",
        "AgentSettings",
        "EvalConfig",
        "ExecutorSettings",
        "GroupConfig",
        "JudgeEntry",
        "JudgeSettings",
        "ReproductionSettings",
        "RunFolder",
        "RunKey",
        "RunOutcome",
        "RunState",
        "STAGES",
        "SandboxSettings",
        "StageRecord",
        "read_group",
        "run_keys",
    ],
    "paperbench.sandbox": [
        "Blacklist",
        "BlacklistHit",
        "CA_BUNDLE_VARS",
        "cap_output",
        "DEFAULT_OUTPUT_LIMIT",
        "DiskCapKind",
        "DiskUsage",
        "docker_engine_answers",
        "DockerBackend",
        "DockerEgressGateway",
        "EgressProxy",
        "EgressSettings",
        "Entry",
        "ExecResult",
        "ExtractReport",
        "folder_entries",
        "get_backend",
        "GpuRequest",
        "HostService",
        "IsolationKind",
        "LeftOutFile",
        "LOCAL_IMAGE",
        "LocalBackend",
        "LocalSandbox",
        "make_tar_gz",
        "NetworkLogEntry",
        "NetworkPolicy",
        "read_blacklist",
        "read_file_beneath",
        "read_network_log",
        "remove_tree",
        "repack",
        "safe_extract",
        "Sandbox",
        "SandboxBackend",
        "SandboxConfig",
        "SandboxLimits",
        "SandboxSpec",
        "SandboxUserKind",
        "SkippedMember",
        "stage_image",
        "tar_entries",
        "TreeLimits",
        "write_file_beneath",
    ],
    "paperbench.testing": [
        "FakeLLMServer",
        "FakeReply",
        "FakeToolCall",
        "FakeUsage",
        "Fault",
        "RecordedRequest",
        "default_reply",
        "requested_schema",
    ],
}


def _attribute_docstrings(module_file: Path) -> set[str]:
    """Names assigned at module level with a string literal right after them."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    found: set[str] = set()
    body = tree.body
    for node, after in itertools.pairwise(body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return found


def _documented(package: str, name: str) -> bool:
    module = importlib.import_module(package)
    obj = getattr(module, name)
    if inspect.isclass(obj):
        return bool(obj.__dict__.get("__doc__"))
    if name.startswith("__"):
        return True  # __version__ and the like: documented by convention
    if inspect.isfunction(obj) or (callable(obj) and hasattr(obj, "__wrapped__")):
        return bool(obj.__doc__)
    # a constant or a type alias: a string right after its assignment, where it is defined
    return any(name in _attribute_docstrings(f) for f in _source_files(module))


def _source_files(module: object) -> list[Path]:
    """The files of a module, or of a package and its modules (read, never imported)."""
    file = Path(getattr(module, "__file__", "") or "")
    if file.name == "__init__.py":
        return sorted(file.parent.glob("*.py"))
    return [file]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_the_public_names_are_the_decided_ones(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name} is in __all__ but not defined"


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_nothing_else_in_a_package_looks_public(package: str) -> None:
    module = importlib.import_module(package)
    if not hasattr(module, "__path__"):
        return  # a module (errors): its imports are its own business
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", None) not in ("typing", "__future__")
        and name not in ("annotations", "TYPE_CHECKING")
    }
    assert public - set(module.__all__) == set(), "export it or make it private"


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_is_documented(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__doc__, f"{package} has no docstring"
    missing = [name for name in module.__all__ if not _documented(package, name)]
    assert not missing, f"{package}: no docstring for {', '.join(missing)}"
