"""The tools an agent's model calls; each runs in the sandbox and becomes a ToolEvent.

:func:`tool_defs` gives the definitions to send to the model, :func:`run_tool` runs one call.
A tool that fails (bad arguments, unknown tool, a command that cannot start, a sandbox error)
gives a :class:`ToolResult` with ``is_error`` set, never an exception out of the loop, except
when the sandbox itself is gone: then :class:`SandboxLostError` (the rollout restarts it).

Background jobs: ``bash`` with ``background: true`` starts the command and returns at once.
The job is kept running by the agent process (one sandbox exec that lives as long as the
run), so it outlives the call on every backend; its output goes to ``/tmp/jobs/<n>.log`` and
its exit code to ``/tmp/jobs/<n>.exit`` when it ends. The model checks on it with bash
(``cat /tmp/jobs/1.exit``, ``tail /tmp/jobs/1.log``). Jobs end with the run (or a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from paperbench.agents._base import RunContext
from paperbench.agents._config import ToolSettings
from paperbench.agents._transcript import ToolEvent
from paperbench.errors import SandboxError, SandboxLostError
from paperbench.llm import ToolCall, ToolDef
from paperbench.sandbox import NetworkPolicy, Sandbox

JOBS_DIR = "/tmp/jobs"
_SNIPPETS_DIR = "/tmp/pb-snippets"


class ToolResult(BaseModel):
    """What one tool call gave back to the model."""

    model_config = ConfigDict(extra="forbid")

    output: str
    is_error: bool = False
    exit_code: int | None = None
    timed_out: bool = False
    submitted: bool = False
    """The call was submit: the agent is done."""


@dataclass
class ToolSet:
    """The tools offered in one run, chosen by the config and the sandbox's network, and the
    background jobs they started."""

    settings: ToolSettings
    names: tuple[str, ...]
    jobs: dict[int, asyncio.Task[Any]] = field(default_factory=dict)

    @classmethod
    def for_sandbox(
        cls, settings: ToolSettings, sandbox: Sandbox, *, submit: bool = True
    ) -> ToolSet:
        """The enabled tools, less web_fetch when the sandbox has no network and less submit
        when ``submit`` is False (the iterative agent)."""
        names = list(settings.enabled)
        if sandbox.spec.network == NetworkPolicy.NONE and "web_fetch" in names:
            names.remove("web_fetch")
        if not submit and "submit" in names:
            names.remove("submit")
        return cls(settings=settings, names=tuple(names))

    async def aclose(self) -> None:
        """Stop the background jobs still running."""
        for task in self.jobs.values():
            task.cancel()
        for task in self.jobs.values():
            with contextlib.suppress(BaseException):
                await task


def cap_text(text: str, limit: int, keep: Literal["middle", "head"] = "middle") -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail (``keep="middle"``:
    the middle is cut) or its head alone (``keep="head"``), with the cut said."""
    if len(text) <= limit:
        return text
    if keep == "head":
        return f"{text[:limit]}\n[... {len(text) - limit} more characters cut ...]"
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut from the middle ...]\n{text[-half:]}"


def _defs(settings: ToolSettings) -> dict[str, ToolDef]:
    cut = "the middle cut" if settings.output_cut == "middle" else "the rest cut"
    timeout = {
        "type": "number",
        "description": f"Seconds before the command is killed (default {settings.timeout_s:g}, "
        f"at most {settings.max_timeout_s:g}).",
    }
    return {
        "bash": ToolDef(
            name="bash",
            description=(
                "Run a bash command in the sandbox (a fresh login shell each call: cd and "
                "exports do not carry over; chain with &&). Output is capped at "
                f"{settings.output_chars} characters, {cut} and the cut said. For "
                "long commands (training, downloads) set background to true: the call returns "
                f"at once with a job number n; the output goes to {JOBS_DIR}/n.log and the exit "
                f"code to {JOBS_DIR}/n.exit when the job ends. Check on it later with bash, "
                f"e.g. `tail {JOBS_DIR}/1.log; cat {JOBS_DIR}/1.exit`. Jobs run until they "
                "end or the run ends."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run."},
                    "timeout": timeout,
                    "background": {
                        "type": "boolean",
                        "description": "Start the command as a background job.",
                    },
                },
                "required": ["command"],
            },
        ),
        "python": ToolDef(
            name="python",
            description=(
                "Run a Python snippet with python3 in the sandbox and show its output "
                "(print what you want to see)."
            ),
            parameters={
                "type": "object",
                "properties": {"code": {"type": "string"}, "timeout": timeout},
                "required": ["code"],
            },
        ),
        "read_file_chunk": ToolDef(
            name="read_file_chunk",
            description=(
                "Show lines of a text file, numbered: n_lines from start_line (1-based; "
                f"n_lines default {settings.read_default_lines}, at most "
                f"{settings.read_max_lines}). Call again to read further."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "n_lines": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": settings.read_max_lines,
                    },
                },
                "required": ["path"],
            },
        ),
        "search_file": ToolDef(
            name="search_file",
            description=(
                "Search a file or folder (recursively) for a regular expression (grep -E); "
                f"shows at most {settings.search_max_matches} matching lines with their "
                "file and line number."
            ),
            parameters={
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                "required": ["pattern", "path"],
            },
        ),
        "web_fetch": ToolDef(
            name="web_fetch",
            description=(
                "Fetch a URL from inside the sandbox (through its network policy) and show "
                f"the body, capped at {settings.fetch_max_chars} characters."
            ),
            parameters={
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            },
        ),
        "submit": ToolDef(
            name="submit",
            description=(
                "End the task: call this once /home/submission holds your final work "
                "(committed). Nothing runs after it."
            ),
            parameters={
                "type": "object",
                "properties": {"summary": {"type": "string"}},
            },
        ),
    }


def tool_defs(tools: ToolSet) -> list[ToolDef]:
    """The definitions of the tools offered, in the config's order."""
    defs = _defs(tools.settings)
    return [defs[name] for name in tools.names]


class _BadArguments(Exception):
    pass


def _arg(call: ToolCall, name: str, kind: type, default: Any = None) -> Any:
    value = call.arguments.get(name, default)
    if value is None:
        raise _BadArguments(f"missing argument {name!r}")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _BadArguments(f"argument {name!r} must be a {kind.__name__}")
    return value


def _timeout(call: ToolCall, settings: ToolSettings) -> float:
    value = _arg(call, "timeout", float, settings.timeout_s)
    if value <= 0:
        raise _BadArguments("argument 'timeout' must be positive")
    return float(min(value, settings.max_timeout_s))


async def _exec(ctx: RunContext, tools: ToolSet, command: str, timeout: float) -> ToolResult:
    limit = tools.settings.output_chars
    result = await ctx.sandbox.exec(command, timeout=timeout, output_limit=limit * 4)
    text = result.stdout
    if result.stderr:
        text += ("\n" if text and not text.endswith("\n") else "") + result.stderr
    text = cap_text(text, limit, tools.settings.output_cut)
    if result.timed_out:
        text += f"\n[killed after {timeout:g}s; use background: true for long commands]"
    elif result.exit_code not in (0, None):
        text += f"\n[exit code {result.exit_code}]"
    return ToolResult(
        output=text or "(no output)",
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        is_error=result.timed_out,
    )


async def _bash(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    command = _arg(call, "command", str)
    if call.arguments.get("background"):
        return await _start_job(ctx, tools, command)
    return await _exec(ctx, tools, command, _timeout(call, tools.settings))


async def _start_job(ctx: RunContext, tools: ToolSet, command: str) -> ToolResult:
    number = len(tools.jobs) + 1
    log, code = f"{JOBS_DIR}/{number}.log", f"{JOBS_DIR}/{number}.exit"
    await ctx.sandbox.exec(f"mkdir -p {JOBS_DIR} && rm -f {code}", timeout=30)
    script = f"( {command}\n) > {log} 2>&1 < /dev/null; echo $? > {code}"
    remaining = ctx.limits.remaining_s()
    timeout = remaining + 60 if remaining is not None else 7 * 24 * 3600.0
    tools.jobs[number] = asyncio.create_task(
        ctx.sandbox.exec(script, timeout=timeout, output_limit=1024)
    )
    return ToolResult(
        output=f"started background job {number}: output in {log}, exit code in {code} when it ends"
    )


async def _python(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    code = _arg(call, "code", str)
    path = f"{_SNIPPETS_DIR}/{call.id or 'snippet'}.py".replace(" ", "_")
    await ctx.sandbox.write_file(path, code.encode("utf-8"))
    timeout = _timeout(call, tools.settings)
    return await _exec(ctx, tools, f"python3 {shlex.quote(path)}", timeout)


async def _read_chunk(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    path = _arg(call, "path", str)
    start = _arg(call, "start_line", int, 1)
    count = _arg(call, "n_lines", int, tools.settings.read_default_lines)
    if start < 1 or count < 1:
        raise _BadArguments("start_line and n_lines must be at least 1")
    if count > tools.settings.read_max_lines:
        raise _BadArguments(f"n_lines must be at most {tools.settings.read_max_lines}")
    end = start + count - 1
    command = (
        f"test -f {shlex.quote(path)} || {{ echo 'no such file: {path}' >&2; exit 1; }}; "
        f'awk \'NR>={start} && NR<={end} {{printf "%6d\\t%s\\n", NR, $0}} '
        f'END {{print "[" NR " lines in file]"}}\' {shlex.quote(path)}'
    )
    result = await _exec(ctx, tools, command, tools.settings.timeout_s)
    return result.model_copy(update={"is_error": result.exit_code != 0})


async def _search(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    pattern = _arg(call, "pattern", str)
    path = _arg(call, "path", str)
    most = tools.settings.search_max_matches
    command = (
        f"grep -rnIE -e {shlex.quote(pattern)} -- {shlex.quote(path)} > /tmp/.pb-search; "
        f"status=$?; head -n {most} /tmp/.pb-search; n=$(wc -l < /tmp/.pb-search); "
        f'if [ "$n" -gt {most} ]; then echo "[$n matches; the first {most} shown]"; fi; '
        'if [ "$status" -eq 1 ]; then echo "(no match)"; exit 0; fi; exit $status'
    )
    result = await _exec(ctx, tools, command, tools.settings.timeout_s)
    return result.model_copy(update={"is_error": result.exit_code != 0})


async def _fetch(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    url = _arg(call, "url", str)
    if not url.startswith(("http://", "https://")):
        raise _BadArguments("url must start with http:// or https://")
    most = tools.settings.fetch_max_chars
    command = (
        f"curl -sS -L --max-time 60 --max-filesize {most * 8} -w '\\n[HTTP %{{http_code}}]' "
        f"{shlex.quote(url)}"
    )
    result = await _exec(ctx, tools, command, 90)
    return result.model_copy(update={"is_error": result.exit_code != 0})


async def _submit(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    summary = call.arguments.get("summary", "")
    return ToolResult(output=f"submitted. {summary}".strip(), submitted=True)


_RUNNERS = {
    "bash": _bash,
    "python": _python,
    "read_file_chunk": _read_chunk,
    "search_file": _search,
    "web_fetch": _fetch,
    "submit": _submit,
}


async def run_tool(ctx: RunContext, call: ToolCall, tools: ToolSet) -> ToolResult:
    """Run one tool call in the sandbox and record it as a ToolEvent. Never raises for a
    tool's failure: that is a result with ``is_error``.

    Raises:
        SandboxLostError: the tool failed because the sandbox is gone (asked of the sandbox
            after a SandboxError); the ToolEvent is recorded first. Nothing more can run,
            so the loop stops before paying for another model call.
    """
    started = time.monotonic()
    error: str | None = None
    lost: SandboxError | None = None
    if call.parse_error is not None:
        error = f"the arguments were not a JSON object ({call.parse_error}); call again"
    elif call.name not in tools.names:
        error = f"no tool named {call.name!r}; the tools are: {', '.join(tools.names)}"
    if error is not None:
        result = ToolResult(output=f"error: {error}", is_error=True)
    else:
        try:
            result = await _RUNNERS[call.name](ctx, call, tools)
        except _BadArguments as exc:
            error = str(exc)
            result = ToolResult(output=f"error: {exc}; see the tool's parameters", is_error=True)
        except SandboxError as exc:
            error = str(exc)
            result = ToolResult(output=f"error: {exc}", is_error=True)
            if isinstance(exc, SandboxLostError) or not await ctx.sandbox.alive():
                lost, error = exc, f"the sandbox is gone: {exc}"
    ctx.transcript.append(
        ToolEvent(
            step=ctx.limits.steps,
            tool_call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            output=result.output,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=time.monotonic() - started,
            error=error,
        )
    )
    if lost is not None:
        raise SandboxLostError(f"the sandbox is gone ({lost})") from lost
    return result
