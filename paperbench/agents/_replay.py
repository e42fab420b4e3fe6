"""The ``replay`` agent: the real tool loop with the model replaced by a recorded transcript.

The assistant messages of the transcript file (its MessageEvents, in order) are the model's
answers; the tools really run in the sandbox. The n-th model call of a run gets the n-th
recorded answer, so a resumed replay goes on where it stopped. Used to test the rollout
stage end to end without a model, and to build the bundled papers' reference submissions.
A resumed replay goes on from the last snapshot's step, so that its submission ends as an
uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from paperbench.agents._base import AgentOutcome, RunContext, read_transcript
from paperbench.agents._config import ReplayConfig
from paperbench.agents._loop import ToolLoopAgent
from paperbench.agents._transcript import (
    MessageEvent,
    ModelCallEvent,
    SnapshotEvent,
    TranscriptEvent,
)
from paperbench.llm import AssistantMessage, Message, ToolDef


def recorded_answers(path: Path) -> list[AssistantMessage]:
    """The assistant messages of a transcript file, in order.

    Raises:
        InputError: a line is not a transcript event (file and line named).
    """
    return [
        event.message
        for event in read_transcript(path)
        if isinstance(event, MessageEvent) and isinstance(event.message, AssistantMessage)
    ]


def _up_to_last_snapshot(history: list[TranscriptEvent]) -> list[TranscriptEvent]:
    """The events before the last snapshot: a resumed replay goes on from the step its
    restored submission was saved at (the steps after it are replayed, so their effects on
    the files are made again), not from the last step recorded."""
    last = max((i for i, e in enumerate(history) if isinstance(e, SnapshotEvent)), default=0)
    if not last:
        return []
    # The snapshot holds the files as they were when the step it names was under way: that
    # step and any later one recorded before the event are replayed too.
    taken_at = history[last].step
    return [e for e in history[:last] if not (isinstance(e, MessageEvent) and e.step >= taken_at)]


class ReplayAgent(ToolLoopAgent):
    """Answers from a recorded transcript; the tools run for real."""

    def __init__(self, config: ReplayConfig, prompts: dict[str, str], transcript: Path) -> None:
        super().__init__(config, prompts, None)
        self.transcript_path = transcript
        self._answers: list[AssistantMessage] | None = None

    async def run(self, ctx: RunContext) -> AgentOutcome:
        self._answers = recorded_answers(self.transcript_path)
        if ctx.resumed:
            ctx = replace(ctx, history=_up_to_last_snapshot(ctx.history))
        return await super().run(ctx)

    async def generate(
        self, ctx: RunContext, messages: Sequence[Message], defs: Sequence[ToolDef]
    ) -> AssistantMessage | None:
        assert self._answers is not None
        # Turns dropped to fit the window had one assistant message each.
        index = self.fitter.removed_turns + sum(isinstance(m, AssistantMessage) for m in messages)
        if index >= len(self._answers):
            return None
        ctx.transcript.append(
            ModelCallEvent(
                step=ctx.limits.steps,
                model=f"replay/{self.transcript_path.name}",
                label="agent_step",
                stop_reason="tool_calls" if self._answers[index].tool_calls else "stop",
            )
        )
        self.stop_reason = "stop"
        return self._answers[index]
