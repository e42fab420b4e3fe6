"""Running commands in a Docker sandbox: one ``docker exec`` each.

:class:`DockerRun` is the part of ``DockerSandbox`` (``_docker``) that runs commands (each one
exec, its output streamed and capped head and tail, ``_docker_exec``) and kills a timed-out
command's tree: from the host through the container's cgroup when it is visible here, else
with a killer run in the container, else by killing the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from pathlib import Path
from typing import Any

from paperbench.errors import SandboxError
from paperbench.sandbox._base import DEFAULT_OUTPUT_LIMIT, ExecResult, SandboxSpec
from paperbench.sandbox._capture import HeadTail
from paperbench.sandbox._docker_exec import (
    KILL_SCRIPT,
    MARKER_ENV,
    ExecState,
    kill_tree_from_host,
    pump,
)
from paperbench.sandbox._docker_files import docker_error
from paperbench.sandbox._docker_user import SandboxUser, parse_setup, setup_argv

_GRACE_S = 3.0
_KILLER_TRIES = 3


class DockerRun:
    """exec for ``DockerSandbox``."""

    api: Any
    id: str
    spec: SandboxSpec
    user: SandboxUser | None
    """Who runs the commands: None for root, else the spec's unprivileged user once made."""
    owner: tuple[int, int]
    container_id: str | None
    init_pid: int | None
    init_ticks: str | None
    """PID 1's start time on the host (``/proc/<init_pid>/stat``), when the engine runs here."""
    procs: Path | None
    _stopped: bool
    _dead: str | None

    def _cid(self) -> str:
        raise NotImplementedError

    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ExecResult:
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else list(cmd)
        return await self.run_as(
            self.user, argv, timeout=timeout, workdir=workdir, env=env, output_limit=output_limit
        )

    async def set_up_user(self) -> None:
        """Set up the spec's unprivileged user (``_docker_user``): commands, uploads and
        written files are its own from now on.

        Raises:
            SandboxError: the set-up failed.
        """
        r = await self.run_as(None, setup_argv(self.spec.writable_dirs), timeout=120)
        if r.exit_code != 0:
            said = (r.stdout + r.stderr)[-300:].strip()
            raise SandboxError(f"sandbox {self.id}: cannot set up its user: {said}")
        self.user = parse_setup(r.stdout)
        self.owner = (self.user.uid, self.user.gid)

    async def run_as(
        self,
        user: SandboxUser | None,
        argv: list[str],
        *,
        timeout: float,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ExecResult:
        """``exec`` of ``argv`` as ``user`` (None: root), whoever runs the spec's commands."""
        cid = self._cid()
        if not argv:
            raise SandboxError("empty command")
        marker = secrets.token_hex(8)
        full_env = {**(user.env if user else {}), **(env or {}), MARKER_ENV: marker}
        state = ExecState(out=HeadTail(output_limit), err=HeadTail(output_limit))
        started = time.monotonic()
        as_user = user.docker if user else ""
        task = asyncio.ensure_future(
            asyncio.to_thread(pump, self.api, cid, argv, full_env, workdir, state, as_user)
        )
        timed_out = False
        note = ""
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            timed_out = True
            note = await self._kill_exec(marker, state, task, user)
        except asyncio.CancelledError:
            await asyncio.shield(self._kill_exec(marker, state, task, user))
            raise
        except Exception as exc:
            state.stop.set()
            state.close_stream()
            raise await self._exec_error(exc) from exc
        if not timed_out and await self._stopped_under(state.exit_code):
            raise SandboxError(f"sandbox {self.id} is gone (its container stopped)")
        stdout, out_cut = state.out.text()
        stderr, err_cut = state.err.text()
        if timed_out:
            stderr += f"\n[paperbench: timed out after {timeout:g}s; {note}]\n"
        return ExecResult(
            exit_code=None if timed_out else state.exit_code,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            duration_s=time.monotonic() - started,
        )

    async def _exec_error(self, exc: Exception) -> SandboxError:
        alive = await self._alive()
        if not alive:
            return SandboxError(f"sandbox {self.id} is gone (its container stopped)")
        return docker_error(exc, f"cannot run a command in sandbox {self.id}")

    async def _stopped_under(self, exit_code: int | None) -> bool:
        """Whether a command that ended by a signal (or without an exit code) ended because
        its container stopped (killed, or its owner's lifeline cut): then the sandbox failed,
        not the command. (A command killed by the OOM killer or by another one is not.)"""
        if exit_code is not None and exit_code < 128:
            return False
        return not await asyncio.to_thread(self._init_alive)

    def _init_alive(self) -> bool:
        """PID 1 still runs: asked of this host's kernel when the engine runs here, else of the
        engine, which may say "running" for a moment after PID 1 died (polled for a second)."""
        if self.procs is not None and self.init_pid and self.init_ticks:
            try:
                stat = Path(f"/proc/{self.init_pid}/stat").read_text(errors="replace")
            except OSError:
                return False
            fields = stat.rsplit(")", 1)[-1].split()  # state is fields[0], start time [19]
            if len(fields) <= 19 or fields[0] in ("Z", "X"):
                return False
            return fields[19] == self.init_ticks
        deadline = time.monotonic() + 1.0
        while True:
            try:
                info = self.api.inspect_container(self.container_id)
            except Exception:
                return False
            if not info["State"].get("Running"):
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.05)

    async def _alive(self) -> bool:
        try:
            info = await asyncio.to_thread(self.api.inspect_container, self.container_id)
        except Exception:
            return False
        return bool(info["State"].get("Running"))

    async def _kill_exec(
        self,
        marker: str,
        state: ExecState,
        task: asyncio.Future[None],
        user: SandboxUser | None,
    ) -> str:
        """Kill the exec's process tree; return what was done, for the result."""
        state.stop.set()
        how = await asyncio.to_thread(self._kill_tree, marker, user)
        done, _ = await asyncio.wait({task}, timeout=_GRACE_S)
        if not done:
            state.close_stream()
            await asyncio.wait({task}, timeout=_GRACE_S)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the stream was closed on purpose
        return how

    def _exit_code(self, exec_id: str) -> int | None:
        """An exec's exit code once the engine has it (its output can end a moment before)."""
        deadline = time.monotonic() + _GRACE_S
        while True:
            info = self.api.exec_inspect(exec_id)
            if not info.get("Running") or time.monotonic() > deadline:
                code = info.get("ExitCode")
                return code if isinstance(code, int) else None
            time.sleep(0.01)

    def _kill_tree(self, marker: str, user: SandboxUser | None) -> str:
        """Kill the marked tree: from the host when the container's cgroup is visible here,
        else with a killer run in the container as the command's user (root without
        ``CAP_SYS_PTRACE`` cannot read another user's environments), else the container."""
        keep = {self.init_pid} if self.init_pid else set()
        if self.procs is not None and kill_tree_from_host(self.procs, marker, keep):
            return "process tree killed"
        try:
            for _ in range(_KILLER_TRIES):  # a try ends with processes still dying: again
                created = self.api.exec_create(
                    self.container_id,
                    ["bash", "-c", KILL_SCRIPT, "k", marker],
                    user=user.docker if user else "",
                )
                self.api.exec_start(created["Id"])
                if self._exit_code(created["Id"]) == 0:
                    return "process tree killed"
        except Exception:
            pass
        # Neither way worked (e.g. no pid left for a killer): the container has to go.
        with contextlib.suppress(Exception):
            self.api.kill(self.container_id)
        self._dead = "killed: the timed-out command's processes could not be killed otherwise"
        return "could not kill the process tree: the sandbox container was killed"
