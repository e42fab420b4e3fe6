"""Nothing outlives its owner: a Docker sandbox whose paperbench process dies stops on its own.

The owner is a real process (the real CLI, or a script on the real backend) killed with
``kill -9``; what is asserted is the engine's view from the host: the container no longer
runs, within a minute (in practice within a second). Untrusted root inside tries what an
attacker would to keep it running. What a stopped sandbox leaves (the container, its network
and firewall rules, its loop-mounted disk) is then removed by ``paperbench sandbox gc``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from paperbench.errors import SandboxError
from paperbench.sandbox import _docker_labels as L
from paperbench.sandbox._base import SandboxSpec
from paperbench.sandbox._docker import DockerBackend, connect
from paperbench.sandbox._docker_firewall import COMMENT_PREFIX, firewall_problem, our_rules
from paperbench.sandbox._local_gc import WORKSPACE_PREFIX, reap_local_orphans

from .docker_fixtures import *  # noqa: F403  (the fixtures)
from .docker_fixtures import SESSION_ID, SESSION_LABEL, TEST_LABELS, sweep

STOP_WITHIN_S = 60.0
REPO = Path(__file__).resolve().parents[2]


def _owned_by(client: Any, pid: int) -> list[dict[str, Any]]:
    """The containers whose owner label names process ``pid`` of this host."""
    prefix = f"{socket.gethostname()}:{pid}:"
    found = client.api.containers(all=True, filters={"label": f"{L.MANAGED}=true"})
    return [c for c in found if (c.get("Labels") or {}).get(L.OWNER, "").startswith(prefix)]


def _running(client: Any, cid: str) -> bool:
    return bool(client.api.inspect_container(cid)["State"]["Running"])


def _seconds_until_stopped(client: Any, cid: str) -> float:
    """Poll the engine until container ``cid`` no longer runs; the time it took (at most
    ``STOP_WITHIN_S`` and a little, then the caller's assertion fails)."""
    started = time.monotonic()
    while _running(client, cid) and time.monotonic() - started < STOP_WITHIN_S + 1:
        time.sleep(0.1)
    return time.monotonic() - started


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def killed_owner() -> Iterator[list[subprocess.Popen[str]]]:
    """Owner processes a test starts: killed and reaped at its end, whatever happened."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.mark.docker
def test_a_killed_cli_leaves_no_container_running_and_gc_reaps_the_rest(
    docker_client: Any,
    reproducer_image: str,
    tmp_path: Path,
    killed_owner: list[subprocess.Popen[str]],
) -> None:
    """``paperbench reproduce --sandbox docker`` of a reproduce.sh that sleeps 600 s, killed
    with ``kill -9`` once its code runs: the container stops on its own within a minute; its
    network, firewall rules and loop-mounted disk stay until ``paperbench sandbox gc``, which
    removes every one of them."""
    network = "full" if firewall_problem() is None else "none"
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "reproduce.sh").write_text("echo started\nsleep 600\n")
    cli = [sys.executable, "-m", "paperbench"]
    argv = [*cli, "reproduce", str(sub), "--sandbox", "docker", "--out", str(tmp_path / "out")]
    argv += ["--image", reproducer_image, "--network", network, "--disk", "64", "--retries", "0"]
    said = tmp_path / "cli.txt"
    with said.open("w") as out:
        proc = subprocess.Popen(argv, env=_env(), text=True, stdout=out, stderr=out)
    killed_owner.append(proc)
    cid = sandbox_id = ""
    try:
        deadline = time.monotonic() + 120
        while not cid and time.monotonic() < deadline and proc.poll() is None:
            for c in _owned_by(docker_client, proc.pid):
                top = docker_client.api.top(c["Id"]) if c["State"] == "running" else {}
                if any("sleep 600" in " ".join(p) for p in top.get("Processes") or []):
                    cid, sandbox_id = c["Id"], c["Names"][0].lstrip("/")
            time.sleep(0.2)
        assert cid, f"reproduce.sh never ran: exit {proc.poll()}: {said.read_text()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        took = _seconds_until_stopped(docker_client, cid)
        assert took < STOP_WITHIN_S, f"still running {took:.0f} s after its owner died"
        print(f"stopped {took:.2f} s after kill -9 of the CLI")

        # What is left, for gc: the container, its network and rules, its disk.
        comment = f"{COMMENT_PREFIX}{sandbox_id}-net"
        disk = Path(tempfile.gettempdir()) / f"{WORKSPACE_PREFIX}{sandbox_id}-disk"
        assert [c["Id"] for c in _owned_by(docker_client, proc.pid)] == [cid]
        nets = docker_client.api.networks(names=[f"{sandbox_id}-net"])
        assert len(nets) == (1 if network == "full" else 0), nets
        assert len([r for r in our_rules() if comment in r]) == (2 if network == "full" else 0)
        assert str(disk) in Path("/proc/self/mountinfo").read_text()  # loop-overlay here

        gc = subprocess.run(
            [*cli, "sandbox", "gc", "--json"], env=_env(), text=True, capture_output=True
        )
        assert gc.returncode == 0, gc.stderr
        ours = [row for row in json.loads(gc.stdout) if sandbox_id in row["name"]]
        assert ours and all(row["removed"] and not row["error"] for row in ours), ours
        assert _owned_by(docker_client, proc.pid) == []
        assert docker_client.api.networks(names=[f"{sandbox_id}-net"]) == []
        assert not [r for r in our_rules() if comment in r]
        assert str(disk) not in Path("/proc/self/mountinfo").read_text()
        assert not disk.exists()
    finally:
        _remove_all_of(docker_client, proc.pid, sandbox_id)


def _remove_all_of(client: Any, pid: int, sandbox_id: str) -> None:
    """What a failing test left: never leave containers, networks, rules or disks."""
    for c in _owned_by(client, pid):
        with contextlib.suppress(Exception):
            client.api.remove_container(c["Id"], force=True, v=True)
    if not sandbox_id:
        return
    for net in client.api.networks(names=[f"{sandbox_id}-net"]):
        with contextlib.suppress(Exception):
            client.api.remove_network(net["Id"])
    for rule in our_rules():
        if f"{sandbox_id}-net" in rule:
            words = shlex.split(rule)
            subprocess.run(["iptables", "-w", "10", "-D", *words[1:]], check=False)
    if (Path(tempfile.gettempdir()) / f"{WORKSPACE_PREFIX}{sandbox_id}-disk").exists():
        with contextlib.suppress(Exception):
            reap_local_orphans()


# Root in the sandbox, as an attacker who wants its container to outlive its owner: hold a
# write end of PID 1's stdin (then the end of file never comes), trace PID 1 and stop it,
# signal it, and all of that again as each of PID 1's own uids and gids (as read from
# /proc/1/status), from processes of a session of their own with the marker variable gone.
# It says what worked on stdout (a file the host reads through the owner), then holds on.
_KEEP_ALIVE = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 16, 0x4206, 0x4207
held, got = [], []

def attempt(who):
    for path in ("/proc/1/fd/0", "/proc/1/task/1/fd/0"):
        try:
            held.append(os.open(path, os.O_WRONLY))
            got.append(f"{who}: opened {path}")
        except OSError:
            pass
    if libc.ptrace(PTRACE_SEIZE, 1, None, None) == 0:
        got.append(f"{who}: seized PID 1")
        libc.ptrace(PTRACE_INTERRUPT, 1, None, None)
    elif libc.ptrace(PTRACE_ATTACH, 1, None, None) == 0:
        got.append(f"{who}: attached to PID 1")
    for sig in (19, 20, 15, 1, 2, 3, 10, 12):  # STOP TSTP TERM HUP INT QUIT USR1 USR2
        try:
            os.kill(1, sig)
        except OSError:
            pass

def ids(key):
    line = next(l for l in open("/proc/1/status") if l.startswith(key + ":"))
    return [int(x) for x in line.split()[1:4]]

uids, gids = ids("Uid"), ids("Gid")
attempt("root")
for uid, gid in [(u, g) for u in sorted(set(uids)) for g in sorted(set(gids))]:
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        os.setgroups([])
        os.setresgid(gids[0], gid, gid)
        os.setresuid(uids[0], uid, uid)
        got.clear()
        attempt(f"uid {uid} gid {gid}")
        os.write(w, "\n".join(got).encode())
        os.close(w)
        while True:
            time.sleep(3600)
    os.close(w)
    said = os.read(r, 65536).decode()
    got += [s for s in said.split("\n") if s]
print(f"pid 1 ids {uids} {gids}; worked: {got}", flush=True)
while True:
    time.sleep(3600)
"""

# The owner: starts a sandbox on the real backend, lets the attacker loose as root, says the
# container id and what the attacker said, then waits to be killed.
_OWNER = """
import asyncio, json, sys
from paperbench.sandbox._base import SandboxSpec
from paperbench.sandbox._docker import DockerBackend

async def main():
    spec = SandboxSpec(image=sys.argv[1], labels=json.loads(sys.argv[2]))
    sb = await DockerBackend().start(spec)
    print(sb.container_id, flush=True)
    await sb.write_file("/tmp/keep.py", sys.argv[3].encode())
    r = await sb.exec(
        "env -i setsid python3 /tmp/keep.py > /tmp/keep.out 2>&1 < /dev/null & "
        "for i in $(seq 100); do [ -s /tmp/keep.out ] && break; sleep 0.1; done; "
        "cat /tmp/keep.out; sleep 1",
        timeout=60,
    )
    print(json.dumps(r.stdout + r.stderr), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


@pytest.mark.docker
def test_root_inside_cannot_keep_its_sandbox_running_past_its_owner(
    docker_client: Any, reproducer_image: str, killed_owner: list[subprocess.Popen[str]]
) -> None:
    """Root in the sandbox holds (or tries to hold) PID 1's stdin, traces and signals it, as
    root and as PID 1's own ids; ``kill -9`` of the owner still stops the container within a
    minute, and nothing the attacker tried worked."""
    labels = json.dumps(TEST_LABELS)
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, reproducer_image, labels, _KEEP_ALIVE],
        env=_env(),
        text=True,
        stdout=subprocess.PIPE,
    )
    killed_owner.append(proc)
    try:
        assert proc.stdout is not None
        cid = proc.stdout.readline().strip()
        assert cid, "the owner did not start its sandbox"
        said = json.loads(proc.stdout.readline() or '""')
        print(said.strip())
        assert "worked: []" in said, said
        assert _running(docker_client, cid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        took = _seconds_until_stopped(docker_client, cid)
        assert took < STOP_WITHIN_S, f"still running {took:.0f} s after its owner died: {said}"
        assert docker_client.api.inspect_container(cid)["State"]["Pid"] == 0
    finally:
        sweep(docker_client)


@pytest.mark.slow
@pytest.mark.docker
def test_an_idle_sandbox_outlives_every_timeout_of_its_attach(
    reproducer_image: str, run: Any
) -> None:
    """The owner's attach carries no byte: a sandbox idle for longer than the client's socket
    timeout (2 s here; the default is 120 s) still runs and answers."""
    client = connect(timeout=2)
    backend = DockerBackend(client=client)
    sb = run(backend.start(SandboxSpec(image=reproducer_image, labels=TEST_LABELS)))
    try:
        time.sleep(5)
        assert run(sb.alive())
        r = run(sb.exec("echo still here", timeout=30))
        assert r.stdout == "still here\n", r
    finally:
        run(sb.stop())
        sweep(client)
        client.close()


@pytest.mark.docker
def test_an_image_without_setpriv_is_one_line_with_the_fix(
    docker_client: Any, reproducer_image: str, run: Any, backend: DockerBackend
) -> None:
    api = docker_client.api
    tag = f"paperbench-test-nosetpriv:{SESSION_ID}"
    made = api.create_container(
        reproducer_image,
        entrypoint=["rm", "/usr/bin/setpriv"],
        labels={SESSION_LABEL: SESSION_ID},
        network_disabled=True,
    )
    try:
        api.start(made["Id"])
        assert api.wait(made["Id"])["StatusCode"] == 0
        api.commit(made["Id"], repository=tag.split(":")[0], tag=SESSION_ID)
        with pytest.raises(SandboxError) as info:
            run(backend.start(SandboxSpec(image=tag, labels=TEST_LABELS)))
        said = str(info.value)
        assert "setpriv" in said and "util-linux" in said and "\n" not in said, said
    finally:
        api.remove_container(made["Id"], force=True)
        with contextlib.suppress(Exception):
            api.remove_image(tag, force=True)
        sweep(docker_client)
