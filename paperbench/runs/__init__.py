"""Groups of runs: what an evaluation is asked (:class:`EvalConfig`), the run store on disk,
the pipeline and its executors. ``paperbench.evaluate()`` is the entry point."""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.runs._config import (
        AgentSettings,
        EvalConfig,
        ExecutorSettings,
        JudgeSettings,
        ReproductionSettings,
        SandboxSettings,
    )
    from paperbench.runs._store import (
        STAGES,
        AgentEntry,
        GroupConfig,
        JudgeEntry,
        RunFolder,
        RunKey,
        RunOutcome,
        RunState,
        StageRecord,
        read_group,
        run_keys,
    )

__all__ = [
    "STAGES",
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
    "SandboxSettings",
    "StageRecord",
    "read_group",
    "run_keys",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
