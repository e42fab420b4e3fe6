"""Escapes to the operator's network: ``full`` means the public internet, on both backends.

A reproduction runs with ``network=full`` by default. It used to reach any private address
that was not the host's own: internal services, a Ray head whose job API runs code. Each test
here runs a real ``reproduce.sh`` through the real CLI (``paperbench reproduce``), on the local
backend (bubblewrap behind slirp4netns) and on Docker, probing:

- an address of each internal range under test (10/8, 172.16/12, 192.168/16 and carrier-grade
  NAT 100.64/10): refused, unless ``--allow-network`` opens its range;
- a cloud metadata address (Alibaba's, 100.100.100.200, inside 100.64/10): refused even when
  its range is opened;
- the host's own address on the test's link, inside an opened range: refused (a host service
  bound to every address is listening there);
- the internet's stand-in (an address of TEST-NET-2, which ``is_private`` would call private):
  reached either way.

Refused means the server never saw the connection (its log of the addresses connections
reached), not only that the client failed. The egress proxy of ``filtered`` refuses and opens
the same ranges (``test_the_proxy_opens_only_the_allowed_ranges``).

The targets live in a network namespace the test makes (``outside``), joined to the host by a
veth pair with a route per address: nothing leaves the machine, every loop is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.reproduce import ReproductionMetadata
from paperbench.sandbox import EgressProxy, EgressSettings
from paperbench.sandbox._egress import ensure_egress_python, read_network_log

from .docker_fixtures import reproducer_image  # noqa: F401  (the fixture)
from .egress_helpers import veth_namespace

runner = CliRunner()

PORT = 8080
HOST_SIDE = "10.231.77.1"
"""The host's own address on the link to the test namespace."""
PRIVATE = {
    "10.0.0.0/8": "10.231.77.2",
    "172.16.0.0/12": "172.16.231.2",
    "192.168.0.0/16": "192.168.231.2",
    "100.64.0.0/10": "100.64.231.2",
}
METADATA = "100.100.100.200"
PUBLIC = "198.51.100.6"
"""The internet's stand-in: TEST-NET-2, which Python's ``is_private`` counts as private."""
OPENED = ["192.168.231.0/24", "100.64.0.0/10", "10.231.77.0/30"]
"""What the allowing run opens: two private ranges, CGNAT (holding the metadata address),
and the link's /30 (holding the host's own address)."""

BACKENDS = [
    pytest.param("local", id="local-bwrap"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


# --------------------------------------------------------------------------- the world

_SERVER = r"""
import socket, sys, time
log = open(sys.argv[1], "a", buffering=1)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(16); s.settimeout(1)
end = time.monotonic() + 900
while time.monotonic() < end:
    try:
        c, _ = s.accept()
    except OSError:
        continue
    dst = c.getsockname()[0]
    log.write(dst + "\n")
    c.settimeout(2)
    try:
        c.recv(1024)
    except OSError:
        pass
    body = ("hello from " + dst).encode()
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.close()
"""


@dataclass
class Outside:
    """The test namespace's server: which of its addresses connections reached."""

    log: Path
    offset: int = 0

    def reached(self) -> set[str]:
        """The addresses connected to since the last call."""
        data = self.log.read_text()
        new, self.offset = data[self.offset :], len(data)
        return set(new.split())


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outside]:
    """A network namespace holding one HTTP server on every address under test."""
    log = tmp_path_factory.mktemp("outside") / "reached.log"
    log.touch()
    others = tuple(a for a in [*PRIVATE.values(), METADATA, PUBLIC] if a != "10.231.77.2")
    server = [sys.executable, "-c", _SERVER, str(log), str(PORT)]
    name = f"pbn{os.getpid() % 100000}"
    with veth_namespace(name, HOST_SIDE, "10.231.77.2", server, extra=others):
        world = Outside(log)
        _wait_until_served(world)
        yield world


def _wait_until_served(world: Outside) -> None:
    """The server answers the host (then forgets that connection)."""
    for _ in range(100):
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((PUBLIC, PORT)) == 0:
                world.reached()
                return
        threading.Event().wait(0.1)
    raise AssertionError("the test namespace's server did not start")


@dataclass
class HostListener:
    """A service of the host's bound to every address (as careless services are)."""

    port: int
    seen: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def host_listener() -> Iterator[HostListener]:
    srv = socket.create_server(("0.0.0.0", 0))
    srv.settimeout(0.2)
    listener = HostListener(srv.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            with conn:
                listener.seen.append(peer[0])
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 11\r\n\r\nhost secret")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener
    stop.set()
    thread.join(timeout=2)
    srv.close()


# --------------------------------------------------------------------------- the probe

# reproduce.sh runs this: a GET to each target at once (plain TCP, 3 s each; a refusal through
# slirp4netns is a timeout), a DNS query to the sandbox's resolver, then one JSON line.
_DNS = r"""
import socket, struct
def dns_answer(server):
    # The root's name servers, asked of a resolver: the answer's code (any code: whether the
    # query went through, not what the resolver knows), or why none came.
    query = struct.pack(">HHHHHH", 0x5042, 0x0100, 1, 0, 0, 0) + b"\x00" + struct.pack(">HH", 2, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(5)
    try:
        u.sendto(query, (server, 53))
        data = u.recv(4096)
        return f"rcode {data[3] & 15}" if data[:2] == query[:2] else "a wrong answer"
    except OSError as exc:
        return f"failed: {type(exc).__name__}"
    finally:
        u.close()
def first_resolver():
    with open("/etc/resolv.conf") as f:
        lines = f.read().splitlines()
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            return words[1]
    return None
"""
_PROBE = (
    _DNS
    + r"""
import json, sys, threading
out = {}
def dns():
    server = first_resolver()
    out["dns"] = dns_answer(server) if server else "no resolver"
def probe(target):
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        s.sendall(b"GET /probe HTTP/1.0\r\n\r\n")
        out[target] = "reached: " + s.recv(200).decode(errors="replace").rsplit("\n", 1)[-1]
    except OSError as exc:
        out[target] = f"refused: {type(exc).__name__}"
    finally:
        s.close()
threads = [threading.Thread(target=probe, args=(t,)) for t in sys.argv[1:]]
threads.append(threading.Thread(target=dns))
for t in threads:
    t.start()
for t in threads:
    t.join()
print("PROBE " + json.dumps(out))
"""
)


def _targets(host_port: int) -> list[str]:
    addresses = [*PRIVATE.values(), METADATA, PUBLIC]
    return [*(f"{a}:{PORT}" for a in addresses), f"{HOST_SIDE}:{host_port}"]


def _reproduce(
    tmp_path: Path, backend: str, host_port: int, *flags: str
) -> tuple[dict[str, str], ReproductionMetadata, str]:
    """``paperbench reproduce`` of a submission that probes every target; what it saw, the
    run's metadata.json and the console's output."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "probe.py").write_text(_PROBE)
    targets = " ".join(_targets(host_port))
    (sub / "reproduce.sh").write_text(f"#!/bin/bash\npython3 probe.py {targets}\n")
    out = tmp_path / "out"
    args = ["reproduce", str(sub), "--sandbox", backend, "--out", str(out), "--retries", "0"]
    result = runner.invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    log = (out / "reproduce.log").read_text()
    lines = [line for line in log.splitlines() if line.startswith("PROBE ")]
    assert lines, log
    meta = ReproductionMetadata.model_validate_json((out / "metadata.json").read_text())
    seen: dict[str, str] = json.loads(lines[-1].removeprefix("PROBE "))
    return seen, meta, result.output


def _skip_without_local_tools(backend: str) -> None:
    if backend == "local":
        missing = [t for t in ("bwrap", "slirp4netns", "iptables") if shutil.which(t) is None]
        if missing:
            pytest.skip(f"the local full network needs {', '.join(missing)}")


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_reaches_the_internet_but_no_private_range(
    backend: str,
    outside: Outside,
    host_listener: HostListener,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    _skip_without_local_tools(backend)
    if backend == "docker":
        request.getfixturevalue("reproducer_image")
    outside.reached()
    seen, meta, _ = _reproduce(tmp_path, backend, host_listener.port)

    assert outside.reached() == {PUBLIC}, seen
    assert seen[f"{PUBLIC}:{PORT}"] == f"reached: hello from {PUBLIC}", seen
    for address in [*PRIVATE.values(), METADATA]:
        assert seen[f"{address}:{PORT}"].startswith("refused"), seen
    assert host_listener.seen == [], seen
    assert meta.config.allow_networks == ()
    # DNS still works, also where the host's resolver is on a private address
    host_dns: dict[str, Any] = {}
    exec(_DNS, host_dns)
    server = host_dns["first_resolver"]()
    if server is not None and host_dns["dns_answer"](server).startswith("rcode"):
        assert seen["dns"] == host_dns["dns_answer"](server), (server, seen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_allow_network_opens_only_its_ranges(
    backend: str,
    outside: Outside,
    host_listener: HostListener,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    _skip_without_local_tools(backend)
    if backend == "docker":
        request.getfixturevalue("reproducer_image")
    outside.reached()
    flags = [arg for cidr in OPENED for arg in ("--allow-network", cidr)]
    seen, meta, output = _reproduce(tmp_path, backend, host_listener.port, *flags)

    opened = {PRIVATE["192.168.0.0/16"], PRIVATE["100.64.0.0/10"], PRIVATE["10.0.0.0/8"]}
    assert outside.reached() == {PUBLIC, *opened}, seen
    for address in opened:
        assert seen[f"{address}:{PORT}"] == f"reached: hello from {address}", seen
    assert seen[f"{PRIVATE['172.16.0.0/12']}:{PORT}"].startswith("refused"), seen
    assert seen[f"{METADATA}:{PORT}"].startswith("refused"), seen  # inside 100.64.0.0/10
    assert seen[f"{HOST_SIDE}:{host_listener.port}"].startswith("refused"), seen
    assert host_listener.seen == [], seen  # the host, inside 10.231.77.0/30
    # said on the console, recorded in the run's files
    assert "--allow-network: the sandbox may reach " + ", ".join(OPENED) in " ".join(output.split())
    assert [str(n) for n in meta.config.allow_networks] == OPENED
    recorded = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert recorded["config"]["allow_networks"] == OPENED


def test_the_proxy_opens_only_the_allowed_ranges(
    outside: Outside, host_listener: HostListener, tmp_path: Path
) -> None:
    """``filtered``: the egress proxy refuses the same ranges, and opens the same way."""
    from paperbench.sandbox._internal_nets import parse_allowed

    allow = [parse_allowed(cidr) for cidr in OPENED]

    async def fetch_all() -> dict[str, str]:
        proxy = EgressProxy(
            [],
            tmp_path / "network.jsonl",
            EgressSettings(python=await ensure_egress_python(), allow=allow, startup_timeout=60),
        )
        endpoint = await proxy.start()
        try:
            return await asyncio.to_thread(_fetch_through, endpoint.url, host_listener.port)
        finally:
            await proxy.stop()

    outside.reached()
    seen = asyncio.run(fetch_all())

    opened = {PRIVATE["192.168.0.0/16"], PRIVATE["100.64.0.0/10"], PRIVATE["10.0.0.0/8"]}
    assert outside.reached() == {PUBLIC, *opened}, seen
    for address in [*opened, PUBLIC]:
        assert seen[f"{address}:{PORT}"] == f"200 hello from {address}", seen
    for address in [PRIVATE["172.16.0.0/12"], METADATA]:
        assert seen[f"{address}:{PORT}"] == "403", seen
    assert seen[f"{HOST_SIDE}:{host_listener.port}"] == "403", seen
    assert host_listener.seen == []
    reasons = {e.url: e.reason for e in read_network_log(tmp_path / "network.jsonl")}
    assert reasons[f"http://{METADATA}:{PORT}/probe"] == "cloud metadata address", reasons


def _fetch_through(proxy_url: str, host_port: int) -> dict[str, str]:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url})
    )
    out: dict[str, Any] = {}
    for target in _targets(host_port):
        try:
            with opener.open(f"http://{target}/probe", timeout=20) as r:
                out[target] = f"{r.status} {r.read(200).decode(errors='replace')}"
        except urllib.error.HTTPError as exc:
            out[target] = str(exc.code)
            exc.close()
        except OSError as exc:
            out[target] = f"failed: {type(exc).__name__}"
    return out


# --------------------------------------------------------------------------- leftovers

# A run that starts a full sandbox with an opened range, says its firewall chain, then waits
# to be killed.
_KILLED_RUN = """
import asyncio, json, sys, tempfile
from pathlib import Path
from paperbench.sandbox._base import NetworkPolicy, SandboxSpec

async def main():
    kind, image, labels = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if kind == "docker":
        from paperbench.sandbox._docker import DockerBackend
        backend = DockerBackend()
    else:
        from paperbench.sandbox import LocalBackend
        backend = LocalBackend(Path(tempfile.gettempdir()), isolation="bwrap")
    spec = SandboxSpec(image=image, network=NetworkPolicy.FULL, labels=labels,
                       allow_networks=["192.168.231.0/24"])
    sb = await backend.start(spec)
    firewall = getattr(sb, "firewall", None)
    print(firewall.chain if firewall else f"paperbench-u{sb._net.uid}", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _wait_for(condition: Callable[[], bool], seconds: float = 15.0) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def _chains() -> set[str]:
    listing = subprocess.run(["iptables", "-S"], capture_output=True, text=True, timeout=30)
    return {line.split()[1] for line in listing.stdout.splitlines() if line.startswith("-N ")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_gc_removes_the_chain_of_a_killed_run(backend: str, request: pytest.FixtureRequest) -> None:
    """kill -9 while a full sandbox runs: its chain stays until ``sandbox gc`` removes it."""
    from paperbench.sandbox._local_net import stale_chains

    from .docker_fixtures import TEST_LABELS, sweep

    _skip_without_local_tools(backend)
    image = request.getfixturevalue("reproducer_image") if backend == "docker" else "host"
    run = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, backend, image, json.dumps(TEST_LABELS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        chain = run.stdout.readline().strip()
        assert chain.startswith("paperbench-") and chain in _chains(), chain
        run.kill()
        run.wait(timeout=30)
        if backend == "local":  # the keeper and slirp4netns end with their owner, soon
            _wait_for(lambda: chain in stale_chains())
        result = runner.invoke(app, ["sandbox", "gc", "--json"])
        assert "Traceback" not in result.output, result.output
        if backend == "local":
            rows = [row for row in json.loads(result.stdout) if row["name"] == chain]
            assert [(r["kind"], r["removed"]) for r in rows] == [("firewall-rule", True)], rows
        assert chain not in _chains()
    finally:
        run.kill()
        run.wait(timeout=30)
        if run.stdout is not None:
            run.stdout.close()
        if backend == "docker":
            sweep(request.getfixturevalue("docker_client"))


# --------------------------------------------------------------------------- the flag


def test_rollout_records_the_opened_ranges(tmp_path: Path) -> None:
    """``paperbench rollout --allow-network``: said on the console, in config.json."""
    _skip_without_local_tools("local")
    out = tmp_path / "run"
    args = ["rollout", "--paper", "calibration-binning", "--agent", "dummy", "--sandbox", "local"]
    args += ["--network", "full", "--allow-network", OPENED[0], "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"--allow-network: the sandbox may reach {OPENED[0]}" in " ".join(result.output.split())
    config = json.loads((out / "config.json").read_text())
    assert (config["network"], config["allow_networks"]) == ("full", [OPENED[0]])


def test_run_records_the_opened_ranges_for_both_stages(tmp_path: Path) -> None:
    """``paperbench run --allow-network``: in group.json, given to the reproduction."""
    from paperbench.runs._config import EvalConfig, SandboxSettings
    from paperbench.runs._group import plan_group
    from paperbench.runs._pipeline import RunSpec, reproduce_config
    from paperbench.runs._store import run_keys
    from paperbench.sandbox import SandboxConfig
    from paperbench.sandbox._internal_nets import parse_allowed

    allow = (parse_allowed(OPENED[0]),)
    options = EvalConfig(
        group="g",
        papers="calibration-binning",
        agents=["dummy"],
        sandbox=SandboxSettings(allow_networks=allow),
    )
    config = plan_group(options, SandboxConfig(backend="local"))
    assert config.model_dump(mode="json")["allow_networks"] == [OPENED[0]]
    (key,) = run_keys(config)
    spec = RunSpec(group_dir=str(tmp_path), key=key, config=config)
    assert reproduce_config(spec).allow_networks == allow


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["reproduce", ".", "--allow-network", "10.1.2.3/24"], "10.1.2.3/24 has host bits set"),
        (["reproduce", ".", "--allow-network", "intranet"], "'intranet' is not an IP range"),
        (["rollout", "--paper", "x", "--allow-network", "8.8.8.0/24"], "nothing to open"),
        (["run", "--allow-network", "169.254.169.254"], "cloud metadata address"),
        (["reproduce", ".", "--network", "none", "--allow-network", "10.0.0.0/8"], "no network"),
    ],
)
def test_a_bad_range_is_one_line_naming_the_flag(args: list[str], says: str) -> None:
    result = runner.invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: --allow-network: ") and says in lines[0], lines
