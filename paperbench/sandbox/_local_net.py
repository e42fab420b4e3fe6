"""``network=full`` for the local backend: user-mode networking to the internet, not the host.

A command that shared the host's network namespace would reach every service of the host on
its loopback and its own addresses. So under bubblewrap a ``full`` sandbox gets a network
namespace of its own, like a container, whose way out is slirp4netns (user-mode TCP/IP: it
turns the sandbox's packets into ordinary sockets of its own process on the host):

    command (joins the sandbox's netns) ─tap0 10.0.2.100→ slirp4netns (host process, NET_UID)
        └ its sockets, in the host's network namespace → the internet
          (host OUTPUT rules for NET_UID: no address of the host, no link-local address)

- The namespace is held by a *keeper*: an unprivileged bubblewrap (``--unshare-user
  --unshare-net``) started as ``NET_UID`` that only sleeps. Its user namespace owns the network
  namespace; the sandbox's commands join it with ``setns(2)`` (paperbench is root) and then run
  as their own sandbox uid in a user namespace of their own (``_local_user``), so they have no
  capability over the network namespace: they cannot change its addresses, routes or tap.
- slirp4netns runs as ``NET_UID`` too, in the user namespace that owns the keeper's network
  namespace, with ``--disable-host-loopback`` (10.0.2.2 does not lead to the host's loopback)
  and ``--enable-seccomp``. The host's ``/dev/net/tun`` is often root's alone, so it is started
  in a mount namespace of its own whose ``/dev/net`` holds a tun node of ``NET_UID``'s.
  (``--enable-sandbox`` is not used: it needs to be root in its user namespace.)
- Its sockets are the host's: a connection to one of the host's own addresses (its public
  address, a Docker bridge's gateway, loopback) would reach the host's services. Two host
  firewall rules, inserted once and shared by every local sandbox, refuse that:
  ``OUTPUT -m owner --uid-owner NET_UID -m addrtype --dst-type LOCAL -j REJECT`` (every address
  of the host's, present or future: the kernel decides) and the same for ``169.254.0.0/16``
  (link-local and cloud metadata). DNS (port 53) to a resolver on the host is let through first,
  so slirp4netns's DNS forwarder (10.0.2.3) works where the host's resolver is local.
- The sandbox's ``/etc/resolv.conf`` names 10.0.2.3.

Needs root, ``slirp4netns`` and ``iptables``; without them a ``full`` local sandbox is refused
with the way out (install them, or ``--sandbox docker``), never run on the host's network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox._local_egress import kill_process, netns_joiner, read_bwrap_info

log = logging.getLogger("paperbench.sandbox")

NET_UID = 1_099_999_999
"""The host uid of every local sandbox's keeper and slirp4netns (no account uses it)."""
RESOLV_CONF = "nameserver 10.0.2.3\n"
COMMENT = "paperbench-local-full"
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_NS_GET_USERNS = 0xB701
"""ioctl(2) on a namespace file: the user namespace that owns it (linux/nsfs.h)."""
_START_TIMEOUT_S = 30.0
_IPTABLES_TIMEOUT_S = 30.0

FULL_HINT = (
    "install them (apt-get install slirp4netns iptables), run as root, or use --sandbox docker"
)


def _owner_rules() -> list[list[str]]:
    """The OUTPUT rules, in order, for slirp4netns's uid."""
    owner = ["-m", "owner", "--uid-owner", str(NET_UID)]
    tag = ["-m", "comment", "--comment", COMMENT]
    return [
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-p", "udp", "--dport", "53",
         "-j", "ACCEPT", *tag],
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-p", "tcp", "--dport", "53",
         "-j", "ACCEPT", *tag],
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "REJECT", *tag],
        [*owner, "-d", "169.254.0.0/16", "-j", "REJECT", *tag],
    ]  # fmt: skip


def full_network_problem() -> str | None:
    """Why ``full`` cannot be given to a local sandbox here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    missing = [t for t in ("slirp4netns", "iptables") if shutil.which(t) is None]
    if missing:
        return f"needs {' and '.join(missing)}"
    return None


def install_host_rules() -> None:
    """Insert the OUTPUT rules for ``NET_UID`` once (idempotent: present rules are kept).

    Raises:
        SandboxUnavailableError: iptables refused.
    """
    rules = _owner_rules()
    for rule in reversed(rules):  # each goes first: they end up in their order, on top
        if _iptables("-C", "OUTPUT", *rule).returncode == 0:
            continue
        done = _iptables("-I", "OUTPUT", "1", *rule)
        if done.returncode != 0:
            raise SandboxUnavailableError(
                f"network=full (local sandbox): iptables -I OUTPUT {shlex.join(rule)} failed: "
                f"{done.stderr.strip()}; {FULL_HINT}"
            )


def host_rules() -> list[str]:
    """The OUTPUT rules this module added (``iptables -S`` lines)."""
    listing = _iptables("-S", "OUTPUT")
    return [line for line in listing.stdout.splitlines() if COMMENT in line]


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["iptables", "-w", "10", *args],
        capture_output=True,
        text=True,
        timeout=_IPTABLES_TIMEOUT_S,
    )


def _become_net_user() -> None:
    os.setgroups([])
    os.setresgid(NET_UID, NET_UID, NET_UID)
    os.setresuid(NET_UID, NET_UID, NET_UID)


def _slirp_preexec() -> Callable[[], None]:
    """For slirp4netns's child between fork and exec: a private ``/dev/net/tun`` it may open.

    The host's tun device is often root's alone (0600). In a mount namespace of its own, the
    child puts a fresh tmpfs over ``/dev/net`` holding a tun node that belongs to ``NET_UID``,
    then becomes ``NET_UID``: nothing on the host changes.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), what)

    def preexec() -> None:
        check(libc.unshare(_CLONE_NEWNS), "unshare a mount namespace")
        check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make mounts private")
        check(libc.mount(b"tmpfs", b"/dev/net", b"tmpfs", 0, b"mode=0755"), "mount /dev/net")
        os.mknod("/dev/net/tun", stat.S_IFCHR | 0o600, os.makedev(10, 200))
        os.chown("/dev/net/tun", NET_UID, NET_UID)
        _become_net_user()

    return preexec


class UserModeNetwork:
    """The network namespace of one ``full`` local sandbox and its slirp4netns."""

    def __init__(self, folder: Path, bind_dir: Path | None = None) -> None:
        self.folder = folder
        self.netns_fd: int | None = None
        self.userns_fd: int | None = None
        self._exit_w: int | None = None
        self.keeper: asyncio.subprocess.Process | None = None
        self.slirp: asyncio.subprocess.Process | None = None
        self.resolv_conf = (bind_dir or folder) / "resolv.conf"

    @property
    def exec_binds(self) -> list[str]:
        """bwrap arguments each exec adds: the resolver of the user-mode network."""
        dest = "/etc/resolv.conf"
        if os.path.islink(dest):  # e.g. to /run/systemd/resolve/: bind where it leads
            dest = os.path.realpath(dest)
        return ["--ro-bind", str(self.resolv_conf), dest]

    @classmethod
    async def start(
        cls, folder: Path, keeper_argv: list[str], bind_dir: Path | None = None
    ) -> UserModeNetwork:
        """Start the keeper (``keeper_argv``: a bwrap command up to its ``--``, without user
        or network namespaces of its own) and slirp4netns. ``bind_dir``: where the resolv.conf
        bound into each exec is written (default ``folder``).

        Raises:
            SandboxUnavailableError: no root, slirp4netns or iptables.
            SandboxError: the keeper or slirp4netns did not start.
        """
        problem = full_network_problem()
        if problem is not None:
            raise SandboxUnavailableError(
                f"network=full with the local sandbox {problem} (its own network namespace "
                f"behind slirp4netns, so that commands cannot reach the host): {FULL_HINT}"
            )
        await asyncio.to_thread(install_host_rules)
        folder.mkdir(mode=0o755, exist_ok=True)
        net = cls(folder, bind_dir)
        net.resolv_conf.write_text(RESOLV_CONF)
        net.resolv_conf.chmod(0o644)
        try:
            await net._start_keeper(keeper_argv)
            await net._start_slirp()
        except BaseException:
            await net.close()
            raise
        return net

    async def _start_keeper(self, keeper_argv: list[str]) -> None:
        info_r, info_w = os.pipe()
        try:
            self.keeper = await asyncio.create_subprocess_exec(
                *keeper_argv[:1],
                "--unshare-user", "--unshare-net",
                *keeper_argv[1:],
                "--info-fd", str(info_w),
                "--", "sleep", "infinity",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(info_w,),
                start_new_session=True,
                preexec_fn=_become_net_user,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
            )  # fmt: skip
        except OSError as exc:
            os.close(info_r)
            raise SandboxError(f"cannot start the sandbox's network keeper: {exc}") from exc
        finally:
            os.close(info_w)
        try:
            reading = asyncio.to_thread(read_bwrap_info, info_r)
            info = await asyncio.wait_for(reading, _START_TIMEOUT_S)
        except TimeoutError:
            info = None
        finally:
            os.close(info_r)
        if info is None:
            raise SandboxError(f"the sandbox's network keeper failed: {await self._keeper_err()}")
        pid = int(info["child-pid"])
        self.netns_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        if os.fstat(self.netns_fd).st_ino == os.stat("/proc/self/ns/net").st_ino:
            raise SandboxError("the sandbox's network keeper has no network namespace of its own")
        # The user namespace that owns the network namespace (bwrap moves its child into a
        # nested one after setting up, which slirp4netns could not use).
        self.userns_fd = fcntl.ioctl(self.netns_fd, _NS_GET_USERNS)
        os.set_inheritable(self.userns_fd, False)

    async def _keeper_err(self) -> str:
        keeper = self.keeper
        if keeper is None or keeper.stderr is None:
            return "no error output"
        kill_process(keeper)
        with contextlib.suppress(TimeoutError):
            data = await asyncio.wait_for(keeper.stderr.read(2000), 5)
            return data.decode("utf-8", "replace").strip() or "no error output"
        return "no error output"

    async def _start_slirp(self) -> None:
        ready_r, ready_w = os.pipe()
        # slirp4netns ends when this pipe closes: with the sandbox, or with paperbench if it
        # is killed (the tap it holds would keep the namespace, and itself, alive).
        exit_r, self._exit_w = os.pipe2(os.O_CLOEXEC)
        assert self.netns_fd is not None and self.userns_fd is not None
        fds = (ready_w, exit_r, self.netns_fd, self.userns_fd)
        stderr_path = self.folder / "slirp4netns.stderr"
        try:
            with stderr_path.open("wb") as stderr:
                self.slirp = await asyncio.create_subprocess_exec(
                    "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                    "--enable-seccomp", f"--ready-fd={ready_w}", f"--exit-fd={exit_r}",
                    f"--userns-path=/proc/self/fd/{self.userns_fd}", "--netns-type=path",
                    f"/proc/self/fd/{self.netns_fd}", "tap0",
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    pass_fds=fds,
                    start_new_session=True,
                    preexec_fn=_slirp_preexec(),
                )  # fmt: skip
        except OSError as exc:
            os.close(ready_r)
            raise SandboxError(f"cannot start slirp4netns: {exc}") from exc
        finally:
            os.close(ready_w)
            os.close(exit_r)
        try:
            ready = await asyncio.wait_for(asyncio.to_thread(os.read, ready_r, 1), _START_TIMEOUT_S)
        except TimeoutError:
            ready = b""
        finally:
            os.close(ready_r)
        if ready != b"1":
            tail = stderr_path.read_bytes()[-2000:].decode("utf-8", "replace").strip()
            raise SandboxError(f"slirp4netns did not start: {tail or 'no error output'}")

    def join_netns(self) -> Callable[[], None] | None:
        """A function for the child between fork and exec that enters the sandbox's netns."""
        return netns_joiner(self.netns_fd)

    def check_alive(self) -> None:
        """Warn when slirp4netns ended (commands then have no network)."""
        slirp = self.slirp
        if slirp is not None and slirp.returncode is not None:
            log.warning("the sandbox's slirp4netns ended (exit %s): no network", slirp.returncode)

    async def close(self) -> None:
        """Stop slirp4netns and the keeper; release the namespace. Idempotent."""
        for attr in ("slirp", "keeper"):
            proc = getattr(self, attr)
            setattr(self, attr, None)
            if proc is not None:
                kill_process(proc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), 10)
        for attr in ("netns_fd", "userns_fd", "_exit_w"):
            fd = getattr(self, attr)
            setattr(self, attr, None)
            if fd is not None:
                os.close(fd)
