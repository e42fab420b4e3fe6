"""The egress proxy, offline: local HTTPS servers on 127.0.0.1 stand in for an allowed host and
for github.com; the proxy's ``resolve`` mapping points their names at loopback.

Every server listens on loopback only; every proxy process is stopped in fixture teardown.
The first run creates the egress environment (mitmproxy in its own venv, about 30 s, once).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from paperbench.errors import EgressProxyError, SandboxError
from paperbench.sandbox._egress import (
    SANDBOX_CA_PATH,
    EgressEndpoint,
    EgressProxy,
    EgressSettings,
    NetworkLogEntry,
    bridge_command,
    ensure_egress_python,
    install_ca_command,
    read_network_log,
    sandbox_env,
)

from .egress_helpers import (
    BLACKLIST,
    GITHUB_NAMES,
    LOOPBACK,
    OTHER_NAMES,
    Pki,
    Servers,
    make_pki,
    serve,
)

pytestmark = pytest.mark.anyio

# --- local servers ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA and one server certificate for every name the servers stand in for."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test CA")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def servers(pki: Pki) -> Iterator[Servers]:
    with serve(pki) as started:
        yield started


# --- the proxy ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def egress_python() -> Path:
    return await ensure_egress_python()


@pytest.fixture(scope="module")
async def proxy(
    egress_python: Path, pki: Pki, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EgressProxy]:
    log = tmp_path_factory.mktemp("egress") / "network.jsonl"
    proxy = EgressProxy(
        BLACKLIST,
        log,
        EgressSettings(
            upstream_ca_bundle=pki.ca,
            resolve=dict.fromkeys([*GITHUB_NAMES, *OTHER_NAMES], LOOPBACK),
            python=egress_python,
            startup_timeout=30,
        ),
    )
    try:
        await proxy.start()
        yield proxy
    finally:
        await proxy.stop()


def _endpoint(proxy: EgressProxy) -> EgressEndpoint:
    assert proxy.endpoint is not None
    return proxy.endpoint


def _fetch(proxy_url: str, url: str, cafile: Path, method: str = "GET") -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(cafile))
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": proxy_url, "https": proxy_url}),
        urllib.request.HTTPSHandler(context=context),
    )
    request = urllib.request.Request(url, method=method)
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), bytes(exc.read())


async def fetch(proxy: EgressProxy, url: str, method: str = "GET") -> tuple[int, bytes]:
    ep = _endpoint(proxy)
    return await asyncio.to_thread(_fetch, ep.url, url, ep.ca_cert_path, method)


def log_for(proxy: EgressProxy, url: str) -> list[NetworkLogEntry]:
    deadline = time.monotonic() + 5
    while True:
        entries = [e for e in read_network_log(_endpoint(proxy).log_path) if e.url == url]
        if entries or time.monotonic() > deadline:
            return entries
        time.sleep(0.05)


# --- tests ---------------------------------------------------------------------------------------


async def test_allowed_https_passes_with_interception(proxy: EgressProxy, servers: Servers) -> None:
    url = f"https://allowed.test:{servers.allowed.port}/data/file.txt"
    status, body = await fetch(proxy, url)
    assert status == 200
    assert body == b"hello from allowed: /data/file.txt\n"
    assert f"GET allowed.test:{servers.allowed.port}/data/file.txt" in servers.allowed.seen
    [entry] = log_for(proxy, url)
    assert entry.verdict == "allowed"
    assert entry.status == 200
    assert entry.method == "GET"
    assert entry.host == "allowed.test"
    assert entry.rule is None
    connects = log_for(proxy, f"allowed.test:{servers.allowed.port}")
    assert connects
    assert connects[0].method == "CONNECT"


@pytest.mark.parametrize(
    "path",
    [
        "https://github.com:{port}/owner/repo",
        "https://github.com:{port}/Owner/Repo.git/info/refs?service=git-upload-pack",
        "https://www.github.com:{port}/owner/repo/tree/main/src",
        "https://github.com:{port}/owner/repo/archive/refs/heads/main.zip",
        "https://codeload.github.com:{port}/owner/repo/tar.gz/main",
        "https://raw.githubusercontent.com:{port}/OWNER/repo/main/train.py",
    ],
)
async def test_blacklisted_repo_forms_are_refused(
    proxy: EgressProxy, servers: Servers, path: str
) -> None:
    url = path.format(port=servers.github.port)
    before = len(servers.github.seen)
    status, body = await fetch(proxy, url)
    assert status == 403
    assert b"blacklisted" in body
    assert b"https://github.com/Owner/Repo" in body
    assert len(servers.github.seen) == before, "a refused request reached the server"
    [entry] = log_for(proxy, url)
    assert entry.verdict == "blocked"
    assert entry.rule == "https://github.com/Owner/Repo"
    assert entry.status == 403
    assert entry.reason == "blacklist"


async def test_other_repos_on_the_same_host_pass(proxy: EgressProxy, servers: Servers) -> None:
    for repo in ("owner/repo2", "someone/else"):
        url = f"https://github.com:{servers.github.port}/{repo}"
        status, body = await fetch(proxy, url)
        assert (status, body) == (200, f"hello from github: /{repo}\n".encode())
        assert [e.verdict for e in log_for(proxy, url)] == ["allowed"]


async def test_host_header_naming_a_blacklisted_url_is_refused(
    proxy: EgressProxy, servers: Servers
) -> None:
    """CONNECT to an allowed host, then ask for a blacklisted repo by Host header."""
    ep = _endpoint(proxy)
    port = servers.allowed.port

    def run() -> int:
        context = ssl.create_default_context(cafile=str(ep.ca_cert_path))
        import http.client

        conn = http.client.HTTPSConnection(ep.host, ep.port, context=context, timeout=10)
        conn.set_tunnel("allowed.test", port)
        try:
            conn.request("GET", "/owner/repo", headers={"Host": "github.com"})
            return conn.getresponse().status
        finally:
            conn.close()

    assert await asyncio.to_thread(run) == 403
    assert not any("/owner/repo" in s for s in servers.allowed.seen)


async def test_plain_http_prefix_rule(proxy: EgressProxy, servers: Servers) -> None:
    port = servers.plain.port
    blocked = f"http://example.org:{port}/code/model.py"
    allowed = f"http://example.org:{port}/codebase/model.py"
    assert (await fetch(proxy, blocked))[0] == 403
    status, body = await fetch(proxy, allowed)
    assert (status, body) == (200, b"hello from plain: /codebase/model.py\n")
    assert [e.verdict for e in log_for(proxy, blocked)] == ["blocked"]
    assert [e.rule for e in log_for(proxy, blocked)] == ["example.org/code"]
    assert [(e.verdict, e.status) for e in log_for(proxy, allowed)] == [("allowed", 200)]


@pytest.mark.parametrize(
    "target",
    [
        "example.org.:{port}/code/x",  # a trailing dot with a port
        "EXAMPLE.ORG.:{port}/code/x",
        "example.org:{port}/code;x",  # path parameters
        "example.org:{port}/code%3Bx",
        "example.org:{port}/code%00.txt",
        "example.org:{port}/code%2Fx",
        "example.org:{port}/code%252Fx",
        "example.org:{port}/CODE",
        "example.org:{port}/x/..;/code",
        "example.org:{port}/x\\..\\code",
        "example.org:{port}/code/x/../..",
    ],
)
async def test_other_readings_of_a_rule_are_refused(
    proxy: EgressProxy, servers: Servers, target: str
) -> None:
    url = "http://" + target.format(port=servers.plain.port)
    before = len(servers.plain.seen)
    status, body = await fetch(proxy, url)
    assert (status, b"(example.org/code)" in body) == (403, True), (url, body)
    assert len(servers.plain.seen) == before, "a refused request reached the server"


async def test_ip_literal_with_a_blacklisted_host_header_is_refused(
    proxy: EgressProxy, servers: Servers
) -> None:
    """The Host header is checked as well as the address the client asks for."""
    ep = _endpoint(proxy)
    port = servers.plain.port

    def run() -> int:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": ep.url}))
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/code/x", headers={"Host": f"example.org:{port}"}
        )
        try:
            with opener.open(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code)

    assert await asyncio.to_thread(run) == 403
    [entry] = log_for(proxy, f"http://example.org:{port}/code/x")
    assert (entry.verdict, entry.reason, entry.rule) == ("blocked", "blacklist", "example.org/code")


def _tunnel_status(proxy: EgressProxy, connect: str, sni: str, path: str) -> int:
    """CONNECT to ``connect``, TLS with server name ``sni``, then GET ``path`` with a Host
    header naming ``connect``: the status the proxy (or the server) answers."""
    ep = _endpoint(proxy)
    context = ssl.create_default_context(cafile=str(ep.ca_cert_path))
    with socket.create_connection((ep.host, ep.port), timeout=10) as raw:
        raw.sendall(f"CONNECT {connect} HTTP/1.1\r\nHost: {connect}\r\n\r\n".encode())
        reply = raw.recv(4096)
        assert reply.startswith(b"HTTP/1.1 200"), reply
        with context.wrap_socket(raw, server_hostname=sni) as tls:
            head = f"GET {path} HTTP/1.1\r\nHost: {connect}\r\nConnection: close\r\n\r\n"
            tls.sendall(head.encode())
            data = b""
            while chunk := tls.recv(4096):
                data += chunk
    return int(data.split(b" ", 2)[1])


async def test_tls_server_name_naming_a_blacklisted_host_is_refused(
    proxy: EgressProxy, servers: Servers
) -> None:
    """The client's TLS server name goes upstream as sent, so it is checked like the host."""
    connect = f"allowed.test:{servers.allowed.port}"
    refused = await asyncio.to_thread(_tunnel_status, proxy, connect, "github.com", "/owner/repo")
    assert refused == 403
    assert not any("/owner/repo" in s for s in servers.allowed.seen)
    ok = await asyncio.to_thread(_tunnel_status, proxy, connect, "allowed.test", "/owner/repo")
    assert ok == 200
    entries = log_for(proxy, f"https://{connect}/owner/repo")
    assert [(e.verdict, e.rule) for e in entries] == [
        ("blocked", "https://github.com/Owner/Repo"),
        ("allowed", None),
    ]


async def test_whole_host_rule_refuses_connect(proxy: EgressProxy, servers: Servers) -> None:
    with pytest.raises(urllib.error.URLError, match="403"):
        await fetch(proxy, f"https://blocked-host.test:{servers.allowed.port}/")
    [entry] = log_for(proxy, f"blocked-host.test:{servers.allowed.port}")
    assert (entry.method, entry.verdict, entry.rule) == ("CONNECT", "blocked", "blocked-host.test")


def _host_addresses() -> list[str]:
    """The IPv4 addresses of this machine's lasting interfaces other than loopback (``ip -j
    addr``): not the bridges of sandbox networks (``br-*``) or the test namespaces' links
    (``pbn*``), which other tests running meanwhile make and remove."""
    out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True)
    found = [
        info["local"]
        for link in json.loads(out.stdout or "[]")
        if not link.get("ifname", "").startswith(("br-", "pbn"))
        for info in link.get("addr_info", [])
        if not info["local"].startswith("127.")
    ]
    assert found, "no non-loopback address on this machine (the Docker bridge has one)"
    return found


async def test_the_hosts_own_addresses_are_refused(proxy: EgressProxy, servers: Servers) -> None:
    """Only names mapped on purpose may reach loopback, and no address of the host's own, in
    whatever range (a public address, a Docker bridge's gateway), is ever connected to: the
    host's services stay out of reach. Refused before any connection is made."""
    before = len(servers.plain.seen)
    port = servers.plain.port
    urls = [f"http://127.0.0.1:{port}/secret", f"http://localhost:{port}/secret"]
    urls += [f"http://{addr}:{port}/secret" for addr in _host_addresses()]
    for url in urls:
        status, body = await fetch(proxy, url)
        assert status == 403, url
        assert b"an address of this machine" in body
        [entry] = log_for(proxy, url)
        assert (entry.verdict, entry.reason) == ("blocked", "host address"), url
    # a private range that is not the host's stays refused as such (no connection either)
    url = f"http://10.255.255.254:{port}/x"
    status, body = await fetch(proxy, url)
    assert status == 403 and b"a private address" in body
    [entry] = log_for(proxy, url)
    assert entry.reason == "private address"
    assert len(servers.plain.seen) == before


async def test_client_without_the_proxy_ca_fails_and_is_logged(
    proxy: EgressProxy, servers: Servers, pki: Pki
) -> None:
    ep = _endpoint(proxy)
    url = f"https://allowed.test:{servers.allowed.port}/untrusted"
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        await asyncio.to_thread(_fetch, ep.url, url, pki.ca)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        errors = [e for e in read_network_log(ep.log_path) if e.verdict == "error"]
        if errors:
            break
        await asyncio.sleep(0.05)
    assert any(e.host == "allowed.test" and "TLS" in (e.reason or "") for e in errors)
    assert not any("/untrusted" in s for s in servers.allowed.seen)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_curl_and_git_with_sandbox_env(proxy: EgressProxy, servers: Servers) -> None:
    """Real tools configured only by the environment a sandbox gets."""
    ep = _endpoint(proxy)
    env = {"PATH": os.environ["PATH"], "HOME": str(ep.log_path.parent)}
    env |= sandbox_env(ep, ca_path=str(ep.ca_cert_path))

    def run(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)

    ok = f"https://allowed.test:{servers.allowed.port}/via-curl"
    done = await asyncio.to_thread(run, "curl", "-sS", "--fail", ok)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello from allowed: /via-curl\n"
    done = await asyncio.to_thread(
        run, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
        f"https://codeload.github.com:{servers.github.port}/owner/repo/zip/main",
    )  # fmt: skip
    assert done.stdout == "403"
    if shutil.which("git"):
        repo = f"https://github.com:{servers.github.port}/owner/repo.git"
        done = await asyncio.to_thread(run, "git", "ls-remote", repo)
        assert done.returncode != 0
        assert "403" in done.stderr
        [entry] = log_for(
            proxy, repo.removesuffix(".git") + ".git/info/refs?service=git-upload-pack"
        )
        assert entry.verdict == "blocked"


async def test_stop_ends_the_process_and_removes_the_confdir(
    egress_python: Path, tmp_path: Path
) -> None:
    settings = EgressSettings(python=egress_python, startup_timeout=30)
    proxy = EgressProxy([], tmp_path / "log.jsonl", settings)
    async with proxy:
        assert proxy.running
        assert proxy._proc is not None
        pid = proxy._proc.pid
        confdir = proxy.confdir
        assert confdir is not None
        ep = _endpoint(proxy)
        assert ep.ca_cert_path.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert not proxy.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not confdir.exists()
    await proxy.stop()  # idempotent


async def test_start_errors_are_one_clear_line(tmp_path: Path) -> None:
    missing = EgressProxy([], tmp_path / "a.jsonl", EgressSettings(python=tmp_path / "no-python"))
    with pytest.raises(EgressProxyError, match="PAPERBENCH_EGRESS_PYTHON"):
        await missing.start()
    # An interpreter without mitmproxy: the process dies and its error is reported.
    no_mitm = EgressProxy([], tmp_path / "b.jsonl", EgressSettings(python=Path(sys.executable)))
    if ensure_no_mitmproxy():
        with pytest.raises(EgressProxyError, match="mitmproxy"):
            await no_mitm.start()
    assert not no_mitm.running
    with pytest.raises(SandboxError, match="expected an IP address"):
        EgressProxy([], tmp_path / "c.jsonl", EgressSettings(listen_host="localhost"))


def ensure_no_mitmproxy() -> bool:
    return importlib.util.find_spec("mitmproxy") is None


def test_sandbox_env_and_ca_install_command() -> None:
    ep = EgressEndpoint(host="172.30.0.1", port=8080, ca_cert_path=Path("/x/ca.pem"),
                        log_path=Path("/x/log"))  # fmt: skip
    env = sandbox_env(ep)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        assert env[name] == "http://172.30.0.1:8080"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
                 "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"):  # fmt: skip
        assert env[name] == SANDBOX_CA_PATH
    other = sandbox_env(ep, "egress", ca_path="/etc/egress.pem")
    assert other["https_proxy"] == "http://egress:8080"
    assert other["SSL_CERT_FILE"] == "/etc/egress.pem"
    v6 = EgressEndpoint(host="::1", port=1, ca_cert_path=Path("c"), log_path=Path("l"))
    assert sandbox_env(v6)["HTTP_PROXY"] == "http://[::1]:1"
    command = install_ca_command()
    assert "update-ca-certificates" in command
    assert SANDBOX_CA_PATH in command


# --- Docker: a filtered sandbox on an internal network, the proxy on its gateway --------------

from paperbench.sandbox._docker_firewall import COMMENT_PREFIX, our_rules  # noqa: E402
from tests.sandbox.docker_fixtures import TEST_LABELS, sweep  # noqa: E402


@pytest.mark.slow
@pytest.mark.docker
# The Docker SDK leaves unix sockets of its exec streams to the garbage collector.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_docker_filtered_sandbox_goes_through_the_proxy(
    docker_client: Any,
    docker_images: dict[str, str],
    egress_python: Path,
    pki: Pki,
    servers: Servers,
    tmp_path: Path,
) -> None:
    from paperbench.sandbox._base import NetworkPolicy, SandboxLimits, SandboxSpec
    from paperbench.sandbox._docker import DockerBackend
    from paperbench.sandbox._egress_gateway import DockerEgressAttachment, DockerEgressGateway

    gateway = DockerEgressGateway(
        docker_client.api,
        ca_bundle=pki.ca,
        resolve=dict.fromkeys([*GITHUB_NAMES, *OTHER_NAMES], LOOPBACK),
        python=egress_python,
    )
    backend = DockerBackend(client=docker_client, egress=gateway)
    log = tmp_path / "network.jsonl"
    spec = SandboxSpec(
        image=docker_images["paperbench-agent"],
        network=NetworkPolicy.FILTERED,
        blacklist=BLACKLIST,
        network_log=log,
        labels=TEST_LABELS,
        limits=SandboxLimits(disk_mb=256),  # a read-only root: the CA still installs
    )
    sb = await backend.start(spec)
    try:
        attachment = sb.egress
        assert isinstance(attachment, DockerEgressAttachment)
        assert not is_loopback(attachment.endpoint.host)
        await attachment.install(sb)
        env = attachment.env
        ok = f"https://allowed.test:{servers.allowed.port}/from-docker"
        r = await sb.exec(["curl", "-sS", "--fail", ok], env=env, timeout=30)
        assert (r.exit_code, r.stdout) == (0, "hello from allowed: /from-docker\n"), r.stderr
        bad = f"https://codeload.github.com:{servers.github.port}/owner/repo/zip/main"
        r = await sb.exec(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", bad], env=env, timeout=30
        )
        assert r.stdout == "403"
        repo = f"https://github.com:{servers.github.port}/owner/repo.git"
        r = await sb.exec(["git", "ls-remote", repo], env=env, timeout=30)
        assert r.exit_code != 0
        assert "403" in r.stderr
        # Without the proxy there is no way out (no DNS, no route): fails at once.
        r = await sb.exec(["curl", "-sS", "-m", "5", "--noproxy", "*", ok], env=env, timeout=30)
        assert r.exit_code != 0
        # Through the proxy, the host's own address on the network is refused.
        host_url = f"http://{attachment.endpoint.host}:{attachment.endpoint.port}/"
        r = await sb.exec(
            ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", host_url], env=env, timeout=30
        )
        assert r.stdout == "403"
        # Directly, a host service on another port of the gateway address is unreachable
        # (host firewall rules on the network's bridge), while the proxy port still answers.
        rules = our_rules()
        assert sum(f"{COMMENT_PREFIX}{sb.id}-net" in line for line in rules) == 2, rules
        host = attachment.endpoint.host
        probe = (
            "import socket,sys\n"
            "s=socket.socket(); s.settimeout(3)\n"
            "try:\n s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
            "except OSError as e:\n print('closed', e)\n"
        )
        with _host_listener() as port:
            r = await sb.exec(["python3", "-c", probe, host, str(port)], timeout=30)
            assert r.stdout.startswith("closed"), r.stdout + r.stderr
        r = await sb.exec(["python3", "-c", probe, host, str(attachment.endpoint.port)], timeout=30)
        assert r.stdout.startswith("open"), r.stdout + r.stderr
    finally:
        await sb.stop()
        sweep(docker_client)
    assert not attachment.proxy.running
    assert not any(f"{COMMENT_PREFIX}{sb.id}-net" in line for line in our_rules())
    verdicts = {(e.url, e.verdict) for e in read_network_log(log)}
    assert (ok, "allowed") in verdicts
    assert (bad, "blocked") in verdicts
    assert (repo + "/info/refs?service=git-upload-pack", "blocked") in verdicts


@contextlib.contextmanager
def _host_listener() -> Iterator[int]:
    """A TCP listener on 0.0.0.0 of the host (any free port) that accepts and closes."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_host_listener_is_reachable_without_the_firewall() -> None:
    """The probe's counterpart: the listener answers on the host itself."""
    with _host_listener() as port, socket.create_connection(("127.0.0.1", port), timeout=3):
        pass


def is_loopback(host: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(host).is_loopback


# --- local sandboxes in their own network namespace: the unix socket bridge -------------------


@pytest.fixture(scope="module")
async def bridged_proxy(
    egress_python: Path, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EgressProxy]:
    d = tmp_path_factory.mktemp("bridge")
    proxy = EgressProxy(
        BLACKLIST,
        d / "network.jsonl",
        EgressSettings(
            upstream_ca_bundle=pki.ca,
            resolve=dict.fromkeys([*GITHUB_NAMES, *OTHER_NAMES], LOOPBACK),
            python=egress_python,
            unix_socket=d / "egress.sock",
            startup_timeout=30,
        ),
    )
    try:
        await proxy.start()
        yield proxy
    finally:
        await proxy.stop()


async def test_unix_socket_bridge(bridged_proxy: EgressProxy, servers: Servers) -> None:
    from paperbench.sandbox._egress_bridge import serve_tcp_to_unix

    ep = _endpoint(bridged_proxy)
    assert ep.unix_socket is not None and ep.unix_socket.is_socket()
    server = await serve_tcp_to_unix(LOOPBACK, 0, ep.unix_socket)
    async with server:
        port = server.sockets[0].getsockname()[1]
        via = f"http://{LOOPBACK}:{port}"
        ok = f"https://allowed.test:{servers.allowed.port}/bridged"
        bad = f"https://github.com:{servers.github.port}/owner/repo"
        status, body = await asyncio.to_thread(_fetch, via, ok, ep.ca_cert_path)
        assert (status, body) == (200, b"hello from allowed: /bridged\n")
        assert (await asyncio.to_thread(_fetch, via, bad, ep.ca_cert_path))[0] == 403
    socket_path = ep.unix_socket
    await bridged_proxy.stop()
    assert not socket_path.exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_bwrap_unshared_network_reaches_the_proxy_through_the_bridge(
    egress_python: Path, pki: Pki, servers: Servers, tmp_path: Path
) -> None:
    """A process with ``--unshare-net`` has no route to the host, yet gets out via the proxy."""
    sock_dir = tmp_path / "run"
    sock_dir.mkdir()
    proxy = EgressProxy(
        BLACKLIST,
        tmp_path / "network.jsonl",
        EgressSettings(
            upstream_ca_bundle=pki.ca,
            resolve=dict.fromkeys([*GITHUB_NAMES, *OTHER_NAMES], LOOPBACK),
            python=egress_python,
            unix_socket=sock_dir / "egress.sock",
            startup_timeout=30,
        ),
    )
    async with proxy:
        ep = _endpoint(proxy)
        env = sandbox_env(ep, LOOPBACK, proxy_port=3128, ca_path=str(ep.ca_cert_path))
        bridge = " ".join(bridge_command(str(sock_dir / "egress.sock"), python=sys.executable))
        ok = f"https://allowed.test:{servers.allowed.port}/in-netns"
        bad = f"https://raw.githubusercontent.com:{servers.github.port}/owner/repo/main/x.py"
        direct = f"http://{LOOPBACK}:{servers.plain.port}/direct"
        script = (
            f"{bridge} & for i in $(seq 50); do "
            "(exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.1; done; "
            f"curl -sS --fail {ok}; "
            f"curl -sS -o /dev/null -w '%{{http_code}}\\n' {bad}; "
            f"curl -sS -m 3 --noproxy '*' {direct} >/dev/null 2>&1; echo direct=$?; kill %1"
        )
        cmd = ["bwrap", "--unshare-net", "--unshare-pid", "--die-with-parent",
               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
               "--bind", str(sock_dir), str(sock_dir), "--", "bash", "-c", script]  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run, cmd, env={"PATH": os.environ["PATH"], **env},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[:3] == ["hello from allowed: /in-netns", "403", "direct=7"], done.stderr
    assert not any("/direct" in s for s in servers.plain.seen)


def _ended(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in {"Z", "X"}


async def test_proxy_ends_when_its_owner_dies_without_stop(
    egress_python: Path, tmp_path: Path
) -> None:
    code = (
        "import asyncio, os\n"
        "from pathlib import Path\n"
        "from paperbench.sandbox._egress import EgressProxy, EgressSettings\n"
        "async def main():\n"
        f"    p = EgressProxy([], Path({str(tmp_path / 'log.jsonl')!r}),\n"
        f"                    EgressSettings(python=Path({str(egress_python)!r})))\n"
        "    await p.start()\n"
        "    print(p._proc.pid, p.confdir, flush=True)\n"
        "    os._exit(1)\n"
        "asyncio.run(main())\n"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    pid_text, confdir = done.stdout.split()
    pid = int(pid_text)
    try:
        deadline = time.monotonic() + 15
        while not _ended(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _ended(pid), "the proxy outlived its owner"
        assert not Path(confdir).exists(), "the CA key outlived the proxy"
    finally:
        if not _ended(pid):
            os.kill(pid, 9)
