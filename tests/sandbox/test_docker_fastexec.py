"""The Docker backend's fast exec path: the in-container exec server and its fallbacks.

Hostile scripts run only inside containers with pids, memory and disk limits (DESIGN.md §7).
The hostile cases of tests/sandbox/test_docker.py run on the fast path (it is the default);
the conformance suite runs on both paths (test_conformance_docker_per_exec.py).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

import pytest

from paperbench.errors import SandboxError
from paperbench.sandbox import _docker_fastexec
from paperbench.sandbox._base import SandboxLimits, cap_output
from paperbench.sandbox._capture import HeadTail
from paperbench.sandbox._docker import DockerBackend
from paperbench.sandbox._execd import Capture

from .docker_fixtures import *  # noqa: F403  (the fixtures)

HOSTILE = SandboxLimits(memory_mb=256, pids=64, cpus=1.0, disk_mb=64)


def test_the_cap_counts_bytes_in_the_singular_and_plural() -> None:
    assert cap_output(b"abc", 2) == ("a\n[... 1 byte truncated by paperbench ...]\nc", True)
    assert cap_output(b"abcd", 2) == ("a\n[... 2 bytes truncated by paperbench ...]\nd", True)


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 7, 10, 100, 1001, 4096])
def test_server_cap_is_cap_output(limit: int) -> None:
    """The server cannot import paperbench: its copy of the cap must give the same text, as
    the per-exec path's ``HeadTail`` does."""
    rng = random.Random(limit)
    samples = [
        b"",
        b"short",
        "héllo wörld ✓ 日本語 ".encode() * 300,
        bytes(rng.randrange(256) for _ in range(5000)),
        b"x" * limit,
        b"y" * (limit + 1),
    ]
    for data in samples:
        cap = Capture(limit)
        i = 0
        while i < len(data):
            n = rng.randint(1, 700)
            cap.feed(data[i : i + n])
            i += n
        assert cap.text() == cap_output(data, limit), (limit, len(data))
        host = HeadTail(limit)
        host.feed(data)
        assert host.text() == cap.text()


def test_fast_exec_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAPERBENCH_DOCKER_FAST_EXEC", raising=False)
    assert DockerBackend(client=object()).fast_exec
    monkeypatch.setenv("PAPERBENCH_DOCKER_FAST_EXEC", "0")
    assert not DockerBackend(client=object()).fast_exec
    assert DockerBackend(client=object(), fast_exec=True).fast_exec


@pytest.mark.docker
def test_fast_path_is_used_and_fast(start_sandbox: Any, run: Any, docker_client: Any) -> None:
    """Over the container's own attach: no relay process, the server bound in read-only."""
    sb = start_sandbox()
    assert sb.fast_exec_active, sb.fast_exec_error
    assert sb.execd.how == "attach"

    async def times() -> list[float]:
        out = []
        for _ in range(30):
            t = time.perf_counter()
            r = await sb.exec(["true"], timeout=10)
            out.append(time.perf_counter() - t)
            assert r.exit_code == 0
        return out

    assert statistics.median(run(times())) < 0.05
    ps = run(sb.exec("ps -eo args", timeout=10)).stdout
    assert "execd.py relay" not in ps and "execd.py init" in ps.splitlines()[1]
    r = run(sb.exec(f"echo x >> {_docker_fastexec.EXECD_PATH}", timeout=10))
    assert r.exit_code != 0 and "Read-only" in r.stderr
    info = docker_client.api.inspect_container(sb.container_id)
    (mount,) = [m for m in info["Mounts"] if m["Destination"] == _docker_fastexec.EXECD_PATH]
    assert mount["Type"] == "bind" and mount["RW"] is False
    assert info["HostConfig"]["LogConfig"]["Type"] == "none"  # frames are not logged


@pytest.mark.docker
def test_concurrent_execs_over_one_server(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox()

    async def many() -> list[Any]:
        return await asyncio.gather(
            *[
                sb.exec(
                    f"sleep 0.{9 - i % 10}; head -c {1000 * i} /dev/zero | tr '\\0' a; "
                    f"echo {i} >&2; exit {i % 7}",
                    timeout=30,
                    output_limit=5000,
                )
                for i in range(20)
            ]
        )

    started = time.monotonic()
    results = run(many())
    assert time.monotonic() - started < 5  # in parallel, not one after the other
    for i, r in enumerate(results):
        assert r.exit_code == i % 7 and r.stderr == f"{i}\n"
        assert r.stdout == cap_output(b"a" * (1000 * i), 5000)[0]
        assert r.stdout_truncated == (1000 * i > 5000)
    assert sb.fast_exec_active and sb.execd.reconnects == 0


@pytest.mark.docker
def test_kill_everything_inside_leaves_the_attach_alone(start_sandbox: Any, run: Any) -> None:
    """``kill -9 -1`` kills every process but PID 1: nothing inside carries the attach."""
    sb = start_sandbox(limits=HOSTILE)

    async def both() -> list[Any]:
        slow = asyncio.ensure_future(sb.exec("echo slow-up; sleep 5; echo never", timeout=30))
        await asyncio.sleep(0.3)
        killer = await sb.exec("kill -9 -1; echo sent", timeout=30)
        return [await slow, killer]

    slow, killer = run(both())
    assert killer.exit_code == 0 and killer.stdout == "sent\n", killer
    assert slow.exit_code == 137 and slow.stdout == "slow-up\n", slow  # its result still came
    assert sb.fast_exec_active and sb.execd.reconnects == 0 and sb.execd.how == "attach"
    assert run(sb.exec("echo again", timeout=10)).stdout == "again\n"


@pytest.mark.docker
def test_dropped_attach_reconnects_and_keeps_results(start_sandbox: Any, run: Any) -> None:
    """The engine drops the attach with half a frame sent: the host attaches again, the
    server skips the half frame, commands in flight keep their results, a command sent while
    the connection was down is sent again and runs once."""
    sb = start_sandbox(limits=HOSTILE)

    async def body() -> list[Any]:
        slow = asyncio.ensure_future(sb.exec("sleep 1; echo slow-done", timeout=30))
        await asyncio.sleep(0.3)
        conn = sb.execd._conn
        conn.writer.write(b'{"op": "exec", "id": 99999, "argv": ["touch", "/tmp/half')
        await conn.writer.drain()
        conn.writer.transport.abort()
        during = await sb.exec("echo during >> /tmp/runs; cat /tmp/runs", timeout=30)
        return [await slow, during]

    slow, during = run(body())
    assert slow.exit_code == 0 and slow.stdout == "slow-done\n", slow
    assert during.exit_code == 0 and during.stdout == "during\n", during
    assert sb.execd.reconnects == 1 and sb.fast_exec_active and sb.execd.how == "attach"
    r = run(sb.exec("echo again; ls /tmp", timeout=10))
    assert r.stdout.startswith("again\n") and "half" not in r.stdout


@pytest.mark.docker
def test_relay_when_attaching_fails(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The relay is the fallback; ``kill -9 -1`` kills it (not PID 1): commands in flight
    keep their results over a new relay."""

    async def no_attach(self: Any) -> Any:
        raise SandboxError("cannot open the attach (test)")

    monkeypatch.setattr(_docker_fastexec.ExecServerClient, "_attach", no_attach)
    sb = start_sandbox(limits=HOSTILE)
    assert sb.fast_exec_active and sb.execd.how == "relay", sb.fast_exec_error

    async def both() -> list[Any]:
        slow = asyncio.ensure_future(sb.exec("sleep 1; echo slow-done", timeout=30))
        await asyncio.sleep(0.3)
        killer = await sb.exec("pkill -9 -f 'execd[.]py relay'; echo sent", timeout=30)
        return [await slow, killer]

    slow, killer = run(both())
    assert slow.exit_code == 0 and slow.stdout == "slow-done\n", slow
    assert killer.exit_code == 0 and killer.stdout == "sent\n", killer
    assert sb.execd.reconnects == 1 and sb.fast_exec_active and sb.execd.how == "relay"
    ps = run(sb.exec("ps -eo args", timeout=10)).stdout
    assert ps.count("execd.py relay") == 1
    assert run(sb.exec("echo again", timeout=10)).stdout == "again\n"


@pytest.mark.docker
def test_connection_lost_for_good_is_a_clear_error_then_per_exec(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sb = start_sandbox(limits=HOSTILE)
    assert sb.fast_exec_active

    async def no_connection(self: Any, resume: Any) -> Any:
        raise SandboxError("the exec server does not answer (test)")

    monkeypatch.setattr(_docker_fastexec.ExecServerClient, "_open", no_connection)

    async def body() -> Any:
        lost = asyncio.ensure_future(sb.exec("sleep 1; echo lost", timeout=30))
        await asyncio.sleep(0.3)
        sb.execd._conn.writer.transport.abort()
        return await lost

    with pytest.raises(SandboxError, match="result is unknown"):
        run(body())
    assert not sb.fast_exec_active and "could not be restored" in (sb.execd.dead or "")
    r = run(sb.exec("echo per-exec; sleep 30", timeout=1.5))  # the per-exec path, kills too
    assert r.timed_out and r.stdout == "per-exec\n" and "process tree killed" in r.stderr


@pytest.mark.docker
def test_without_the_server_commands_run_per_exec(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for an image without python3: PID 1 is the bash init, which says so at once."""
    import paperbench.sandbox._docker as docker_mod

    real = docker_mod.launch_script
    monkeypatch.setattr(
        docker_mod, "launch_script", lambda init: real(init).replace("python3", "nopy")
    )
    started = time.monotonic()
    sb = start_sandbox(limits=HOSTILE)
    assert time.monotonic() - started < 5  # not a wait for a server that never answers
    assert not sb.fast_exec_active and _docker_fastexec.NO_SERVER in (sb.fast_exec_error or "")
    r = run(sb.exec("echo out; echo err >&2; exit 4", timeout=10))
    assert (r.exit_code, r.stdout, r.stderr) == (4, "out\n", "err\n")
    assert "sleep 2147483647" in run(sb.exec("ps -eo args", timeout=10)).stdout


@pytest.mark.docker
def test_engine_that_cannot_bind_the_server_gets_it_uploaded(
    backend: DockerBackend, start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from docker.types import Mount

    def unbindable() -> Any:
        path = _docker_fastexec.EXECD_PATH
        return Mount(target=path, source="/nonexistent/execd.py", type="bind", read_only=True)

    monkeypatch.setattr(_docker_fastexec, "execd_mount", unbindable)
    import paperbench.sandbox._docker as docker_mod

    monkeypatch.setattr(docker_mod, "execd_mount", unbindable)
    sb = start_sandbox()
    assert sb.fast_exec_active and sb.execd.how == "attach", sb.fast_exec_error
    assert backend._bind_execd_ok is False
    assert run(sb.exec("echo up", timeout=10)).stdout == "up\n"
    sb2 = start_sandbox()  # remembered: no second failed create
    assert sb2.fast_exec_active


@pytest.mark.docker
def test_server_timeout_kills_the_tree_without_the_host(start_sandbox: Any, run: Any) -> None:
    """The server kills on its own (the host cgroup kill is only the backstop)."""
    sb = start_sandbox(limits=HOSTILE)
    sb.procs = None  # the host-side kill would have to exec a killer: the server must do it
    started = time.monotonic()
    r = run(
        sb.exec(
            "sleep 1201 & setsid sleep 1202 & nohup sleep 1203 >/dev/null 2>&1 & "
            "(sleep 1204 &) & env -u PAPERBENCH_EXEC_ID sleep 1205 & echo up; sleep 1200",
            timeout=1.5,
        )
    )
    assert r.timed_out and r.exit_code is None and r.stdout == "up\n"
    assert "process tree killed" in r.stderr and time.monotonic() - started < 4
    ps = run(sb.exec("ps -eo args", timeout=10))
    assert "sleep 12" not in ps.stdout, ps.stdout


@pytest.mark.docker
def test_spawn_failure_runs_per_exec(start_sandbox: Any, run: Any) -> None:
    """A command the server cannot start (no such program) is run per exec: same result."""
    sb = start_sandbox()
    r = run(sb.exec(["no-such-program-here"], timeout=10))
    assert r.exit_code in (126, 127) and "no-such-program-here" in r.stdout + r.stderr
    assert sb.fast_exec_active


@pytest.mark.docker
def test_process_hidden_from_the_server_is_killed_from_the_host(
    start_sandbox: Any, run: Any
) -> None:
    """A child that leaves the session and makes itself non-dumpable: the server (root without
    CAP_SYS_PTRACE) cannot read its environment, says its kill is incomplete, and the host
    kills it from outside."""
    sb = start_sandbox(limits=HOSTILE)
    assert sb.procs is not None
    hide = "import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(1300)"
    r = run(sb.exec(f"setsid python3 -c '{hide}' & echo up; sleep 1200", timeout=1.5))
    assert r.timed_out and r.stdout == "up\n" and "process tree killed" in r.stderr, r
    ps = run(sb.exec("ps -eo args", timeout=10)).stdout
    assert "sleep(1300)" not in ps and "sleep 1200" not in ps, ps
