"""Carry TCP connections across a network-namespace boundary over a unix socket.

A local sandbox under bubblewrap ``--unshare-net`` has only its own loopback: it cannot reach
the egress proxy on the host's loopback. The unix socket is the way through, since a file can
be bound into the sandbox while a network cannot:

    sandbox process ─TCP→ 127.0.0.1:PORT (sandbox netns)
        └ tcp-to-unix bridge, inside the sandbox ─unix→ SOCKET (bound into the sandbox)
            └ unix-to-tcp side, in the proxy process ─TCP→ the proxy on the host's loopback

The proxy process runs the unix side itself (``EgressSettings(unix_socket=...)``); the sandbox
runs ``python3 _egress_bridge.py tcp-to-unix 127.0.0.1:PORT SOCKET`` in the background. Only
the standard library is used, so any Python 3.11 in the sandbox can run this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _splice(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    try:
        await asyncio.gather(_pipe(client[0], upstream[1]), _pipe(upstream[0], client[1]))
    finally:  # both closed before the first wait, which a cancellation may cut short
        for writer in (client[1], upstream[1]):
            writer.close()
        for writer in (client[1], upstream[1]):
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class BridgeServer:
    """A listening side of the bridge, used as an ``asyncio.Server`` is (``sockets``,
    ``serve_forever``, ``close``, ``wait_closed``, ``async with``). Closing it also ends the
    connections it carries: Python 3.11's ``Server.close`` leaves their handlers running,
    to be torn down half-way when their event loop ends."""

    def __init__(self) -> None:
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def carrying(self, handler: Handler) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.add(task)
            try:
                await handler(reader, writer)
            finally:
                self._tasks.discard(task)

        return handle

    def listening(self, server: asyncio.Server) -> BridgeServer:
        self._server = server
        return self

    @property
    def sockets(self) -> tuple[Any, ...]:
        return tuple(self._server.sockets) if self._server else ()

    async def serve_forever(self) -> None:
        assert self._server is not None
        await self._server.serve_forever()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> BridgeServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
        await self.wait_closed()


async def serve_unix_to_tcp(unix_path: Path, host: str, port: int) -> BridgeServer:
    """Accept on unix socket ``unix_path`` and connect each client to ``host:port``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await _splice((reader, writer), upstream)

    unix_path.unlink(missing_ok=True)
    bridge = BridgeServer()
    server = await asyncio.start_unix_server(bridge.carrying(handle), path=str(unix_path))
    unix_path.chmod(0o666)  # an unprivileged sandbox user must be able to connect
    return bridge.listening(server)


async def serve_tcp_to_unix(host: str, port: int, unix_path: Path) -> BridgeServer:
    """Accept on ``host:port`` and connect each client to unix socket ``unix_path``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream = await asyncio.open_unix_connection(str(unix_path))
        except OSError:
            writer.close()
            return
        await _splice((reader, writer), upstream)

    bridge = BridgeServer()
    return bridge.listening(await asyncio.start_server(bridge.carrying(handle), host, port))


async def _run_tcp_to_unix(listen: str, unix_path: Path) -> None:
    host, _, port = listen.rpartition(":")
    server = await serve_tcp_to_unix(host or "127.0.0.1", int(port), unix_path)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != "tcp-to-unix":
        sys.stderr.write("usage: _egress_bridge.py tcp-to-unix HOST:PORT SOCKET\n")
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run_tcp_to_unix(argv[2], Path(argv[3])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
