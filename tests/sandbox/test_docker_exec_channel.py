"""Hostile code against the exec server's channel: it can neither forge nor steal nor stall it.

Each attack runs as a real command inside a real container with pids, memory and disk limits
(DESIGN.md §7), as a submission's code would: root in the container, without CAP_SYS_PTRACE.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from paperbench.errors import SandboxError
from paperbench.sandbox import _docker_fastexec
from paperbench.sandbox._base import SandboxLimits
from paperbench.sandbox._execd import hello_proof, sign, unsign

from .docker_fixtures import *  # noqa: F403  (the fixtures)

HOSTILE = SandboxLimits(memory_mb=256, pids=64, cpus=1.0, disk_mb=64)

TRACE_PID1 = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.syscall.restype = ctypes.c_long
out = {}
def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
for name, req in (("ptrace_attach", 16), ("ptrace_seize", 0x4206)):
    rc = libc.ptrace(req, 1, None, None)
    out[name] = "ok" if rc == 0 else err()
    if rc == 0:
        libc.ptrace(17, 1, None, None)  # PTRACE_DETACH: leave PID 1 running
pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1): allowed, it grants nothing by itself
fd = libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else -1  # pidfd_getfd(PID 1's stdout)
out["pidfd_getfd"] = "ok" if fd >= 0 else err()
for path, mode in (
    ("/proc/1/fd/1", "wb"), ("/proc/1/fd/0", "wb"), ("/proc/1/fd/0", "rb"),
    ("/proc/1/mem", "rb"), ("/proc/1/environ", "rb"),
):
    try:
        with open(path, mode, buffering=0) as f:
            f.write(b"\n{}\n") if "w" in mode else f.read(1)
        out[path + " " + mode] = "ok"
    except OSError as exc:
        out[path + " " + mode] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    os.readlink("/proc/1/fd/1")  # (listing /proc/1/fd shows numbers only: allowed)
    out["readlink /proc/1/fd/1"] = "ok"
except OSError as exc:
    out["readlink /proc/1/fd/1"] = errno.errorcode.get(exc.errno, str(exc.errno))
out["own dumpable"] = libc.prctl(3, 0, 0, 0, 0)
out["own environ"] = b"PAPERBENCH_EXEC_ID=" in open("/proc/self/environ", "rb").read()
out["own fds"] = len(os.listdir("/proc/self/fd"))
print(json.dumps(out))
"""

FIND_RELAY = r"""
import os
def relay_pid():
    for p in os.listdir("/proc"):
        if not p.isdigit() or p == str(os.getpid()):
            continue
        try:
            args = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if args[0].endswith(b"python3") and any(b"relay" in a for a in args[3:]):
            return p
    raise SystemExit("no relay")
"""

FORGE = (
    FIND_RELAY
    + r"""
import json, os, sys
forged = []
for rid in range(1, 40):
    reply = {"id": rid, "exit_code": 0, "stdout": "forged\n", "stderr": "", "timed_out": False,
             "stdout_truncated": False, "stderr_truncated": False, "note": "", "duration": 0.1}
    body = json.dumps(reply).encode()
    forged += [b"\n" + body + b"\n", b"0" * 64 + b" " + body + b"\n"]
where = sys.argv[1]
if where.startswith("relay:"):
    where = f"/proc/{relay_pid()}/fd/{where[6:]}"
try:
    fd = os.open(where, os.O_WRONLY)
    for line in forged:
        os.write(fd, line)
    os.close(fd)
    print("wrote", file=sys.stderr)
except OSError as exc:
    print("refused", exc.errno, file=sys.stderr)
print("real")
sys.exit(42)
"""
)

SOCKET_ATTACKS = r"""
import hashlib, hmac, json, os, socket, sys, time
results = {}
def attempt(name, payload, wait=1.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0paperbench-execd")
    started = time.monotonic()
    try:
        s.sendall(payload)
    except OSError:
        pass
    s.settimeout(wait)
    got = b""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                break
            got += data
    except socket.timeout:
        pass
    except OSError:
        pass
    results[name] = {"got": got.decode(errors="replace"), "s": time.monotonic() - started}
def hello(**extra):
    msg = {"op": "hello", "nonce": "feed", "resume": [1, 2, 3], **extra}
    return b"\n" + json.dumps(msg).encode() + b"\n"
guess = os.urandom(32)
proof = hmac.new(guess, b"hello:feed:1000000", hashlib.sha256).hexdigest()
run_it = {"op": "exec", "id": 777, "argv": ["touch", "/tmp/pwned"], "env": {}, "workdir": "/",
          "timeout": 10, "output_limit": 100, "user": None}
attempt("hello without proof", hello(conn=1000000))
attempt("hello with a guessed key", hello(conn=1000000, key=guess.hex(), proof=proof))
attempt("hello with a guessed proof", hello(conn=1000000, proof="0" * 64))
attempt("exec before hello", json.dumps(run_it).encode() + b"\n")
attempt("signed exec before hello", b"0" * 64 + b" " + json.dumps(run_it).encode() + b"\n")
if os.fork() == 0:  # as the unprivileged user: closed at once
    os.setgid(1000)
    os.setuid(1000)
    attempt("as uid 1000", hello(conn=1000000, key=guess.hex(), proof=proof), wait=5.0)
    print(json.dumps(results["as uid 1000"]))
    os._exit(0)
os.wait()
print(json.dumps(results))
"""

HOLD_SOCKETS = r"""
import json, socket, sys, time
socks = {}
def connect(name, payload=b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0paperbench-execd")
    if payload:
        try:
            s.sendall(payload)
        except OSError:
            pass
    s.setblocking(False)
    socks[name] = (s, time.monotonic())
    time.sleep(0.05)
for i in range(6):
    connect(f"idle{i}")
connect("half a hello", b'\n{"op": "hello", "nonce": "ab')
connect("endless line", b"x" * 200_000)
closed = {}
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline and len(closed) < len(socks):
    for name, (s, opened) in socks.items():
        if name in closed:
            continue
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if data:
            closed[name] = "got " + data.decode(errors="replace")
        else:
            closed[name] = round(time.monotonic() - opened, 2)
    time.sleep(0.05)
print(json.dumps({name: closed.get(name, "open") for name in socks}))
"""


def _no_attach(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_attach(self: Any) -> Any:
        raise SandboxError("cannot open the attach (test)")

    monkeypatch.setattr(_docker_fastexec.ExecServerClient, "_attach", no_attach)


def test_frames_are_bound_to_their_key_connection_direction_and_place() -> None:
    key, other = b"k" * 32, b"o" * 32
    line = sign(key, "s", "n1", 3, b'{"id": 1}')
    assert unsign(key, "s", "n1", 3, line.rstrip(b"\n")) == b'{"id": 1}'
    for args in [
        (other, "s", "n1", 3),
        (key, "h", "n1", 3),
        (key, "s", "n2", 3),
        (key, "s", "n1", 4),
    ]:
        assert unsign(*args, line.rstrip(b"\n")) is None
    assert unsign(key, "s", "n1", 3, line.rstrip(b"\n").replace(b"1}", b"2}")) is None
    assert unsign(key, "s", "n1", 3, b'{"id": 1}') is None
    assert hello_proof(key, "n", 1) != hello_proof(key, "n", 2) != hello_proof(other, "n", 2)


@pytest.mark.docker
def test_pid1_cannot_be_traced_or_opened(start_sandbox: Any, run: Any) -> None:
    """ptrace, pidfd_getfd and /proc/1/{fd,mem,environ} are refused to root in the container;
    the commands the server starts are dumpable again and see their own /proc."""
    sb = start_sandbox(limits=HOSTILE)
    assert sb.fast_exec_active
    r = run(sb.exec(["python3", "-c", TRACE_PID1], timeout=30))
    assert r.exit_code == 0, r
    out = json.loads(r.stdout)
    assert out.pop("own dumpable") == 1 and out.pop("own environ") is True
    assert out.pop("own fds") <= 5  # 0, 1, 2, the listing's own, nothing of PID 1's
    assert all(v in ("EPERM", "EACCES") for v in out.values()), out
    assert run(sb.exec("echo still; exit 3", timeout=10)).exit_code == 3
    assert sb.execd.reconnects == 0


@pytest.mark.docker
def test_forged_result_on_pid1_stdout_is_never_a_result(start_sandbox: Any, run: Any) -> None:
    """The command writes result lines for every likely id to /proc/1/fd/1 (the attach the host
    reads): refused, and the host records the real exit 42 and output."""
    sb = start_sandbox(limits=HOSTILE)
    r = run(sb.exec(["python3", "-c", FORGE, "/proc/1/fd/1"], timeout=30))
    assert (r.exit_code, r.stdout) == (42, "real\n"), r
    assert r.stderr.startswith("refused 13"), r.stderr
    assert sb.execd.reconnects == 0 and sb.execd.how == "attach"


@pytest.mark.docker
def test_relay_is_not_dumpable(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_attach(monkeypatch)
    sb = start_sandbox(limits=HOSTILE)
    assert sb.execd.how == "relay", sb.fast_exec_error
    r = run(sb.exec(["python3", "-c", FORGE, "relay:1"], timeout=30))
    assert (r.exit_code, r.stdout) == (42, "real\n"), r
    assert r.stderr.startswith("refused 13"), r.stderr


def _dumpable_relay(monkeypatch: pytest.MonkeyPatch) -> None:
    """A relay that stays dumpable: what a process that opened the relay's pipes in its first
    milliseconds (before its prctl) holds."""
    patch = (
        "import sys; sys.argv = ['execd.py', 'relay']; "
        f"src = open('{_docker_fastexec.EXECD_PATH}').read(); "
        "old = 'no_dump(libc())  # first: its stdin'; assert old in src; "
        "exec(compile(src.replace(old, 'None  #'), 'execd.py', 'exec'))"
    )
    monkeypatch.setattr(_docker_fastexec, "RELAY_ARGV", ["python3", "-I", "-S", "-c", patch])


@pytest.mark.docker
def test_forged_replies_on_a_relay_are_refused_by_their_mac(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with the relay's stdout open for writing (the race the MAC is there for), forged
    replies never become results: the host reconnects and takes the real one."""
    _no_attach(monkeypatch)
    _dumpable_relay(monkeypatch)
    sb = start_sandbox(limits=HOSTILE)
    assert sb.execd.how == "relay", sb.fast_exec_error
    r = run(sb.exec(["python3", "-c", FORGE, "relay:1"], timeout=30))
    assert (r.exit_code, r.stdout, r.stderr) == (42, "real\n", "wrote\n"), r
    assert sb.execd.reconnects >= 1 and sb.fast_exec_active
    assert run(sb.exec("echo after", timeout=10)).stdout == "after\n"


@pytest.mark.docker
def test_frames_injected_into_a_relay_are_never_run(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exec frames written into the relay's stdin (plain, or with a made-up MAC) end that
    connection; nothing runs, and the host's commands go on over a new relay."""
    _no_attach(monkeypatch)
    _dumpable_relay(monkeypatch)
    sb = start_sandbox(limits=HOSTILE)
    inject = (
        FIND_RELAY
        + r"""
import json
pid = relay_pid()
req = {"op": "exec", "id": 10**6, "argv": ["touch", "/tmp/injected"], "env": {},
       "workdir": "/", "timeout": 10, "output_limit": 100, "user": None}
fd = os.open(f"/proc/{pid}/fd/0", os.O_WRONLY)
body = json.dumps(req).encode()
os.write(fd, b"\n" + body + b"\n" + b"0" * 64 + b" " + body + b"\n")
print("injected")
"""
    )
    r = run(sb.exec(["python3", "-c", inject], timeout=30))
    assert (r.exit_code, r.stdout) == (0, "injected\n"), r
    time.sleep(0.5)
    r = run(sb.exec("ls /tmp/injected; echo $?", timeout=30))
    assert r.stdout.strip().endswith("2"), r  # no such file: nothing ran
    assert sb.fast_exec_active and sb.execd.reconnects >= 1


@pytest.mark.docker
@pytest.mark.parametrize("path", ["attach", "relay"])
def test_socket_hello_gets_nothing_and_takes_nothing(
    path: str, start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process in the container connects to the server's socket and says hello (without a
    proof, with a guessed key, with a guessed proof) or sends commands: it gets nothing, runs
    nothing, and the host's commands — one in flight meanwhile — return their own results."""
    if path == "relay":
        _no_attach(monkeypatch)
    sb = start_sandbox(limits=HOSTILE)
    assert sb.execd.how == path, sb.fast_exec_error

    async def body() -> list[Any]:
        slow = asyncio.ensure_future(sb.exec("sleep 2; echo slow-done; exit 5", timeout=30))
        await asyncio.sleep(0.3)
        attack = await sb.exec(["python3", "-c", SOCKET_ATTACKS], timeout=60)
        return [await slow, attack]

    slow, attack = run(body())
    assert (slow.exit_code, slow.stdout) == (5, "slow-done\n"), slow
    assert attack.exit_code == 0, attack
    as_user, results = (json.loads(line) for line in attack.stdout.splitlines())
    assert as_user["got"] == "" and as_user["s"] < 2, as_user  # closed at once
    assert len(results) == 5
    for name, got in results.items():
        assert got["got"] == "", (name, got)
    r = run(sb.exec("ls /tmp/pwned; echo out; exit 7", timeout=10))
    assert (r.exit_code, r.stdout) == (7, "out\n") and "No such file" in r.stderr, r
    assert sb.execd.reconnects == 0 and sb.execd.how == path


@pytest.mark.docker
def test_held_connections_do_not_stall_the_server(
    start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle connections, half a hello and an endless line on the socket: the host's relay
    keeps serving (each command answers quickly), the endless line is cut off, the oldest
    idle ones make way for newer ones, and the rest are closed when their time is up."""
    _no_attach(monkeypatch)
    sb = start_sandbox(limits=HOSTILE)
    assert sb.execd.how == "relay"

    async def body() -> tuple[Any, list[float]]:
        held = asyncio.ensure_future(sb.exec(["python3", "-c", HOLD_SOCKETS, "13"], timeout=60))
        await asyncio.sleep(1.0)
        times = []
        while not held.done():
            t = time.perf_counter()
            r = await sb.exec(["echo", "served"], timeout=10)
            times.append(time.perf_counter() - t)
            assert r.stdout == "served\n", r
            await asyncio.sleep(0.2)
        return await held, times

    held, times = run(body())
    assert held.exit_code == 0, held
    closed = json.loads(held.stdout)
    assert max(times) < 1.0 and len(times) > 20, times
    assert closed["endless line"] < 1.0, closed
    for name in ("idle0", "idle1", "idle2", "idle3"):  # made way for newer ones
        assert closed[name] < 1.0, closed
    for name in ("idle4", "idle5", "half a hello"):  # their time is up
        assert isinstance(closed[name], float) and 9.0 < closed[name] < 12.0, closed
    assert sb.execd.reconnects == 0 and sb.execd.how == "relay"
