"""``network=filtered`` on the local backend beyond the conformance suite: what start and stop
leave behind, a bridge that dies, plain mode's advisory proxy, start errors.

Every server here listens on 127.0.0.1; every sandbox is stopped in ``finally``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
from pathlib import Path

import pytest

from paperbench.errors import EgressProxyError
from paperbench.sandbox import LocalBackend, LocalSandbox, SandboxSpec
from paperbench.sandbox import _local_egress as local_egress
from paperbench.sandbox._egress import ensure_egress_python

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="filtered under bubblewrap needs bwrap and root",
)


@pytest.fixture(scope="module")
def egress_python() -> Path:
    return asyncio.run(ensure_egress_python())


async def _start(
    root: Path, egress_python: Path, isolation: str = "bwrap", **spec: object
) -> LocalSandbox:
    fields: dict[str, object] = {
        "image": "host",
        "workdir": "/home/submission",
        "network": "filtered",
        "network_log": root.parent / "network.jsonl",
    }
    fields.update(spec)
    gateway = local_egress.LocalEgressGateway(python=egress_python, startup_timeout=30)
    backend = LocalBackend(root, isolation=isolation, egress=gateway)  # type: ignore[arg-type]
    return await backend.start(SandboxSpec.model_validate(fields))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in {"Z", "X"}


_CONNECT = (
    "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',{port}),timeout=2);"
    ' print(s.recv(4).decode())"'
)


@needs_bwrap
def test_stop_ends_the_bridge_and_the_proxy(egress_python: Path, tmp_path: Path) -> None:
    async def main() -> None:
        # A long root: the socket path would not fit a unix socket, so it gets a short folder.
        root = tmp_path / ("long-" * 12) / "sandboxes"
        sb = await _start(root, egress_python)
        try:
            egress = sb._egress
            assert egress is not None and egress.keeper is not None
            keeper, proxy = egress.keeper.pid, egress.proxy
            assert proxy._proc is not None
            proxy_pid = proxy._proc.pid
            socket_dir = egress.socket_dir
            assert socket_dir is not None and (socket_dir / "egress.sock").is_socket()
            r = await sb.exec("echo $HTTPS_PROXY; cat /proc/net/tcp | grep -c ':0C38 '", timeout=30)
            assert r.stdout.split() == ["http://127.0.0.1:3128", "1"], r.stderr
        finally:
            await sb.stop()
        assert _gone(keeper) and _gone(proxy_pid)
        assert not proxy.running
        assert not socket_dir.exists()
        assert not sb.workspace.exists()
        assert sb._egress is None

    asyncio.run(main())


@needs_bwrap
def test_a_dead_bridge_fails_closed(
    egress_python: Path,
    tmp_path: Path,
    loopback_server: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        sb = await _start(tmp_path / "ws", egress_python)
        try:
            assert sb._egress is not None and sb._egress.keeper is not None
            keeper = sb._egress.keeper
            os.killpg(keeper.pid, signal.SIGKILL)
            await asyncio.wait_for(keeper.wait(), 10)
            with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
                r = await sb.exec(_CONNECT.format(port=loopback_server), timeout=30)
            assert r.exit_code != 0 and "pong" not in r.stdout
            assert "egress bridge" in caplog.text
            r = await sb.exec(
                "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 3128), 2)\"",
                timeout=30,
            )
            assert r.exit_code != 0
        finally:
            await sb.stop()

    asyncio.run(main())


def test_plain_mode_sets_the_proxy_and_warns_that_it_is_advisory(
    egress_python: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(local_egress, "_warned_plain", False)

    async def main() -> None:
        with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
            sb = await _start(tmp_path / "ws", egress_python, isolation="none")
        try:
            assert sb._egress is not None
            url = sb._egress.endpoint.url
            r = await sb.exec('echo "$HTTPS_PROXY"; head -c 27 "$SSL_CERT_FILE"', timeout=30)
            assert r.stdout.splitlines() == [url, "-----BEGIN CERTIFICATE-----"]
        finally:
            await sb.stop()

    asyncio.run(main())
    assert "ADVISORY ONLY" in caplog.text


def test_bad_blacklist_is_one_clear_error_and_leaves_nothing(
    egress_python: Path, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    with pytest.raises(EgressProxyError, match="blacklist"):
        asyncio.run(_start(root, egress_python, isolation="none", blacklist=["not a url"]))
    assert list(root.iterdir()) == []


def test_a_long_temporary_folder_still_gets_a_socket_path_that_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace under a long TMPDIR: the proxy's socket goes to a short folder of its own,
    which must not be under that same TMPDIR (its socket path would not fit either)."""
    long_tmp = tmp_path / ("d" * 60) / ("e" * 60)
    long_tmp.mkdir(parents=True)
    monkeypatch.setattr("tempfile.tempdir", str(long_tmp))
    folder = long_tmp / "workspace" / "egress"
    folder.mkdir(parents=True)
    sock_dir = local_egress._socket_dir(folder)
    try:
        assert sock_dir != folder
        assert len(os.fsencode(sock_dir / "egress.sock")) <= local_egress._MAX_SOCKET_PATH
    finally:
        local_egress._remove_socket_dir(sock_dir, folder)
    assert not sock_dir.exists()
