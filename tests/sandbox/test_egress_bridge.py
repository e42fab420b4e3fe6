"""The bridge's servers end the connections they carry when they close."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from paperbench.sandbox._egress_bridge import serve_tcp_to_unix, serve_unix_to_tcp


async def _held_upstream() -> tuple[asyncio.Server, asyncio.Event, asyncio.Event]:
    """A TCP server that reads what it is sent and never answers: the bridge's connection to
    it stays open until one side closes."""
    got, ended = asyncio.Event(), asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(5)
        got.set()
        await reader.read()  # EOF: the bridge closed its side
        writer.close()
        await writer.wait_closed()
        ended.set()

    return await asyncio.start_server(hold, "127.0.0.1", 0), got, ended


@pytest.mark.parametrize("way", ["tcp-to-unix", "unix-to-tcp"])
def test_closing_a_bridge_ends_the_connections_it_carries(way: str, tmp_path: Path) -> None:
    async def main() -> None:
        upstream, got, ended = await _held_upstream()
        port = upstream.sockets[0].getsockname()[1]
        sock = tmp_path / "bridge.sock"
        async with upstream:
            if way == "tcp-to-unix":  # the unix side: a second bridge in front of upstream
                inner = await serve_unix_to_tcp(sock, "127.0.0.1", port)
                bridge = await serve_tcp_to_unix("127.0.0.1", 0, sock)
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", bridge.sockets[0].getsockname()[1]
                )
            else:
                inner = None
                bridge = await serve_unix_to_tcp(sock, "127.0.0.1", port)
                reader, writer = await asyncio.open_unix_connection(str(sock))
            writer.write(b"hello")
            await asyncio.wait_for(got.wait(), 10)
            async with bridge:
                pass
            # the client sees its connection end, and so does the upstream
            assert await asyncio.wait_for(reader.read(), 10) == b""
            await asyncio.wait_for(ended.wait(), 10)
            writer.close()
            await writer.wait_closed()
            if inner is not None:
                inner.close()
                await inner.wait_closed()

    asyncio.run(main())
