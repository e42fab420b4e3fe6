"""External agents' own event streams, read into the project's transcript events.

Each external agent prints what it does in its own format; a reader turns each line (or, for
mini-SWE-agent, the trajectory file at the end) into :mod:`~paperbench.agents._transcript`
events, so the monitor scans them and the report shows them like any agent's:

- ``claude-stream-json``: Claude Code's ``--output-format stream-json --verbose``. An
  ``assistant`` line is one content block of a model answer (text, thinking, tool_use): a
  MessageEvent with an AssistantMessage (text, reasoning, tool calls); a ``user`` line holding
  ``tool_result`` blocks gives a ToolEvent per result (its call's name and input, its output)
  and the ToolMessage; ``system``/``init`` and ``result`` are notes (``agent_started``,
  ``agent_result`` with the agent's own view of its cost and turns; an error result is the
  agent's own account of its failure, :attr:`EventReader.failure`).
- ``codex-json``: Codex CLI's ``exec --json``. ``agent_message`` and ``reasoning`` items are
  AssistantMessages; ``command_execution``, ``file_change``, ``mcp_tool_call`` and
  ``web_search`` items are ToolEvents (a call and its result, paired by the item id);
  ``turn.completed`` usage is an ``agent_usage`` note. Its errors are ``agent_error`` notes
  (``data.event`` says which): the ``error`` events (each retry it announces, then the error
  it gives up on), ``turn.failed`` (the turn's error: :attr:`EventReader.failure`) and the
  ``error`` items (what it reports and goes on from, e.g. a model it has no metadata for).
- ``mini-swe-agent``: its trajectory JSON (``messages``: system, user, then assistant answers
  with bash tool calls, or one fenced command in its text format, and the observations):
  AssistantMessages and a ``bash`` ToolEvent per action with the observation as its output.

The model calls themselves (usage, cost) are not taken from these streams: the model gateway
records them as ModelCallEvents. A line that is not JSON is kept as an ``agent_output`` note;
an event type not known is skipped (the raw stream is kept beside the transcript).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Literal

from paperbench.agents._tools import cap_text
from paperbench.agents._transcript import MessageEvent, NoteEvent, ToolEvent, TranscriptEvent
from paperbench.llm import AssistantMessage, ToolCall, ToolMessage, UserMessage

EventFormat = Literal["claude-stream-json", "codex-json", "mini-swe-agent", "none"]
"""How an external agent reports what it does (``none``: only its raw output is kept)."""

OUTPUT_CHARS = 16_000
"""A tool output longer than this is cut in the transcript (head and tail; the cut said)."""


def _cap(text: str, limit: int = OUTPUT_CHARS) -> str:
    return cap_text(text, limit)


def _text_of(content: Any) -> str:
    """The text of a tool result's content: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif isinstance(block, dict):
                parts.append(f"[{block.get('type', 'block')}]")
        return "\n".join(parts)
    return "" if content is None else json.dumps(content)


class EventReader:
    """Reads one agent's stream line by line (:meth:`feed`), keeping the step count."""

    def __init__(self, step: int = 0) -> None:
        self.step = step
        """Model answers seen so far (an answer's events share its step)."""
        self.failure: str | None = None
        """The agent's own account of why it failed, from its stream (the last one given)."""

    def feed(self, line: str) -> list[TranscriptEvent]:
        """The events of one line of the agent's output."""
        line = line.strip()
        if not line:
            return []
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            return [NoteEvent(step=self.step, kind="agent_output", text=_cap(line, 2_000))]
        if not isinstance(data, dict):
            return [NoteEvent(step=self.step, kind="agent_output", text=_cap(line, 2_000))]
        return self.read(data)

    def read(self, data: dict[str, Any]) -> list[TranscriptEvent]:
        """The events of one parsed line."""
        return []

    def feed_all(self, lines: Iterable[str]) -> list[TranscriptEvent]:
        """The events of many lines, in order."""
        return [event for line in lines for event in self.feed(line)]


class ClaudeStreamReader(EventReader):
    """Claude Code's stream-json (see the module docstring)."""

    def __init__(self, step: int = 0) -> None:
        super().__init__(step)
        self._message_id: str | None = None
        self._calls: dict[str, tuple[str, dict[str, Any]]] = {}

    def read(self, data: dict[str, Any]) -> list[TranscriptEvent]:
        kind = data.get("type")
        if kind == "assistant":
            return self._assistant(data.get("message") or {})
        if kind == "user":
            return self._results(data.get("message") or {})
        if kind == "system" and data.get("subtype") == "init":
            keep = ("session_id", "model", "cwd", "tools", "claude_code_version")
            info = {k: data[k] for k in keep if k in data}
            text = f"Claude Code {data.get('claude_code_version', '')} started".strip()
            return [NoteEvent(step=self.step, kind="agent_started", text=text, data=info)]
        if kind == "result":
            keep = ("subtype", "is_error", "num_turns", "total_cost_usd", "stop_reason")
            info = {k: data[k] for k in keep if k in data}
            text = str(data.get("result") or data.get("subtype") or "")
            if data.get("is_error") is True:
                self.failure = _cap(text, 2_000)
            return [
                NoteEvent(step=self.step, kind="agent_result", text=_cap(text, 4_000), data=info)
            ]
        return []

    def _assistant(self, message: dict[str, Any]) -> list[TranscriptEvent]:
        message_id = message.get("id")
        if message_id is None or message_id != self._message_id:
            self.step += 1
            self._message_id = message_id
        text, reasoning, calls = [], [], []
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                text.append(str(block.get("text", "")))
            elif block.get("type") == "thinking":
                reasoning.append(str(block.get("thinking", "")))
            elif block.get("type") in ("tool_use", "server_tool_use"):
                given = block.get("input")
                args: dict[str, Any] = given if isinstance(given, dict) else {}
                call = ToolCall(
                    id=str(block.get("id", "")), name=str(block.get("name", "")), arguments=args
                )
                self._calls[call.id] = (call.name, call.arguments)
                calls.append(call)
        answer = AssistantMessage(
            content="\n".join(text),
            tool_calls=tuple(calls),
            reasoning="\n".join(reasoning) or None,
        )
        return [MessageEvent(step=self.step, message=answer)]

    def _results(self, message: dict[str, Any]) -> list[TranscriptEvent]:
        content = message.get("content")
        if isinstance(content, str):
            return [MessageEvent(step=self.step, message=UserMessage(content=content))]
        events: list[TranscriptEvent] = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                call_id = str(block.get("tool_use_id", ""))
                name, args = self._calls.pop(call_id, ("unknown", {}))
                output = _cap(_text_of(block.get("content")))
                error = bool(block.get("is_error"))
                events.append(
                    ToolEvent(
                        step=self.step,
                        tool_call_id=call_id,
                        name=name,
                        arguments=args,
                        output=output,
                        error=output[:300] if error else None,
                    )
                )
                events.append(
                    MessageEvent(
                        step=self.step,
                        message=ToolMessage(
                            tool_call_id=call_id, name=name, content=output, is_error=error
                        ),
                    )
                )
            elif block.get("type") == "text":
                user = UserMessage(content=str(block.get("text", "")))
                events.append(MessageEvent(step=self.step, message=user))
        return events


_CODEX_TOOLS = {
    "command_execution": "shell",
    "file_change": "apply_patch",
    "mcp_tool_call": "mcp",
    "web_search": "web_search",
}


class CodexJsonReader(EventReader):
    """Codex CLI's ``exec --json`` events (see the module docstring)."""

    def read(self, data: dict[str, Any]) -> list[TranscriptEvent]:
        kind = data.get("type")
        if kind == "thread.started":
            info = {"thread_id": data.get("thread_id")}
            return [
                NoteEvent(step=self.step, kind="agent_started", text="Codex started", data=info)
            ]
        if kind == "turn.completed":
            usage = data.get("usage") or {}
            return [
                NoteEvent(step=self.step, kind="agent_usage", text="turn completed", data=usage)
            ]
        if kind == "error":  # {"type": "error", "message": ...}
            return [self._error(kind, data.get("message", data))]
        if kind == "turn.failed":  # {"type": "turn.failed", "error": {"message": ...}}
            error = data.get("error")
            note = self._error(kind, error.get("message") if isinstance(error, dict) else error)
            self.failure = note.text
            return [note]
        if kind != "item.completed":
            return []
        item = data.get("item") or {}
        item_type = item.get("type")
        if item_type == "error":  # an error it reports and goes on from
            return [self._error("item", item.get("message", item))]
        if item_type in ("agent_message", "reasoning"):
            self.step += 1
            text = str(item.get("text", ""))
            if item_type == "reasoning":
                answer = AssistantMessage(reasoning=text)
            else:
                answer = AssistantMessage(content=text)
            return [MessageEvent(step=self.step, message=answer)]
        if item_type in _CODEX_TOOLS:
            return self._tool(item, _CODEX_TOOLS[item_type])
        if item_type == "todo_list":
            return [NoteEvent(step=self.step, kind="agent_plan", data={"items": item.get("items")})]
        return []

    def _error(self, event: str, message: Any) -> NoteEvent:
        text = message if isinstance(message, str) else json.dumps(message)
        text = _cap(text, 2_000)
        if event == "error" and not text.startswith("Reconnecting..."):
            self.failure = text  # the error it gave up on (turn.failed repeats it)
        return NoteEvent(step=self.step, kind="agent_error", text=text, data={"event": event})

    def _tool(self, item: dict[str, Any], name: str) -> list[TranscriptEvent]:
        self.step += 1
        call_id = str(item.get("id", ""))
        if name == "shell":
            args: dict[str, Any] = {"command": item.get("command", "")}
            output = str(item.get("aggregated_output", ""))
        elif name == "apply_patch":
            args = {"changes": item.get("changes", [])}
            output = str(item.get("status", ""))
        else:
            args = {k: v for k, v in item.items() if k not in ("id", "type", "result", "status")}
            output = json.dumps(item.get("result", item.get("status", "")))[:OUTPUT_CHARS]
        exit_code = item.get("exit_code")
        failed = item.get("status") == "failed"
        call = ToolCall(id=call_id, name=name, arguments=args)
        return [
            MessageEvent(step=self.step, message=AssistantMessage(tool_calls=(call,))),
            ToolEvent(
                step=self.step,
                tool_call_id=call_id,
                name=name,
                arguments=args,
                output=_cap(output),
                exit_code=exit_code if isinstance(exit_code, int) else None,
                error="failed" if failed else None,
            ),
            MessageEvent(
                step=self.step,
                message=ToolMessage(
                    tool_call_id=call_id, name=name, content=_cap(output), is_error=failed
                ),
            ),
        ]


_BASH_BLOCK = re.compile(r"```(?:bash|sh|mswea_bash_command)?\s*\n(.*?)\n```", re.DOTALL)


def _mini_calls(message: dict[str, Any], step: int) -> tuple[ToolCall, ...]:
    """The bash calls of a mini-SWE-agent answer: its tool calls (the default format), else
    the fenced block of the text format."""
    calls: list[ToolCall] = []
    for raw in message.get("tool_calls") or []:
        if not isinstance(raw, dict):
            continue
        function = raw.get("function") or {}
        try:
            args = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {"command": str(function.get("arguments"))}
        call_id = str(raw.get("id") or f"mini-{step}-{len(calls)}")
        name = str(function.get("name") or "bash")
        calls.append(
            ToolCall(id=call_id, name=name, arguments=args if isinstance(args, dict) else {})
        )
    if calls:
        return tuple(calls)
    match = _BASH_BLOCK.search(_text_of(message.get("content")))
    if match is None:
        return ()
    return (ToolCall(id=f"mini-{step}", name="bash", arguments={"command": match.group(1)}),)


def _observation(content: str) -> tuple[str, int | None]:
    """A mini-SWE-agent observation: JSON ``{returncode, output}`` (the default format) or
    text with ``<returncode>`` (the text format)."""
    try:
        data = json.loads(content)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and "output" in data:
        code = data.get("returncode")
        return str(data["output"]), code if isinstance(code, int) else None
    found = re.search(r"<returncode>\s*(-?\d+)\s*</returncode>", content)
    return content, int(found.group(1)) if found else None


def mini_trajectory_events(trajectory: dict[str, Any], step: int = 0) -> list[TranscriptEvent]:
    """The events of a mini-SWE-agent trajectory (format 1.1: ``messages`` with system, user,
    assistant answers with bash tool calls or a fenced command, ``tool`` or ``user``
    observations, and a last ``exit`` message). The system prompt and the task are left out
    (the run's instructions are recorded already); ``exit`` is an ``agent_result`` note."""
    events: list[TranscriptEvent] = []
    pending: list[ToolCall] = []
    for message in trajectory.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), _text_of(message.get("content"))
        if role == "assistant":
            step += 1
            calls = _mini_calls(message, step)
            pending = list(calls)
            answer = AssistantMessage(content=content, tool_calls=calls)
            events.append(MessageEvent(step=step, message=answer))
        elif role in ("tool", "user") and pending:
            wanted = message.get("tool_call_id")
            call = next((c for c in pending if c.id == wanted), pending[0])
            pending.remove(call)
            output, code = _observation(content)
            output = _cap(output)
            events.append(
                ToolEvent(
                    step=step,
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    output=output,
                    exit_code=code,
                )
            )
            events.append(
                MessageEvent(
                    step=step,
                    message=ToolMessage(tool_call_id=call.id, name=call.name, content=output),
                )
            )
        elif role == "user" and step > 0:
            events.append(MessageEvent(step=step, message=UserMessage(content=_cap(content))))
        elif role == "exit":
            extra = message.get("extra") or {}
            info = {k: extra.get(k) for k in ("exit_status", "submission") if k in extra}
            text = str(extra.get("exit_status") or "exit")
            events.append(NoteEvent(step=step, kind="agent_result", text=text, data=info))
    return events


def reader_for(kind: EventFormat, step: int = 0) -> EventReader | None:
    """The line reader of a format (None for formats read at the end, or ``none``)."""
    if kind == "claude-stream-json":
        return ClaudeStreamReader(step)
    if kind == "codex-json":
        return CodexJsonReader(step)
    return None
