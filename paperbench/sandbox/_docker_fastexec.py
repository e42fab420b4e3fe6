"""The Docker backend's fast exec path: one connection to the in-container exec server.

``_execd.py`` runs as the container's PID 1; the host talks to it over the container's own
stdin/stdout through ``docker attach`` (the container is created with stdin open and attached
before it starts), one line per frame both ways (see ``_execd``). The attach stream is
hijacked straight from the engine's unix socket and read by one task that hands each reply to
the future waiting for it, so a command costs one round trip on a socket, not a ``docker exec``
(runc alone takes ~60 ms per exec). No process in the container carries the attach, so
``kill -9 -1`` in a command cannot break it. When attaching fails, one ``docker exec`` of
``execd.py relay`` (a pump to the server's unix socket) carries the same frames instead.

The channel is authenticated (see ``_execd``): the client makes a fresh 32-byte key, hands it
to the server in its first ``hello`` (before any command), signs every frame it sends with it
and takes only replies signed with it for the current connection, in sequence; a reply that
does not verify breaks the connection like a cut frame.

When the connection breaks (the engine drops the attach, or ``kill -9 -1`` kills the relay),
the reader connects again once and asks the server for the replies it still owes: the server
outlives any connection, so commands in flight keep their results; a request the server never
received is sent again (it never ran). Every connection starts with a newline and a ``hello``
with a fresh nonce, and everything the server sent before its answer is skipped, so half a frame
left by a dropped attach breaks nothing. If no connection can be made, every command in flight
fails with a :class:`SandboxError` saying its result is unknown, and later commands take the
per-exec path.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paperbench.errors import SandboxError
from paperbench.sandbox._execd import VERSION, hello_proof, sign, unsign

EXECD_PATH = "/opt/paperbench/execd.py"
EXECD_SOURCE = Path(__file__).with_name("_execd.py")
_CONNECT_TIMEOUT_S = 15.0
_MAX_BREAKS = 3
"""Consecutive broken connections (no reply in between) before the fast path is given up."""
NO_SERVER = "no Python 3.8+ in the image to run the exec server"
RELAY_ARGV = ["python3", "-I", "-S", EXECD_PATH, "relay"]


def launch_script(init_script: str) -> str:
    """PID 1: the exec server when the image has a Python 3.8+, else the bash init (which says
    so on stdout, so the host does not wait for a server)."""
    check = "python3 -I -S -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null"
    return (
        f"if [ -r {EXECD_PATH} ] && {check}; then exec python3 -I -S {EXECD_PATH} init; fi; "
        + f"echo '{json.dumps({'fatal': NO_SERVER})}'; "
        + init_script
    )


def execd_mount() -> Any | None:
    """A read-only bind mount of the exec server at ``EXECD_PATH``; None when the installed
    package has no plain file to bind (then ``execd_archive`` is put in the container)."""
    from docker.types import Mount

    source = EXECD_SOURCE.resolve()
    if not source.is_file():
        return None
    return Mount(target=EXECD_PATH, source=str(source), type="bind", read_only=True)


def execd_archive() -> bytes:
    """A tar holding the exec server at ``EXECD_PATH`` (for ``put_archive`` at ``/``)."""
    data = EXECD_SOURCE.read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("opt", "opt/paperbench"):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        info = tarfile.TarInfo(EXECD_PATH.lstrip("/"))
        info.size = len(data)
        info.mode = 0o644
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class NotStarted(Exception):
    """The command did not run on the fast path (nothing ran): run it the per-exec way."""


@dataclass
class _Pending:
    future: asyncio.Future[dict[str, Any]]
    request: dict[str, Any]
    resent: bool = False


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    how: str
    """``attach`` or ``relay``."""
    buf: bytearray = field(default_factory=bytearray)
    scanned: int = 0
    stderr: bytearray = field(default_factory=bytearray)
    nonce: str = ""
    """The nonce of this connection's hello: every frame on it is signed for it."""
    tx: int = 0
    """The sequence number of the next frame sent."""
    rx: int = 0
    """The sequence number of the next reply."""


class NoServer(SandboxError):
    """The container runs no exec server (the bash init said so, or it gave up)."""


class ExecServerClient:
    """The host end of one sandbox's exec server connection (bound to one event loop)."""

    def __init__(self, api: Any, container_id: str, sandbox_id: str) -> None:
        self.api = api
        self.container_id = container_id
        self.sandbox_id = sandbox_id
        self.loop = asyncio.get_running_loop()
        self.key = secrets.token_bytes(32)
        self._keyed = False
        """The server proved it holds the key: it is never sent again."""
        self._conns = 0
        self.pending: dict[int, _Pending] = {}
        self.dead: str | None = None
        self.reconnects = 0
        self._conn: _Conn | None = None
        self._attached: _Conn | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._next = 0
        self._breaks = 0
        self._closing = False

    # ------------------------------------------------------------------ connection

    async def attach(self) -> None:
        """Attach to the container's stdin/stdout, for ``connect``: done before the container
        starts, nothing it says is missed. If the engine refuses, ``connect`` tries again."""
        with contextlib.suppress(SandboxError):
            self._attached = await self._attach()

    async def connect(self) -> None:
        """Greet the server on the attach (a new one, else a relay) and start the reader.

        Raises:
            SandboxError: no exec server answers.
        """
        attached, self._attached = self._attached, None
        if attached is not None:
            try:
                self._conn = await self._hello(attached, [])
            except NoServer:
                raise
            except SandboxError:
                self._conn = await self._open([])
        else:
            self._conn = await self._open([])
        self._ready.set()
        self._reader = asyncio.ensure_future(self._read_loop())

    @property
    def how(self) -> str | None:
        """How the server is reached now: ``attach``, ``relay`` or None (not connected)."""
        conn = self._conn
        return None if conn is None else conn.how

    async def _open(self, resume: list[int]) -> _Conn:
        """A greeted connection: an attach, else a relay."""
        try:
            return await self._hello(await self._attach(), resume)
        except NoServer:
            raise
        except SandboxError as exc:
            attach_error = exc
        try:
            return await self._hello(await self._relay(), resume)
        except SandboxError as exc:
            raise SandboxError(f"{exc}; attaching failed too: {attach_error}") from exc

    def _socket_path(self) -> str:
        sock_path = getattr(getattr(self.api, "_custom_adapter", None), "socket_path", None)
        if not sock_path or self.api.base_url != "http+docker://localhost":
            raise SandboxError("the fast exec path needs the engine on a local unix socket")
        return str(sock_path)

    async def _upgrade(self, how: str, path: str, body: bytes) -> _Conn:
        """POST ``path`` on the engine's socket and take over the connection it upgrades."""
        reader, writer = await asyncio.open_unix_connection(self._socket_path(), limit=1 << 20)
        conn = _Conn(reader, writer, how)
        try:
            writer.write(
                (
                    f"POST /v{self.api._version}{path} HTTP/1.1\r\n"
                    "Host: docker\r\nContent-Type: application/json\r\n"
                    "Connection: Upgrade\r\nUpgrade: tcp\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                + body
            )
            async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status not in (101, 200):
                raise SandboxError(f"the engine answered {status} to the {how}")
        except BaseException as exc:
            await self._close(conn)
            if isinstance(exc, asyncio.CancelledError | SandboxError):
                raise
            raise SandboxError(f"cannot open the {how}: {type(exc).__name__}: {exc}") from exc
        return conn

    async def _attach(self) -> _Conn:
        return await self._upgrade(
            "attach",
            f"/containers/{self.container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1",
            b"",
        )

    async def _relay(self) -> _Conn:
        self._socket_path()
        try:
            created = await asyncio.to_thread(
                self.api.exec_create,
                self.container_id,
                RELAY_ARGV,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
            )
        except Exception as exc:
            raise SandboxError(f"cannot start the exec relay: {exc}") from exc
        return await self._upgrade(
            "relay", f"/exec/{created['Id']}/start", b'{"Detach": false, "Tty": false}'
        )

    async def _hello(self, conn: _Conn, resume: list[int]) -> _Conn:
        """Greet the server on ``conn`` and skip what it sent before its answer.

        Raises:
            NoServer: the container says it runs no exec server.
            SandboxError: no answer.
        """
        self._conns += 1
        conn.nonce = nonce = secrets.token_hex(8)
        hello: dict[str, Any] = {
            "op": "hello",
            "nonce": nonce,
            "conn": self._conns,
            "proof": hello_proof(self.key, nonce, self._conns),
            "resume": resume,
        }
        if not self._keyed:
            hello["key"] = self.key.hex()
        try:
            conn.writer.write(b"\n" + json.dumps(hello).encode() + b"\n")
            async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                while True:
                    line = await self._read_line(conn)
                    if line.startswith(b"{"):  # the bash init (or a server with no host yet)
                        with contextlib.suppress(ValueError):
                            said = json.loads(line)
                            if isinstance(said, dict) and "fatal" in said:
                                raise NoServer(str(said["fatal"]))
                        continue
                    body = unsign(self.key, "s", nonce, 0, line)
                    if body is not None:  # else a frame of an earlier connection
                        break
            msg = json.loads(body)
            if not isinstance(msg, dict) or msg.get("hello") != VERSION:
                raise SandboxError(f"unexpected greeting from the exec server: {msg!r}")
            conn.rx = 1
            self._keyed = True
        except BaseException as exc:
            await self._close(conn)
            if isinstance(exc, asyncio.CancelledError | NoServer):
                raise
            said = conn.stderr[-300:].decode("utf-8", errors="replace").strip()
            raise SandboxError(
                f"the exec server does not answer on the {conn.how} ({type(exc).__name__}: {exc}"
                + (f"; it said: {said}" if said else "")
                + ")"
            ) from exc
        return conn

    async def _read_msg(self, conn: _Conn) -> dict[str, Any]:
        """The next reply on ``conn``, verified.

        Raises:
            ValueError: a line that is not the next frame signed by the server (a broken,
                forged or replayed frame).
        """
        line = await self._read_line(conn)
        body = unsign(self.key, "s", conn.nonce, conn.rx, line)
        if body is None:
            raise ValueError("a frame that is not the exec server's next reply")
        conn.rx += 1
        msg = json.loads(body)
        if not isinstance(msg, dict):
            raise ValueError("a frame that is not a JSON object")
        return msg

    async def _read_line(self, conn: _Conn) -> bytes:
        """The next non-empty line on stdout, read through Docker's 8-byte stream headers."""
        while True:
            end = conn.buf.find(b"\n", conn.scanned)
            if end >= 0:
                line = bytes(conn.buf[:end])
                del conn.buf[: end + 1]
                conn.scanned = 0
                if line.strip():
                    return line
                continue
            conn.scanned = len(conn.buf)
            head = await conn.reader.readexactly(8)
            payload = await conn.reader.readexactly(int.from_bytes(head[4:8], "big"))
            if head[0] == 2:
                conn.stderr += payload
                del conn.stderr[:-4000]
            else:
                conn.buf += payload

    async def _read_loop(self) -> None:
        while True:
            conn = self._conn
            assert conn is not None
            try:
                msg = await self._read_msg(conn)
            except (OSError, EOFError, ValueError, asyncio.IncompleteReadError):
                if not await self._reconnect():
                    return
                continue
            if "fatal" in msg:
                self._give_up(f"the exec server gave up: {msg['fatal']}")
                return
            self._dispatch(msg)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        rid = msg.get("id")
        pending = self.pending.get(rid) if isinstance(rid, int) else None
        if msg.get("unknown"):
            if pending is not None and not pending.resent and not pending.future.done():
                pending.resent = True  # the server never got it: it never ran
                self._send(pending.request)
            elif pending is not None and not pending.future.done():
                pending.future.set_exception(NotStarted("the exec server lost the request"))
            return
        self._breaks = 0
        if msg.get("lost"):
            if pending is not None and not pending.future.done():
                pending.future.set_exception(
                    SandboxError(
                        f"sandbox {self.sandbox_id}: the command ran but its result was lost "
                        "while the exec server's connection was down"
                    )
                )
            return
        if "error" in msg:
            if pending is not None and not pending.future.done():
                pending.future.set_exception(NotStarted(str(msg["error"])))
            return
        self._send({"op": "ack", "id": rid})
        if pending is not None and not pending.future.done():
            pending.future.set_result(msg)

    async def _reconnect(self) -> bool:
        """Connect again once and resume; False (and every waiter failed) if it cannot."""
        self._ready.clear()
        await self._close_conn()
        if self._closing:
            self._fail_all(SandboxError(f"sandbox {self.sandbox_id} is stopped"))
            return False
        self._breaks += 1
        why = "it broke too often"
        if self._breaks <= _MAX_BREAKS:
            try:
                self._conn = await self._open(sorted(self.pending))
            except SandboxError as exc:
                why = str(exc)
            else:
                self.reconnects += 1
                self._ready.set()
                return True
        self._give_up(f"the connection to the exec server broke and could not be restored: {why}")
        return False

    def _give_up(self, why: str) -> None:
        self.dead = why
        self._fail_all(
            SandboxError(f"sandbox {self.sandbox_id}: {why}; the command's result is unknown")
        )
        self._ready.set()

    def _fail_all(self, exc: Exception) -> None:
        for pending in self.pending.values():
            if not pending.future.done():
                pending.future.set_exception(exc)

    def _send(self, msg: dict[str, Any]) -> None:
        conn = self._conn
        if conn is None or conn.writer.is_closing():
            return  # the reader reconnects and resumes
        data = sign(self.key, "h", conn.nonce, conn.tx, json.dumps(msg).encode())
        conn.tx += 1
        with contextlib.suppress(Exception):
            conn.writer.write(data)

    async def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._close(conn)

    @staticmethod
    async def _close(conn: _Conn) -> None:
        conn.writer.close()
        with contextlib.suppress(Exception):
            await conn.writer.wait_closed()

    # ------------------------------------------------------------------ commands

    async def submit(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        workdir: str | None,
        timeout: float,
        output_limit: int,
        user: tuple[int, int] | None = None,
    ) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Send one command (run as ``user``, a uid and gid, or root); its id and the future
        of its reply.

        Raises:
            NotStarted: the fast path is not available (nothing was sent).
        """
        if self.dead is not None or self._closing:
            raise NotStarted(self.dead or "closed")
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), _CONNECT_TIMEOUT_S * 2)
            except TimeoutError:
                raise NotStarted("the exec server is reconnecting") from None
            if self.dead is not None or self._conn is None:
                raise NotStarted(self.dead or "closed")
        self._next += 1
        rid = self._next
        request = {
            "op": "exec",
            "id": rid,
            "argv": argv,
            "env": env,
            "workdir": workdir,
            "timeout": timeout,
            "output_limit": output_limit,
            "user": list(user) if user is not None else None,
        }
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[rid] = _Pending(future, request)
        self._send(request)
        conn = self._conn
        if conn is not None and not conn.writer.is_closing():
            with contextlib.suppress(Exception):
                await conn.writer.drain()
        return rid, future

    def kill(self, rid: int) -> None:
        self._send({"op": "kill", "id": rid})

    def forget(self, rid: int) -> None:
        pending = self.pending.pop(rid, None)
        if pending is not None and pending.future.done() and not pending.future.cancelled():
            pending.future.exception()  # retrieved: nobody waits for it any more

    async def close(self) -> None:
        """Close the connection (the server dies with the container)."""
        self._closing = True
        attached, self._attached = self._attached, None
        if attached is not None:
            await self._close(attached)
        task, self._reader = self._reader, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self._close_conn()
        self._fail_all(SandboxError(f"sandbox {self.sandbox_id} is stopped"))
        for rid in list(self.pending):
            self.forget(rid)
