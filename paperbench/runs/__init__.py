"""Groups of runs: the run store on disk, the pipeline and its executors."""

from paperbench.runs._store import (
    STAGES,
    AgentEntry,
    GroupConfig,
    JudgeEntry,
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
    "GroupConfig",
    "JudgeEntry",
    "RunKey",
    "RunOutcome",
    "RunState",
    "StageRecord",
    "read_group",
    "run_keys",
]
