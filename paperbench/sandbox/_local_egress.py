"""``network=filtered`` for the local backend: one egress proxy per sandbox.

Under bubblewrap a filtered sandbox has a network namespace of its own, with only a loopback,
that lives as long as the sandbox:

    command (one bwrap per exec, joined to the sandbox's netns) ─TCP→ 127.0.0.1:3128
        └ bridge, in the "netns keeper" ─unix→ <workspace>/egress/egress.sock
            └ the egress proxy on the host (``EgressSettings(unix_socket=...)``) → the internet

How it lives across execs: at start, one long-lived bwrap (the *keeper*) is started with
``--unshare-net``; it runs only the stdlib bridge (``_egress_bridge.py``), sees the socket's
folder and nothing of the workspace. Its namespace is pinned by an open file descriptor
(``/proc/<keeper>/ns/net``, checked against the inode bwrap reports); each exec joins it with
``setns(2)`` between fork and exec and then starts its usual bwrap, without ``--unshare-net``.
So every command shares one namespace (as in a container) while keeping its own pid namespace,
the bridge starts once instead of once per exec, and commands never see the socket. Joining
a namespace needs root (CAP_SYS_ADMIN), which the local backend has on these machines;
without it ``start`` fails with a clear error. If the keeper dies, commands keep their
isolated namespace and simply have no way out: it fails closed. The keeper and the bridge are
not in the sandbox's cgroup (like the proxy, they are paperbench's, not the sandbox's), and
they end with the paperbench process (``--die-with-parent``).

Trust: the system folders are the host's, read-only, so nothing can be installed into the
system trust store. Instead each exec gets the host's CA bundle plus the proxy's CA
certificate bound read-only at ``/run/paperbench/egress-ca.pem`` and, when the host's
``/etc/ssl/certs/ca-certificates.crt`` is a regular file, over that path too (OpenSSL,
curl and git read it). The variables from ``sandbox_env`` (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
PIP_CERT, GIT_SSL_CAINFO, NODE_EXTRA_CA_CERTS, ...) name the same file. A tool with its own
trust store that reads neither fails TLS through the proxy.

Plain mode (no bubblewrap) has no network namespace: the proxy runs and its variables are
set, but a command that ignores HTTPS_PROXY reaches the network directly. Advisory only, and
said loudly in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from paperbench.errors import SandboxError
from paperbench.sandbox._base import SandboxSpec
from paperbench.sandbox._egress import (
    BRIDGE_SCRIPT,
    DEFAULT_HOST_CA_BUNDLE,
    EgressEndpoint,
    EgressProxy,
    EgressSettings,
    proxy_inputs,
    sandbox_env,
)
from paperbench.sandbox._local_gc import WORKSPACE_PREFIX, remove_tree, write_owner

log = logging.getLogger("paperbench.sandbox")

__all__ = ["BRIDGE_PORT", "LocalEgress", "LocalEgressGateway"]

BRIDGE_PORT = 3128
CA_IN_SANDBOX = "/run/paperbench/egress-ca.pem"
_SOCKET_DIR_IN_SANDBOX = "/run/paperbench/egress"
_BRIDGE_IN_SANDBOX = "/run/paperbench/egress_bridge.py"
_SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_CLONE_NEWNET = 0x40000000
_STDERR_TAIL = 2000
_MAX_SOCKET_PATH = 100
"""Bytes; sun_path holds 108 with its terminating NUL."""
# Runs in the keeper: load the bridge file, listen, then say so on stdout (no polling).
_KEEPER_CODE = """\
import asyncio, importlib.util, sys
spec = importlib.util.spec_from_file_location("paperbench_egress_bridge", sys.argv[1])
bridge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bridge)
async def main():
    server = await bridge.serve_tcp_to_unix("127.0.0.1", int(sys.argv[2]), bridge.Path(sys.argv[3]))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""

_warned_plain = False


def _warn_plain_once() -> None:
    global _warned_plain
    if not _warned_plain:
        _warned_plain = True
        log.warning(
            "network=filtered WITHOUT bubblewrap is ADVISORY ONLY: the proxy variables are set "
            "and requests through them are filtered and logged, but commands share the host "
            "network and any that ignores HTTPS_PROXY goes out unfiltered and unlogged. "
            "Install bubblewrap or use --sandbox docker to enforce the blacklist."
        )


class LocalEgress:
    """A running egress proxy for one local sandbox: what each exec needs to go through it."""

    def __init__(self, proxy: EgressProxy, endpoint: EgressEndpoint, env: dict[str, str]) -> None:
        self.proxy = proxy
        self.endpoint = endpoint
        self.env = env
        """Proxy and CA variables for the sandbox's environment."""
        self.exec_binds: list[str] = []
        """bwrap arguments each exec adds (the CA bundle)."""
        self.netns_fd: int | None = None
        """The sandbox's network namespace, which each exec joins (bwrap only)."""
        self.keeper: asyncio.subprocess.Process | None = None
        self.socket_dir: Path | None = None
        """A short folder of its own for the proxy's socket, when the workspace path is too
        long for a unix socket (removed on close; carries an owner file for gc)."""
        self._warned_dead = False

    def check_bridge(self) -> None:
        """Warn once when the bridge has ended (commands then have no network at all)."""
        keeper = self.keeper
        if keeper is not None and keeper.returncode is not None and not self._warned_dead:
            self._warned_dead = True
            log.warning(
                "the egress bridge of a filtered local sandbox ended (exit %s): its "
                "commands have no network now",
                keeper.returncode,
            )

    def join_netns(self) -> Callable[[], None] | None:
        """A function for the child between fork and exec that enters the sandbox's netns."""
        return netns_joiner(self.netns_fd)

    async def close(self) -> None:
        """Stop the keeper, release the namespace and stop the proxy. Idempotent."""
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            kill_process(keeper)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(keeper.wait(), 10)
        fd, self.netns_fd = self.netns_fd, None
        if fd is not None:
            os.close(fd)
        await self.proxy.stop()
        if self.socket_dir is not None:
            _remove_socket_dir(self.socket_dir, None)
            self.socket_dir = None


class LocalEgressGateway:
    """Starts one egress proxy per filtered local sandbox (``LocalBackend(egress=...)``).

    ``ca_bundle`` adds CA certificates the proxy trusts upstream (besides the host's bundle)
    for every sandbox; a sandbox's own ``spec.ca_bundle`` is added too. ``resolve`` is for
    tests: names mapped to addresses. Without ``spec.network_log`` the log goes to
    ``log_dir`` (default ``~/.cache/paperbench/network-logs``) as ``<workspace name>.jsonl``.
    """

    def __init__(
        self,
        *,
        ca_bundle: Path | None = None,
        upstream_proxy: str | None = None,
        resolve: Mapping[str, str] | None = None,
        python: Path | None = None,
        log_dir: Path | None = None,
        port: int = BRIDGE_PORT,
        startup_timeout: float = 60.0,
    ) -> None:
        self.ca_bundle = ca_bundle
        self.upstream_proxy = upstream_proxy
        self.resolve = dict(resolve or {})
        self.python = python
        self.log_dir = log_dir
        self.port = port
        self.startup_timeout = startup_timeout

    async def attach(
        self,
        workspace: Path,
        spec: SandboxSpec,
        *,
        isolation: Literal["bwrap", "none"],
        keeper_argv: list[str],
        keeper_env: dict[str, str],
        bind_dir: Path | None = None,
    ) -> LocalEgress:
        """Start the proxy for a sandbox (and, under bwrap, the keeper: ``keeper_argv`` is the
        sandbox's bwrap command up to its ``--``, with ``--unshare-net``). ``bind_dir``: where
        the CA bundle bound into each exec is written (the sandbox's own, on its capped disk,
        so that no host folder shows in its mountinfo); default the egress folder.

        Raises:
            SandboxError: not root under bwrap, a bad blacklist, or the proxy or the bridge
                did not start (EgressProxyError).
        """
        if isolation == "bwrap" and os.geteuid() != 0:
            raise SandboxError(
                "network=filtered with the local backend needs root (to join the sandbox's "
                "network namespace); run as root, use --sandbox docker, or network=none"
            )
        inputs = proxy_inputs(spec, self.log_dir, workspace.name)
        folder = workspace / "egress"
        folder.mkdir(mode=0o755)
        sock_dir = _socket_dir(folder) if isolation == "bwrap" else folder
        bundles = [p for p in (self.ca_bundle, spec.ca_bundle) if p is not None]
        settings = EgressSettings(
            upstream_ca_bundle=tuple(bundles),
            upstream_proxy=self.upstream_proxy,
            resolve=self.resolve,
            python=self.python,
            services=spec.host_services,
            allow=spec.allow_networks,
            unix_socket=sock_dir / "egress.sock" if isolation == "bwrap" else None,
            startup_timeout=self.startup_timeout,
        )
        proxy = EgressProxy(inputs.blacklist, inputs.log_path, settings, harness=inputs.harness)
        try:
            endpoint = await proxy.start()
        except BaseException:
            _remove_socket_dir(sock_dir, folder)
            raise
        try:
            bundle = (bind_dir or folder) / "egress-ca.pem"
            _write_bundle(bundle, endpoint.ca_cert_path)
            if isolation == "none":
                _warn_plain_once()
                return LocalEgress(proxy, endpoint, sandbox_env(endpoint, ca_path=str(bundle)))
            env = sandbox_env(endpoint, "127.0.0.1", proxy_port=self.port, ca_path=CA_IN_SANDBOX)
            egress = LocalEgress(proxy, endpoint, env)
            egress.socket_dir = sock_dir if sock_dir != folder else None
            egress.exec_binds = ["--ro-bind", str(bundle), CA_IN_SANDBOX]
            if os.path.isfile(_SYSTEM_BUNDLE) and not os.path.islink(_SYSTEM_BUNDLE):
                egress.exec_binds += ["--ro-bind", str(bundle), _SYSTEM_BUNDLE]
            try:
                await self._start_keeper(egress, folder, sock_dir, keeper_argv, keeper_env)
            except BaseException:
                await egress.close()
                raise
            return egress
        except BaseException:
            await proxy.stop()
            _remove_socket_dir(sock_dir, folder)
            raise

    async def _start_keeper(
        self,
        egress: LocalEgress,
        folder: Path,
        sock_dir: Path,
        argv: list[str],
        env: dict[str, str],
    ) -> None:
        info_r, info_w = os.pipe()
        stderr_path = folder / "bridge.stderr"
        try:
            with stderr_path.open("wb") as stderr:
                egress.keeper = await asyncio.create_subprocess_exec(
                    *argv,
                    "--ro-bind", str(sock_dir), _SOCKET_DIR_IN_SANDBOX,
                    "--ro-bind", str(BRIDGE_SCRIPT), _BRIDGE_IN_SANDBOX,
                    "--info-fd", str(info_w),
                    "--", "python3", "-I", "-c", _KEEPER_CODE, _BRIDGE_IN_SANDBOX,
                    str(self.port), f"{_SOCKET_DIR_IN_SANDBOX}/egress.sock",
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=env,
                    pass_fds=(info_w,),
                    start_new_session=True,
                )  # fmt: skip
        except OSError as exc:
            os.close(info_r)
            raise SandboxError(f"cannot start the egress bridge: {exc}") from exc
        finally:
            os.close(info_w)
        keeper = egress.keeper
        assert keeper.stdout is not None

        def fail(what: str) -> SandboxError:
            tail = stderr_path.read_bytes()[-_STDERR_TAIL:].decode("utf-8", "replace").strip()
            return SandboxError(f"the egress bridge {what}: {tail or 'no error output'}")

        reading = asyncio.ensure_future(asyncio.to_thread(read_bwrap_info, info_r))
        try:
            info = await asyncio.wait_for(asyncio.shield(reading), self.startup_timeout)
            line = await asyncio.wait_for(keeper.stdout.readline(), self.startup_timeout)
        except TimeoutError:
            raise fail(f"did not start within {self.startup_timeout:.0f} s") from None
        finally:
            if not reading.done():  # bwrap hangs: end it, so that the read sees EOF
                kill_process(keeper)
                with contextlib.suppress(TimeoutError, OSError):
                    await asyncio.wait_for(reading, 10)
            os.close(info_r)
        if info is None or line.strip() != b"ready":
            raise fail("failed to start")
        try:
            fd = os.open(f"/proc/{int(info['child-pid'])}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise fail(f"ended at once ({exc.strerror})") from exc
        egress.netns_fd = fd
        inode = os.fstat(fd).st_ino
        if inode != info.get("net-namespace") or inode == os.stat("/proc/self/ns/net").st_ino:
            raise SandboxError("the egress bridge is not in a network namespace of its own")


def _socket_dir(folder: Path) -> Path:
    """``folder``, or a short folder of its own when a socket path in it would be too long
    (under the temporary folder when its path is short enough, else under ``/tmp``: a long
    ``TMPDIR`` holds the workspace too)."""
    if _fits(folder):
        return folder
    parent = Path(tempfile.gettempdir())
    parent = parent if _fits(parent / f"{WORKSPACE_PREFIX}egress-xxxxxxxx") else Path("/tmp")
    short = Path(tempfile.mkdtemp(prefix=f"{WORKSPACE_PREFIX}egress-", dir=parent))
    write_owner(short)
    return short


def _fits(folder: Path) -> bool:
    return len(os.fsencode(folder / "egress.sock")) <= _MAX_SOCKET_PATH


def _remove_socket_dir(sock_dir: Path, folder: Path | None) -> None:
    if sock_dir != folder:
        with contextlib.suppress(OSError):
            remove_tree(sock_dir)


def kill_process(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def read_bwrap_info(fd: int) -> dict[str, int] | None:
    """bwrap's ``--info-fd`` JSON (child pid, namespace inodes); None when bwrap died first."""
    data = b""
    while len(data) < 65536:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
        with contextlib.suppress(ValueError):
            info = json.loads(data)
            if isinstance(info, dict) and "child-pid" in info:
                return info
    return None


def _write_bundle(dest: Path, proxy_ca: Path) -> None:
    parts = []
    with contextlib.suppress(OSError):
        parts.append(DEFAULT_HOST_CA_BUNDLE.read_text(encoding="ascii", errors="replace"))
    parts.append(proxy_ca.read_text(encoding="ascii"))
    dest.write_text("\n".join(p.strip() + "\n" for p in parts))
    dest.chmod(0o644)


_setns: Callable[[int, int], int] | None = None


def netns_joiner(fd: int | None) -> Callable[[], None] | None:
    """A function for the child between fork and exec that enters network namespace ``fd``
    (None: no namespace to join)."""
    if fd is None:
        return None
    setns = _libc_setns()

    def join() -> None:
        if setns(fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the sandbox network namespace")

    return join


def _libc_setns() -> Callable[[int, int], int]:
    """libc's setns(2), loaded in the parent (the child between fork and exec only calls it)."""
    global _setns
    if _setns is None:
        _setns = ctypes.CDLL(None, use_errno=True).setns
    return _setns
