"""Local-backend specifics beyond the conformance suite: links out of the workspace, the
plain-mode warning, limits, the backend chooser and the package's exported names."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import paperbench.sandbox as sandbox_pkg
from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox import (
    LocalBackend,
    LocalSandbox,
    SandboxConfig,
    SandboxSpec,
    get_backend,
)


async def _start(root: Path, isolation: str = "auto", **spec: object) -> LocalSandbox:
    fields: dict[str, object] = {"image": "host", "workdir": "/home/submission"}
    fields.update(spec)
    backend = LocalBackend(root, isolation=isolation)  # type: ignore[arg-type]
    return await backend.start(SandboxSpec.model_validate(fields))


def test_links_planted_in_the_sandbox_never_reach_the_host(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    outside = tmp_path / "host-dir"
    outside.mkdir()

    async def main() -> None:
        sb = await _start(tmp_path / "ws")
        try:
            # The sandbox plants links to host paths it cannot see itself.
            (sb.fs / "home" / "submission" / "leak").symlink_to(secret)
            (sb.fs / "home" / "submission" / "door").symlink_to(outside)
            # Reads never follow them: the link reads as missing.
            with pytest.raises(SandboxError, match="no such file"):
                await sb.read_file("/home/submission/leak")
            with pytest.raises(SandboxError, match="no such file"):
                await sb.download("/home/submission/leak", tmp_path / "got")
            # Writes remove the link in the way and write inside the workspace.
            await sb.write_file("/home/submission/door/planted", b"x")
            await sb.upload(secret, "/home/submission/door/planted2")
            door = sb.fs / "home" / "submission" / "door"
            assert door.is_dir() and not door.is_symlink()
            assert sorted(p.name for p in door.iterdir()) == ["planted", "planted2"]
            await sb.write_file("/home/submission/leak", b"mine")
            assert not (sb.fs / "home" / "submission" / "leak").is_symlink()
            with pytest.raises(SandboxError, match="read-only"):
                await sb.write_file("/etc/paperbench-probe", b"x")
            with pytest.raises(SandboxError, match="absolute"):
                await sb.read_file("relative/path")
        finally:
            await sb.stop()

    asyncio.run(main())
    assert list(outside.iterdir()) == []
    assert secret.read_text() == "host only"
    assert not (tmp_path / "got").exists()


def _path_without(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only python3 and bash: no bwrap, no mkfs.ext4 (``tools`` are added)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("python3", "bash", *tools):
        found = shutil.which(name)
        assert found is not None
        (bindir / name).symlink_to(found)
    return str(bindir)


def test_none_isolation_is_asked_for_and_warned_per_backend(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        backend = LocalBackend(tmp_path, isolation="none")
        assert backend.isolation_kind == "none"
        for _ in range(2):
            sb = await backend.start(SandboxSpec(image="host", workdir="/home/submission"))
            r = await sb.exec('echo "$PAPERBENCH_SANDBOX_ROOT"', timeout=30)
            assert r.stdout.strip() == str(sb.fs)
            await sb.stop()

    with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
        asyncio.run(main())
    warnings = [r for r in caplog.records if "WITHOUT bubblewrap" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


def test_auto_without_bubblewrap_is_refused_with_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", _path_without(tmp_path))
    with pytest.raises(SandboxUnavailableError) as info:
        LocalBackend(tmp_path)
    message = str(info.value)
    assert "install bubblewrap" in message and "--allow-unsandboxed" in message
    assert "scripts/ensure-docker.sh" in message
    # auto with no Docker engine either: the same refusal, never plain host subprocesses.
    cfg = SandboxConfig(docker_base_url="unix:///nonexistent/docker.sock", local_root=tmp_path)
    with pytest.raises(SandboxUnavailableError, match=r"no Docker engine answers.*bubblewrap"):
        asyncio.run(get_backend("auto", config=cfg))


def test_auto_without_bubblewrap_when_allowed_warns_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", _path_without(tmp_path))
    with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
        backend = LocalBackend(tmp_path / "ws", allow_unsandboxed=True)
    assert backend.isolation == "none" and backend.isolation_kind == "none"
    assert "--allow-unsandboxed" in backend.isolation_reason
    assert any("WITHOUT bubblewrap" in r.getMessage() for r in caplog.records)


def test_disk_cap_stops_an_endless_writer_in_bubblewrap(tmp_path: Path) -> None:
    """A script that writes without end stops at the cap, in total over many files; the
    host's free space goes down by no more than the cap."""

    async def main() -> None:
        free_before = shutil.disk_usage(tmp_path).free
        sb = await _start(tmp_path, isolation="bwrap", limits={"disk_mb": 32})
        try:
            assert sb.disk_cap == "loop-ext4" and sb.isolation == "bwrap"
            r = await sb.exec(
                "i=0; while head -c 4000000 /dev/zero > f$i; do i=$((i+1)); done; "
                "head -c 4000000 /dev/zero > /tmp/more; echo rc=$? files=$i; du -sm . | cut -f1",
                timeout=60,
            )
            assert "No space left on device" in r.stderr
            used_mb = int(r.stdout.split()[-1])
            assert 20 <= used_mb <= 32, r.stdout
            usage = sb.disk_usage()
            assert usage is not None and usage.full
            assert free_before - shutil.disk_usage(tmp_path).free <= 40 << 20
        finally:
            await sb.stop()
        assert not sb.workspace.exists()
        assert str(sb.workspace) not in Path("/proc/self/mountinfo").read_text()

    asyncio.run(main())


def test_disk_cap_refused_when_it_cannot_be_made_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PATH", _path_without(tmp_path, "bwrap", "setpriv"))

    async def main() -> None:
        with pytest.raises(SandboxUnavailableError, match=r"mkfs\.ext4.*--allow-uncapped-disk"):
            await _start(tmp_path / "ws", limits={"disk_mb": 32})
        assert list((tmp_path / "ws").iterdir()) == []  # nothing left behind
        sb = await _start(tmp_path / "ws", limits={"disk_mb": 1, "allow_uncapped_disk": True})
        try:
            assert sb.disk_cap == "rlimit-fsize" and sb.disk_usage() is None
            r = await sb.exec("head -c 3000000 /dev/zero > big; echo rc=$?", timeout=30)
            assert "rc=0" not in r.stdout  # each file is still capped
        finally:
            await sb.stop()

    with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
        asyncio.run(main())
    assert any("NOT capped" in r.getMessage() for r in caplog.records)


def test_commands_run_as_a_uid_of_the_sandbox_and_the_sandbox_user_is_not_root_inside(
    tmp_path: Path,
) -> None:
    """Root inside a user namespace by default; ``user="sandbox"`` is uid 1000 there too. On
    the host each sandbox's commands are a non-root uid of its own, which owns the files they
    write and those paperbench writes in for them."""
    if os.geteuid() != 0:
        pytest.skip("the per-sandbox uid is set up by a root paperbench")

    async def main() -> None:
        root_sb = await _start(tmp_path / "ws")
        user_sb = await _start(tmp_path / "ws2", user="sandbox")
        try:
            assert root_sb.user is not None and user_sb.user is not None
            assert root_sb.user.uid != user_sb.user.uid and root_sb.user.uid >= 1_000_000
            await root_sb.write_file("/home/submission/given.txt", b"x")
            r = await root_sb.exec(
                "id -u; echo more >> given.txt && touch made.txt && echo ok; "
                "grep CapEff /proc/self/status",
                timeout=30,
            )
            assert r.stdout.splitlines()[:2] == ["0", "ok"], r
            assert r.stdout.split()[-1] == "0000000000000000"
            made = root_sb.fs / "home" / "submission" / "made.txt"
            given = root_sb.fs / "home" / "submission" / "given.txt"
            assert made.stat().st_uid == root_sb.user.uid == given.stat().st_uid
            r = await user_sb.exec("id -u; touch /home/submission/x && echo ok", timeout=30)
            assert r.stdout.split() == ["1000", "ok"], r
        finally:
            await root_sb.stop()
            await user_sb.stop()

    asyncio.run(main())


def test_extra_ca_bundle_is_trusted_inside(tmp_path: Path) -> None:
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n")

    async def main() -> None:
        sb = await _start(tmp_path / "ws", ca_bundle=ca)
        try:
            r = await sb.exec('tail -c 200 "$SSL_CERT_FILE"; echo "$PIP_CERT"', timeout=30)
            assert "MIIBfake" in r.stdout
        finally:
            await sb.stop()

    asyncio.run(main())


# --------------------------------------------------------------------------- chooser


def test_get_backend_local_and_auto_fallback(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        assert (await get_backend("local")).name == "local"
        # No engine answers at this address: auto falls back to local with bubblewrap,
        # said as a warning and recorded as the reason.
        cfg = SandboxConfig(docker_base_url="unix:///nonexistent/docker.sock")
        with caplog.at_level(logging.INFO, logger="paperbench.sandbox"):
            backend = await get_backend("auto", config=cfg)
        assert backend.name == "local" and backend.isolation_kind == "bubblewrap"
        assert "no Docker engine answers" in backend.isolation_reason
        said = [r for r in caplog.records if "no Docker engine answers" in r.getMessage()]
        assert said and all(r.levelno == logging.WARNING for r in said)
        with pytest.raises(SandboxUnavailableError, match=r"--sandbox local"):
            await get_backend("docker", config=cfg)

    asyncio.run(main())


def test_sandbox_config_is_plain_data_for_other_processes(tmp_path: Path) -> None:
    cfg = SandboxConfig(backend="local", local_root=tmp_path, local_isolation="none")
    again = pickle.loads(pickle.dumps(cfg))
    assert again == SandboxConfig.model_validate_json(cfg.model_dump_json()) == cfg
    backend = asyncio.run(again.build())
    assert isinstance(backend, LocalBackend) and backend.root == tmp_path
    with pytest.raises(ValueError, match="extra"):
        SandboxConfig.model_validate({"backend": "local", "typo": 1})


def test_package_exports_and_light_import() -> None:
    assert len(set(sandbox_pkg.__all__)) == len(sandbox_pkg.__all__)
    assert {"Sandbox", "SandboxSpec", "get_backend", "EgressProxy", "read_blacklist"} <= set(
        sandbox_pkg.__all__
    )
    assert "DockerBackend" in sandbox_pkg.__all__
    code = (
        "import sys, paperbench.sandbox; "
        "print(any(m in ('docker', 'paperbench.sandbox._docker') or m.startswith('docker.') "
        "for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
