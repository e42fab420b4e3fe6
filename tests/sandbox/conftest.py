"""Fixtures for the sandbox conformance suite: one parametrised backend, started per test.

Each test body is an ``async def body(sb)`` run by ``in_sandbox(body)``: the sandbox is started
and stopped inside the same event loop (``asyncio.run`` per test), and always stopped, also when
the test fails. ``in_sandbox(body, egress=EgressOptions(...))`` gives the backend an egress
proxy set up for the offline test servers (``egress_helpers``).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from paperbench.sandbox import LocalBackend, Sandbox, SandboxBackend, SandboxSpec
from paperbench.sandbox._egress import ensure_egress_python
from paperbench.sandbox._local_egress import LocalEgressGateway
from tests.sandbox.egress_helpers import RESOLVE, Servers, make_pki, serve

FAKE_KEY_NAME = "PAPERBENCH_TEST_FAKE_OPENAI_API_KEY"
FAKE_KEY_VALUE = "sk-fake-host-secret-0123456789"

# the Docker backend's session fixtures: engine, images
from tests.sandbox.docker_fixtures import (  # noqa: E402, F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)


@dataclass(frozen=True)
class EgressOptions:
    """What a test gives a backend's egress proxy, whatever the backend."""

    ca_bundle: Path
    """The test CA, trusted upstream (the test servers' certificates)."""
    resolve: dict[str, str]
    """Test host names → 127.0.0.1."""
    python: Path
    """An interpreter with mitmproxy."""


@dataclass
class BackendCase:
    """One backend under test: its id, how to build it, and how to check it cleaned up."""

    id: str
    build: Callable[[Path, EgressOptions | None], SandboxBackend]
    image: str | None = None
    """None: the local backends ignore the image; docker uses the reproducer image."""

    def cleaned_up(self, sb: Sandbox) -> bool:
        workspace = getattr(sb, "workspace", None)
        if isinstance(workspace, Path):
            cgroup = getattr(sb, "_cgroup", None)
            cgroup_gone = cgroup is None or not any(d.exists() for d in cgroup.dirs.values())
            return not workspace.exists() and cgroup_gone
        return True  # the docker backend checks its containers in its own tests


def _local(isolation: str) -> Callable[[Path, EgressOptions | None], SandboxBackend]:
    def build(root: Path, egress: EgressOptions | None) -> SandboxBackend:
        gateway = None
        if egress is not None:
            gateway = LocalEgressGateway(
                ca_bundle=egress.ca_bundle, resolve=egress.resolve, python=egress.python
            )
        return LocalBackend(root, isolation=isolation, egress=gateway)  # type: ignore[arg-type]

    return build


def _docker(_: Path, __: EgressOptions | None) -> SandboxBackend:
    raise AssertionError("built in in_sandbox with the session's docker client")


BACKEND_PARAMS = [
    pytest.param(BackendCase("local-bwrap", _local("bwrap")), id="local-bwrap"),
    pytest.param(BackendCase("local-none", _local("none")), id="local-none"),
    # marked `docker`: fails loudly when no engine answers (never skipped)
    pytest.param(BackendCase("docker", _docker), id="docker", marks=pytest.mark.docker),
]


@pytest.fixture(params=BACKEND_PARAMS)
def backend_case(request: pytest.FixtureRequest) -> BackendCase:
    case: BackendCase = request.param
    if case.id == "local-bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this machine (apt-get install bubblewrap)")
    return case


InSandbox = Callable[..., Any]


@pytest.fixture
def in_sandbox(
    backend_case: BackendCase,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> InSandbox:
    """``in_sandbox(body, **spec_fields)`` starts a sandbox, awaits ``body(sb)``, stops it.

    A fake API key is set in the host environment first: no backend may pass it through.
    """
    monkeypatch.setenv(FAKE_KEY_NAME, FAKE_KEY_VALUE)
    root = tmp_path / "sandboxes"
    image = backend_case.image or "host"
    build = backend_case.build
    if backend_case.id == "docker":
        from paperbench.sandbox._docker import DockerBackend

        image = request.getfixturevalue("reproducer_image")
        client = request.getfixturevalue("docker_client")

        def build(_: Path, egress: EgressOptions | None) -> SandboxBackend:
            if egress is None:
                return DockerBackend(client=client)
            from paperbench.sandbox._egress_gateway import DockerEgressGateway

            gateway = DockerEgressGateway(
                client.api, ca_bundle=egress.ca_bundle, resolve=egress.resolve, python=egress.python
            )
            return DockerBackend(client=client, egress=gateway)

        # Every container a test creates carries the session label and is swept afterwards,
        # also when the test fails (DESIGN.md §7).
        request.addfinalizer(lambda: sweep(client))

    def run(
        body: Callable[[Sandbox], Awaitable[Any]],
        *,
        egress: EgressOptions | None = None,
        **spec_fields: Any,
    ) -> Any:
        fields: dict[str, Any] = {"image": image, "workdir": "/home/submission"}
        if backend_case.id == "docker":
            fields["labels"] = dict(TEST_LABELS)
        fields.update(spec_fields)
        spec = SandboxSpec(**fields)

        async def main() -> Any:
            sb = await build(root, egress).start(spec)
            try:
                return await body(sb)
            finally:
                await sb.stop()

        return asyncio.run(main())

    return run


@pytest.fixture
def loopback_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers each connection with ``pong`` (bounded)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"pong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    srv.close()


@dataclass
class EgressWorld:
    """Offline stand-ins for the internet and what a backend's egress proxy needs to reach
    them."""

    servers: Servers
    options: EgressOptions


@pytest.fixture(scope="module")
def egress_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressWorld]:
    """HTTPS servers on 127.0.0.1 standing in for allowed.test and github.com, and the options
    that make a backend's egress proxy reach them (the first run creates the egress venv)."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    python = asyncio.run(ensure_egress_python())
    with serve(pki) as servers:
        yield EgressWorld(servers, EgressOptions(pki.ca, RESOLVE, python))
