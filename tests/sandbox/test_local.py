"""Local-backend specifics beyond the conformance suite: links out of the workspace, the
plain-mode warning, limits, the backend chooser and the package's exported names."""

from __future__ import annotations

import asyncio
import logging
import pickle
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
    _local,
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
            for call in (
                sb.read_file("/home/submission/leak"),
                sb.download("/home/submission/leak", tmp_path / "got"),
                sb.write_file("/home/submission/door/planted", b"x"),
                sb.upload(secret, "/home/submission/door/planted2"),
            ):
                with pytest.raises(SandboxError, match="link leads out"):
                    await call
            with pytest.raises(SandboxError, match="read-only"):
                await sb.write_file("/etc/paperbench-probe", b"x")
            with pytest.raises(SandboxError, match="absolute"):
                await sb.read_file("relative/path")
        finally:
            await sb.stop()

    asyncio.run(main())
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "got").exists()


def test_plain_mode_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _local._warned_plain = False

    async def main() -> None:
        for _ in range(2):
            sb = await _start(tmp_path, isolation="none")
            r = await sb.exec('echo "$PAPERBENCH_SANDBOX_ROOT"', timeout=30)
            assert r.stdout.strip() == str(sb.fs)
            await sb.stop()

    with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
        asyncio.run(main())
    warnings = [r for r in caplog.records if "WITHOUT bubblewrap" in r.getMessage()]
    assert len(warnings) == 1


def test_file_size_limit_applies(tmp_path: Path) -> None:
    async def main() -> None:
        sb = await _start(tmp_path, limits={"disk_mb": 1})
        try:
            r = await sb.exec("head -c 3000000 /dev/zero > big; echo rc=$?", timeout=30)
            assert "rc=0" not in r.stdout
            assert (sb.fs / "home" / "submission" / "big").stat().st_size <= 1 << 20
        finally:
            await sb.stop()

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


def test_get_backend_local_and_auto_fallback() -> None:
    async def main() -> None:
        assert (await get_backend("local")).name == "local"
        # No engine answers at this address: auto falls back to local.
        cfg = SandboxConfig(docker_base_url="unix:///nonexistent/docker.sock")
        assert (await get_backend("auto", config=cfg)).name == "local"
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
