"""The egress proxy process: mitmproxy with paperbench's blacklist addon.

Started by ``paperbench.sandbox._egress.EgressProxy`` as ``PYTHON _egress_addon.py CONFIG.json``
with an interpreter that has mitmproxy (often a separate environment, since mitmproxy pins its
dependencies tightly). It therefore imports only the standard library, mitmproxy, and
``_blacklist.py`` and ``_internal_nets.py`` (the ranges it refuses, the same list as the host
firewall rules of ``full``) loaded by path from beside this file; never ``paperbench`` itself.

Protocol with the parent: one JSON line on stdout once the proxy listens,
``{"event": "ready", "host": ..., "port": ...}``; the process exits when its stdin closes
(so it never outlives paperbench) or on SIGTERM. Diagnostics go to stderr.

Per request the addon decides, and appends one JSON line to the network log:
``{ts, method, url, host, verdict, rule, status, reason?, error?}`` where verdict is
``allowed``, ``blocked`` or ``error`` (the client never got through, e.g. it refused the
proxy's certificate). Blocked requests are answered 403 before any upstream connection is made
(``connection_strategy=lazy``). Two blacklists are told apart by ``reason``: ``blacklist`` for a
rule of the paper's (``blacklist``), ``harness blacklist`` for one of the harness's own
(``harness_blacklist``: a command agent's model providers); the paper's is asked first, so a
request both refuse is logged as the paper's.

Host services (``services``: ``"name:port"`` → ``"address:port"``, e.g. the model gateway of an
external agent) are the one way to the host: a plain-HTTP request to ``http://name:port`` goes
to the address, whatever the private-address refusal says, with its response streamed (server-
sent events must not wait for the end). The name on another port, and a CONNECT (TLS) to it,
are refused. Logged with rule ``host_service``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import json
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from mitmproxy import http, tcp, tls  # type: ignore[import-not-found,unused-ignore]
from mitmproxy.options import Options  # type: ignore[import-not-found,unused-ignore]
from mitmproxy.proxy.server_hooks import ServerConnectionHookData  # type: ignore[import-not-found,unused-ignore]
from mitmproxy.tools.dump import DumpMaster  # type: ignore[import-not-found,unused-ignore]

_URL_LOG_LIMIT = 4096
BLACKLIST_REASON = "blacklist"
HARNESS_REASON = "harness blacklist"
"""The network log's ``reason`` for each list's refusals (``_egress.py`` names them too)."""


def _load_sibling(name: str) -> ModuleType:
    """Load ``paperbench/sandbox/<name>.py`` by path (``paperbench`` is not importable here)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_paperbench{name}", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _parse_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``address`` as an IP address (an IPv4-mapped IPv6 one as IPv4; a zone dropped)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _internal_nets() -> ModuleType:
    name = "_paperbench_internal_nets"
    return sys.modules.get(name) or _load_sibling("_internal_nets")


def range_refusal(address: str, allowed: Sequence[Any] = ()) -> str | None:
    """Why ``address`` is refused by its range: ``cloud metadata address`` or ``private
    address`` (loopback, private, link-local, ULA, multicast, ...: ``_internal_nets``), unless
    a range of ``allowed`` (``ipaddress`` networks) holds it; None: it may be reached."""
    ip = _parse_ip(address)
    if ip is None:
        return None
    reason: str | None = _internal_nets().refusal(ip, allowed)
    return reason


def is_host_address(address: str) -> bool:
    """An address of one of this machine's own interfaces, whatever its range (a public
    address of the host's, a Docker bridge's gateway): one a socket can be bound to.

    Asked of the kernel at every check, so an interface that appears after the proxy started
    is covered too.
    """
    ip = _parse_ip(address)
    if ip is None:
        return False
    if ip.is_unspecified or ip.is_loopback:
        return True
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


def refused_address(address: str, allowed: Sequence[Any] = ()) -> str | None:
    """Why the proxy never connects to ``address`` (None: it may). The host's own addresses
    stay refused whatever ``allowed`` opens."""
    if is_host_address(address):
        return "host address"
    return range_refusal(address, allowed)


class NetworkLog:
    """Appends JSON lines, flushed one by one, up to ``max_bytes`` (then one final notice)."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file = path.open("a", encoding="utf-8")
        self._written = path.stat().st_size
        self._full = False

    def write(self, **entry: Any) -> None:
        if self._full:
            return
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        if self._written + len(line) > self.max_bytes:
            self._full = True
            line = json.dumps({"ts": _now(), "verdict": "error", "reason": "log full"}) + "\n"
        self._file.write(line)
        self._file.flush()
        self._written += len(line)

    def close(self) -> None:
        self._file.close()


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _cap(text: str) -> str:
    return text if len(text) <= _URL_LOG_LIMIT else text[:_URL_LOG_LIMIT] + "..."


class EgressAddon:
    """Refuses blacklisted URLs with 403 and logs every request with its verdict."""

    def __init__(
        self,
        blacklist: Any,
        log: NetworkLog,
        *,
        resolve: dict[str, str],
        block_private: bool,
        via_upstream_proxy: bool = False,
        unix_socket: str | None = None,
        services: dict[str, str] | None = None,
        allow_networks: Sequence[str] = (),
        harness: Any = None,
    ) -> None:
        self.blacklist = blacklist
        self.harness = harness
        """The harness's own blacklist (a ``Blacklist``), or None."""
        self.allowed = [ipaddress.ip_network(n) for n in allow_networks]
        """Internal ranges this sandbox may reach after all (``--allow-network``)."""
        self.services: dict[str, tuple[str, int]] = {}
        for key, target in (services or {}).items():
            address, _, port = target.rpartition(":")
            self.services[key.lower()] = (address, int(port))
        self.service_names = {key.rpartition(":")[0] for key in self.services}
        self.log = log
        self.resolve = {k.lower(): v for k, v in resolve.items()}
        self.block_private = block_private
        self.via_upstream_proxy = via_upstream_proxy
        self.unix_socket = unix_socket
        self._unix_server: Any = None  # a BridgeServer of the sibling module loaded by path

    # --- lifecycle --------------------------------------------------------------------------

    async def running(self) -> None:
        from mitmproxy import ctx

        proxyserver: Any = ctx.master.addons.get("proxyserver")
        addrs = proxyserver.listen_addrs()
        host, port = addrs[0][0], addrs[0][1]
        ready: dict[str, Any] = {"event": "ready", "host": host, "port": port}
        if self.unix_socket:
            bridge = _load_sibling("_egress_bridge")
            path = Path(self.unix_socket)
            try:
                self._unix_server = await bridge.serve_unix_to_tcp(path, host, port)
            except OSError as exc:  # said on stderr: mitmproxy's own exit names no cause
                sys.stderr.write(f"cannot listen on the unix socket {path}: {exc}\n")
                sys.stderr.flush()
                raise
            ready["unix_socket"] = str(path)
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()

    def done(self) -> None:
        if self._unix_server is not None:
            self._unix_server.close()
        self.log.close()

    # --- decisions --------------------------------------------------------------------------

    def _blocked(self, flow: http.HTTPFlow, reason: str, rule: str | None, message: str) -> None:
        body = f"paperbench egress proxy: {message}\n"
        flow.response = http.Response.make(
            403,
            body.encode(),
            {"Content-Type": "text/plain; charset=utf-8", "X-Paperbench-Egress": "blocked"},
        )
        flow.metadata["paperbench_logged"] = True
        self._write(flow, "blocked", rule=rule, status=403, reason=reason)

    def _write(self, flow: http.HTTPFlow, verdict: str, **extra: Any) -> None:
        req = flow.request
        url = f"{req.host}:{req.port}" if req.method == "CONNECT" else req.pretty_url
        self.log.write(
            ts=_now(),
            method=req.method,
            url=_cap(url),
            host=req.pretty_host,
            verdict=verdict,
            **{"rule": None, "status": None, **extra},
        )

    def _refused_target(self, host: str) -> str | None:
        """Why ``host`` (a name or an address literal) is refused as it is written."""
        if not self.block_private or host.lower() in self.resolve:
            return None
        if host.lower().rstrip(".") == "localhost":
            return "host address"
        return refused_address(host, self.allowed)

    def _refuse_address(self, flow: http.HTTPFlow, host: str, reason: str) -> None:
        what = {"host address": "an address of this machine"}.get(reason, f"a {reason}")
        self._blocked(flow, reason, None, f"{host} is {what}")

    def _service(self, host: str, port: int) -> tuple[str, int] | None:
        return self.services.get(f"{host.lower().rstrip('.')}:{port}")

    def http_connect(self, flow: http.HTTPFlow) -> None:
        host = flow.request.host
        if host.lower().rstrip(".") in self.service_names:
            what = f"{host}:{flow.request.port} is a host service: plain HTTP to its own port only"
            self._blocked(flow, "host service", "host_service", what)
            return
        if self._refused_by_a_list(flow, [host], host=True):
            return
        if (refused := self._refused_target(host)) is not None:
            self._refuse_address(flow, host, refused)
        else:
            flow.metadata["paperbench_logged"] = True
            self._write(flow, "allowed", status=200)

    async def request(self, flow: http.HTTPFlow) -> None:
        req = flow.request
        if req.host.lower().rstrip(".") in self.service_names:
            if flow.client_conn.tls_established or self._service(req.host, req.port) is None:
                what = f"{req.host}:{req.port} is a host service: plain HTTP to its own port only"
                self._blocked(flow, "host service", "host_service", what)
            else:
                flow.metadata["paperbench_service"] = True
            return
        # The destination (absolute URL or CONNECT target), the Host header and the client's
        # TLS server name (mitmproxy sends it upstream as given) may differ: refuse if any
        # names a blacklisted URL.
        candidates = [req.url, req.pretty_url]
        if flow.client_conn.sni:
            candidates.append(f"{req.scheme}://{flow.client_conn.sni}{req.path}")
        if self._refused_by_a_list(flow, candidates, host=False):
            return
        refused = self._refused_target(req.host) or await self._resolves_refused(req.host, req.port)
        if refused is not None:
            self._refuse_address(flow, req.host, refused)

    def _refused_by_a_list(self, flow: http.HTTPFlow, targets: list[str], *, host: bool) -> bool:
        """Refuse the request if a rule of the paper's blacklist, else of the harness's, refuses
        one of ``targets`` (host names at CONNECT, URLs after it); logged with the list's reason.
        """
        lists = [(self.blacklist, BLACKLIST_REASON, "is blacklisted")]
        if self.harness is not None:
            lists.append((self.harness, HARNESS_REASON, "is refused by the harness"))
        for rules, reason, what in lists:
            for target in targets:
                hit = rules.blocks_host(target) if host else rules.matches(target)
                if hit is not None:
                    self._blocked(flow, reason, hit.rule, f"{target} {what} ({hit.rule})")
                    return True
        return False

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        if flow.metadata.get("paperbench_service") and flow.response is not None:
            flow.response.stream = True  # server-sent events pass as they come

    def response(self, flow: http.HTTPFlow) -> None:
        if not flow.metadata.get("paperbench_logged") and flow.response is not None:
            flow.metadata["paperbench_logged"] = True
            rule = "host_service" if flow.metadata.get("paperbench_service") else None
            self._write(flow, "allowed", status=flow.response.status_code, rule=rule)

    def error(self, flow: http.HTTPFlow) -> None:
        if not flow.metadata.get("paperbench_logged"):
            flow.metadata["paperbench_logged"] = True
            message = flow.error.msg if flow.error else "unknown error"
            rule = "host_service" if flow.metadata.get("paperbench_service") else None
            self._write(flow, "allowed", error=_cap(message), rule=rule)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        server = flow.server_conn
        host = server.sni or (server.address[0] if server.address else "")
        self.log.write(
            ts=_now(),
            method=None,
            url=None,
            host=host,
            verdict="blocked",
            rule=None,
            status=None,
            reason="non-HTTP traffic",
        )
        flow.kill()

    def tls_failed_client(self, data: tls.TlsData) -> None:
        self.log.write(
            ts=_now(),
            method=None,
            url=None,
            host=data.context.client.sni,
            verdict="error",
            rule=None,
            status=None,
            reason="client TLS handshake failed (is the proxy CA trusted in the sandbox?)",
            error=_cap(str(data.conn.error)),
        )

    async def server_connect(self, data: ServerConnectionHookData) -> None:
        """Pin the upstream address: test mappings, and never the host's private networks."""
        if data.server.address is None:
            return
        host, port = data.server.address[0], data.server.address[1]
        service = self._service(host, port)
        if service is not None:
            data.server.address = service
            return
        mapped = self.resolve.get(host.lower())
        if mapped is not None:
            data.server.address = (mapped, port)
            return
        if not self.block_private or self.via_upstream_proxy:
            return  # behind an upstream proxy, the address here is the proxy's own
        if (refused := self._refused_target(host)) is not None:
            data.server.error = f"paperbench egress proxy: {host} is a refused {refused}"
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            data.server.error = f"cannot resolve {host}: {exc}"
            return
        addresses = [str(info[4][0]) for info in infos]
        refused = next(filter(None, (refused_address(a, self.allowed) for a in addresses)), None)
        if not addresses or refused is not None:
            data.server.error = f"paperbench egress proxy: {host} resolves to a {refused}"
            return
        data.server.address = (addresses[0], port)

    async def _resolves_refused(self, host: str, port: int) -> str | None:
        if not self.block_private or host.lower() in self.resolve:
            return None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError:
            return None  # reported as an upstream error instead
        found = (refused_address(str(info[4][0]), self.allowed) for info in infos)
        return next(filter(None, found), None)


def _watch_stdin(master: DumpMaster) -> None:
    """Shut down when the parent goes away (stdin reaches EOF)."""
    try:
        while sys.stdin.buffer.read(1024):
            pass
    except OSError:
        pass
    master.shutdown()


async def _main(config: dict[str, Any]) -> None:
    blacklist_module = _load_sibling("_blacklist")
    blacklist = blacklist_module.Blacklist.from_urls(config["blacklist"])
    harness = blacklist_module.Blacklist.from_urls(config.get("harness_blacklist") or [])
    opts = Options(
        listen_host=config["listen_host"],
        listen_port=int(config["listen_port"]),
        confdir=config["confdir"],
    )
    master = DumpMaster(opts, with_termlog=False, with_dumper=False)
    updates: dict[str, Any] = {
        "connection_strategy": "lazy",
        "ssl_insecure": False,
        "http2": True,
        "stream_large_bodies": "1m",
    }
    if config.get("upstream_ca"):
        updates["ssl_verify_upstream_trusted_ca"] = config["upstream_ca"]
    if config.get("upstream_proxy"):
        updates["mode"] = [f"upstream:{config['upstream_proxy']}"]
    master.options.update(**updates)
    log = NetworkLog(Path(config["log_path"]), int(config["max_log_bytes"]))
    master.addons.add(
        EgressAddon(
            blacklist,
            log,
            resolve=dict(config.get("resolve") or {}),
            block_private=bool(config.get("block_private", True)),
            via_upstream_proxy=bool(config.get("upstream_proxy")),
            unix_socket=config.get("unix_socket"),
            services=dict(config.get("services") or {}),
            allow_networks=list(config.get("allow_networks") or []),
            harness=harness,
        )
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    threading.Thread(target=_watch_stdin, args=(master,), daemon=True).start()
    try:
        await master.run()
    finally:
        if config.get("remove_confdir"):
            # The CA key must not outlive the proxy, even when its owner died without stop().
            shutil.rmtree(config["confdir"], ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: _egress_addon.py CONFIG.json\n")
        return 2
    config = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    asyncio.run(_main(config))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
