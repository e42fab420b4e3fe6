"""The egress proxy behind network policy ``filtered``.

A sandbox under ``filtered`` has no route out except this proxy: mitmproxy with a small addon
(``_egress_addon.py``) that intercepts TLS with a per-proxy CA, refuses blacklisted URLs with
403 before any upstream connection, refuses every address of the host's own interfaces
(asked of the kernel at each connection) and the loopback, private, link-local and other
internal ranges (``_internal_nets``, the list ``full`` refuses too; those opened with
``--allow-network`` excepted, cloud metadata never), and appends every request with its
verdict to the network log (JSON lines, read back with ``read_network_log``) for the monitor.

The proxy runs in its own process, started with an interpreter that has mitmproxy. mitmproxy
pins its dependencies tightly (11.x wants ``h11<=0.14``, which conflicts with httpx's), so
unless ``PAPERBENCH_EGRESS_PYTHON`` names such an interpreter, or mitmproxy imports in the
current environment, paperbench creates a separate virtual environment on first use, in
``PAPERBENCH_EGRESS_VENV`` or ``~/.cache/paperbench/egress-venv``.

Wiring a sandbox (see the Docker backend)::

    proxy = EgressProxy(Blacklist.from_urls(spec.blacklist), spec.network_log,
                        EgressSettings(listen_host=gateway_ip, upstream_ca_bundle=spec.ca_bundle))
    endpoint = await proxy.start()
    # mount endpoint.ca_cert_path read-only at SANDBOX_CA_PATH, add sandbox_env(endpoint)
    # to the sandbox's environment, run install_ca_command() in it as root; at the end:
    await proxy.stop()

Only the CA *certificate* ever enters a sandbox; its key stays in the proxy's confdir on the
host, which is removed when the proxy stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from paperbench.errors import EgressProxyError
from paperbench.sandbox._base import HostService, SandboxSpec
from paperbench.sandbox._blacklist import Blacklist
from paperbench.sandbox._internal_nets import IPNetwork

__all__ = [
    "BLACKLIST_REASON",
    "BRIDGE_SCRIPT",
    "DEFAULT_HOST_CA_BUNDLE",
    "EGRESS_REQUIREMENT",
    "HARNESS_REASON",
    "SANDBOX_CA_PATH",
    "EgressEndpoint",
    "EgressProxy",
    "EgressSettings",
    "NetworkLogEntry",
    "bridge_command",
    "ensure_egress_python",
    "install_ca_command",
    "read_network_log",
    "sandbox_env",
]

EGRESS_REQUIREMENT = "mitmproxy>=11.0,<12"
"""What the egress environment installs (mitmproxy 12 needs Python 3.12)."""
EGRESS_PYTHON_ENV = "PAPERBENCH_EGRESS_PYTHON"
EGRESS_VENV_ENV = "PAPERBENCH_EGRESS_VENV"
DEFAULT_HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The host's CA bundle, which the proxy trusts upstream (TLS may itself be intercepted)."""
SANDBOX_CA_PATH = "/usr/local/share/ca-certificates/paperbench-egress-ca.crt"
"""Where a sandbox finds the proxy's CA certificate (``update-ca-certificates`` reads it)."""
DEFAULT_NO_PROXY = ("localhost", "127.0.0.1", "::1")
DEFAULT_MAX_LOG_BYTES = 50_000_000
_ADDON_SCRIPT = Path(__file__).with_name("_egress_addon.py")
BLACKLIST_REASON = "blacklist"
"""The network log's ``reason`` of a request refused by a rule of the paper's blacklist."""
HARNESS_REASON = "harness blacklist"
"""The network log's ``reason`` of a request refused by a rule of the harness's own blacklist
(``SandboxSpec.harness_blacklist``), never the paper's (the addon writes the same words)."""
BRIDGE_SCRIPT = Path(__file__).with_name("_egress_bridge.py")
"""Standard-library script a sandbox runs to reach the proxy's unix socket over its loopback."""
_READY_MARKER = ".paperbench-egress"
_STDERR_TAIL = 2000

Progress = Callable[[str], None]


def _stderr_progress(message: str) -> None:
    print(f"paperbench: {message}", file=sys.stderr, flush=True)


class EgressEndpoint(BaseModel):
    """Where a started proxy listens, and the files a sandbox needs from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    port: int
    ca_cert_path: Path
    """The proxy CA's certificate (PEM), to install in the sandbox's trust store."""
    log_path: Path
    unix_socket: Path | None = None
    """A unix socket forwarding to the proxy, for sandboxes in their own network namespace."""

    @property
    def url(self) -> str:
        return _proxy_url(self.host, self.port)


class NetworkLogEntry(BaseModel):
    """One line of the network log."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ts: str
    method: str | None = None
    url: str | None = None
    host: str | None = None
    verdict: Literal["allowed", "blocked", "error"]
    rule: str | None = None
    """The blacklist line that refused the request."""
    status: int | None = None
    reason: str | None = None
    """Why a request was blocked or failed: ``blacklist`` (a rule of the paper's blacklist),
    ``harness blacklist`` (a rule of the harness's own, ``SandboxSpec.harness_blacklist``),
    private address, non-HTTP traffic, ..."""
    error: str | None = None


def read_network_log(path: Path, *, max_entries: int = 1_000_000) -> list[NetworkLogEntry]:
    """Read a network log; a torn last line (the proxy was killed mid-write) is skipped.

    Raises:
        EgressProxyError: the file cannot be read.
    """
    entries: list[NetworkLogEntry] = []
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if len(entries) >= max_entries:
                    break
                with contextlib.suppress(ValueError):
                    entries.append(NetworkLogEntry.model_validate(json.loads(line)))
    except OSError as exc:
        raise EgressProxyError(f"{path}: cannot read the network log: {exc}") from exc
    return entries


# --- the environment that runs mitmproxy --------------------------------------------------


def default_egress_venv() -> Path:
    if value := os.environ.get(EGRESS_VENV_ENV):
        return Path(value)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "paperbench" / "egress-venv"


def find_egress_python() -> Path | None:
    """An interpreter that can run the proxy without installing anything, or None."""
    if value := os.environ.get(EGRESS_PYTHON_ENV):
        return Path(value)
    if importlib.util.find_spec("mitmproxy") is not None:
        return Path(sys.executable)
    venv = default_egress_venv()
    if _venv_ready(venv):
        return venv / "bin" / "python"
    return None


async def ensure_egress_python(progress: Progress | None = None) -> Path:
    """An interpreter with mitmproxy, creating the egress environment on first use.

    Raises:
        EgressProxyError: the environment could not be created.
    """
    found = find_egress_python()
    if found is not None:
        return found
    return await asyncio.to_thread(
        _create_venv, default_egress_venv(), progress or _stderr_progress
    )


def _venv_ready(venv: Path) -> bool:
    marker = venv / _READY_MARKER
    try:
        return marker.read_text().strip() == EGRESS_REQUIREMENT
    except OSError:
        return False


def _create_venv(venv: Path, progress: Progress) -> Path:
    python = venv / "bin" / "python"
    hint = f"or set {EGRESS_PYTHON_ENV} to a Python that has {EGRESS_REQUIREMENT!r} installed"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _venv_ready(venv):
            return python
        progress(f"creating the egress proxy environment in {venv} ({EGRESS_REQUIREMENT}, once)")
        shutil.rmtree(venv, ignore_errors=True)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
             EGRESS_REQUIREMENT],
            [str(python), "-c", "import mitmproxy.tools.dump"],
        ]  # fmt: skip
        for cmd in steps:
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise EgressProxyError(f"cannot create {venv}: {exc}; {hint}") from exc
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip()[-_STDERR_TAIL:]
                raise EgressProxyError(
                    f"cannot create {venv}: {' '.join(cmd[:4])} failed: {tail}; {hint}"
                )
        (venv / _READY_MARKER).write_text(EGRESS_REQUIREMENT + "\n")
        progress("egress proxy environment ready")
    return python


# --- the proxy ------------------------------------------------------------------------------


class EgressSettings(BaseModel):
    """How an :class:`EgressProxy` runs, besides what it refuses and where it logs.

    ``listen_host`` is the address sandboxes reach: loopback for tests and host-side tools,
    the gateway address of a sandbox network for Docker. ``resolve`` maps host names to
    addresses like curl's ``--resolve`` (tests point ``github.com`` at local servers); mapped
    addresses are exempt from the private-address refusal. ``services`` are the host services
    a sandbox may reach by name (:class:`~paperbench.sandbox._base.HostService`): only their
    port, plain HTTP, responses streamed. ``allow`` are internal ranges the proxy connects to
    after all (``SandboxSpec.allow_networks``).
    ``upstream_ca_bundle`` adds CA certificates (one file or several) to trust upstream
    besides ``host_ca_bundle``. ``unix_socket`` makes the proxy process also accept
    connections on that unix socket, for sandboxes in a network namespace of their own (see
    ``_egress_bridge`` and ``bridge_command``). ``confdir`` is where the proxy keeps its CA
    (default: a temporary folder, removed when it stops); ``python`` an interpreter with
    mitmproxy (default: :func:`ensure_egress_python`, which tells ``progress`` of the
    environment it creates).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    upstream_ca_bundle: tuple[Path, ...] = ()
    host_ca_bundle: Path | None = DEFAULT_HOST_CA_BUNDLE
    upstream_proxy: str | None = Field(default=None, repr=False)  # may carry user:password@
    resolve: dict[str, str] = Field(default_factory=dict)
    block_private: bool = True
    confdir: Path | None = None
    python: Path | None = None
    startup_timeout: float = 60.0
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES
    progress: Progress | None = None
    unix_socket: Path | None = None
    services: tuple[HostService, ...] = ()
    allow: tuple[IPNetwork, ...] = ()

    @field_validator("upstream_ca_bundle", mode="before")
    @classmethod
    def _one_or_several(cls, value: object) -> object:
        if value is None:
            return ()
        return (value,) if isinstance(value, Path | str) else value


class EgressProxy:
    """A mitmproxy process enforcing a blacklist and writing the network log to ``log_path``,
    run as ``settings`` say (:class:`EgressSettings`; its defaults when not given).

    ``harness`` is the harness's own blacklist (``SandboxSpec.harness_blacklist``): refused
    like ``blacklist`` but logged with reason ``harness blacklist``; a request both refuse is
    logged as the paper's.

    Raises:
        EgressProxyError: ``listen_host``, an address of ``resolve`` or a service's
            ``target_host`` is not an IP address.
    """

    def __init__(
        self,
        blacklist: Blacklist | Iterable[str],
        log_path: Path,
        settings: EgressSettings | None = None,
        *,
        harness: Blacklist | Iterable[str] = (),
    ) -> None:
        s = settings or EgressSettings()
        self.blacklist = (
            blacklist if isinstance(blacklist, Blacklist) else Blacklist.from_urls(blacklist)
        )
        self.harness = harness if isinstance(harness, Blacklist) else Blacklist.from_urls(harness)
        self.log_path = Path(log_path)
        self.listen_host = _ip_literal(s.listen_host, "listen_host")
        self.listen_port = s.listen_port
        self.upstream_ca_bundles = list(s.upstream_ca_bundle)
        self.host_ca_bundle = s.host_ca_bundle
        self.upstream_proxy = s.upstream_proxy
        self.resolve = {h: _ip_literal(a, f"resolve[{h!r}]") for h, a in s.resolve.items()}
        self.block_private = s.block_private
        self._confdir_given = s.confdir
        self.confdir: Path | None = None
        self.python = s.python
        self.startup_timeout = s.startup_timeout
        self.max_log_bytes = s.max_log_bytes
        self.progress = s.progress
        self.unix_socket = s.unix_socket
        self.services = {
            f"{v.name}:{v.port}": f"{_ip_literal(v.target_host, 'target_host')}:{v.target_port}"
            for v in s.services
        }
        self.allow = s.allow
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr: IO[bytes] | None = None
        self._drain: asyncio.Task[None] | None = None
        self.endpoint: EgressEndpoint | None = None

    async def start(self) -> EgressEndpoint:
        """Start the proxy and wait until it listens.

        Raises:
            EgressProxyError: mitmproxy is missing and cannot be installed, a CA bundle is
                unreadable, or the proxy did not come up in ``startup_timeout``.
        """
        if self.endpoint is not None:
            return self.endpoint
        python = self.python or await ensure_egress_python(self.progress)
        try:
            return await self._start(python)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, python: Path) -> EgressEndpoint:
        confdir = self._confdir_given or Path(tempfile.mkdtemp(prefix="paperbench-egress-"))
        confdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.confdir = confdir
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()
        config = {
            "listen_host": self.listen_host,
            "listen_port": self.listen_port,
            "confdir": str(confdir),
            "log_path": str(self.log_path.resolve()),
            "blacklist": self.blacklist.urls,
            "harness_blacklist": self.harness.urls,
            "upstream_ca": self._write_upstream_ca(confdir),
            "upstream_proxy": self.upstream_proxy,
            "resolve": self.resolve,
            "services": self.services,
            "block_private": self.block_private,
            "allow_networks": [str(n) for n in self.allow],
            "max_log_bytes": self.max_log_bytes,
            "unix_socket": str(self.unix_socket) if self.unix_socket else None,
            "remove_confdir": self._confdir_given is None,
        }
        config_path = confdir / "egress.json"
        config_path.write_text(json.dumps(config, indent=2))
        self._stderr = (confdir / "proxy.stderr").open("w+b")
        try:
            self._proc = await asyncio.create_subprocess_exec(
                str(python), "-I", str(_ADDON_SCRIPT), str(config_path),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,  # no terminal signals from the caller's group
            )  # fmt: skip
        except OSError as exc:
            raise EgressProxyError(
                f"cannot start the egress proxy with {python}: {exc}; "
                f"set {EGRESS_PYTHON_ENV} to a Python that has mitmproxy"
            ) from exc
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), self.startup_timeout)
        except TimeoutError:
            raise EgressProxyError(
                f"the egress proxy did not start within {self.startup_timeout:.0f} s: "
                f"{self._stderr_tail()}"
            ) from None
        try:
            ready = json.loads(line)
            host, port = str(ready["host"]), int(ready["port"])
        except (ValueError, KeyError, TypeError):
            raise EgressProxyError(
                f"the egress proxy failed to start: {self._stderr_tail() or line!r}"
            ) from None
        self._drain = asyncio.create_task(_drain(self._proc.stdout))
        ca_cert = confdir / "mitmproxy-ca-cert.pem"
        if not ca_cert.is_file():
            raise EgressProxyError(f"the egress proxy wrote no CA certificate in {confdir}")
        ca_cert.chmod(0o644)
        self.endpoint = EgressEndpoint(
            host=host,
            port=port,
            ca_cert_path=ca_cert,
            log_path=self.log_path,
            unix_socket=self.unix_socket,
        )
        return self.endpoint

    def _write_upstream_ca(self, confdir: Path) -> str | None:
        sources = [p for p in [self.host_ca_bundle] if p is not None and p.is_file()]
        sources += self.upstream_ca_bundles
        if not sources:
            return None
        parts = []
        for path in sources:
            try:
                parts.append(path.read_text(encoding="ascii").strip() + "\n")
            except (OSError, UnicodeDecodeError) as exc:
                raise EgressProxyError(
                    f"{path}: cannot read CA bundle: {exc}; pass a PEM file to --ca-bundle"
                ) from exc
        bundle = confdir / "upstream-ca.pem"
        bundle.write_text("".join(parts))
        return str(bundle)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - _STDERR_TAIL))
        return self._stderr.read().decode("utf-8", errors="replace").strip()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def stop(self) -> None:
        """Stop the proxy process and remove its confdir (if paperbench made it). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None:
            await _end_process(proc)
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain
            self._drain = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.unix_socket is not None:
            self.unix_socket.unlink(missing_ok=True)
        if self.confdir is not None and self._confdir_given is None:
            shutil.rmtree(self.confdir, ignore_errors=True)
        self.confdir = None
        self.endpoint = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


async def _end_process(proc: asyncio.subprocess.Process) -> None:
    """Close stdin (the proxy shuts down by itself), then SIGTERM, then SIGKILL."""
    if proc.stdin is not None:
        proc.stdin.close()
    for action, wait in ((None, 5.0), (proc.terminate, 3.0), (proc.kill, 5.0)):
        if action is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                action()
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


# --- what a sandbox needs ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProxyInputs:
    """What a sandbox's proxy refuses and where it logs."""

    blacklist: Blacklist
    """The paper's (``spec.blacklist``)."""
    harness: Blacklist
    """The harness's own (``spec.harness_blacklist``)."""
    log_path: Path


def proxy_inputs(spec: SandboxSpec, log_dir: Path | None, name: str) -> ProxyInputs:
    """The blacklists and network-log path of a sandbox's proxy: ``spec.network_log``, else
    ``<log_dir or ~/.cache/paperbench/network-logs>/<name>.jsonl``.

    Raises:
        EgressProxyError: ``spec.blacklist`` or ``spec.harness_blacklist`` holds an entry
            that is not one URL.
    """
    lists: list[Blacklist] = []
    given = (("blacklist", spec.blacklist), ("harness blacklist", spec.harness_blacklist))
    for what, urls in given:
        try:
            lists.append(Blacklist.from_urls(urls))
        except ValueError as exc:
            raise EgressProxyError(f"the sandbox's {what}: {exc}") from exc
    folder = log_dir or Path.home() / ".cache" / "paperbench" / "network-logs"
    log_path = spec.network_log if spec.network_log is not None else folder / f"{name}.jsonl"
    return ProxyInputs(lists[0], lists[1], log_path)


CA_BUNDLE_VARS = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "npm_config_cafile",
    "AWS_CA_BUNDLE",
)
"""The variables that name a CA bundle, each set to the egress proxy's CA in a sandbox."""


def sandbox_env(
    endpoint: EgressEndpoint,
    proxy_host: str | None = None,
    *,
    proxy_port: int | None = None,
    ca_path: str = SANDBOX_CA_PATH,
    no_proxy: Iterable[str] = DEFAULT_NO_PROXY,
) -> dict[str, str]:
    """Environment for a sandbox behind ``endpoint``.

    ``proxy_host`` and ``proxy_port`` are the proxy's address as seen from the sandbox
    (default: where it listens; a bridged local sandbox gives its own loopback). ``ca_path``
    is where the sandbox finds the CA certificate. Every TLS connection leaves through the
    proxy, so the CA variables name the proxy's CA alone.
    """
    url = _proxy_url(proxy_host or endpoint.host, proxy_port or endpoint.port)
    skip = ",".join(no_proxy)
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    env |= {"NO_PROXY": skip, "no_proxy": skip}
    env |= dict.fromkeys(CA_BUNDLE_VARS, ca_path)
    return env


def bridge_command(
    socket_path: str, *, port: int = 3128, python: str = "python3", script: str | None = None
) -> list[str]:
    """The command a sandbox with its own network namespace runs in the background so that
    ``127.0.0.1:port`` inside it reaches the proxy's unix socket (bound in at ``socket_path``).
    Pair with ``sandbox_env(endpoint, "127.0.0.1", proxy_port=port)``."""
    return [python, "-I", script or str(BRIDGE_SCRIPT), "tcp-to-unix", f"127.0.0.1:{port}",
            socket_path]  # fmt: skip


def install_ca_command(ca_path: str = SANDBOX_CA_PATH) -> str:
    """A shell command that adds the CA at ``ca_path`` to the sandbox's system trust store.

    Run it once as root. It uses ``update-ca-certificates`` where the image has it and
    otherwise appends to the system bundle; it never fails the sandbox (the environment
    from ``sandbox_env`` covers the common tools either way).
    """
    target = SANDBOX_CA_PATH
    return (
        f"ca={_sh_quote(ca_path)}; "
        "if command -v update-ca-certificates >/dev/null 2>&1; then "
        f"mkdir -p /usr/local/share/ca-certificates && "
        f'{{ [ "$ca" = {_sh_quote(target)} ] || cp "$ca" {_sh_quote(target)}; }} && '
        "update-ca-certificates >/dev/null 2>&1; "
        "else for b in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do "
        '[ -f "$b" ] && cat "$ca" >> "$b"; done; fi; true'
    )


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _proxy_url(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _ip_literal(value: str, field: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise EgressProxyError(f"{field}: expected an IP address, got {value!r}") from None
