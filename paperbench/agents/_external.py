"""External agents: a command-line agent (Claude Code, Codex CLI, mini-SWE-agent, any CLI) run
headless in the agent's sandbox, behind a model gateway on the host.

Before the sandbox starts, :meth:`ExternalAgent.prepare` starts the run's
:class:`~paperbench.gateway.ModelGateway` (the run's folder ``gateway/``; its calls go to the
run's cost ledger, whose caps it enforces, and each one becomes a ModelCallEvent) and asks for
it as a host service: the sandbox reaches ``http://model-gateway.paperbench:8080`` through its
egress proxy and nothing else of the host; the providers' own hosts are refused there by the
harness's own rule (``SandboxSpec.harness_blacklist``), logged apart from the paper's blacklist:
the monitor lists those refusals and never counts them as hits.
The agent gets the gateway's URL for its API and the run's token, never the key.

:meth:`ExternalAgent.run` writes the config's files, then starts the launch command in
/home/submission in a session of its own (``setsid``), under ``timeout`` for the time left,
its stdout (the agent's event stream) and stderr in ``~/.paperbench-agent/``. While it runs, the new
part of its stdout is read every ``poll_s`` seconds into transcript events
(:mod:`~paperbench.agents._external_events`); model calls count as steps. The run ends when
the command exits, or when a limit is reached: the time (``timeout`` sends SIGTERM, then
SIGKILL after ``grace_s``), the steps or tokens (the agent's process group gets SIGTERM, then
SIGKILL), or the budget (the gateway refused a call: ``limit`` ``dollars``). The raw stream is
kept as ``agent_stdout.jsonl`` and ``agent_stderr.log`` in the run folder. An agent that fails
is an ``error`` in its own words (the failure its stream gave, else its stderr's end), unless
the gateway's record shows that its last model calls failed at the provider (a rejected key,
an outage past its retries: :mod:`paperbench.gateway._verdict`): then the model layer's error
is raised, and the run pauses as it does for any agent, nothing graded.

A new session after a restart or a resume gets the instructions again with a note of the time
left; the gateway answers a request it already answered from its record, so nothing answered
is paid twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from paperbench.agents._base import (
    SUBMISSION_DIR,
    Agent,
    AgentOutcome,
    AgentSetup,
    LimitReached,
    RunContext,
)
from paperbench.agents._config import CommandConfig
from paperbench.agents._external_events import EventReader, mini_trajectory_events, reader_for
from paperbench.agents._transcript import ModelCallEvent, NoteEvent
from paperbench.errors import ModelAuthError, ModelError, ModelUnavailableError, SandboxError
from paperbench.llm import Model, Usage
from paperbench.sandbox import HostService, safe_extract

if TYPE_CHECKING:
    from paperbench.gateway import GatewayCall, ModelGateway

GATEWAY_NAME = "model-gateway.paperbench"
"""The host name of the model gateway in the agent's sandbox."""
GATEWAY_PORT = 8080
AGENT_DIR = ".paperbench-agent"
"""The agent's own files in its sandbox, in its user's home: its instructions, its output, its
pid and exit code."""
PROVIDER_HOSTS = (
    "https://api.anthropic.com/",
    "https://statsig.anthropic.com/",
    "https://claude.ai/",
    "https://api.openai.com/",
    "https://auth.openai.com/",
    "https://chatgpt.com/",
    "https://ab.chatgpt.com/",
    "https://generativelanguage.googleapis.com/",
    "https://openrouter.ai/",
)
"""Refused for external agents by the harness's own rule (not the paper's blacklist): they
reach a model only through the gateway, and their vendors' other services (sign-in,
telemetry, plugin catalogues) not at all."""
READ_CHUNK = 1024 * 1024
"""Bytes of the agent's output read per poll at most."""


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


class ExternalAgent(Agent):
    """A command-line agent behind the model gateway (see the module docstring)."""

    def __init__(self, config: CommandConfig, model: Model) -> None:
        self.config = config
        self.model = model
        self.name = config.name or config.type
        self.gateway: ModelGateway | None = None
        self._setup: AgentSetup | None = None
        self._calls = 0
        self._dir = f"/root/{AGENT_DIR}"
        """The agent's own folder in the sandbox (known once :meth:`run` asked its home)."""

    # -- the gateway, before the sandbox ----------------------------------------------------

    async def prepare(self, setup: AgentSetup) -> tuple[HostService, ...]:
        """Start the run's model gateway; the sandbox must reach it (a host service). The
        plan has checked the model's provider and the network (``command_agent_refusal``)."""
        from paperbench.gateway import ModelGateway

        config = self.model.config
        self._setup = setup
        self._calls = max(self._calls, setup.limits.steps)  # a resume counts on from its steps
        upstream = {self.config.api: config}
        self.gateway = ModelGateway(
            **upstream,  # type: ignore[arg-type]
            log_dir=setup.out_dir / "gateway",
            ledger=self.model.ledger,
            stage="rollout",
            on_call=self._on_call,
        )
        await self.gateway.start()
        return (HostService(name=GATEWAY_NAME, port=GATEWAY_PORT, target_port=self.gateway.port),)

    async def release(self) -> None:
        """Stop the gateway."""
        if self.gateway is not None:
            await self.gateway.close()
            self.gateway = None

    def blacklist(self) -> tuple[str, ...]:
        """The providers' hosts: the agent reaches a model only through the gateway."""
        return PROVIDER_HOSTS

    def _on_call(self, call: GatewayCall) -> None:
        if self._setup is None or call.protocol is None:
            return  # not a model call (listing models, counting tokens)
        if call.outcome in ("unauthorized", "passed", "refused"):
            return
        self._calls += 1
        tracker = self._setup.limits
        tracker.steps = max(tracker.steps, self._calls)
        self._setup.transcript.append(
            ModelCallEvent(
                step=tracker.steps,
                model=call.model or self.model.name,
                usage=call.usage or Usage(),
                cost_usd=call.cost_usd,
                latency_s=call.latency_s,
                cached=call.outcome == "cache_hit",
                stop_reason=call.stop_reason,
                label="gateway",
            )
        )

    # -- the run ----------------------------------------------------------------------------

    def _values(self, home: str) -> dict[str, str]:
        assert self.gateway is not None
        base = f"http://{GATEWAY_NAME}:{GATEWAY_PORT}"
        path = "/anthropic" if self.config.api == "anthropic" else "/openai/v1"
        return {
            "instructions_file": f"{self._dir}/instructions.md",
            "model": self.model.config.model_name,
            "base_url": base + path,
            "token": self.gateway.token,
            "home": home,
        }

    async def run(self, ctx: RunContext) -> AgentOutcome:
        if self.gateway is None:
            raise SandboxError("the model gateway is not running: prepare() was not called")
        made = await ctx.sandbox.exec(
            f'mkdir -p "$HOME/{AGENT_DIR}" && printf %s "$HOME"', timeout=30
        )
        if made.exit_code != 0 or not made.stdout.startswith("/"):
            raise SandboxError(f"cannot make the agent's folder in its home: {made.stderr.strip()}")
        home = made.stdout
        self._dir = f"{home}/{AGENT_DIR}"
        values = self._values(home)
        values["resume_file"] = f"{self._dir}/resume.md"
        text = ctx.instructions
        launch = self.config.launch
        if ctx.resumed or ctx.history:
            left = ctx.limits.remaining_s()
            when = f"{left / 3600:.1f} hours" if left is not None else "no time limit"
            note = (
                "NOTE: this is a new session. The previous one was interrupted; your work so "
                f"far is in {SUBMISSION_DIR} (restored from its last snapshot). Time left: "
                f"{when}."
            )
            text = f"{note}\n\n{text}"
            await ctx.sandbox.write_file(values["resume_file"], note.encode("utf-8"))
            if self.config.resume_launch and await self._restore_session(ctx, home):
                launch = self.config.resume_launch
        await ctx.sandbox.write_file(values["instructions_file"], text.encode("utf-8"))
        for path, content in self.config.files.items():
            target = _fill(path if path.startswith("/") else posixpath.join(home, path), values)
            # its folders made by the agent's user (write_file would make them as root)
            await ctx.sandbox.exec(f"mkdir -p {shlex.quote(posixpath.dirname(target))}", timeout=30)
            await ctx.sandbox.write_file(target, _fill(content, values).encode())
        env = {k: _fill(v, values) for k, v in self.config.env.items()}
        env["PB_LAUNCH"] = _fill(launch, values)
        remaining = ctx.limits.remaining_s()
        seconds = max(1, int(remaining)) if remaining is not None else 7 * 24 * 3600
        script = (
            f"cd {SUBMISSION_DIR} || exit 1; "  # apart: `a && b &` would background a subshell
            f"setsid timeout --signal=TERM --kill-after={self.config.grace_s:g} {seconds} "
            f'bash -c "$PB_LAUNCH" > {self._dir}/stdout.jsonl 2> {self._dir}/stderr.log '
            f"< /dev/null & echo $! > {self._dir}/pid; wait $!; code=$?; "
            f"echo $code > {self._dir}/exit; exit $code"
        )
        task = asyncio.create_task(
            ctx.sandbox.exec(
                script, timeout=seconds + self.config.grace_s + 60, env=env, output_limit=4096
            )
        )
        reader = reader_for(self.config.events, ctx.limits.steps)
        offset, stopped = 0, None
        saved, saved_calls = asyncio.get_running_loop().time(), self._calls
        began = self._calls  # the calls of earlier sessions (a restart, a resume)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.config.poll_s)
                offset = await self._pull(ctx, reader, offset)
                if done:
                    break
                # the session is kept once a model call has been answered since the last
                # time, at most every session_every_s (and right after this session's first)
                now = asyncio.get_running_loop().time()
                first = saved_calls == began and self._calls > began
                due = now - saved >= self.config.session_every_s and self._calls > saved_calls
                if first or due:
                    saved, saved_calls = now, self._calls
                    await self._save_session(ctx, home)
                if stopped is None:
                    stopped = self._limit(ctx)
                    if stopped is not None:
                        await self._stop(ctx)
            result = task.result()
            offset = await self._pull(ctx, reader, offset)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await self._keep_raw(ctx)
            await self._save_session(ctx, home)
        if self.config.events == "mini-swe-agent" and self.config.trajectory:
            await self._trajectory(ctx, values)
        return await self._outcome(ctx, result.exit_code, stopped, reader)

    def _limit(self, ctx: RunContext) -> LimitReached | None:
        """The limit reached, if any: the budget (the gateway refused a call), then the
        tracker's (steps are model calls)."""
        assert self.gateway is not None
        if self.gateway.exhausted is not None:
            return LimitReached("dollars", self.gateway.exhausted)
        try:
            ctx.limits.check()
        except LimitReached as exc:
            if exc.kind != "wall_time":  # the time limit is timeout's, from inside
                return exc
        return None

    async def _stop(self, ctx: RunContext) -> None:
        """SIGTERM to the agent's process group, SIGKILL after ``grace_s``."""
        pid = f"$(cat {self._dir}/pid)"
        grace = self.config.grace_s
        command = (
            f"kill -TERM -- -{pid} 2>/dev/null; "
            f"( sleep {grace:g}; kill -KILL -- -{pid} 2>/dev/null ) > /dev/null 2>&1 &"
        )
        with contextlib.suppress(SandboxError):
            await ctx.sandbox.exec(command, timeout=30)

    async def _pull(self, ctx: RunContext, reader: EventReader | None, offset: int) -> int:
        """Read the agent's new output (from ``offset``) into transcript events."""
        if reader is None:
            return offset
        path = f"{self._dir}/stdout.jsonl"
        try:
            result = await ctx.sandbox.exec(
                f"test -f {path} && tail -c +{offset + 1} {path} | head -c {READ_CHUNK}",
                timeout=30,
                output_limit=READ_CHUNK + 1024,
            )
        except SandboxError:
            return offset
        data = result.stdout
        cut = data.rfind("\n")
        if cut < 0:
            return offset
        chunk = data[: cut + 1]
        for event in reader.feed_all(chunk.splitlines()):
            ctx.transcript.append(event)
        return offset + len(chunk.encode("utf-8"))

    async def _save_session(self, ctx: RunContext, home: str) -> None:
        """The agent's session folders, into the run folder (``agent_session/<name>.tar.gz``)."""
        if ctx.run_dir is None:
            return
        for name in self.config.session_dirs:
            dest = Path(ctx.run_dir, "agent_session", f"{name.strip('/')}.tar.gz")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(SandboxError):  # not made yet: nothing to keep
                await ctx.sandbox.snapshot(posixpath.join(home, name), dest)

    async def _restore_session(self, ctx: RunContext, home: str) -> bool:
        """The saved session folders put back in the new home; whether there were any."""
        if ctx.run_dir is None:
            return False
        restored = False
        for name in self.config.session_dirs:
            archive = Path(ctx.run_dir, "agent_session", f"{name.strip('/')}.tar.gz")
            if not archive.is_file():
                continue
            with tempfile.TemporaryDirectory(prefix="paperbench-session-") as tmp:
                await asyncio.to_thread(safe_extract, archive, Path(tmp) / "s")
                await ctx.sandbox.upload(Path(tmp) / "s", posixpath.join(home, name))
            restored = True
        if restored:
            ctx.transcript.append(
                NoteEvent(
                    step=ctx.limits.steps,
                    kind="agent_session_restored",
                    text=f"{self.name}'s session restored: {', '.join(self.config.session_dirs)}",
                )
            )
        return restored

    async def _keep_raw(self, ctx: RunContext) -> None:
        """The agent's stdout and stderr, kept in the run folder as they are."""
        if ctx.run_dir is None:
            return
        for name, target in (
            ("stdout.jsonl", "agent_stdout.jsonl"),
            ("stderr.log", "agent_stderr.log"),
        ):
            with contextlib.suppress(SandboxError, OSError):
                data = await ctx.sandbox.read_file(
                    f"{self._dir}/{name}", max_bytes=256 * 1024 * 1024
                )
                Path(ctx.run_dir, target).write_bytes(data)

    async def _trajectory(self, ctx: RunContext, values: dict[str, str]) -> None:
        assert self.config.trajectory is not None
        path = _fill(self.config.trajectory, values)
        if not path.startswith("/"):
            path = posixpath.join(SUBMISSION_DIR, path)
        try:
            data = json.loads(await ctx.sandbox.read_file(path, max_bytes=64 * 1024 * 1024))
        except (SandboxError, ValueError) as exc:
            ctx.transcript.append(
                NoteEvent(step=ctx.limits.steps, kind="agent_trajectory_missing", text=str(exc))
            )
            return
        if ctx.run_dir is not None:
            Path(ctx.run_dir, "agent_trajectory.json").write_text(json.dumps(data))
        for event in mini_trajectory_events(data if isinstance(data, dict) else {}):
            ctx.transcript.append(event)

    async def _outcome(
        self,
        ctx: RunContext,
        exit_code: int | None,
        stopped: LimitReached | None,
        reader: EventReader | None,
    ) -> AgentOutcome:
        """How the agent's run ended: a limit, its own end (its failure in its own words: the
        failure its stream gave, else the end of its stderr), or, when the gateway's record
        shows that its last model calls failed at the provider (a rejected key, an outage),
        the model layer's error for that, raised (the rollout pauses, as for any agent)."""
        assert self.gateway is not None
        if self.gateway.exhausted is not None:
            return AgentOutcome(status="limit", limit="dollars", summary=self.gateway.exhausted)
        if stopped is not None:
            return AgentOutcome(status="limit", limit=stopped.kind, summary=str(stopped))
        if exit_code == 124:  # timeout's own code: the time was up
            return AgentOutcome(status="limit", limit="wall_time", summary="the time was up")
        words = reader.failure if reader is not None else None
        cause = self.gateway.upstream.error()
        if cause is not None:
            raise _in_its_words(cause, self.name, words)
        if exit_code == 0:
            return AgentOutcome(status="submitted", summary=f"{self.name} finished")
        if words is None:
            with contextlib.suppress(SandboxError):
                out = await ctx.sandbox.exec(f"tail -c 2000 {self._dir}/stderr.log", timeout=30)
                words = " ".join(out.stdout.split())[-500:] or None
        return AgentOutcome(
            status="error",
            error=f"{self.name} exited with code {exit_code}" + (f": {words}" if words else ""),
        )


def _in_its_words(error: ModelError, name: str, words: str | None) -> ModelError:
    """``error`` with what the agent itself said of its failure, when it said something."""
    if not words:
        return error
    said = " ".join(words.split())
    text = f"{error} ({name}: {said if len(said) <= 300 else said[:299] + '…'})"
    if isinstance(error, ModelAuthError):
        return ModelAuthError(text, status=error.status)
    return ModelUnavailableError(text)
