"""The rollout transcript: ``transcript.jsonl``, one event a line, appended and flushed as it
happens, so a kill -9 loses at most the event in flight.

Every event has a ``type``, the wall-clock ``time`` and the agent ``step`` it belongs to.
The conversation itself is carried by ``message`` events holding paperbench.llm messages
exactly as they were sent or received (reasoning items included), so a resumed run rebuilds
the conversation from the file and a replay agent re-reads it. Readers (the blacklist
monitor, the HTML report) take the events they know and skip none silently: an unknown
``type`` is an error naming the line.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench.llm import Message, ModelOutput, Usage
from paperbench.sandbox import LeftOutFile

TRANSCRIPT_VERSION = 1
"""The version of transcript.jsonl's format."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    time: float = Field(default_factory=time.time)
    step: int = 0


class StartEvent(_Event):
    """The run began (or resumed: ``resumed`` counts earlier starts)."""

    type: Literal["start"] = "start"
    version: int = TRANSCRIPT_VERSION
    agent: str
    model: str | None = None
    paper_id: str
    seed: int = 0
    resumed: int = 0
    config: dict[str, Any] = Field(default_factory=dict)
    """The resolved agent configuration (never a key)."""


class MessageEvent(_Event):
    """One conversation message, as sent to or received from the model."""

    type: Literal["message"] = "message"
    message: Message


class ModelCallEvent(_Event):
    """What one model call took: usage, cost, latency, whether the cache answered."""

    type: Literal["model_call"] = "model_call"
    model: str
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    latency_s: float = 0.0
    cached: bool = False
    stop_reason: str | None = None
    label: str = "agent_step"

    @classmethod
    def of(cls, out: ModelOutput, *, step: int, label: str = "agent_step") -> ModelCallEvent:
        """The event for one model answer."""
        return cls(
            step=step,
            model=out.model,
            usage=out.usage,
            cost_usd=out.cost_usd,
            latency_s=out.latency_s,
            cached=out.cached,
            stop_reason=out.stop_reason,
            label=label,
        )


class ToolEvent(_Event):
    """One tool run in the sandbox: what was asked, what came back, how long it took."""

    type: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    output: str = ""
    """The output as the model saw it (capped, the cut said)."""
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    error: str | None = None


class NoteEvent(_Event):
    """Something the run did to the conversation or its environment: context trimmed (what
    was cut), environment restarted (``environment_restarted``: why, from which snapshot),
    snapshots pruned (``snapshots_pruned``), the run paused (``paused``: the provider's last
    error), a limit reached, an artifact saved."""

    type: Literal["note"] = "note"
    kind: str
    text: str = ""
    data: dict[str, Any] = Field(default_factory=dict)


class SnapshotEvent(_Event):
    """/home/submission was saved."""

    type: Literal["snapshot"] = "snapshot"
    path: str
    """Relative to the run folder, e.g. ``snapshots/0003.tar.gz``."""
    bytes: int = 0
    left_out: list[LeftOutFile] = Field(default_factory=list)
    """Files not kept in it (over 10 MB): path and size."""


class EndEvent(_Event):
    """The run ended: how, and which limit stopped it."""

    type: Literal["end"] = "end"
    status: str
    """``submitted``, ``limit``, ``error``, ``cancelled``, or ``paused``: the run stopped
    before its end (provider unavailable, sandbox lost) and is resumable."""
    limit: str | None = None
    """``wall_time``, ``steps``, ``tokens`` or ``dollars`` when a limit stopped the run."""
    error: str | None = None


TranscriptEvent = Annotated[
    StartEvent | MessageEvent | ModelCallEvent | ToolEvent | NoteEvent | SnapshotEvent | EndEvent,
    Field(discriminator="type"),
]
"""One line of ``transcript.jsonl``."""
