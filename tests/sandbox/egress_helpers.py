"""Offline stand-ins for the internet, shared by the egress tests: a test CA, HTTPS servers on
127.0.0.1 with a certificate for github.com and a few test names, and the blacklist they use.

The proxy's ``resolve`` mapping (``RESOLVE``) points those names at loopback. Every server
listens on 127.0.0.1 only and is shut down when ``serve`` exits.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LOOPBACK = "127.0.0.1"
GITHUB_NAMES = ["github.com", "www.github.com", "codeload.github.com", "raw.githubusercontent.com"]
OTHER_NAMES = ["allowed.test", "example.org", "blocked-host.test"]
BLACKLIST = ["https://github.com/Owner/Repo", "example.org/code", "blocked-host.test"]
RESOLVE = dict.fromkeys([*GITHUB_NAMES, *OTHER_NAMES], LOOPBACK)


@dataclass
class LocalServer:
    name: str
    server: ThreadingHTTPServer
    seen: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


def start_server(name: str, context: ssl.SSLContext | None) -> LocalServer:
    """An HTTP(S) server on 127.0.0.1 answering ``hello from <name>: <path>``."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.headers.get('Host')}{self.path}")
            body = f"hello from {name}: {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_HEAD = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}).start()
    return LocalServer(name, server, seen)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path


def make_pki(d: Path) -> Pki:
    """A test CA in ``d`` and one server certificate for every name the servers stand in for.

    Raises:
        RuntimeError: the openssl command is missing.
    """
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the test CA")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=paperbench test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=github.com", cwd=d)
    names = ",".join(f"DNS:{n}" for n in [*GITHUB_NAMES, *OTHER_NAMES])
    (d / "ext.cnf").write_text(
        f"subjectAltName={names}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    _openssl(
        "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=d,
    )  # fmt: skip
    return Pki(ca=d / "ca.pem", cert=d / "srv.pem", key=d / "srv.key")


@dataclass
class Servers:
    github: LocalServer
    allowed: LocalServer
    plain: LocalServer


@contextmanager
def serve(pki: Pki) -> Iterator[Servers]:
    """Two HTTPS servers (github, allowed) and one plain HTTP server, all on 127.0.0.1."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.cert, pki.key)
    started: list[LocalServer] = []
    try:
        for name, ctx in (("github", context), ("allowed", context), ("plain", None)):
            started.append(start_server(name, ctx))
        yield Servers(*started)
    finally:
        for s in started:
            s.server.shutdown()
            s.server.server_close()


@contextmanager
def veth_namespace(
    name: str,
    host_side: str,
    peer: str,
    server: list[str],
    *,
    extra: tuple[str, ...] = (),
) -> Iterator[None]:
    """A network namespace ``name`` joined to the host by a veth pair (``host_side`` and
    ``peer`` in one /30; each of ``extra`` a /32 of the peer, routed to it from the host),
    running ``server`` (an argv) inside it; all of it removed on exit, also on failure."""
    if shutil.which("ip") is None:
        raise AssertionError("the ip command (iproute2) is needed for the test namespace")
    host_if, peer_if = f"{name[:8]}h", f"{name[:8]}p"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

    proc: subprocess.Popen[bytes] | None = None
    try:
        ip("netns", "add", name)
        ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        ip("link", "set", peer_if, "netns", name)
        ip("addr", "add", f"{host_side}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", name, "addr", "add", f"{peer}/30", "dev", peer_if)
        for address in extra:
            ip("-n", name, "addr", "add", f"{address}/32", "dev", peer_if)
        ip("-n", name, "link", "set", peer_if, "up")
        ip("-n", name, "link", "set", "lo", "up")
        ip("-n", name, "route", "add", "default", "via", host_side)
        for address in extra:
            ip("route", "add", f"{address}/32", "dev", host_if)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", name, *server],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        yield
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
