"""Agents: the rollout stage. An agent works in a sandbox and leaves /home/submission."""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.agents._base import (
        INSTRUCTIONS_PATH,
        PAPER_DIR,
        SUBMISSION_DIR,
        Agent,
        AgentLimits,
        AgentOutcome,
        LimitKind,
        LimitReached,
        LimitTracker,
        OutcomeStatus,
        RunContext,
        TranscriptWriter,
        read_transcript,
    )
    from paperbench.agents._config import (
        AgentConfig,
        AgentIdentity,
        BasicConfig,
        DummyConfig,
        IterativeConfig,
        LoadedAgent,
        PapercoderConfig,
        ReplayConfig,
        ToolSettings,
        instructions_text,
        load_agent,
    )
    from paperbench.agents._loop import BasicAgent, DummyAgent, IterativeAgent
    from paperbench.agents._monitor import (
        MONITOR_VERSION,
        MonitorHit,
        MonitorPolicy,
        MonitorReport,
        monitor_run,
        write_report,
    )
    from paperbench.agents._papercoder import PapercoderAgent
    from paperbench.agents._replay import ReplayAgent
    from paperbench.agents._resources import (
        AgentResources,
        ResolvedResources,
        RunResources,
        resources_from_flags,
        resources_line,
    )
    from paperbench.agents._rollout import rollout
    from paperbench.agents._rollout_files import (
        RolloutConfig,
        RolloutPausedError,
        RolloutResult,
        RolloutStatus,
        load_status,
    )
    from paperbench.agents._rollout_plan import RolloutOptions
    from paperbench.agents._rollout_settings import RolloutSettings
    from paperbench.agents._tools import ToolResult, ToolSet, run_tool, tool_defs
    from paperbench.agents._transcript import (
        TRANSCRIPT_VERSION,
        EndEvent,
        MessageEvent,
        ModelCallEvent,
        NoteEvent,
        SnapshotEvent,
        StartEvent,
        ToolEvent,
        TranscriptEvent,
    )

__all__ = [
    "INSTRUCTIONS_PATH",
    "MONITOR_VERSION",
    "PAPER_DIR",
    "SUBMISSION_DIR",
    "TRANSCRIPT_VERSION",
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
    "IterativeAgent",
    "IterativeConfig",
    "LimitKind",
    "LimitReached",
    "LimitTracker",
    "LoadedAgent",
    "MessageEvent",
    "ModelCallEvent",
    "MonitorHit",
    "MonitorPolicy",
    "MonitorReport",
    "NoteEvent",
    "OutcomeStatus",
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
    "SnapshotEvent",
    "StartEvent",
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
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
