"""Our tool-loop agents: ``basic`` (until submit or a limit), ``iterative`` (no submit; told
the time left after each step) and ``dummy`` (a trivial submission, no model).

One step is one model call and the tool calls of its answer. Before each step the limits are
checked; every message sent or received is a MessageEvent, every call a ModelCallEvent, every
tool run a ToolEvent. Before each call the conversation is fitted to the model's window
(:mod:`paperbench.agents._context`: old tool outputs shortened, then the oldest turns
dropped, optionally summarised), each cut a ``context_trimmed`` note; a context-length refusal
from the provider refits with more dropped instead of ending the run. Answers with no text
and no tool call end the run after ``max_empty_answers`` in a row; tool calls of an answer cut
off at the output limit are not run (the model is told, and the limit raised). A lost sandbox
(:class:`~paperbench.errors.SandboxLostError`) and a provider outage past the retry budget
(:class:`~paperbench.errors.ModelUnavailableError`) propagate: the rollout restarts or pauses
the run, and no model call is made after either. On resume the conversation is rebuilt from
the MessageEvents of ``ctx.history`` (no answer there is paid for again), tool calls left
without a result get one saying so, and the restart notice is added.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from paperbench.agents._base import (
    SUBMISSION_DIR,
    Agent,
    AgentOutcome,
    LimitReached,
    RunContext,
    effort_for,
)
from paperbench.agents._config import BasicConfig, DummyConfig, IterativeConfig, ReplayConfig
from paperbench.agents._context import ContextFitter, render_turns, split_turns
from paperbench.agents._tools import ToolSet, run_tool, tool_defs
from paperbench.agents._transcript import MessageEvent, ModelCallEvent, NoteEvent
from paperbench.errors import (
    OUTSIDE_MODEL_ERRORS,
    BudgetExhaustedError,
    ContextLengthError,
    ModelError,
)
from paperbench.llm import (
    AssistantMessage,
    Message,
    Model,
    ModelOutput,
    StopReason,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
    max_output_tokens,
    token_count_kind,
)

BEGIN = "Begin: the task is in the system message and in /home/instructions.txt."
NUDGE = "Go on with the task using the tools; call submit when /home/submission is final."
INTERRUPTED = "[no result: the environment was restarted while this tool ran]"
SUMMARY_PROMPT = (
    "You keep the notes of a long-running coding agent. Below are the oldest turns of its "
    "work, about to be removed from its memory. Summarise what they established that is "
    "still useful: decisions taken, files written and what they hold, commands that worked "
    "or failed and why, results and numbers, open problems. Be factual and brief (at most "
    "400 words); no advice."
)
REMINDER = (
    "Time used: {elapsed} of {time_limit} ({time_left} left). Work until the time is up, and "
    "commit your work in /home/submission with git regularly."
)
"""The periodic reminder when the config names no ``reminder`` prompt."""


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
        self.max_tokens = config.max_tokens
        self.fitter = self._new_fitter()
        self.cache_key: str | None = None
        self.stop_reason: StopReason = "stop"

    def _new_fitter(self) -> ContextFitter:
        config = self.config
        return ContextFitter(
            model=self.model_name,
            window=config.context_window,
            answer_tokens=max(config.answer_tokens, config.max_tokens or 0),
            drop_fraction=config.drop_fraction,
        )

    @property
    def model_name(self) -> str:
        return self.model.name if self.model is not None else "openai/gpt-4o"

    async def run(self, ctx: RunContext) -> AgentOutcome:
        # Each run (a restart in a new sandbox included) fits its rebuilt conversation anew.
        self.max_tokens = self.config.max_tokens
        self.fitter = self._new_fitter()
        tools = ToolSet.for_sandbox(self.config.tools, ctx.sandbox, submit=self.submit_tool)
        try:
            return await self._loop(ctx, tools)
        finally:
            await tools.aclose()

    async def _loop(self, ctx: RunContext, tools: ToolSet) -> AgentOutcome:
        defs = tool_defs(tools)
        messages = self._start(ctx)
        self.cache_key = f"pb-{ctx.paper_id}-{ctx.seed}-{uuid.uuid4().hex[:12]}"
        empty = 0
        while True:
            try:
                ctx.limits.check()
            except LimitReached as exc:
                self._note(ctx, "limit", str(exc), {"limit": exc.kind})
                return AgentOutcome(status="limit", limit=exc.kind, summary=str(exc))
            ctx.limits.steps += 1
            try:
                messages, answer = await self._step(ctx, messages, defs)
            except BudgetExhaustedError as exc:
                self._note(ctx, "limit", str(exc), {"limit": "dollars"})
                return AgentOutcome(status="limit", limit="dollars", summary=str(exc))
            except OUTSIDE_MODEL_ERRORS:
                raise  # an outage or a key: the rollout pauses the run, resumable
            except ModelError as exc:
                self._note(ctx, "error", str(exc))
                return AgentOutcome(status="error", error=str(exc))
            if answer is None:
                return AgentOutcome(status="error", error="the recorded answers ran out")
            message = answer
            if not message.content.strip() and not message.tool_calls:
                empty += 1
                if empty >= self.config.max_empty_answers:
                    reason = (
                        f"the model gave {empty} empty answers in a row (no text, no tool call)"
                    )
                    self._add(ctx, messages, message)
                    self._note(ctx, "empty_answers", reason, {"count": empty})
                    return AgentOutcome(status="error", error=reason)
            else:
                empty = 0
            self._add(ctx, messages, message)
            if message.tool_calls and self.stop_reason == "max_tokens":
                self._refuse_cut_calls(ctx, messages, message)
                continue
            submitted: str | None = None
            for call in message.tool_calls:
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
            follow = self.follow_up(ctx, message)
            if follow is not None:
                self._add(ctx, messages, UserMessage(content=follow))

    async def _step(
        self, ctx: RunContext, messages: list[Message], defs: Sequence[ToolDef]
    ) -> tuple[list[Message], AssistantMessage | None]:
        """One model call on the conversation fitted to the window. A context-length refusal
        is never the end: the fitter learns from it and drops more, until nothing is left to
        drop."""
        force = False
        while True:
            messages = await self._fit(ctx, messages, defs, force=force)
            try:
                return messages, await self.generate(ctx, messages, defs)
            except ContextLengthError as exc:
                ours = self.fitter.count(messages, defs)
                _, turns = split_turns(messages)
                self._note(
                    ctx,
                    "context_refused",
                    f"the provider refused {ours} counted tokens as too long ({exc})",
                    {"tokens_counted": ours, "provider_tokens": exc.tokens, "limit": exc.limit},
                )
                if len(turns) <= 1:
                    raise  # nothing left to drop: the newest turn alone does not fit
                self.fitter.learn(exc.tokens, exc.limit, ours)
                force = True

    def _refuse_cut_calls(
        self, ctx: RunContext, messages: list[Message], message: AssistantMessage
    ) -> None:
        """An answer cut off at the output limit: its tool calls are not run (their arguments
        may be incomplete); each gets a result saying so, and the limit is raised."""
        before = self.max_tokens
        ceiling = max_output_tokens(self.model_name)
        raised = 2 * (before or self.config.answer_tokens)
        self.max_tokens = raised if ceiling is None else min(raised, ceiling)
        self.fitter.answer_tokens = max(self.fitter.answer_tokens, self.max_tokens)
        text = (
            "not run: your answer was cut off at the output limit before this call was "
            "complete, so its arguments may be incomplete. "
            + (
                f"The limit is now {self.max_tokens} tokens; "
                if self.max_tokens != before
                else "The limit cannot be raised; "
            )
            + "make the call again, and split long file contents over several calls."
        )
        for call in message.tool_calls:
            self._add(
                ctx,
                messages,
                ToolMessage(tool_call_id=call.id, name=call.name, content=text, is_error=True),
            )
        self._note(
            ctx,
            "output_cut",
            f"answer cut off at the output limit; {len(message.tool_calls)} tool calls not run",
            {"max_tokens_before": before, "max_tokens": self.max_tokens},
        )

    # -- what differs between agents ------------------------------------------------------

    async def generate(
        self, ctx: RunContext, messages: Sequence[Message], defs: Sequence[ToolDef]
    ) -> AssistantMessage | None:
        """The next assistant message (None: there is none, for a replay); sets
        :attr:`stop_reason`."""
        assert self.model is not None
        out = await self.model.generate(
            messages,
            tools=defs,
            max_tokens=self.max_tokens,
            reasoning_effort=effort_for(self.model.name, self.config.reasoning_effort),
            label="agent_step",
            prompt_cache_key=self.cache_key if self.config.prompt_cache else None,
        )
        self._record_call(ctx, out)
        self.stop_reason = out.stop_reason
        return out.assistant_message()

    # -- follow-up messages (no_tool_call, continue, reminder) ----------------------------

    def follow_up(self, ctx: RunContext, answer: AssistantMessage) -> str | None:
        """The user message after a step, if any: the nudge (prompt ``no_tool_call``) when
        the answer called no tool, and the periodic reminder (:meth:`reminder`)."""
        nudge = None if answer.tool_calls else self.prompts.get("no_tool_call", NUDGE)
        return _join(nudge, self.reminder(ctx))

    def reminder(self, ctx: RunContext) -> str | None:
        """The time used and left, when the next step is a multiple of
        ``reminder_every_steps`` (it closes the step before, so the model reads it first)."""
        every = self.config.reminder_every_steps
        if every is None or (ctx.limits.steps + 1) % every:
            return None
        limit = ctx.limits.limits.wall_time_s
        remaining = ctx.limits.remaining_s()
        fills = {
            "{elapsed}": _clock(ctx.limits.elapsed_s()),
            "{time_limit}": "no limit" if limit is None else _clock(limit),
            "{time_left}": "no limit" if remaining is None else _clock(remaining),
        }
        text = self.prompts.get("reminder", REMINDER)
        for placeholder, value in fills.items():
            text = text.replace(placeholder, value)
        return text

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

    def _record_call(self, ctx: RunContext, out: ModelOutput, label: str = "agent_step") -> None:
        ctx.transcript.append(ModelCallEvent.of(out, step=ctx.limits.steps, label=label))

    def _note(
        self, ctx: RunContext, kind: str, text: str, data: dict[str, object] | None = None
    ) -> None:
        ctx.transcript.append(
            NoteEvent(step=ctx.limits.steps, kind=kind, text=text, data=dict(data or {}))
        )

    async def _fit(
        self, ctx: RunContext, messages: list[Message], defs: Sequence[ToolDef], force: bool
    ) -> list[Message]:
        """The conversation fitted to the window (see :mod:`paperbench.agents._context`);
        every cut is a ``context_trimmed`` note."""
        fitted = self.fitter.fit(messages, defs, force=force)
        if not fitted.changed and not fitted.over:
            return fitted.messages
        if fitted.dropped and self.config.context_summary:
            await self._summarise(ctx, fitted.dropped)
            fitted.messages = self.fitter.refresh_note(fitted.messages)
        self._note(
            ctx,
            "context_trimmed",
            f"shortened {len(fitted.shortened_ids)} old tool outputs ({fitted.chars_cut} "
            f"characters), dropped the {fitted.dropped_turns} oldest turns; about "
            f"{fitted.tokens} of {fitted.budget} tokens used",
            {
                "tool_call_ids": fitted.shortened_ids,
                "chars_cut": fitted.chars_cut,
                "turns_dropped": fitted.dropped_turns,
                "turns_removed_total": self.fitter.removed_turns,
                "tokens": fitted.tokens,
                "budget": fitted.budget,
                "window": self.fitter.window,
                "correction": round(self.fitter.correction, 3),
                "count": token_count_kind(self.model_name),
            },
        )
        return fitted.messages

    async def _summarise(self, ctx: RunContext, dropped: list[Message]) -> None:
        """Ask the model for a summary of the dropped turns; kept in the opening message."""
        if self.model is None:
            return
        limit = max(4_000, (self.fitter.budget // 2) * 3)  # about half the window, in chars
        request: list[Message] = [
            SystemMessage(content=self.prompts.get("summary", SUMMARY_PROMPT)),
            UserMessage(content=render_turns(dropped, limit)),
        ]
        if self.fitter.summaries:  # one summary of everything removed so far, not a pile
            earlier = "\n\n".join(self.fitter.summaries)
            request[1] = UserMessage(
                content=f"SUMMARY OF WHAT WAS REMOVED BEFORE:\n{earlier}\n\n{request[1].content}"
            )
        try:
            out = await self.model.generate(request, max_tokens=2_000, label="context_summary")
        except BudgetExhaustedError:
            raise
        except OUTSIDE_MODEL_ERRORS:
            raise
        except ModelError as exc:
            self._note(ctx, "context_summary_failed", f"no summary of the dropped turns: {exc}")
            return
        self._record_call(ctx, out, label="context_summary")
        if out.text.strip():
            self.fitter.summaries = [out.text.strip()]


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
        nudge = None if answer.tool_calls else self.prompts.get("no_tool_call")
        kept = self.continuation(ctx) if self._continue_kept else None
        return _join(nudge, kept, self.reminder(ctx))

    async def generate(
        self, ctx: RunContext, messages: Sequence[Message], defs: Sequence[ToolDef]
    ) -> AssistantMessage | None:
        """With ``continue_in_history: false`` the continuation is the last message of every
        request and is never kept in the conversation."""
        if not self._continue_kept:
            messages = [*messages, UserMessage(content=self.continuation(ctx))]
        return await super().generate(ctx, messages, defs)

    @property
    def _continue_kept(self) -> bool:
        return not isinstance(self.config, IterativeConfig) or self.config.continue_in_history

    def continuation(self, ctx: RunContext) -> str:
        """The ``continue`` prompt (``continue_code_dev`` for Code-Dev when given), with the
        time left."""
        remaining = ctx.limits.remaining_s()
        left = "no time limit" if remaining is None else _duration(remaining)
        template = self.prompts.get("continue", "Keep working. Time left: {time_left}.")
        if ctx.code_dev:
            template = self.prompts.get("continue_code_dev", template)
        return template.replace("{time_left}", left)


def _join(*parts: str | None) -> str | None:
    """The follow-up parts that are given, one paragraph each; None when there is none."""
    given = [part for part in parts if part]
    return "\n\n".join(given) if given else None


def _clock(seconds: float) -> str:
    """``H:MM:SS``."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


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
