"""The exec server of the Docker backend's fast path: runs inside the container, stdlib only.

It is bind-mounted read-only into the container (or uploaded before it starts when the engine
cannot bind it) at ``/opt/paperbench/execd.py`` and runs as the container's PID 1 (``execd.py
init``) when the image has a Python 3.8+; it never imports paperbench. PID 1 because the kernel
protects a pid namespace's init from signals sent inside it: ``kill -9 -1`` in a command kills
every other process in the container, yet the server lives on, keeps the command's pipes and
exit status, and hands the result over. Like the bash init it replaces, it reaps orphans. If its
loop ever fails it says so on stdout (``{"fatal"}``) and execs the bash init, so the container
never dies of it.

The host reaches it one of two ways, both carrying the same frames (one line each):

- the container's own stdin/stdout, through ``docker attach`` (the container is created with
  stdin open): no process in the container carries the connection, so nothing inside can break
  it, and attaching costs no ``runc exec``;
- ``execd.py relay``, one long-lived ``docker exec`` that pumps bytes between its stdin/stdout
  and the server's abstract unix socket (the fallback).

**Nothing in the container can forge, steal or stall the channel**, not even root (commands
run as root or as an unprivileged user; no sandbox has ``CAP_SYS_PTRACE``):

- the first thing ``init`` does is ``prctl(PR_SET_DUMPABLE, 0)``: ``/proc/1/fd/*``,
  ``/proc/1/mem``, ``/proc/1/environ`` and ``ptrace`` of PID 1 then need ``CAP_SYS_PTRACE``, so
  nothing in the container can open PID 1's stdin or stdout (the attach) or touch its memory.
  Commands get stdin from ``/dev/null``, their own pipes for stdout and stderr and no other
  descriptor, and exec a non-setuid binary, which makes them dumpable again (tools reading
  their own ``/proc/self`` work). The relay makes itself non-dumpable too, as its first act;
- a per-sandbox key (32 random bytes, made by the host) authenticates the channel. It travels
  once, in the host's first ``hello``, when nothing but PID 1 runs in the container (the host
  sends no command before the server proved it holds the key), and never in an environment,
  an argument or a file. Later hellos carry ``HMAC(key, "hello:<nonce>:<conn>")`` for a fresh
  nonce and a connection number above any accepted (a replayed hello is refused). Every other
  frame, both ways, is ``<hex HMAC> <json>``, the MAC taken over the direction, the nonce and
  the frame's sequence number on its connection: a frame that does not verify is never acted
  on (it ends a relay connection: the host reconnects and resumes), nor taken by the host;
- anything in the container's network namespace can connect to the abstract socket. A peer
  whose uid is not 0 (``SO_PEERCRED``) is closed at once; a root peer gets nothing and must
  send a valid hello as its first line, within ``MAX_HELLO`` bytes and ``HELLO_TIMEOUT_S``, or
  is closed; at most ``MAX_WAITING`` wait at once (a newer one closes the oldest). Replies go
  only to the channel of the last valid hello, and the server never blocks reading a peer.

Why MAC the replies when nothing in the container can write PID 1's stdout: the relay. Its
stdout is a ``docker exec`` pipe, and until the relay is non-dumpable (its first milliseconds)
a root process watching ``/proc`` can open that pipe and keep it; over the relay the MAC is what
refuses forged and replayed frames. Over the attach it costs one HMAC per frame (a few
microseconds; under 1 ms per MB of output).

A dropped attach can leave half a frame in stdin, and a new attach can start in the middle of a
reply: the host starts each connection with a newline and a ``hello`` carrying a fresh nonce,
the server skips lines that do not verify on stdin, and the host skips everything before the
``hello`` reply with its nonce.

- host → server: ``{"op": "hello", "nonce", "conn", "proof", "resume": [ids], "key"}`` on
  connect, as plain JSON (``resume``: the ids still waiting for a reply; ``key`` only until the
  server has proved it holds it); then, signed: ``{"op": "exec", "id", "argv", "workdir", "env",
  "timeout", "output_limit", "user"}`` (``user``: ``[uid, gid]`` to run the command as, or
  null for root); ``{"op": "ack", "id"}`` once a reply arrived (the server then forgets it);
  ``{"op": "kill", "id"}``; ``{"op": "resume", "ids"}``;
- server → host, signed: ``{"hello": VERSION, "nonce"}``, then for each resumed id its reply
  again, ``{"id", "unknown": true}`` when the server never received it (nothing ran) or ``{"id",
  "lost": true}`` when it ran but its reply was dropped (more than ``KEEP_UNACKED`` replies
  waited for a reconnect); ``{"id", "exit_code", "stdout", "stderr", "stdout_truncated",
  "stderr_truncated", "timed_out", "note", "duration"}``; ``{"id", "error"}`` when the command
  could not be started (nothing ran); ``{"fatal": why}`` when the server gives up (the bash init
  follows; plain JSON when no host has authenticated yet, as the bash init's own notice that
  there is no server).

Each command runs in a new session with ``PAPERBENCH_EXEC_ID=<marker>`` in its environment. On
timeout (or a kill request) its process group, every process carrying the marker and every
process in their sessions get SIGKILL, round after round until none is left; no fork is needed,
so this works under a fork bomb too. Root without ``CAP_SYS_PTRACE`` cannot read another user's
``/proc/<pid>/environ``: for those the server takes that user's filesystem ids for the read
(``setfsuid``; not where ``fs.suid_dumpable`` is 1, which would make PID 1 dumpable meanwhile).
A process whose environment stays unreadable (one that made itself non-dumpable) makes the kill
report itself incomplete, and the host kills from outside. Output is capped head and tail by
:func:`cap_text`, the one output cap of every backend (the host's ``cap_output`` and
``HeadTail`` call it too: this file cannot import paperbench, so the cap lives here).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Any

VERSION = 2
SOCKET_NAME = "\0paperbench-execd"
MARKER_ENV = "PAPERBENCH_EXEC_ID"
DRAIN_GRACE_S = 0.5
"""After a command exits, how long its pipes may stay open (held by a background child)."""
KEEP_UNACKED = 64
MAX_LINE = 64 << 20
"""A host frame longer than this is garbage (nothing sends that much): it is dropped."""
MAX_HELLO = 64 << 10
"""Bytes read from a relay connection before its hello: more, and it is closed."""
HELLO_TIMEOUT_S = 10.0
"""How long a relay connection may wait before its hello is in: then it is closed."""
MAX_WAITING = 4
"""Relay connections without a hello yet at once: a newer one closes the oldest."""
SEND_TIMEOUT_S = 30.0
INIT_FALLBACK = 'trap "exit 0" TERM; while :; do sleep 2147483647 & wait $!; done'
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4

# ------------------------------------------------------------------ the channel's keys


def _mac(key: bytes, what: bytes) -> bytes:
    return hmac.new(key, what, hashlib.sha256).hexdigest().encode()


def hello_proof(key: bytes, nonce: str, conn: int) -> str:
    """What a ``hello`` shows to prove its sender holds ``key``."""
    return _mac(key, f"hello:{nonce}:{conn}".encode()).decode()


def sign(key: bytes, way: str, nonce: str, seq: int, body: bytes) -> bytes:
    """The line carrying ``body`` as frame ``seq`` of connection ``nonce`` in direction ``way``
    (``h``: host → server, ``s``: server → host)."""
    return _mac(key, f"{way}:{nonce}:{seq}:".encode() + body) + b" " + body + b"\n"


def unsign(key: bytes, way: str, nonce: str, seq: int, line: bytes) -> bytes | None:
    """The body of ``line`` (without its newline) if it is that frame, else None."""
    mac, sep, body = line.partition(b" ")
    if not sep or len(mac) != 64:
        return None
    if not hmac.compare_digest(mac, _mac(key, f"{way}:{nonce}:{seq}:".encode() + body)):
        return None
    return body


def libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def no_dump(lib: Any) -> None:
    """Make this process non-dumpable (see the module docstring).

    Raises:
        OSError: the kernel refused, or the process is still dumpable.
    """
    import ctypes

    if lib.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(err)}")
    if lib.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_DUMPABLE, 0) left the process dumpable")


_FS_IDS: Any = None
"""libc, when another user's ``/proc/<pid>/environ`` may be read with its filesystem ids."""


def allow_fs_ids(lib: Any) -> None:
    """Read other users' environments with their filesystem ids, unless ``fs.suid_dumpable``
    is 1 (changing ids would make this process dumpable until the next ``prctl``)."""
    global _FS_IDS
    try:
        with open("/proc/sys/fs/suid_dumpable", "rb") as f:
            mode = f.read().strip()
    except OSError:
        return
    if mode in (b"0", b"2"):
        _FS_IDS = lib


def cap_text(head: bytes, tail: bytes, total: int, limit: int) -> tuple[str, bool]:
    """The output cap of every backend: a stream's ``head`` and ``tail`` as kept, its
    ``total`` size and the ``limit`` → its text, with the cut said, and whether it was cut."""
    if total <= limit:
        return (head + tail).decode("utf-8", errors="replace"), False
    cut = total - len(head) - len(tail)
    h = head.decode("utf-8", errors="replace")
    t = tail.decode("utf-8", errors="replace")
    unit = "byte" if cut == 1 else "bytes"  # no paperbench here: ``plural`` spelled out
    return f"{h}\n[... {cut} {unit} truncated by paperbench ...]\n{t}", True


class Capture:
    """The first and last ``limit // 2`` bytes of a stream, and its size."""

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 0)
        self.half = self.limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.over = False

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if not self.over:
            self.head += chunk
            if len(self.head) <= self.limit:
                return
            self.over = True
            self.tail = self.head[self.half :]
            del self.head[self.half :]
        else:
            self.tail += chunk
        if len(self.tail) > self.half:
            del self.tail[: len(self.tail) - self.half]

    def text(self) -> tuple[str, bool]:
        return cap_text(bytes(self.head), bytes(self.tail), self.total, self.limit)


def _ids(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[-1].split()
        return int(fields[2]), int(fields[3])
    except (OSError, IndexError, ValueError):
        return None


def _environ(pid: int) -> bytes | None:
    """``/proc/<pid>/environ`` (empty when the process is gone); None when refused."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except PermissionError:
        pass
    except OSError:
        return b""
    lib = _FS_IDS
    try:
        owner = os.stat(f"/proc/{pid}")  # its uid and gid (a dumpable process's)
    except OSError:
        return b""
    if lib is None or owner.st_uid == 0:
        return None
    lib.setfsgid(owner.st_gid)
    lib.setfsuid(owner.st_uid)
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except PermissionError:
        return None
    except OSError:
        return b""
    finally:
        lib.setfsuid(0)
        lib.setfsgid(0)
        lib.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def kill_tree(
    marker: str, pgid: int, rounds: int = 20, spare: frozenset[int] = frozenset()
) -> bool:
    """SIGKILL the group ``pgid``, the marked processes and their sessions. True once clean:
    a round found no marked process, and no process (but PID 1, this one and ``spare``) whose
    environment could not be read."""
    me = os.getpid()
    needle = (f"{MARKER_ENV}={marker}").encode()
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    for _ in range(rounds):
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        ids = {pid: _ids(pid) for pid in pids}
        environ = {pid: _environ(pid) for pid in pids}
        marked = [pid for pid, env in environ.items() if env and needle in env.split(b"\0")]
        hidden = [pid for pid, env in environ.items() if env is None and pid not in spare]
        sessions = {pgid}
        for pid in marked:
            pg_sid = ids.get(pid)
            if pg_sid is not None:
                sessions.add(pg_sid[1])
                if pg_sid[0] > 1:
                    with contextlib.suppress(OSError):
                        os.killpg(pg_sid[0], signal.SIGKILL)
        hit = False
        for pid, pg_sid in ids.items():
            if pid in marked or (pg_sid is not None and pg_sid[1] in sessions):
                hit = True
                _kill(pid)
        if not hit:
            return not hidden
        time.sleep(0.01)
    return False


def as_user(user: Any) -> dict[str, Any]:
    """``Popen`` arguments that run a command as ``[uid, gid]`` with no other group; none for
    None (root, as the server)."""
    if not user:
        return {}
    uid, gid = int(user[0]), int(user[1])
    if sys.version_info >= (3, 9):  # noqa: UP036 - the container's Python may be 3.8
        return {"user": uid, "group": gid, "extra_groups": []}

    def drop() -> None:  # pragma: no cover - Python 3.8 only
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return {"preexec_fn": drop}


def write_all(fd: int, data: bytes, timeout: float) -> bool:
    """Write all of ``data`` to the non-blocking ``fd`` within ``timeout``; False if not."""
    deadline = time.monotonic() + timeout
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(InterruptedError):
                select.select([], [fd], [], left)
        except OSError:
            return False
    return True


class Job:
    def __init__(self, req: dict[str, Any], proc: subprocess.Popen[bytes], marker: str) -> None:
        self.id = req["id"]
        self.proc = proc
        self.marker = marker
        self.started = time.monotonic()
        self.deadline = self.started + float(req["timeout"])
        limit = int(req.get("output_limit", 1_000_000))
        self.out = Capture(limit)
        self.err = Capture(limit)
        self.open = 2
        self.status: int | None = None
        self.exited_at = 0.0
        self.timed_out = False
        self.note = ""


class Channel:
    """One way the host may reach the server: the container's stdin/stdout (``sock`` None,
    through ``docker attach``) or one connection to the unix socket (a relay, or anything else
    in the container)."""

    def __init__(self, sock: socket.socket | None = None, peer: int = 0) -> None:
        self.sock = sock
        self.peer = peer
        """The connecting process (its pid in the container), for a socket."""
        self.buf = bytearray()
        self.opened = time.monotonic()
        self.nonce: str | None = None
        """The nonce of the host's hello once one was verified on this channel."""
        self.rx = 0
        """The sequence number of the next host frame."""
        self.tx = 0
        """The sequence number of the next reply."""


class Server:
    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(SOCKET_NAME)
        self.listener.listen(8)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, ("accept", None))
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        self.stdio = Channel()
        try:
            os.set_blocking(0, False)
            os.set_blocking(1, False)
            self.sel.register(0, selectors.EVENT_READ, ("stdin", None))
        except (OSError, ValueError):
            pass  # no usable stdin: only the relay reaches the server
        self.socks: dict[socket.socket, Channel] = {}
        self.key: bytes | None = None
        """The channel's key, from the host's first hello."""
        self.last_conn = 0
        """The highest connection number of a valid hello: a lower or equal one is a replay."""
        self.out: Channel | None = None
        """Where replies go: the channel of the last valid hello (None: no host until the next)."""
        self.jobs: dict[object, Job] = {}
        self.by_pid: dict[int, Job] = {}
        self.unacked: dict[object, bytes] = {}
        self.evicted: set[object] = set()
        """Ids whose reply was dropped unacknowledged: they ran, their result is lost."""
        self.workdir = os.getcwd()

    # ---------------------------------------------------------------- connection

    def send(self, msg: dict[str, Any]) -> None:
        body = json.dumps(msg).encode()
        if "id" in msg:
            self.unacked[msg["id"]] = body
            while len(self.unacked) > KEEP_UNACKED:
                oldest = next(iter(self.unacked))
                del self.unacked[oldest]
                self.evicted.add(oldest)
        self.write(body)

    def line(self, body: bytes) -> bytes | None:
        """``body`` signed as the next reply on the host's channel; None without one."""
        ch = self.out
        if ch is None or ch.nonce is None or self.key is None:
            return None
        ch.tx += 1
        return sign(self.key, "s", ch.nonce, ch.tx - 1, body)

    def write(self, body: bytes) -> None:
        """Send to the host's channel (a relay that fails is given up until the next hello)."""
        ch = self.out
        data = self.line(body)
        if ch is None or data is None:
            return
        if ch.sock is None:
            # A frame cut short (the host read nothing for SEND_TIMEOUT_S) runs into the next
            # one: the host sees a broken line and attaches again, which resyncs.
            write_all(1, data, SEND_TIMEOUT_S)
            return
        try:
            ch.sock.setblocking(True)
            ch.sock.settimeout(SEND_TIMEOUT_S)
            ch.sock.sendall(data)
            ch.sock.setblocking(False)
        except OSError:
            self.drop(ch)

    def drop(self, ch: Channel) -> None:
        if ch.sock is None:
            ch.nonce = None
            ch.buf.clear()
        elif self.socks.pop(ch.sock, None) is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(ch.sock)
            ch.sock.close()
        if self.out is ch:
            self.out = None

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid, uid, _ = struct.unpack("3i", cred)
        except OSError:
            conn.close()
            return
        if uid != 0:  # the host's relay runs as root: never the unprivileged user
            conn.close()
            return
        waiting = [ch for ch in self.socks.values() if ch.nonce is None]
        if len(waiting) >= MAX_WAITING:
            self.drop(min(waiting, key=lambda ch: ch.opened))
        conn.setblocking(False)
        ch = Channel(conn, pid)
        self.socks[conn] = ch
        self.sel.register(conn, selectors.EVENT_READ, ("conn", ch))

    def read_conn(self, ch: Channel) -> None:
        assert ch.sock is not None
        try:
            data = ch.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.drop(ch)
            return
        self.feed(ch, data)

    def read_stdin(self) -> None:
        try:
            data = os.read(0, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # no stdin (not created with one): only the relay reaches the server
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(0)
            self.drop(self.stdio)
            return
        self.feed(self.stdio, data)

    def feed(self, ch: Channel, data: bytes) -> None:
        """Handle each complete line of ``ch``."""
        buf = ch.buf
        start = len(buf)
        buf += data
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buf[:end])
            del buf[: end + 1]
            start = 0
            self.take(ch, line)
            if ch.sock is not None and ch.sock not in self.socks:
                return  # dropped while handling
        if ch.sock is not None and ch.nonce is None and len(buf) > MAX_HELLO:
            self.drop(ch)
        elif len(buf) > MAX_LINE:
            buf.clear()

    def take(self, ch: Channel, line: bytes) -> None:
        """One line: a hello (plain JSON), or a frame signed for ``ch``'s connection. Anything
        else is skipped on stdin (only the host writes there: a half frame of a dropped
        attach) and ends a socket connection."""
        if not line.strip():
            return
        if line.startswith(b"{"):
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict) and msg.get("op") == "hello" and self.hello(ch, msg):
                    return
        elif ch.nonce is not None and self.key is not None:
            body = unsign(self.key, "h", ch.nonce, ch.rx, line)
            if body is not None:
                ch.rx += 1
                with contextlib.suppress(ValueError):
                    msg = json.loads(body)
                    if isinstance(msg, dict):
                        self.handle(msg)
                return
        if ch.sock is not None:
            self.drop(ch)

    def hello(self, ch: Channel, msg: dict[str, Any]) -> bool:
        """Make ``ch`` the host's channel if ``msg`` proves it comes from the host."""
        nonce, conn, proof = msg.get("nonce"), msg.get("conn"), msg.get("proof")
        if not isinstance(nonce, str) or not 0 < len(nonce) <= 64 or not isinstance(proof, str):
            return False
        if type(conn) is not int or conn <= self.last_conn:
            return False
        key = self.key
        if key is None:  # the host's first hello: nothing but PID 1 has run yet
            offered = msg.get("key")
            try:
                key = bytes.fromhex(offered) if isinstance(offered, str) else None
            except ValueError:
                key = None
            if key is None or len(key) < 16:
                return False
        if not hmac.compare_digest(proof.encode(), hello_proof(key, nonce, conn).encode()):
            return False
        self.key = key
        self.last_conn = conn
        for other in [*self.socks.values(), self.stdio]:
            if other is not ch and other.nonce is not None:
                self.drop(other)  # no longer the host's
        ch.nonce, ch.rx, ch.tx = nonce, 0, 0
        self.out = ch
        self.write(json.dumps({"hello": VERSION, "nonce": nonce}).encode())
        self.resume(msg.get("resume") or [])
        return True

    def handle(self, msg: dict[str, Any]) -> None:
        """A frame of the host's."""
        op = msg.get("op")
        if op == "exec":
            self.start(msg)
        elif op == "ack":
            self.unacked.pop(msg.get("id"), None)
        elif op == "kill":
            job = self.jobs.get(msg.get("id"))
            if job is not None and job.status is None:
                job.timed_out = True
                job.note = "killed on request"
                kill_tree(job.marker, job.proc.pid, spare=self.relays())
        elif op == "resume":
            self.resume(msg.get("ids") or [])

    def relays(self) -> frozenset[int]:
        """The host's relay processes (non-dumpable, as the server is)."""
        return frozenset(ch.peer for ch in self.socks.values() if ch.nonce is not None)

    def resume(self, ids: list[Any]) -> None:
        for rid in ids:
            if isinstance(rid, (dict, list)):
                continue
            if rid in self.unacked:
                self.write(self.unacked[rid])
            elif rid in self.evicted:
                self.send({"id": rid, "lost": True})
                self.unacked.pop(rid, None)
            elif rid not in self.jobs:
                self.send({"id": rid, "unknown": True})
                self.unacked.pop(rid, None)

    def fatal(self, why: str) -> bytes:
        """The ``fatal`` line: signed for the host's channel when there is one."""
        body = json.dumps({"fatal": why}).encode()
        return b"\n" + (self.line(body) or body + b"\n")

    # ---------------------------------------------------------------- commands

    def start(self, req: dict[str, Any]) -> None:
        env = dict(os.environ)
        env.update(req.get("env") or {})
        marker = env.get(MARKER_ENV, "")
        try:
            proc = subprocess.Popen(
                req["argv"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=req.get("workdir") or self.workdir,
                env=env,
                start_new_session=True,
                **as_user(req.get("user")),
            )
        except Exception as exc:  # nothing ran: the host runs it its own way
            self.send({"id": req["id"], "error": f"{type(exc).__name__}: {exc}"})
            self.unacked.pop(req["id"], None)
            return
        job = Job(req, proc, marker)
        self.jobs[job.id] = job
        self.by_pid[proc.pid] = job
        for stream, cap in ((proc.stdout, job.out), (proc.stderr, job.err)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream, selectors.EVENT_READ, ("pipe", (job, cap)))

    def read_pipe(self, stream: Any, job: Job, cap: Capture) -> None:
        try:
            data = os.read(stream.fileno(), 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            cap.feed(data)
            return
        self.close_pipe(stream, job)

    def close_pipe(self, stream: Any, job: Job) -> None:
        try:
            self.sel.unregister(stream)
        except (KeyError, ValueError):
            return
        stream.close()
        job.open -= 1
        self.maybe_done(job)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.by_pid.pop(pid, None)
            if job is None:
                continue  # an orphan: reaped, as an init does
            job.proc.returncode = status  # so Popen never waits for it itself
            if os.WIFSIGNALED(status):
                job.status = 128 + os.WTERMSIG(status)
            else:
                job.status = os.WEXITSTATUS(status)
            job.exited_at = time.monotonic()
            self.maybe_done(job)

    def maybe_done(self, job: Job) -> None:
        if job.status is None or job.open > 0 or job.id not in self.jobs:
            return
        del self.jobs[job.id]
        stdout, out_cut = job.out.text()
        stderr, err_cut = job.err.text()
        self.send(
            {
                "id": job.id,
                "exit_code": None if job.timed_out else job.status,
                "stdout": stdout,
                "stderr": stderr,
                "stdout_truncated": out_cut,
                "stderr_truncated": err_cut,
                "timed_out": job.timed_out,
                "note": job.note,
                "duration": time.monotonic() - job.started,
            }
        )

    def tick(self) -> float:
        """Kill what is over its deadline, give up on pipes held too long; the next wait."""
        now = time.monotonic()
        wait = 1.0
        for job in list(self.jobs.values()):
            if job.status is None and not job.timed_out:
                if now >= job.deadline:
                    job.timed_out = True
                    clean = kill_tree(job.marker, job.proc.pid, spare=self.relays())
                    job.note = "process tree killed" if clean else "kill incomplete"
                else:
                    wait = min(wait, job.deadline - now)
            if job.status is not None and job.open > 0:
                if now - job.exited_at >= DRAIN_GRACE_S:
                    for key in list(self.sel.get_map().values()):
                        kind, data = key.data
                        if kind == "pipe" and data[0] is job:
                            self.close_pipe(key.fileobj, job)
                else:
                    wait = min(wait, DRAIN_GRACE_S - (now - job.exited_at))
        for ch in list(self.socks.values()):
            if ch.nonce is None:
                left = ch.opened + HELLO_TIMEOUT_S - now
                if left <= 0:
                    self.drop(ch)  # no hello in time
                else:
                    wait = min(wait, left)
        return max(wait, 0.0)

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(self.tick()):
                kind, data = key.data
                if kind == "accept":
                    self.accept()
                elif kind == "conn":
                    if data.sock in self.socks:
                        self.read_conn(data)
                elif kind == "stdin":
                    self.read_stdin()
                elif kind == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                elif kind == "pipe":
                    self.read_pipe(key.fileobj, *data)
            self.reap()


def init() -> None:
    server: Server | None = None
    try:
        lib = libc()
        no_dump(lib)  # first: before anything else can look at this process
        allow_fs_ids(lib)
        # A namespace's init gets only the signals it handles: SIG_DFL everywhere keeps it
        # alive (and children start with the default dispositions).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        server = Server()
        server.serve()
    except BaseException as exc:  # never let the container die of the server
        why = f"paperbench execd failed ({exc!r}): falling back to the bash init"
        with contextlib.suppress(Exception):
            line = server.fatal(why) if server is not None else None
            plain = b"\n" + json.dumps({"fatal": why}).encode() + b"\n"
            write_all(1, line or plain, 5.0)
        with contextlib.suppress(Exception):
            sys.stderr.write(why + "\n")
            sys.stderr.flush()
        os.execv("/bin/bash", ["bash", "-c", INIT_FALLBACK])


def relay() -> None:
    """Pump stdin → server socket (a thread) and server socket → stdout until either ends."""
    import threading

    no_dump(libc())  # first: its stdin and stdout carry the host's frames
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(SOCKET_NAME)

    def upstream() -> None:
        try:
            while True:
                data = os.read(0, 1 << 16)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while True:
            data = sock.recv(1 << 16)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        pass
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:] == ["init"]:
        init()
    elif sys.argv[1:] == ["relay"]:
        relay()
    else:
        sys.exit("usage: execd.py init|relay")
