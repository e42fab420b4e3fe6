"""Running one command in a container: streamed, capped output and whole-tree kills.

Every exec carries ``PAPERBENCH_EXEC_ID=<marker>`` in its environment, which its children
inherit. Killing an exec's tree means SIGKILL to every process in the container that carries the
marker, and to every process in the sessions and process groups of those processes (a child
that clears its environment but stays in the session still dies). Processes are found in one of
two ways:

- from the host, when the engine runs on this machine: the container's ``cgroup.procs`` lists
  host pids, ``/proc`` gives their environment and session. It needs no new process in the
  container, so it works even when a fork bomb holds every pid the limit allows;
- otherwise inside the container, with a bash script made of builtins only.

If both fail, the caller kills the container.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paperbench.sandbox._capture import HeadTail

MARKER_ENV = "PAPERBENCH_EXEC_ID"

_KILL_ROUNDS = 20

# Bash builtins only (no fork per process): finds the marked processes, kills them and every
# process in their sessions; repeats until a round finds none. $1 is the marker value.
KILL_SCRIPT = r"""
m="PAPERBENCH_EXEC_ID=$1"; me=$$
for round in 1 2 3 4 5 6 7 8 9 10; do
  declare -A sids=(); hits=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [[ $p == "$me" || $p == 1 ]] && continue
    while IFS= read -r -d '' kv; do
      if [[ $kv == "$m" ]]; then
        hits=1
        if read -r st 2>/dev/null < "$d/stat"; then
          st=${st##*) }; set -- $st
          [[ $4 != 0 && $4 != 1 ]] && sids[$4]=1
          [[ $3 != 0 && $3 != 1 ]] && kill -9 -- "-$3" 2>/dev/null
        fi
        kill -9 "$p" 2>/dev/null; break
      fi
    done 2>/dev/null < "$d/environ"
  done
  for d in /proc/[0-9]*; do
    p=${d#/proc/}; [[ $p == "$me" || $p == 1 ]] && continue
    if read -r st 2>/dev/null < "$d/stat"; then
      st=${st##*) }; set -- $st
      [[ -n ${sids[$4]:-} ]] && kill -9 "$p" 2>/dev/null
    fi
  done
  (( hits )) || exit 0
done
exit 1
"""


@dataclass
class ExecState:
    """What the pumping thread shares with the async side."""

    out: HeadTail
    err: HeadTail
    exec_id: str | None = None
    stream: Any = None
    sock: Any = None
    exit_code: int | None = None
    finished: bool = False
    stop: threading.Event = field(default_factory=threading.Event)

    def close_stream(self) -> None:
        stream = self.stream
        if stream is not None:
            with contextlib.suppress(Exception):  # already closed or the socket is gone
                stream.close()
        # The SDK leaves the hijacked socket open once the stream has ended: close it here.
        sock = getattr(self.sock, "_sock", self.sock)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        response = getattr(stream, "_response", None)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()


def pump(
    api: Any,
    container_id: str,
    argv: list[str],
    env: dict[str, str],
    workdir: str | None,
    state: ExecState,
    user: str = "",
) -> None:
    """Create and start the exec (as ``user``, ``uid:gid``; root when empty), read its output
    to the end, then wait for its exit code.

    Runs in a worker thread. Returns early when ``state.stop`` is set.
    """
    created = api.exec_create(
        container_id, argv, stdout=True, stderr=True, environment=env, workdir=workdir, user=user
    )
    state.exec_id = created["Id"]
    state.stream = api.exec_start(state.exec_id, stream=True, demux=True)
    with contextlib.suppress(Exception):  # only used to close the connection at the end
        state.sock = api._get_raw_response_socket(state.stream._response)
    try:
        for out, err in state.stream:
            if out:
                state.out.feed(out)
            if err:
                state.err.feed(err)
            if state.stop.is_set():
                return
    except Exception:
        if state.stop.is_set():  # the stream was closed on purpose
            return
        raise
    finally:
        state.close_stream()
    # The output can end before the process does (it may close stdout): wait for the exit.
    delay = 0.002
    while not state.stop.is_set():
        info = api.exec_inspect(state.exec_id)
        if not info.get("Running"):
            state.exit_code = info.get("ExitCode")
            state.finished = True
            return
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


# --------------------------------------------------------------------------- host-side kills


def cgroup_procs_path(init_pid: int, container_id: str) -> Path | None:
    """The container's ``cgroup.procs`` file as seen from this host, or None if not visible."""
    try:
        lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if container_id[:12] not in rel:
            continue
        if controllers == "":
            candidates.append(Path("/sys/fs/cgroup") / rel.lstrip("/") / "cgroup.procs")
        elif "pids" in controllers.split(","):
            candidates.append(Path("/sys/fs/cgroup/pids") / rel.lstrip("/") / "cgroup.procs")
    for path in candidates:
        try:
            if str(init_pid) in path.read_text().split():
                return path
        except OSError:
            continue
    return None


def _stat_ids(pid: str) -> tuple[int, int] | None:
    """(process group, session) of a host pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode("ascii", errors="replace")
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    try:
        return int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _has_marker(pid: str, needle: bytes) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return needle in env.split(b"\0")


def kill_tree_from_host(procs: Path, marker: str, keep: set[int]) -> bool:
    """SIGKILL every marked process of the container and everything in their sessions.

    ``keep`` holds host pids never to signal (the container's init). Returns True once a round
    finds no marked process left, False if the cgroup cannot be read.
    """
    needle = f"{MARKER_ENV}={marker}".encode()
    for _ in range(_KILL_ROUNDS):
        try:
            pids = procs.read_text().split()
        except OSError:
            return False
        ids = {pid: _stat_ids(pid) for pid in pids if int(pid) not in keep}
        keep_groups = {i for pid in keep if (s := _stat_ids(str(pid))) for i in s}
        marked = [pid for pid in ids if _has_marker(pid, needle)]
        if not marked:
            return True
        sessions: set[int] = set()
        for pid in marked:
            pg_sid = ids.get(pid)
            if pg_sid is None:
                continue
            pgid, sid = pg_sid
            sessions.add(sid)
            if pgid > 1 and pgid not in keep_groups:
                _signal(lambda g=pgid: os.killpg(g, signal.SIGKILL))
        for pid, pg_sid in ids.items():
            if pid in marked or (
                pg_sid is not None and pg_sid[1] in sessions and pg_sid[1] not in keep_groups
            ):
                _signal(lambda p=int(pid): os.kill(p, signal.SIGKILL))
        time.sleep(0.01)
    return False


def _signal(send: Any) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        send()
