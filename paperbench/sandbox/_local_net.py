"""``network=full`` for the local backend: user-mode networking to the internet, not the host.

A command that shared the host's network namespace would reach every service of the host on
its loopback and its own addresses. So under bubblewrap a ``full`` sandbox gets a network
namespace of its own, like a container, whose way out is slirp4netns (user-mode TCP/IP: it
turns the sandbox's packets into ordinary sockets of its own process on the host):

    command (joins the sandbox's netns) ─tap0 10.0.2.100→ slirp4netns (host process, its uid)
        └ its sockets, in the host's network namespace → the internet
          (host OUTPUT rules for that uid: no address of the host, no internal range)

- The namespace is held by a *keeper*: an unprivileged bubblewrap (``--unshare-user
  --unshare-net``) started as the sandbox's network uid that only sleeps. Its user namespace
  owns the network namespace; the sandbox's commands join it with ``setns(2)`` (paperbench
  is root) and then run as their own sandbox uid in a user namespace of their own
  (``_local_user``), so they have no capability over the network namespace: they cannot
  change its addresses, routes or tap.
- slirp4netns runs as that uid too, in the user namespace that owns the keeper's network
  namespace, with ``--disable-host-loopback`` (10.0.2.2 does not lead to the host's loopback)
  and ``--enable-seccomp``. The host's ``/dev/net/tun`` is often root's alone, so it is started
  in a mount namespace of its own whose ``/dev/net`` holds a tun node of that uid's.
  (``--enable-sandbox`` is not used: it needs to be root in its user namespace.)
- Its sockets are the host's: a connection to one of the host's own addresses (its public
  address, a Docker bridge's gateway, loopback) would reach the host's services, and one to a
  private address the operator's network. Host firewall rules refuse both. Shared by every
  local sandbox, inserted once, for the whole range of network uids:
  ``OUTPUT -m owner --uid-owner <range> -m addrtype --dst-type LOCAL -j REJECT`` (every
  address of the host's, present or future: the kernel decides) and the same for each cloud
  metadata address; DNS (port 53) to a resolver on the host is let through first, so
  slirp4netns's DNS forwarder (10.0.2.3) works where the host's resolver is local. And one
  chain per sandbox, ``paperbench-u<uid>``, jumped to for its uid
  (``_iptables.internet_only_chain``): the host's addresses left to the shared rules, DNS to
  the host's own resolvers (``/etc/resolv.conf``, often a private address) let through, the
  ranges opened with ``--allow-network`` returned, every other private, link-local or
  otherwise internal range (``_internal_nets``) refused. It is removed with the sandbox;
  ``paperbench sandbox gc`` removes those whose uid no longer runs anything.
- The keeper and slirp4netns of each sandbox run as a uid of its own (``NET_UID_BASE`` and
  up), so that its chain applies to its traffic alone (and one slirp4netns cannot signal or
  trace another's).
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
import secrets
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox import _iptables as ipt
from paperbench.sandbox._internal_nets import CLOUD_METADATA, IPNetwork, of_version
from paperbench.sandbox._local_egress import kill_process, netns_joiner, read_bwrap_info

log = logging.getLogger("paperbench.sandbox")

NET_UID_BASE = 1_090_000_000
"""The host uids of local sandboxes' keepers and slirp4netns, one per sandbox, are drawn from
[NET_UID_BASE, NET_UID_BASE + NET_UID_SPAN): no account uses them, nor a sandbox's commands
(``_local_user.UID_BASE``)."""
NET_UID_SPAN = 1 << 20
RESOLV_CONF = "nameserver 10.0.2.3\n"
COMMENT = "paperbench-local-full"
CHAIN_PREFIX = "paperbench-u"
_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_NS_GET_USERNS = 0xB701
"""ioctl(2) on a namespace file: the user namespace that owns it (linux/nsfs.h)."""
_START_TIMEOUT_S = 30.0

FULL_HINT = (
    "install them (apt-get install slirp4netns iptables), run as root, or use --sandbox docker"
)


def _owner_rules() -> list[list[str]]:
    """The shared OUTPUT rules, in order, for every sandbox's network uid."""
    owner = ["-m", "owner", "--uid-owner", f"{NET_UID_BASE}-{NET_UID_BASE + NET_UID_SPAN - 1}"]
    tag = ["-m", "comment", "--comment", COMMENT]
    return [
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-p", "udp", "--dport", "53",
         "-j", "ACCEPT", *tag],
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-p", "tcp", "--dport", "53",
         "-j", "ACCEPT", *tag],
        [*owner, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "REJECT", *tag],
        *([*owner, "-d", str(n), "-j", "REJECT", *tag] for n in of_version(CLOUD_METADATA, 4)),
    ]  # fmt: skip


def _free_uid() -> int:
    """A network uid of the range that has no chain (none of a live sandbox's)."""
    taken = set(ipt.chains(4, CHAIN_PREFIX))
    while True:
        uid = NET_UID_BASE + secrets.randbelow(NET_UID_SPAN)
        if _uid_chain(uid) not in taken:
            return uid


def _uid_chain(uid: int) -> str:
    return f"{CHAIN_PREFIX}{uid}"


def _uid_rules(uid: int, allow: Sequence[IPNetwork]) -> list[str]:
    """iptables-restore lines: the chain of one sandbox's network uid and the jump to it."""
    chain = _uid_chain(uid)
    head = ["-m addrtype --dst-type LOCAL -j RETURN"]  # the host: the shared rules decide
    head += ipt.dns_rules(4)
    lines = ipt.internet_only_chain(chain, allow, 4, head)
    jump = f"-m owner --uid-owner {uid} -m comment --comment {COMMENT}:{uid} -j {chain}"
    return [*lines, f"-I OUTPUT 1 {jump}"]


def _jump_spec(uid: int) -> list[str]:
    comment = f"{COMMENT}:{uid}"
    return ["-m", "owner", "--uid-owner", str(uid), "-m", "comment", "--comment", comment,
            "-j", _uid_chain(uid)]  # fmt: skip


def remove_uid_rules(uid: int) -> str | None:
    """Delete the jump to a sandbox's chain and the chain; None when both are gone."""
    for _ in range(16):
        if ipt.run(4, "-D", "OUTPUT", *_jump_spec(uid)).returncode != 0:
            break
    return ipt.delete_chain(4, _uid_chain(uid))


def _uids_running() -> set[int]:
    """The real uids of every process on the host."""
    uids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    uids.add(int(line.split()[1]))
                    break
    return uids


def stale_chains() -> list[str]:
    """The chains of sandboxes' network uids that no process runs as any more (the sandbox
    is gone: its keeper and slirp4netns end with it, or with paperbench)."""
    if os.geteuid() != 0:
        return []
    ours = ipt.chains(4, CHAIN_PREFIX)
    if not ours:
        return []
    running = _uids_running()
    return [c for c in ours if c.removeprefix(CHAIN_PREFIX).isdigit() and
            int(c.removeprefix(CHAIN_PREFIX)) not in running]  # fmt: skip


def remove_stale_chain(chain: str) -> str | None:
    """Remove one chain of :func:`stale_chains` with its jump; None when done, else why not."""
    uid = chain.removeprefix(CHAIN_PREFIX)
    if not uid.isdigit() or not chain.startswith(CHAIN_PREFIX):
        return "not a chain of a sandbox's network uid"
    if int(uid) in _uids_running():
        return f"kept: uid {uid} runs a sandbox's network again"
    return remove_uid_rules(int(uid))


def full_network_problem() -> str | None:
    """Why ``full`` cannot be given to a local sandbox here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    missing = [t for t in ("slirp4netns", "iptables") if shutil.which(t) is None]
    if missing:
        return f"needs {' and '.join(missing)}"
    return None


def install_host_rules() -> None:
    """Insert the shared OUTPUT rules once (idempotent: present rules are kept).

    Raises:
        SandboxUnavailableError: iptables refused.
    """
    rules = _owner_rules()
    for rule in reversed(rules):  # each goes first: they end up in their order, on top
        if ipt.run(4, "-C", "OUTPUT", *rule).returncode == 0:
            continue
        done = ipt.run(4, "-I", "OUTPUT", "1", *rule)
        if done.returncode != 0:
            raise SandboxUnavailableError(
                f"network=full (local sandbox): iptables -I OUTPUT {shlex.join(rule)} failed: "
                f"{done.stderr.strip()}; {FULL_HINT}"
            )


def host_rules() -> list[str]:
    """The OUTPUT rules this module added (``iptables -S`` lines), shared and per sandbox."""
    listing = ipt.run(4, "-S", "OUTPUT")
    return [line for line in listing.stdout.splitlines() if COMMENT in line]


def _net_user(uid: int) -> Callable[[], None]:
    def become() -> None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    return become


def _slirp_preexec(uid: int) -> Callable[[], None]:
    """For slirp4netns's child between fork and exec: a private ``/dev/net/tun`` it may open.

    The host's tun device is often root's alone (0600). In a mount namespace of its own, the
    child puts a fresh tmpfs over ``/dev/net`` holding a tun node that belongs to ``uid``,
    then becomes ``uid``: nothing on the host changes.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    become = _net_user(uid)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), what)

    def preexec() -> None:
        check(libc.unshare(_CLONE_NEWNS), "unshare a mount namespace")
        check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make mounts private")
        check(libc.mount(b"tmpfs", b"/dev/net", b"tmpfs", 0, b"mode=0755"), "mount /dev/net")
        os.mknod("/dev/net/tun", stat.S_IFCHR | 0o600, os.makedev(10, 200))
        os.chown("/dev/net/tun", uid, uid)
        become()

    return preexec


class UserModeNetwork:
    """The network namespace of one ``full`` local sandbox and its slirp4netns."""

    def __init__(
        self,
        folder: Path,
        bind_dir: Path | None = None,
        *,
        uid: int = NET_UID_BASE,
        allow: Sequence[IPNetwork] = (),
    ) -> None:
        self.folder = folder
        self.uid = uid
        """The host uid of the keeper and slirp4netns, the sandbox's own."""
        self.allow = tuple(allow)
        self._rules = False
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
        cls,
        folder: Path,
        keeper_argv: list[str],
        bind_dir: Path | None = None,
        allow: Sequence[IPNetwork] = (),
    ) -> UserModeNetwork:
        """Start the keeper (``keeper_argv``: a bwrap command up to its ``--``, without user
        or network namespaces of its own), the firewall chain of its uid, then slirp4netns.
        ``bind_dir``: where the resolv.conf bound into each exec is written (default
        ``folder``). ``allow``: the internal ranges the sandbox may reach after all.

        Raises:
            SandboxUnavailableError: no root, slirp4netns or iptables, or iptables refused.
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
        uid = await asyncio.to_thread(_free_uid)
        net = cls(folder, bind_dir, uid=uid, allow=allow)
        net.resolv_conf.write_text(RESOLV_CONF)
        net.resolv_conf.chmod(0o644)
        try:
            await net._start_keeper(keeper_argv)
            # The keeper runs as the uid from here on: gc leaves the chain alone.
            await asyncio.to_thread(net._install_rules)
            await net._start_slirp()
        except BaseException:
            await net.close()
            raise
        return net

    def _install_rules(self) -> None:
        self._rules = True
        done = ipt.restore(4, _uid_rules(self.uid, self.allow))
        if done.returncode != 0:
            raise SandboxUnavailableError(
                f"network=full (local sandbox): iptables-restore could not make the chain "
                f"{_uid_chain(self.uid)}: {done.stderr.strip()}; {FULL_HINT}"
            )

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
                preexec_fn=_net_user(self.uid),
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
                    preexec_fn=_slirp_preexec(self.uid),
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
        if self._rules:
            self._rules = False
            error = await asyncio.to_thread(remove_uid_rules, self.uid)
            if error is not None:
                log.warning("%s (paperbench sandbox gc removes it)", error)
