"""Host services through the egress proxy: a sandbox under ``network=filtered`` reaches one
service of the host (the model gateway of an external agent) by its name and port, streamed,
and nothing else of the host: not the same name on another port, not over TLS, not the
service's own address. First through the proxy alone, then from a real Docker sandbox."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from paperbench.sandbox import SandboxConfig
from paperbench.sandbox._base import HostService, NetworkPolicy, SandboxSpec
from paperbench.sandbox._egress import (
    EgressProxy,
    EgressSettings,
    ensure_egress_python,
    read_network_log,
)

from .docker_fixtures import TEST_LABELS, reproducer_image  # noqa: F401

pytestmark = pytest.mark.anyio
NAME = "model-gateway.test"
PORT = 8123
CHUNKS = 3
GAP_S = 0.4


class _Events(BaseHTTPRequestHandler):
    """Answers every GET with CHUNKS server-sent events, GAP_S apart."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for n in range(CHUNKS):
            data = f"data: event {n}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            time.sleep(GAP_S)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def service() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Events)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _service(server: ThreadingHTTPServer) -> HostService:
    return HostService(name=NAME, port=PORT, target_port=server.server_address[1])


@pytest.fixture(scope="module")
async def proxy(
    service: ThreadingHTTPServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EgressProxy]:
    log = tmp_path_factory.mktemp("egress") / "network.jsonl"
    settings = EgressSettings(python=await ensure_egress_python(), services=[_service(service)])
    proxy = EgressProxy([], log, settings)
    try:
        await proxy.start()
        yield proxy
    finally:
        await proxy.stop()


def _get(proxy_url: str, url: str) -> tuple[int, list[tuple[float, bytes]]]:
    """GET ``url`` through the proxy (plain HTTP, absolute form); each line of the body with
    the time it arrived."""
    host, port = proxy_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        target = url.removeprefix("http://").split("/", 1)[0]
        sock.sendall(f"GET {url} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        reader = sock.makefile("rb")
        status = int(reader.readline().split()[1])
        lines = []
        while line := reader.readline():
            lines.append((time.monotonic(), line))
    return status, lines


async def test_a_service_is_reached_by_name_and_streamed(
    proxy: EgressProxy, service: ThreadingHTTPServer
) -> None:
    assert proxy.endpoint is not None
    started = time.monotonic()
    status, lines = await asyncio.to_thread(_get, proxy.endpoint.url, f"{_service(service).url}/v1")
    assert status == 200
    events = [(t, line) for t, line in lines if line.startswith(b"data: ")]
    assert [line for _, line in events] == [f"data: event {n}\n".encode() for n in range(CHUNKS)]
    # the first event came before the last was sent: nothing waited for the end
    assert events[0][0] - started < GAP_S * (CHUNKS - 1) - 0.2
    assert events[-1][0] - events[0][0] >= GAP_S * (CHUNKS - 1) - 0.1
    assert "/v1" in service.seen  # type: ignore[attr-defined]
    entry = next(e for e in read_network_log(proxy.endpoint.log_path) if e.url.endswith("/v1"))
    assert (entry.verdict, entry.rule, entry.status) == ("allowed", "host_service", 200)


async def test_nothing_else_of_the_host_is_reached(
    proxy: EgressProxy, service: ThreadingHTTPServer
) -> None:
    assert proxy.endpoint is not None
    before = list(service.seen)  # type: ignore[attr-defined]
    real = service.server_address[1]
    for url in (
        f"http://{NAME}:{PORT + 1}/other-port",  # the name, another port
        f"http://127.0.0.1:{real}/direct",  # the service's own address
        f"http://localhost:{real}/direct",
    ):
        status, _ = await asyncio.to_thread(_get, proxy.endpoint.url, url)
        assert status == 403, url
    # TLS to the name (a CONNECT) is refused too
    status, _ = await asyncio.to_thread(_connect, proxy.endpoint.url, f"{NAME}:{PORT}")
    assert status == 403
    assert service.seen == before  # type: ignore[attr-defined]


def _connect(proxy_url: str, target: str) -> tuple[int, bytes]:
    host, port = proxy_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        data = sock.recv(4096)
    return int(data.split()[1]), data


def test_a_service_needs_the_filtered_network() -> None:
    service = HostService(name=NAME, port=PORT, target_port=9)
    with pytest.raises(ValueError, match="need network=filtered"):
        SandboxSpec(image="x", network=NetworkPolicy.NONE, host_services=(service,))
    with pytest.raises(ValueError, match="pattern"):
        HostService(name="Not A Name", port=PORT, target_port=9)


@pytest.mark.parametrize("backend", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_a_sandbox_reaches_the_service_and_not_the_host(
    backend: str, service: ThreadingHTTPServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    image = request.getfixturevalue("reproducer_image") if backend == "docker" else "local"

    async def go() -> tuple[str, str]:
        sandboxes = await SandboxConfig(backend=backend).build()  # type: ignore[arg-type]
        spec = SandboxSpec(
            image=image,
            network=NetworkPolicy.FILTERED,
            host_services=(_service(service),),
            network_log=tmp_path / "network.jsonl",
            labels=TEST_LABELS,
        )
        sb = await sandboxes.start(spec)
        try:
            ok = await sb.exec(f"curl -sS -N {_service(service).url}/from-{backend}", timeout=30)
            real = service.server_address[1]
            # the service's real port at the proxy's address (the host's, on Docker's sandbox
            # network; the sandbox's own loopback, locally), and the name on another port
            other = await sb.exec(
                "gw=${HTTP_PROXY#http://}; gw=${gw%%:*}; "
                f"curl -s -w '%{{http_code}}' --max-time 20 "
                f"-o /dev/null http://$gw:{real}/x -o /dev/null http://{NAME}:{PORT + 1}/y; echo",
                timeout=60,
            )
        finally:
            await sb.stop()
        return ok.stdout, other.stdout

    ok, other = asyncio.run(go())
    assert ok.count("data: event") == CHUNKS
    assert f"/from-{backend}" in service.seen  # type: ignore[attr-defined]
    direct, by_name = other.strip()[:3], other.strip()[3:]
    assert direct in ("403", "000"), other  # refused by the proxy, or no route at all
    assert by_name == "403", other
