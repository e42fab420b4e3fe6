"""Fitting a tool loop's conversation into the model's context window.

Before each model call the conversation is counted (exact counts where an offline tokenizer
exists for the model, an estimate otherwise, with a wider margin) with the tool definitions
and the room kept for the answer. When it does not fit:

1. the OLDEST tool outputs are shortened to their head (never the newest; every tool call
   keeps a result, as both APIs require);
2. if that is not enough, whole turns are dropped, oldest first: a turn is an assistant
   message with its tool results and any user messages after them, so what remains is always
   a valid conversation (the opening system and user messages stay; the first kept turn is an
   assistant turn). At least :attr:`ContextFitter.drop_fraction` of the turns go at once (as
   PaperBench drops the oldest 30 %), so the kept prefix stays the same, and cacheable, for
   many steps; the opening user message says how many turns were removed (and, when the agent
   asks for it, carries a summary of them written by the model).

A cut brings the conversation under :attr:`ContextFitter.low_water` of the budget, not just
under it, for the same reason. The provider has the last word: a context-length refusal
(:class:`~paperbench.errors.ContextLengthError`) teaches the fitter how far off its count was
(:meth:`ContextFitter.learn`) and the loop fits again with more dropped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from paperbench.llm import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
    count_message_tokens,
    count_tokens,
    token_count_kind,
)

KEEP_CHARS = 300
"""What is left of a shortened tool output: its head."""
REMOVED_MARK = "[Context note:"
"""Starts the note, in the opening user message, of the turns removed so far."""


@dataclass
class Fitted:
    """The conversation to send and what was cut to get it."""

    messages: list[Message]
    shortened_ids: list[str] = field(default_factory=list)
    """Tool calls whose output was shortened by this fit (first time only)."""
    chars_cut: int = 0
    dropped: list[Message] = field(default_factory=list)
    """The messages of the turns dropped by this fit, oldest first."""
    dropped_turns: int = 0
    tokens: int = 0
    """The conversation's count after the fit (with the learnt correction)."""
    budget: int = 0
    over: bool = False
    """Still over the budget: nothing more could be cut."""

    @property
    def changed(self) -> bool:
        return bool(self.shortened_ids or self.chars_cut or self.dropped_turns)


@dataclass
class ContextFitter:
    """Keeps one loop's conversation inside ``window`` tokens (see the module docs)."""

    model: str
    """``provider/model``: picks the tokenizer and the margin."""
    window: int
    answer_tokens: int
    drop_fraction: float = 0.3
    low_water: float = 0.85
    correction: float = 1.0
    """Provider's count / ours, learnt from context-length refusals (never below 1)."""
    removed_turns: int = 0
    """Turns removed since the loop started (said in the opening user message)."""
    summaries: list[str] = field(default_factory=list)
    _shortened: set[str] = field(default_factory=set)
    _counts: dict[int, tuple[Message, int]] = field(default_factory=dict)

    @property
    def margin(self) -> int:
        """Tokens kept free for what the count cannot see: 2 % with an exact tokenizer
        (message framing the provider adds), 12 % with an estimate."""
        share = 0.02 if token_count_kind(self.model) == "exact" else 0.12
        return math.ceil(self.window * share)

    @property
    def budget(self) -> int:
        return max(1024, self.window - self.answer_tokens - self.margin)

    def count(self, messages: Sequence[Message], defs: Sequence[ToolDef]) -> int:
        """Tokens of the tool definitions and ``messages``, times the learnt correction."""
        fixed = count_tokens(json.dumps([d.model_dump() for d in defs]), self.model) if defs else 0
        raw = fixed + sum(self._message_tokens(m) for m in messages)
        return math.ceil(raw * self.correction)

    def _message_tokens(self, message: Message) -> int:
        # Messages are immutable: each is counted once while the loop holds it (a long run
        # would otherwise count its whole conversation again at every step).
        held = self._counts.get(id(message))
        if held is not None and held[0] is message:
            return held[1]
        tokens = count_message_tokens([message], self.model)
        if len(self._counts) > 20_000:
            self._counts.clear()
        self._counts[id(message)] = (message, tokens)
        return tokens

    def learn(self, provider_tokens: int | None, provider_limit: int | None, ours: int) -> None:
        """A context-length refusal: the provider counted ``provider_tokens`` where we counted
        ``ours`` (with the current correction). Without numbers, assume 15 % more."""
        ratio = provider_tokens / ours if provider_tokens is not None and ours > 0 else 1.15
        self.correction = max(1.0, self.correction * max(ratio, 1.05))
        if provider_limit is not None and provider_limit < self.window:
            self.window = provider_limit

    def fit(
        self, messages: list[Message], defs: Sequence[ToolDef], *, force: bool = False
    ) -> Fitted:
        """``messages`` cut to fit (a new list; ``messages`` is not changed). ``force``:
        the provider refused the last count, so turns are dropped even if the count fits."""
        budget = self.budget
        used = self.count(messages, defs)
        if used <= budget and not force:
            return Fitted(messages=messages, tokens=used, budget=budget)
        target = math.floor(budget * self.low_water)
        fitted = Fitted(messages=list(messages), budget=budget)
        if not force:
            used = self._shorten(fitted, used, target)
        if used > target or force:
            used = self._drop(fitted, defs, target)
        fitted.tokens = used
        fitted.over = used > budget
        return fitted

    def _shorten(self, fitted: Fitted, used: int, target: int) -> int:
        out = fitted.messages
        tool_at = [i for i, m in enumerate(out) if isinstance(m, ToolMessage)]
        for index in tool_at[:-1]:  # the newest output is never shortened
            if used <= target:
                break
            message = out[index]
            assert isinstance(message, ToolMessage)
            if len(message.content) <= KEEP_CHARS + 100:
                continue
            removed = len(message.content) - KEEP_CHARS
            short = message.model_copy(
                update={
                    "content": message.content[:KEEP_CHARS]
                    + f"\n[... {removed} characters of this old output cut to save context]"
                }
            )
            saved = count_tokens(message.content, self.model) - count_tokens(
                short.content, self.model
            )
            used -= math.ceil(saved * self.correction)
            out[index] = short
            fitted.chars_cut += removed
            if message.tool_call_id not in self._shortened:
                fitted.shortened_ids.append(message.tool_call_id)
                self._shortened.add(message.tool_call_id)
        return used

    def _drop(self, fitted: Fitted, defs: Sequence[ToolDef], target: int) -> int:
        messages = fitted.messages
        opening, turns = split_turns(messages)
        droppable = len(turns) - 1  # the newest turn always stays
        at_least = max(1, math.ceil(self.drop_fraction * len(turns))) if droppable > 0 else 0
        sizes = [sum(self._message_tokens(m) for m in turn) for turn in turns]
        rest = sum(sizes)
        dropped = 0
        used = self.count(messages, defs)
        while dropped < droppable and (dropped < at_least or used > target):
            rest -= sizes[dropped]
            dropped += 1
            head = self.count(self._with_note(opening, dropped), defs)
            used = head + math.ceil(rest * self.correction)
        if dropped == 0:
            return used
        fitted.dropped = [m for turn in turns[:dropped] for m in turn]
        fitted.dropped_turns = dropped
        self.removed_turns += dropped
        fitted.messages = self._with_note(opening, 0) + [m for t in turns[dropped:] for m in t]
        return self.count(fitted.messages, defs)

    def refresh_note(self, messages: list[Message]) -> list[Message]:
        """``messages`` with the opening note rewritten (after a new summary)."""
        opening, turns = split_turns(messages)
        return self._with_note(opening, 0) + [m for turn in turns for m in turn]

    def _with_note(self, opening: list[Message], extra: int) -> list[Message]:
        """The opening messages, the last user one saying what was removed so far (``extra``
        more turns than recorded: used while deciding how many to drop)."""
        total = self.removed_turns + extra
        if total == 0 or not opening:
            return list(opening)
        note = (
            f"{REMOVED_MARK} the {total} oldest turns of this conversation were removed to fit "
            "the model's context window. Your files and everything you did in the sandbox are "
            "unchanged; look at them again if you need what those turns said.]"
        )
        if self.summaries:
            note += "\n\nSummary of the removed turns:\n" + "\n\n".join(self.summaries)
        out = list(opening)
        for index in range(len(out) - 1, -1, -1):
            message = out[index]
            if isinstance(message, UserMessage):
                base = message.content.split("\n\n" + REMOVED_MARK, 1)[0]
                out[index] = message.model_copy(update={"content": f"{base}\n\n{note}"})
                return out
        return [*out, UserMessage(content=note)]


def split_turns(messages: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """The opening messages (before the first assistant message) and the turns after them:
    each an assistant message, its tool results and the user messages that follow."""
    opening: list[Message] = []
    turns: list[list[Message]] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        else:
            opening.append(message)
    return opening, turns


def render_turns(messages: Sequence[Message], limit_chars: int) -> str:
    """Dropped turns as plain text for a summary request, at most ``limit_chars`` (each tool
    output cut to its head and tail)."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            calls = "; ".join(
                f"{c.name}({json.dumps(c.arguments)[:400]})" for c in message.tool_calls
            )
            parts.append(
                f"ASSISTANT: {message.content[:2000]}" + (f"\nCALLS: {calls}" if calls else "")
            )
        elif isinstance(message, ToolMessage):
            text = message.content
            if len(text) > 1200:
                text = text[:600] + " [...] " + text[-600:]
            parts.append(f"TOOL RESULT: {text}")
        elif isinstance(message, (UserMessage, SystemMessage)):
            parts.append(f"USER: {message.content[:1500]}")
    text = "\n\n".join(parts)
    if len(text) > limit_chars:
        half = limit_chars // 2
        text = text[:half] + "\n[...]\n" + text[-half:]
    return text
