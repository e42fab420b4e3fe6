"""The Docker backend against the real engine (and its pure parts without one).

Hostile scripts run only inside containers with pids, memory and disk limits (DESIGN.md §7):
never on the host. Every container, volume and network a test creates carries the session
label and is removed by the fixtures, also on failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox import _docker_labels as L
from paperbench.sandbox._base import (
    GpuRequest,
    NetworkPolicy,
    SandboxLimits,
    SandboxSpec,
    cap_output,
)
from paperbench.sandbox._capture import HeadTail
from paperbench.sandbox._docker import (
    CAPABILITIES,
    DockerBackend,
    connect,
    device_requests,
    host_config_args,
    sandbox_env,
)
from paperbench.sandbox._gc import find_orphans, reap
from paperbench.sandbox._images import (
    DEFAULT_IMAGES,
    ImageOptions,
    debian_mirror,
    ensure_images,
)
from paperbench.sandbox._local_gc import WORKSPACE_PREFIX, reap_local_orphans
from paperbench.sandbox._seccomp import DENIED, DOCKER_DEFAULT, docker_profile

from .docker_fixtures import *  # noqa: F403  (the fixtures)
from .docker_fixtures import SESSION_ID, SESSION_LABEL, TEST_LABELS, sweep

HOSTILE = SandboxLimits(memory_mb=256, pids=64, cpus=1.0, disk_mb=64)
CAP_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "FOWNER": 3,
    "FSETID": 4,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
}
"""The capabilities a sandbox keeps, and their bits in /proc/<pid>/status."""

PRIVILEGED_ACTS = r"""
import errno, json, os, socket, stat
out = {}
def act(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
act("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
act("mknod", lambda: os.mknod("/tmp/null2", 0o600 | stat.S_IFCHR, os.makedev(1, 3)))
act("chroot", lambda: os.chroot("/tmp"))
print(json.dumps(out))
"""

# System calls our profile refuses and Docker's default allows (io_uring on Docker 20.10; the
# rest as the local backend refuses them), and ptrace of a child, which both allow.
SYSCALLS = r"""
import ctypes, errno, json, os, struct
libc = ctypes.CDLL(None, use_errno=True)
def said(rc):
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
out = {}
params = ctypes.create_string_buffer(120)
out["io_uring_setup"] = said(libc.syscall(425, 1, params))  # 425 on x86_64 and arm64 alike
handle = ctypes.create_string_buffer(struct.pack("I", 128) + bytes(132))
mount_id = ctypes.c_int()
out["name_to_handle_at"] = said(
    libc.name_to_handle_at(-100, b"/dev/shm", handle, ctypes.byref(mount_id), 0)
)
src, dst = ctypes.create_string_buffer(b"secret!"), ctypes.create_string_buffer(8)
mine = IoVec(ctypes.cast(dst, ctypes.c_void_p), 8)
theirs = IoVec(ctypes.cast(src, ctypes.c_void_p), 8)
out["process_vm_readv"] = said(
    libc.process_vm_readv(os.getpid(), ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
)
out["adjtimex"] = said(libc.adjtimex(ctypes.create_string_buffer(256)))  # a read: modes 0
out["keyctl"] = said(libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0, -1, 0))
child = os.fork()
if child == 0:
    os._exit(0 if libc.ptrace(0, 0, None, None) == 0 else 1)  # PTRACE_TRACEME
out["ptrace of a child"] = "ok" if os.waitpid(child, 0)[1] == 0 else "refused"
print(json.dumps(out))
"""

# A package from a local apt repository (apt's fetchers drop to _apt: setuid/setgid) and a
# wheel with pip, offline, as root under the sandbox's capabilities.
APT_AND_PIP = r"""
set -e
mkdir -p /tmp/repo/pbtest/DEBIAN /tmp/repo/pbtest/usr/local/share/pbtest && cd /tmp/repo
printf 'Package: pbtest\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\n' \
  > pbtest/DEBIAN/control
echo 'Description: t' >> pbtest/DEBIAN/control
echo from-apt > pbtest/usr/local/share/pbtest/hi
dpkg-deb --root-owner-group --build pbtest pbtest_1.0_all.deb >/dev/null
{ cat pbtest/DEBIAN/control; echo "Filename: ./pbtest_1.0_all.deb"
  echo "Size: $(stat -c %s pbtest_1.0_all.deb)"
  echo "SHA256: $(sha256sum pbtest_1.0_all.deb | cut -d' ' -f1)"; } > Packages
chmod -R a+rX /tmp/repo
echo 'deb [trusted=yes] file:/tmp/repo ./' > /tmp/pbtest.list
O="-o Dir::Etc::SourceList=/tmp/pbtest.list -o Dir::Etc::SourceParts=/nonexistent"
apt-get $O update 2>&1
apt-get $O install -y --no-install-recommends pbtest 2>&1
cat /usr/local/share/pbtest/hi
python3 - <<'PY'
import base64, hashlib, zipfile
files = {
    "pbw/__init__.py": b"X = 'from-pip'\n",
    "pbw-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pbw\nVersion: 1.0\n",
    "pbw-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
    b"Tag: py3-none-any\n",
}
record = [
    f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
    f"{len(d)}" for n, d in files.items()
] + ["pbw-1.0.dist-info/RECORD,,"]
with zipfile.ZipFile("/tmp/pbw-1.0-py3-none-any.whl", "w") as z:
    for n, d in files.items():
        z.writestr(n, d)
    z.writestr("pbw-1.0.dist-info/RECORD", "\n".join(record) + "\n")
PY
pip install --no-index /tmp/pbw-1.0-py3-none-any.whl 2>&1
cd / && python3 -c 'import pbw; print(pbw.X)'
"""

# --------------------------------------------------------------------------- no engine needed


def test_the_cap_counts_bytes_in_the_singular_and_plural() -> None:
    assert cap_output(b"abc", 2) == ("a\n[... 1 byte truncated by paperbench ...]\nc", True)
    assert cap_output(b"abcd", 2) == ("a\n[... 2 bytes truncated by paperbench ...]\nd", True)


@pytest.mark.parametrize("limit", [0, 1, 2, 3, 7, 10, 100, 1001, 4096])
def test_streamed_cap_is_cap_output(limit: int) -> None:
    """What a command's output streamed in chunks of any size keeps is ``cap_output`` of it."""
    rng = random.Random(limit)
    samples = [
        b"",
        b"short",
        "héllo wörld ✓ 日本語 ".encode() * 300,
        bytes(rng.randrange(256) for _ in range(5000)),
        b"x" * limit,
        b"y" * (limit + 1),
    ]
    for data in samples:
        cap = HeadTail(limit)
        i = 0
        while i < len(data):
            n = rng.randint(1, 700)
            cap.feed(data[i : i + n])
            i += n
        assert cap.text() == cap_output(data, limit), (limit, len(data))


def test_no_engine_is_one_line_with_the_fix() -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        connect("unix:///nonexistent/docker.sock")
    msg = str(info.value)
    assert "\n" not in msg
    assert "unix:///nonexistent/docker.sock" in msg and "scripts/ensure-docker.sh" in msg


def test_gpu_device_requests_without_a_gpu() -> None:
    """No GPU on this machine: check the arguments the engine would receive."""
    import docker

    assert device_requests(None) == []
    api = docker.APIClient(base_url="unix:///nonexistent.sock", version="1.41")
    for gpu, expected in [
        (GpuRequest(count=-1), {"Count": -1, "DeviceIDs": []}),
        (GpuRequest(count=2), {"Count": 2, "DeviceIDs": []}),
        (GpuRequest(device_ids=["0", "GPU-abc"]), {"Count": 0, "DeviceIDs": ["0", "GPU-abc"]}),
    ]:
        spec = SandboxSpec(image="x", gpu=gpu)
        args = host_config_args(
            spec, network_mode="none", disk_mounts=[], tmpfs={}, storage_size_mb=None
        )
        hc = api.create_host_config(**args)
        (req,) = hc["DeviceRequests"]
        assert req["Capabilities"] == [["gpu"]]
        assert req["Driver"] == ""
        assert {k: req[k] for k in expected} == expected


def test_limits_and_env_arguments() -> None:
    spec = SandboxSpec(
        image="x",
        limits=SandboxLimits(cpus=1.5, memory_mb=512, pids=100),
        env={"A": "1"},
        proxy_env={"HTTPS_PROXY": "http://127.0.0.1:3128"},
    )
    args = host_config_args(
        spec, network_mode="none", disk_mounts=[], tmpfs={}, storage_size_mb=None
    )
    assert args["nano_cpus"] == 1_500_000_000
    assert args["mem_limit"] == args["memswap_limit"] == "512m"
    assert args["pids_limit"] == 100
    assert args["privileged"] is False and "storage_opt" not in args
    assert sandbox_env(spec) == {"A": "1", "HTTPS_PROXY": "http://127.0.0.1:3128"}


def test_privilege_arguments() -> None:
    args = host_config_args(
        SandboxSpec(image="x"), network_mode="none", disk_mounts=[], tmpfs={}, storage_size_mb=None
    )
    no_new, seccomp = args["security_opt"]
    assert no_new == "no-new-privileges" and args["privileged"] is False
    assert args["cap_drop"] == ["ALL"]
    assert sorted(args["cap_add"]) == sorted(CAP_BITS) == sorted(CAPABILITIES)
    # Docker's default profile, rule by rule, minus what the local backend refuses.
    assert seccomp.startswith("seccomp=")
    ours = json.loads(seccomp.removeprefix("seccomp="))
    shipped = json.loads(resources.files("paperbench").joinpath(DOCKER_DEFAULT).read_text("utf-8"))
    assert ours["defaultAction"] == shipped["defaultAction"] == "SCMP_ACT_ERRNO"
    assert {k: v for k, v in ours.items() if k != "syscalls"} == {
        k: v for k, v in shipped.items() if k != "syscalls"
    }
    kept = iter(ours["syscalls"])
    for rule in shipped["syscalls"]:
        names = [n for n in rule["names"] if n not in DENIED or rule["action"] != "SCMP_ACT_ALLOW"]
        if names:
            assert next(kept) == {**rule, "names": names}
    assert next(kept, None) is None
    allowed = {n for r in ours["syscalls"] if r["action"] == "SCMP_ACT_ALLOW" for n in r["names"]}
    assert not allowed & set(DENIED)
    assert {"ptrace", "clone", "mmap", "execve", "socket"} <= allowed


def test_debian_mirror_from_apt_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://other.example/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://other.example/debian"


# --------------------------------------------------------------------------- with the engine


@pytest.mark.docker
def test_images_cached_second_ensure_is_a_no_op(
    docker_client: Any, docker_images: dict[str, str]
) -> None:
    assert set(docker_images) == set(DEFAULT_IMAGES)
    for name, tag in docker_images.items():
        assert tag.startswith(name + ":") and len(tag.split(":")[1]) == 12
    said: list[str] = []
    started = time.monotonic()
    again = ensure_images(client=docker_client, log=said.append)
    assert again == docker_images
    assert time.monotonic() - started < 5
    assert all("up to date" in line for line in said), said


@pytest.mark.docker
def test_image_tag_follows_the_ca_bundle(docker_images: dict[str, str], tmp_path: Path) -> None:
    from paperbench.sandbox._images import base_tag, image_tag

    pem = tmp_path / "extra.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    plain = image_tag("paperbench-agent", base_tag(), ImageOptions())
    with_ca = image_tag("paperbench-agent", base_tag(), ImageOptions(ca_bundle=pem))
    assert plain == docker_images["paperbench-agent"] and with_ca != plain


@pytest.mark.docker
def test_images_hold_their_tools(
    start_sandbox: Any, run: Any, docker_images: dict[str, str]
) -> None:
    sb = start_sandbox(image=docker_images["paperbench-reproducer"])
    r = run(
        sb.exec(
            "python3 -c 'import numpy, venv; print(numpy.__version__)' && git --version"
            " && curl --version >/dev/null && echo ok",
            timeout=30,
        )
    )
    assert r.exit_code == 0 and r.stdout.strip().endswith("ok"), r
    sb = start_sandbox(image=docker_images["paperbench-agent"])
    r = run(
        sb.exec(
            "gcc --version >/dev/null && make --version >/dev/null && python3 -m venv "
            "/tmp/v && /tmp/v/bin/pip --version",
            timeout=60,
        )
    )
    assert r.exit_code == 0, r


@pytest.mark.docker
def test_exec_basics(start_sandbox: Any, run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAPERBENCH_TEST_HOST_SECRET", "sk-host-secret")
    sb = start_sandbox(env={"FROM_SPEC": "yes"}, workdir="/home/submission")
    r = run(
        sb.exec(
            "echo out; echo err >&2; pwd; echo $FROM_SPEC $FROM_EXEC; exit 3",
            timeout=10,
            env={"FROM_EXEC": "too"},
        )
    )
    assert (r.exit_code, r.stderr, r.timed_out) == (3, "err\n", False)
    assert r.stdout == "out\n/home/submission\nyes too\n"
    r = run(sb.exec(["env"], timeout=10, workdir="/tmp"))
    assert "PAPERBENCH_TEST_HOST_SECRET" not in r.stdout and "sk-host-secret" not in r.stdout
    r = run(sb.exec(["printf", "%s", "a b"], timeout=10))
    assert r.stdout == "a b"


@pytest.mark.docker
def test_container_labels_limits_and_cleanup(
    start_sandbox: Any, run: Any, docker_client: Any
) -> None:
    sb = start_sandbox(limits=SandboxLimits(cpus=1.0, memory_mb=300, pids=77, disk_mb=32))
    info = docker_client.api.inspect_container(sb.container_id)
    labels = info["Config"]["Labels"]
    assert labels[L.MANAGED] == "true" and labels[L.KIND] == "sandbox"
    assert labels["paperbench.run"] == "test-docker" and labels[L.OWNER] == L.owner_id()
    hc = info["HostConfig"]
    assert hc["NanoCpus"] == 1_000_000_000 and hc["PidsLimit"] == 77
    assert hc["Memory"] == hc["MemorySwap"] == 300 * 1024 * 1024
    assert not hc["Privileged"] and hc["NetworkMode"] == "none"
    binds = json.dumps(info["Mounts"]) + json.dumps(hc.get("Binds"))
    assert "docker.sock" not in binds
    # No storage_opt on overlay2/ext4: the image overlaid with its upper layer on one
    # loop-mounted image of 32 MB; its top-level folders bound in, the root itself read-only.
    assert sb.disk_cap == "loop-overlay" and hc["ReadonlyRootfs"] is True
    r = run(sb.exec("df -m /home /tmp /submission /usr/local | tail -n 4", timeout=10))
    rows = [line.split() for line in r.stdout.splitlines()]
    assert len({row[0] for row in rows}) == 1 and all(int(row[1]) <= 32 for row in rows)
    r = run(sb.exec("touch /usr/bin/x && echo usr-ok; touch /x; echo rc=$?", timeout=10))
    assert "usr-ok\nrc=1" in r.stdout and "Read-only file system" in r.stderr, r
    volumes = list(sb.volumes)
    disk_folder = sb.disk_folder
    assert disk_folder is not None and disk_folder.exists()
    run(sb.stop())
    run(sb.stop())  # twice is fine
    assert not docker_client.api.containers(all=True, filters={"id": sb.container_id})
    names = {v["Name"] for v in docker_client.api.volumes()["Volumes"] or []}
    assert not names & set(volumes)
    assert not disk_folder.exists()
    assert str(disk_folder) not in Path("/proc/self/mountinfo").read_text()
    with pytest.raises(SandboxError, match="stopped"):
        run(sb.exec("true", timeout=5))


@pytest.mark.docker
def test_start_failure_leaves_nothing_behind(
    backend: DockerBackend, run: Any, docker_client: Any
) -> None:
    spec = SandboxSpec(
        image="paperbench-no-such-image:0", labels=TEST_LABELS, limits=SandboxLimits(disk_mb=16)
    )
    with pytest.raises(SandboxError, match="paperbench images build"):
        run(backend.start(spec))
    assert sweep(docker_client) == []


@pytest.mark.docker
def test_network_none_and_full(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(network=NetworkPolicy.NONE)
    r = run(sb.exec("ls /sys/class/net", timeout=10))
    assert r.stdout.split() == ["lo"]
    sb = start_sandbox(network=NetworkPolicy.FULL)
    r = run(sb.exec("ls /sys/class/net; grep -c . /proc/net/route", timeout=10))
    assert "eth0" in r.stdout.split() and int(r.stdout.split()[-1]) >= 2  # header + default


def test_network_filtered_defaults_to_the_egress_gateway() -> None:
    """Without an ``egress``, filtered sandboxes get paperbench's proxy (tested end to end in
    test_egress.py); the backend itself is tested with a stand-in below."""
    from paperbench.sandbox._docker import _default_gateway
    from paperbench.sandbox._egress_gateway import DockerEgressGateway

    assert isinstance(_default_gateway(object()), DockerEgressGateway)


class _FakeEgress:
    """Stands in for the egress proxy: records the network it was attached to."""

    def __init__(self) -> None:
        self.network: str | None = None
        self.closed = False
        self.proxy_url = "http://127.0.0.1:9"

    async def attach(self, network: str, spec: SandboxSpec) -> _FakeEgress:
        self.network = network
        return self

    async def close(self) -> None:
        self.closed = True


@pytest.mark.docker
def test_network_filtered_is_an_internal_network(
    docker_client: Any, run: Any, reproducer_image: str
) -> None:
    egress = _FakeEgress()
    backend = DockerBackend(client=docker_client, egress=egress)
    spec = SandboxSpec(image=reproducer_image, network=NetworkPolicy.FILTERED, labels=TEST_LABELS)
    sb = run(backend.start(spec))
    try:
        assert egress.network is not None
        net = docker_client.api.inspect_network(egress.network)
        assert net["Internal"] is True and net["Labels"][L.MANAGED] == "true"
        r = run(sb.exec("echo $HTTPS_PROXY", timeout=10))
        assert r.stdout.strip() == "http://127.0.0.1:9"
        info = docker_client.api.inspect_container(sb.container_id)
        assert list(info["NetworkSettings"]["Networks"]) == [egress.network]
    finally:
        run(sb.stop())
        sweep(docker_client)
    assert egress.closed
    assert not docker_client.api.networks(names=[egress.network])


@pytest.mark.docker
def test_files_round_trip(start_sandbox: Any, run: Any, tmp_path: Path) -> None:
    sb = start_sandbox(limits=SandboxLimits(disk_mb=64))
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    run(sb.upload(src, "/home/submission/code"))
    run(sb.upload(src / "a.txt", "/home/new/parents/a.txt"))
    assert run(sb.read_file("/home/new/parents/a.txt")) == b"alpha"
    run(sb.write_file("/home/submission/code/c.txt", b"gamma"))
    run(
        sb.exec(
            "ln -s /etc/passwd /home/submission/code/out-link; ln -s a.txt "
            "/home/submission/code/in-link",
            timeout=10,
        )
    )
    run(sb.download("/home/submission/code", tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 10
    assert (tmp_path / "back" / "c.txt").read_text() == "gamma"
    assert not (tmp_path / "back" / "out-link").exists()  # safe extraction left it out
    run(sb.download("/home/submission/code/a.txt", tmp_path / "one.txt"))
    assert (tmp_path / "one.txt").read_text() == "alpha"
    snap = tmp_path / "snaps" / "s.tar.gz"
    run(sb.snapshot("/home/submission/code", snap))
    with tarfile.open(snap) as tar:
        names = set(tar.getnames())
    assert {"a.txt", "c.txt", "sub", "sub/b.bin", "in-link"} <= names
    assert "out-link" not in names
    assert [p.name for p in snap.parent.iterdir()] == ["s.tar.gz"]  # no temp file left
    with pytest.raises(SandboxError, match="over the limit"):
        run(sb.read_file("/home/submission/code/sub/b.bin", max_bytes=100))
    with pytest.raises(SandboxError, match="folder"):
        run(sb.read_file("/home/submission/code"))
    with pytest.raises(SandboxError, match="does not exist"):
        run(sb.read_file("/home/nope"))
    with pytest.raises(SandboxError, match="does not exist"):
        run(sb.snapshot("/home/nope", snap))


@pytest.mark.docker
def test_ca_bundle_is_added_when_asked(start_sandbox: Any, run: Any, tmp_path: Path) -> None:
    pem = tmp_path / "corp.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nUEFQRVJCRU5DSC1URVNU\n-----END CERTIFICATE-----\n")
    sb = start_sandbox(ca_bundle=pem)
    r = run(
        sb.exec(
            "grep -c UEFQRVJCRU5DSC1URVNU $SSL_CERT_FILE; grep -c BEGIN "
            "/etc/ssl/certs/ca-certificates.crt",
            timeout=10,
        )
    )
    first, total = r.stdout.split()
    assert first == "1" and int(total) > 10  # appended to the image's own bundle


@pytest.mark.docker
def test_capabilities_are_dropped(start_sandbox: Any, run: Any) -> None:
    """Commands hold exactly the kept capabilities (PID 1, the watchdog, none of them); what
    needs another is refused."""
    sb = start_sandbox(limits=HOSTILE)
    want = sum(1 << bit for bit in CAP_BITS.values())
    r = run(sb.exec("grep -H '^Cap' /proc/self/status /proc/1/status", timeout=10))
    caps = dict(line.rsplit(":", 1) for line in r.stdout.splitlines())
    for kind in ("CapEff", "CapPrm", "CapBnd"):
        assert int(caps[f"/proc/self/status:{kind}"], 16) == want, (kind, caps)
        assert int(caps[f"/proc/1/status:{kind}"], 16) == (want if kind == "CapBnd" else 0)
    for who in ("/proc/self/status", "/proc/1/status"):
        assert int(caps[f"{who}:CapAmb"], 16) == 0
    r = run(sb.exec(["python3", "-c", PRIVILEGED_ACTS], timeout=30))
    assert json.loads(r.stdout) == dict.fromkeys(["raw socket", "mknod", "chroot"], "EPERM"), r


@pytest.mark.docker
def test_seccomp_refuses_io_uring_and_what_the_local_backend_refuses(
    start_sandbox: Any, run: Any
) -> None:
    """Our profile, not the engine's default: io_uring and the local backend's refused calls
    fail (as root), ptrace of a child still works; and the engine was given our profile."""
    sb = start_sandbox(limits=HOSTILE)
    r = run(sb.exec(["python3", "-c", SYSCALLS], timeout=30))
    assert r.exit_code == 0, r
    said = json.loads(r.stdout)
    assert said.pop("io_uring_setup") in {"EPERM", "ENOSYS"}, r.stdout
    assert said.pop("ptrace of a child") == "ok", r.stdout
    assert said == dict.fromkeys(
        ["name_to_handle_at", "process_vm_readv", "adjtimex", "keyctl"], "EPERM"
    ), r.stdout
    opts = sb.api.inspect_container(sb.container_id)["HostConfig"]["SecurityOpt"]
    assert opts == ["no-new-privileges", f"seccomp={docker_profile()}"]


@pytest.mark.docker
def test_apt_and_pip_install_as_root_with_the_kept_capabilities(
    start_sandbox: Any, run: Any
) -> None:
    sb = start_sandbox(limits=SandboxLimits(memory_mb=512, pids=128, disk_mb=256))
    r = run(sb.exec(APT_AND_PIP, timeout=120))
    assert r.exit_code == 0, r
    assert r.stdout.rstrip().endswith("from-pip"), r.stdout
    assert "from-apt\n" in r.stdout, r.stdout
    for failed in ("seteuid", "setresuid", "unsandboxed", "Operation not permitted"):
        assert failed not in r.stdout + r.stderr, r


# --------------------------------------------------------------------------- hostile code


@pytest.mark.docker
def test_timeout_kills_background_children(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)
    script = textwrap.dedent("""
        sleep 1001 &
        nohup sleep 1002 >/dev/null 2>&1 &
        setsid sleep 1003 &
        (sleep 1004 &) &
        env -u PAPERBENCH_EXEC_ID sleep 1005 &
        echo started; sleep 1000
    """)
    started = time.monotonic()
    r = run(sb.exec(script, timeout=2))
    assert r.timed_out and r.exit_code is None and r.stdout == "started\n"
    assert "process tree killed" in r.stderr
    assert time.monotonic() - started < 8
    ps = run(sb.exec("ps -eo args", timeout=10))
    assert "sleep 10" not in ps.stdout, ps.stdout


async def _until_running(sb: Any, command: str, timeout: float = 30) -> None:
    """Until a process of the sandbox runs ``command`` (its ``ps`` polled)."""
    deadline = time.monotonic() + timeout
    while command not in (await sb.exec("ps -eo args", timeout=10)).stdout.splitlines():
        assert time.monotonic() < deadline, f"{command!r} did not start in {timeout:g} s"
        await asyncio.sleep(0.05)


@pytest.mark.docker
def test_sleeps_forever_and_cancellation_kill_the_tree(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)

    async def cancel_it() -> None:
        task = asyncio.ensure_future(sb.exec("sleep 2000 & sleep 2001", timeout=600))
        await _until_running(sb, "sleep 2001")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(cancel_it())
    ps = run(sb.exec("ps -eo args", timeout=10))
    assert "sleep 200" not in ps.stdout


@pytest.mark.docker
def test_fork_bomb_is_contained(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)
    r = run(sb.exec("bomb() { bomb | bomb & }; bomb; sleep 30", timeout=4))
    assert r.timed_out
    after = run(sb.exec("echo alive; ps -e --no-headers | wc -l", timeout=10))
    assert after.exit_code == 0 and after.stdout.split()[0] == "alive", after
    assert int(after.stdout.split()[1]) < 10, after.stdout


@pytest.mark.docker
def test_huge_log_is_capped(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)
    r = run(
        sb.exec(
            "head -c 1000000000 /dev/zero | tr '\\0' x; echo; echo tail-mark",
            timeout=60,
            output_limit=10_000,
        )
    )
    assert r.exit_code == 0 and r.stdout_truncated
    assert len(r.stdout) < 11_000 and r.stdout.endswith("tail-mark\n")
    assert "bytes truncated by paperbench" in r.stdout


@pytest.mark.docker
def test_disk_fill_is_capped(start_sandbox: Any, run: Any) -> None:
    """An endless writer over many files and folders stops at the cap in total, and the
    host's disk gives no more than the cap."""
    free_before = shutil.disk_usage(tempfile.gettempdir()).free
    sb = start_sandbox(limits=HOSTILE)
    r = run(
        sb.exec(
            "i=0; while head -c 4000000 /dev/zero > /home/f$i; do i=$((i+1)); done; "
            "head -c 4000000 /dev/zero > /tmp/more; echo rc=$?; "
            "head -c 4000000 /dev/zero > /var/more; echo rc=$?; "
            "du -cm /home /tmp/more /var/more | tail -n 1 | cut -f1",  # what was written
            timeout=60,
        )
    )
    assert "rc=1" in r.stdout and "No space left" in r.stderr
    assert int(r.stdout.split()[-1]) <= 64
    assert free_before - shutil.disk_usage(tempfile.gettempdir()).free <= 72 << 20
    usage = sb.disk_usage()
    assert usage is not None and usage.full
    ok = run(sb.exec("rm /home/f* && echo ok", timeout=10))
    assert ok.stdout == "ok\n"


@pytest.mark.docker
def test_memory_hog_is_killed(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)
    r = run(sb.exec(["python3", "-c", "x = bytearray(600 * 1024 * 1024); print('no')"], timeout=60))
    assert r.exit_code == 137 and "no" not in r.stdout  # the OOM killer, inside the cgroup
    assert run(sb.exec("echo alive", timeout=10)).stdout == "alive\n"


@pytest.mark.docker
@pytest.mark.parametrize("view", ["host", "engine"])
def test_a_container_killed_under_a_command_is_a_sandbox_error(
    view: str, start_sandbox: Any, run: Any
) -> None:
    """The command's SIGKILL (137) is the sandbox's failure when its container died, whether
    PID 1's end is seen on this host or only by the engine (which says "running" a moment
    longer); a command killed inside stays a result (the next test)."""
    sb = start_sandbox(limits=HOSTILE)
    if view == "engine":
        sb.procs = None  # as with a remote engine

    async def killed_under() -> Any:
        async def kill() -> None:  # once the command runs: "under" it, whatever the load
            def running() -> bool:
                top = sb.api.top(sb.container_id).get("Processes") or []
                return any("sleep 30" in " ".join(p) for p in top)

            deadline = time.monotonic() + 30
            while not await asyncio.to_thread(running) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(sb.api.kill, sb.container_id)

        killer = asyncio.ensure_future(kill())
        try:
            return await sb.exec("sleep 30", timeout=60)
        finally:
            await killer

    with pytest.raises(SandboxError, match="is gone"):
        run(killed_under())


@pytest.mark.docker
def test_kills_its_own_shell_and_everything(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox(limits=HOSTILE)
    r = run(sb.exec("kill -9 $$", timeout=10))
    assert r.exit_code == 137 and not r.timed_out
    r = run(sb.exec("sleep 300 & kill -9 -1; wait $!; echo $?", timeout=10))
    assert r.stdout == "137\n"  # all but the caller and PID 1 were killed
    assert run(sb.exec("echo alive", timeout=10)).stdout == "alive\n"  # PID 1 survives


@pytest.mark.docker
def test_writes_outside_the_work_dir_stay_in_the_container(start_sandbox: Any, run: Any) -> None:
    marker = f"/tmp/paperbench-escape-{SESSION_ID}"
    sb = start_sandbox(limits=HOSTILE)
    r = run(
        sb.exec(
            f"echo x > {marker}; echo x > /etc/escape-{SESSION_ID}; "
            f"echo x > /root/escape; mkdir -p /var/lib/docker && echo x > "
            f"/var/lib/docker/escape-{SESSION_ID}; echo done",
            timeout=10,
        )
    )
    assert r.stdout == "done\n"
    assert not Path(marker).exists()
    assert not Path(f"/etc/escape-{SESSION_ID}").exists()
    assert not Path(f"/var/lib/docker/escape-{SESSION_ID}").exists()


# --------------------------------------------------------------------------- crash and gc


@pytest.mark.docker
def test_crashed_owner_leaves_an_orphan_that_gc_reaps(
    docker_client: Any, reproducer_image: str, tmp_path: Path
) -> None:
    code = textwrap.dedent(f"""
        import asyncio, os
        from pathlib import Path
        from paperbench.sandbox._base import SandboxSpec, SandboxLimits
        from paperbench.sandbox._docker import DockerBackend
        async def main():
            sb = await DockerBackend(disk_root=Path({str(tmp_path)!r})).start(SandboxSpec(
                image={reproducer_image!r}, limits=SandboxLimits(disk_mb=16),
                labels={{{SESSION_LABEL!r}: {SESSION_ID!r}, "paperbench.run": "crash"}}))
            print(sb.container_id, sb.id, flush=True)
            os._exit(9)  # no stop, no finally: a crash
        asyncio.run(main())
    """)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.returncode == 9, proc.stderr
    cid, sandbox_id = proc.stdout.split()
    try:
        orphans = [
            o
            for o in find_orphans(docker_client)
            if o.id == cid[:12] or o.name.startswith(sandbox_id)
        ]
        kinds = sorted(set(o.kind for o in orphans))
        assert kinds == ["container"], orphans  # loop-overlay binds folders: no volume
        assert all(o.reason == "owner process gone" for o in orphans)
        done = reap(docker_client, orphans)
        assert all(o.removed for o in done), done
        assert not docker_client.api.containers(all=True, filters={"id": cid})
        # The capped disk (a loop-mounted image) is reaped like a local workspace.
        disk = tmp_path / f"{WORKSPACE_PREFIX}{sandbox_id}-disk"
        assert str(disk) in Path("/proc/self/mountinfo").read_text()
        local = reap_local_orphans(tmp_path)
        assert [(o.name, o.removed) for o in local] == [(disk.name, True)], local
        assert not disk.exists() and str(disk) not in Path("/proc/self/mountinfo").read_text()
    finally:
        sweep(docker_client)
        reap_local_orphans(tmp_path)


@pytest.mark.docker
def test_gc_leaves_live_sandboxes_alone(start_sandbox: Any, docker_client: Any) -> None:
    sb = start_sandbox()
    ids = {o.id for o in find_orphans(docker_client)}
    assert sb.container_id[:12] not in ids
    everything = {o.id for o in find_orphans(docker_client, everything=True)}
    assert sb.container_id[:12] in everything


@pytest.mark.docker
def test_timeout_kill_inside_the_container_when_the_host_cannot(
    start_sandbox: Any, run: Any
) -> None:
    """The fallback for a remote engine: the bash-builtins killer run by docker exec."""
    sb = start_sandbox(limits=HOSTILE)
    sb.procs = None  # as if the container's cgroup were not visible from here
    r = run(sb.exec("setsid sleep 1101 & nohup sleep 1102 & sleep 1100", timeout=1.5))
    assert r.timed_out and "process tree killed" in r.stderr
    ps = run(sb.exec("ps -eo args", timeout=10))
    assert "sleep 110" not in ps.stdout, ps.stdout


# --------------------------------------------------------------------------- cancelled starts


@pytest.mark.docker
@pytest.mark.parametrize("network", ["none", "full"])
def test_a_start_cancelled_at_any_point_leaves_nothing_behind(
    network: str, backend: Any, reproducer_image: str, docker_client: Any, loop: Any
) -> None:
    """A start cancelled while an engine call runs in its thread (the network, the
    container, the attach of its lifeline): nothing it made outlives the cancellation."""
    import gc
    import secrets

    from paperbench.sandbox._docker_firewall import firewall_problem

    if network == "full" and firewall_problem() is not None:
        pytest.skip(str(firewall_problem()))
    case = secrets.token_hex(4)
    spec = SandboxSpec(
        image=reproducer_image,
        network=NetworkPolicy(network),
        labels={**TEST_LABELS, "paperbench.test-case": case},
    )
    flt = {"label": f"paperbench.test-case={case}"}

    async def cancelled_after(delay: float) -> None:
        task = asyncio.ensure_future(backend.start(spec))
        await asyncio.sleep(delay)
        task.cancel()
        try:
            started = await task
        except asyncio.CancelledError:
            return
        await started.stop()  # it was up before the cancellation came

    try:
        for delay in (0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.25, 0.4):
            loop.run_until_complete(cancelled_after(delay))
            gc.collect()  # an attach socket nobody holds would be said here, as an error
            assert docker_client.api.containers(all=True, filters=flt) == [], delay
            assert docker_client.api.networks(filters=flt) == [], delay
    finally:
        sweep(docker_client)  # what a failure left
