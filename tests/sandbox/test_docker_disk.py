"""The Docker backend's disk cap leaves the root writable: apt-get installs into /usr and
/var/lib/dpkg, a write past the cap fails with ENOSPC, and the cap used is recorded.

Real engine, real apt and dpkg (a package built in the test: the sandbox has no network), as
root under the sandbox's capabilities.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

from paperbench.sandbox._base import SandboxLimits
from paperbench.sandbox._disk import _mount_source, mounts_under
from paperbench.sandbox._docker import DockerBackend, DockerSandbox

from .docker_fixtures import *  # noqa: F403  (the fixtures)
from .docker_fixtures import TEST_LABELS

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]

# A package whose files go to /usr/bin and /usr/share (the image's own folders, not a volume),
# installed by apt-get from the .deb; dpkg records it under /var/lib/dpkg.
APT_INTO_USR = r"""
set -e
mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/share/pbdisk /tmp/pkg/usr/bin && cd /tmp
printf 'Package: pbdisk\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\n' \
  > pkg/DEBIAN/control
echo 'Description: t' >> pkg/DEBIAN/control
echo in-usr > pkg/usr/share/pbdisk/hi
printf '#!/bin/sh\necho pbdisk-runs\n' > pkg/usr/bin/pbdisk && chmod 755 pkg/usr/bin/pbdisk
dpkg-deb --root-owner-group --build pkg pbdisk_1.0_all.deb >/dev/null
apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=/nonexistent \
  install -y --no-install-recommends /tmp/pbdisk_1.0_all.deb 2>&1
cat /usr/share/pbdisk/hi
pbdisk
dpkg-query -W -f='${Status}\n' pbdisk
"""

FILL = "dd if=/dev/zero of=/usr/share/fill bs=1M count={mb} 2>&1; echo rc=$?"


def _install_and_fill(sb: DockerSandbox, run: Any, disk_mb: int) -> None:
    r = run(sb.exec(APT_INTO_USR, timeout=180))
    assert r.exit_code == 0, r
    out = r.stdout.splitlines()
    assert out[-3:] == ["in-usr", "pbdisk-runs", "install ok installed"], r.stdout
    assert "Read-only file system" not in r.stdout + r.stderr
    r = run(sb.exec(FILL.format(mb=disk_mb + 32), timeout=60))
    assert "No space left on device" in r.stdout and "rc=1" in r.stdout, r
    r = run(sb.exec("rm /usr/share/fill && echo freed > /usr/share/after && echo ok", timeout=30))
    assert r.stdout.strip() == "ok", r  # room again once the filler is gone


def test_apt_get_installs_into_usr_under_a_disk_cap(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=SandboxLimits(memory_mb=512, pids=128, disk_mb=96))
    assert sb.disk_cap in ("storage_opt", "loop-overlay") and sb.disk_cap_note is None
    _install_and_fill(sb, run, 96)
    if sb.disk_cap == "loop-overlay":  # everything written is on the capped image
        usage = sb.disk_usage()
        assert usage is not None and usage.total_bytes <= 96 << 20
        r = run(sb.exec("touch /new-top-level; echo rc=$?", timeout=10))
        assert "rc=1" in r.stdout and "Read-only file system" in r.stderr


def test_loop_overlay_is_unmounted_with_the_sandbox(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=SandboxLimits(disk_mb=32))
    if sb.disk_cap != "loop-overlay":
        pytest.fail(f"this engine caps with {sb.disk_cap}: the test is for loop-overlay")
    folder = sb.disk_folder
    assert folder is not None
    points = mounts_under(folder)
    assert len(points) == 2 and points[0].name == "root"  # the overlay, then the ext4 image
    loop = _mount_source(points[1])
    assert loop is not None and loop.startswith("/dev/loop")
    assert Path(f"/sys/block/{Path(loop).name}/loop/dio").read_text().strip() == "1"  # direct I/O
    r = run(sb.exec("echo x > /submission/a && cat /submission/a; readlink /etc/mtab", timeout=10))
    assert r.stdout == "x\n/proc/mounts\n", r  # /submission made, /etc/mtab as Docker has it
    run(sb.stop())
    assert not mounts_under(folder) and not folder.exists()


class _LayersElsewhere(DockerBackend):
    """An engine whose image layers this host cannot see (e.g. a remote engine)."""

    async def _image_layers(self, sb: DockerSandbox) -> tuple[list[str] | None, str]:
        return None, "the image's layers are not on this host (test)"


def test_loop_ext4_says_the_root_is_read_only(
    docker_client: Any,
    reproducer_image: str,
    run: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from paperbench.sandbox._base import SandboxSpec

    backend = _LayersElsewhere(client=docker_client)
    spec = SandboxSpec(image=reproducer_image, labels=TEST_LABELS, limits=SandboxLimits(disk_mb=32))
    with caplog.at_level(logging.WARNING, logger="paperbench.sandbox"):
        sb = run(backend.start(spec))
    try:
        assert sb.disk_cap == "loop-ext4"
        note = sb.disk_cap_note
        assert note is not None and "read-only" in note and "apt-get install fails" in note
        assert "scripts/ensure-docker.sh" in note and "--allow-uncapped-disk" in note
        assert note in caplog.text
        r = run(sb.exec("touch /usr/bin/x; echo rc=$?; echo y > /tmp/y && cat /tmp/y", timeout=10))
        assert "rc=1" in r.stdout and "y" in r.stdout and "Read-only" in r.stderr, r
    finally:
        run(sb.stop())


def test_ensure_docker_a_second_run_changes_nothing() -> None:
    """The engine runs (the session's fixtures started it): the script only reports."""
    script = ROOT / "scripts" / "ensure-docker.sh"
    runs = [
        subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
        for _ in range(2)
    ]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
        assert "Docker engine answers" in proc.stderr
        for change in ("starting dockerd", "restarting", "stopping", "installing"):
            assert change not in proc.stderr, proc.stderr
    assert runs[0].stderr == runs[1].stderr


@pytest.mark.parametrize("layers_here", [True, False], ids=["loop-overlay", "loop-ext4"])
def test_the_reproduction_records_the_cap_and_a_read_only_root(
    docker_client: Any, reproducer_image: str, run: Any, tmp_path: Path, layers_here: bool
) -> None:
    """A reproduce.sh that writes /usr: it works under a writable root; under loop-ext4 it
    fails, and metadata.json says why and how to fix it."""
    from paperbench.reproduce import ReproduceConfig
    from paperbench.reproduce._stage import _Run
    from paperbench.sandbox._base import NetworkPolicy, SandboxSpec

    staged = tmp_path / "submission"
    staged.mkdir()
    (staged / "reproduce.sh").write_text("touch /usr/share/from-reproduce && echo wrote-usr\n")
    config = ReproduceConfig(image=reproducer_image, network=NetworkPolicy.NONE)
    backend = (
        DockerBackend(client=docker_client)
        if layers_here
        else _LayersElsewhere(client=docker_client)
    )
    spec = SandboxSpec(image=reproducer_image, labels=TEST_LABELS, limits=SandboxLimits(disk_mb=64))
    repro = _Run(staged, tmp_path / "out", config)
    record, _ = run(repro.attempt(backend, spec, staged, tmp_path / "executed"))
    meta = repro.meta
    if layers_here:
        assert meta.disk_cap in ("storage_opt", "loop-overlay") and not meta.hints
        assert record.exit_code == 0 and "wrote-usr" in record.log_tail, record
    else:
        assert meta.disk_cap == "loop-ext4" and record.exit_code != 0
        assert "Read-only file system" in record.log_tail, record
        (hint,) = meta.hints
        assert "read-only" in hint and "scripts/ensure-docker.sh" in hint
        assert "read-only" in meta.model_dump_json()  # what metadata.json holds
