"""Our tool-loop agents: ``basic`` (until submit or a limit), ``iterative`` (no submit; told
the time left after each step) and ``dummy`` (a trivial submission, no model).

One step is one model call and the tool calls of its answer. Before each step the limits are
checked; every message sent or received is a MessageEvent, every call a ModelCallEvent, every
tool run a ToolEvent. When the conversation nears ``context_window`` the OLDEST tool outputs
are shortened first (never removed: every tool call keeps its result, as both APIs require;
the newest output is never touched) and a NoteEvent says what was cut. On resume the
conversation is rebuilt from the MessageEvents of ``ctx.history`` (no answer there is paid
for again), tool calls left without a result get one saying so, and the restart notice is
added.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from paperbench.agents._base import (
    SUBMISSION_DIR,
    Agent,
    AgentOutcome,
    LimitReached,
    RunContext,
)
from paperbench.agents._config import BasicConfig, DummyConfig, IterativeConfig, ReplayConfig
from paperbench.agents._tools import ToolSet, run_tool, tool_defs
from paperbench.agents._transcript import MessageEvent, ModelCallEvent, NoteEvent
from paperbench.errors import BudgetExhaustedError, ModelError, ModelUnavailableError
from paperbench.llm import (
    AssistantMessage,
    Message,
    Model,
    ModelOutput,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
    count_message_tokens,
    count_tokens,
)

BEGIN = "Begin: the task is in the system message and in /home/instructions.txt."
NUDGE = "Go on with the task using the tools; call submit when /home/submission is final."
INTERRUPTED = "[no result: the environment was restarted while this tool ran]"
_KEEP_CHARS = 300
"""What is left of a shortened tool output: its head."""


class ToolLoopAgent(Agent):
    """The loop shared by basic, iterative and replay."""

    submit_tool: bool = True

    def __init__(
        self,
        config: BasicConfig | IterativeConfig | ReplayConfig,
        prompts: dict[str, str],
        model: Model | None,
    ) -> None:
        self.config = config
        self.prompts = prompts
        self.model = model
        self.name = config.name or config.type
        self._shortened: set[str] = set()

    @property
    def model_name(self) -> str:
        return self.model.name if self.model is not None else "openai/gpt-4o"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        tools = ToolSet.for_sandbox(self.config.tools, ctx.sandbox, submit=self.submit_tool)
        try:
            return await self._loop(ctx, tools)
        finally:
            await tools.aclose()

    async def _loop(self, ctx: RunContext, tools: ToolSet) -> AgentOutcome:
        defs = tool_defs(tools)
        messages = self._start(ctx)
        while True:
            try:
                ctx.limits.check()
            except LimitReached as exc:
                self._note(ctx, "limit", str(exc), {"limit": exc.kind})
                return AgentOutcome(status="limit", limit=exc.kind, summary=str(exc))
            ctx.limits.steps += 1
            messages = self._fit(ctx, messages, defs)
            try:
                answer = await self.generate(ctx, messages, defs)
            except BudgetExhaustedError as exc:
                self._note(ctx, "limit", str(exc), {"limit": "dollars"})
                return AgentOutcome(status="limit", limit="dollars", summary=str(exc))
            except ModelUnavailableError:
                raise
            except ModelError as exc:
                self._note(ctx, "error", str(exc))
                return AgentOutcome(status="error", error=str(exc))
            if answer is None:
                return AgentOutcome(status="error", error="the recorded answers ran out")
            self._add(ctx, messages, answer)
            submitted: str | None = None
            for call in answer.tool_calls:
                result = await run_tool(ctx, call, tools)
                self._add(
                    ctx,
                    messages,
                    ToolMessage(
                        tool_call_id=call.id,
                        name=call.name,
                        content=result.output,
                        is_error=result.is_error,
                    ),
                )
                if result.submitted:
                    submitted = result.output
            if submitted is not None:
                return AgentOutcome(status="submitted", summary=submitted)
            follow = self.follow_up(ctx, answer)
            if follow is not None:
                self._add(ctx, messages, UserMessage(content=follow))

    # -- what differs between agents ------------------------------------------------------

    async def generate(
        self, ctx: RunContext, messages: Sequence[Message], defs: Sequence[ToolDef]
    ) -> AssistantMessage | None:
        """The next assistant message (None: there is none, for a replay)."""
        assert self.model is not None
        out = await self.model.generate(
            messages,
            tools=defs,
            max_tokens=self.config.max_tokens,
            reasoning_effort=self.config.reasoning_effort,
            label="agent_step",
        )
        self._record_call(ctx, out)
        return out.assistant_message()

    def follow_up(self, ctx: RunContext, answer: AssistantMessage) -> str | None:
        """The user message after a step, if any."""
        return None if answer.tool_calls else NUDGE

    # -- conversation ---------------------------------------------------------------------

    def _start(self, ctx: RunContext) -> list[Message]:
        earlier = [e.message for e in ctx.history if isinstance(e, MessageEvent)]
        if earlier:
            messages = _close_open_calls(earlier)
            ctx.limits.steps = max(
                ctx.limits.steps, sum(isinstance(m, AssistantMessage) for m in earlier)
            )
            for message in messages[len(earlier) :]:
                self._record(ctx, message)
            if ctx.resumed:
                self._add(ctx, messages, UserMessage(content=self.prompts.get("restart", "")))
            return messages
        system = self.prompts.get("system", "{instructions}")
        messages = []
        filled = system.replace("{instructions}", ctx.instructions)
        self._add(ctx, messages, SystemMessage(content=filled))
        self._add(ctx, messages, UserMessage(content=BEGIN))
        return messages

    def _add(self, ctx: RunContext, messages: list[Message], message: Message) -> None:
        messages.append(message)
        self._record(ctx, message)

    def _record(self, ctx: RunContext, message: Message) -> None:
        ctx.transcript.append(MessageEvent(step=ctx.limits.steps, message=message))

    def _record_call(self, ctx: RunContext, out: ModelOutput) -> None:
        ctx.transcript.append(ModelCallEvent.of(out, step=ctx.limits.steps))

    def _note(
        self, ctx: RunContext, kind: str, text: str, data: dict[str, object] | None = None
    ) -> None:
        ctx.transcript.append(
            NoteEvent(step=ctx.limits.steps, kind=kind, text=text, data=dict(data or {}))
        )

    def _fit(
        self, ctx: RunContext, messages: list[Message], defs: Sequence[ToolDef]
    ) -> list[Message]:
        """Shorten the oldest tool outputs until the conversation fits the window."""
        budget = self.config.context_window - self.config.answer_tokens
        fixed = count_tokens(json.dumps([d.model_dump() for d in defs]), self.model_name)
        used = fixed + count_message_tokens(messages, self.model_name)
        if used <= budget:
            return messages
        tool_at = [i for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
        cut_ids: list[str] = []
        chars = 0
        out = list(messages)
        for index in tool_at[:-1]:  # the newest output is never shortened
            if used <= budget:
                break
            message = out[index]
            assert isinstance(message, ToolMessage)
            if len(message.content) <= _KEEP_CHARS + 100:
                continue
            removed = len(message.content) - _KEEP_CHARS
            short = message.model_copy(
                update={
                    "content": message.content[:_KEEP_CHARS]
                    + f"\n[... {removed} characters of this old output cut to save context]"
                }
            )
            used -= count_tokens(message.content, self.model_name) - count_tokens(
                short.content, self.model_name
            )
            out[index] = short
            chars += removed
            if message.tool_call_id not in self._shortened:
                cut_ids.append(message.tool_call_id)
                self._shortened.add(message.tool_call_id)
        if cut_ids or used > budget:
            self._note(
                ctx,
                "context_trimmed",
                f"shortened {len(cut_ids)} old tool outputs ({chars} characters); "
                f"about {used} of {budget} tokens used",
                {"tool_call_ids": cut_ids, "chars_cut": chars, "tokens": used, "budget": budget},
            )
        return out


def _close_open_calls(earlier: list[Message]) -> list[Message]:
    """``earlier`` with a result for every tool call that has none (it was running when the
    environment stopped), placed right after its assistant message's other results."""
    out: list[Message] = []
    pending: list[str] = []

    def close() -> None:
        for call_id in pending:
            out.append(ToolMessage(tool_call_id=call_id, content=INTERRUPTED, is_error=True))
        pending.clear()

    for message in earlier:
        if isinstance(message, ToolMessage):
            if message.tool_call_id in pending:
                pending.remove(message.tool_call_id)
            out.append(message)
            continue
        close()
        out.append(message)
        if isinstance(message, AssistantMessage):
            pending.extend(call.id for call in message.tool_calls)
    close()
    return out


class BasicAgent(ToolLoopAgent):
    """A ReAct tool loop until the model calls submit or a limit is reached."""


class IterativeAgent(ToolLoopAgent):
    """No submit tool: after each step, a continuation message with the time left."""

    submit_tool = False

    def follow_up(self, ctx: RunContext, answer: AssistantMessage) -> str | None:
        remaining = ctx.limits.remaining_s()
        left = "no time limit" if remaining is None else _duration(remaining)
        template = self.prompts.get("continue", "Keep working. Time left: {time_left}.")
        return template.replace("{time_left}", left)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


DUMMY_REPRODUCE = """#!/usr/bin/env bash
# A trivial reproduction: records that it ran.
set -euo pipefail
mkdir -p results
echo '{"dummy": true}' > results/dummy.json
echo "dummy reproduction done"
"""
DUMMY_README = "# Dummy submission\n\nWritten by paperbench's dummy agent: no replication.\n"


class DummyAgent(Agent):
    """Writes a trivial reproduce.sh and README.md; no model."""

    def __init__(self, config: DummyConfig) -> None:
        self.config = config
        self.name = config.name or "dummy"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        await ctx.sandbox.write_file(f"{SUBMISSION_DIR}/reproduce.sh", DUMMY_REPRODUCE.encode())
        await ctx.sandbox.write_file(f"{SUBMISSION_DIR}/README.md", DUMMY_README.encode())
        commit = await ctx.sandbox.exec(
            f"cd {SUBMISSION_DIR} && if [ -d .git ]; then git add -A && "
            "git -c user.name=paperbench -c user.email=agent@paperbench.invalid "
            "commit -q -m 'dummy submission'; fi",
            timeout=60,
        )
        ctx.transcript.append(
            NoteEvent(
                kind="dummy",
                text="wrote reproduce.sh and README.md",
                data={"git_exit_code": commit.exit_code},
            )
        )
        return AgentOutcome(status="submitted", summary="dummy submission")
