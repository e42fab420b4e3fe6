"""The local backend: a workspace folder per sandbox, commands isolated with bubblewrap.

Each sandbox owns a workspace folder ``<root>/paperbench-sbx-*/fs``. A sandbox path
``/<top>/rest`` (``/submission/x``, ``/home/submission``, ``/tmp/y``) lives at ``fs/<top>/rest``;
top folders are created on first write. System folders (``/usr``, ``/etc``, ...) are read-only.

Isolation modes:

* ``bwrap`` (when ``bwrap`` is on PATH): every command runs in a fresh bubblewrap namespace
  with the system folders bound read-only (selectively: ``/usr``, ``/etc``, ``/lib*``, ...,
  never ``/root``, ``/home``, ``/run`` or the checkout), each workspace top folder bound
  read-write at its sandbox path, a fresh ``/proc`` and ``/dev``, its own pid namespace (the
  command's processes die with it). It runs as a non-root uid of the sandbox's own, root only
  inside a user namespace, with no capabilities, ``no_new_privs`` and a seccomp filter (see
  ``_local_user`` and ``_seccomp``): the host's kernel settings, root-only files and keyrings
  are out of its reach. Network: ``none`` is a namespace with only a loopback; under
  ``filtered`` every command joins one network namespace per sandbox whose only way out is
  the egress proxy (see ``_local_egress``: a long-lived bwrap keeps the namespace and runs the
  bridge to the proxy's unix socket); under ``full`` one whose way out is slirp4netns, which
  reaches the internet but no address of the host (``_local_net``).
* ``none`` (no bwrap; only when asked): a plain subprocess in its own session, cwd inside the
  workspace and ``PAPERBENCH_SANDBOX_ROOT`` naming the folder sandbox paths map into. A loud
  warning is logged. Gaps: commands see the host filesystem and network, and absolute sandbox
  paths written in commands are not rewritten; ``filtered`` only sets the proxy variables
  (advisory).

With ``disk_mb`` the workspace's ``fs`` folder is a loop-mounted ext4 image of that size
(``_disk``), so the sandbox's writable space is capped in total; where that cannot be made the
start is refused unless ``limits.allow_uncapped_disk`` (then only RLIMIT_FSIZE caps each file,
said as a warning and reported by ``disk_cap``).

In both modes the environment is only ``spec.env`` plus PATH/HOME/LANG (never the host's),
rlimits apply (no core dumps; RLIMIT_FSIZE from ``disk_mb``; RLIMIT_AS from ``memory_mb`` when
no memory cgroup is available), and a per-sandbox cgroup (when writable) enforces the pids,
memory and CPU limits. Only a cgroup pids limit is a hard process-count limit for root, which
``LocalSandbox.hard_pids_limit`` reports. Processes do not outlive the exec that started them.
Each workspace holds an owner file naming the creating process and its cgroups, so that
``reap_local_orphans`` (``_local_gc``) can remove what a crashed run left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import posixpath
import resource
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from paperbench._console import plural
from paperbench._io import atomic_open
from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox._base import (
    DEFAULT_OUTPUT_LIMIT,
    DiskCapKind,
    DiskUsage,
    ExecResult,
    IsolationKind,
    NetworkPolicy,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
)
from paperbench.sandbox._capture import HeadTail, drain
from paperbench.sandbox._cgroup import Cgroup
from paperbench.sandbox._disk import DiskCap, DiskCapUnavailableError
from paperbench.sandbox._local_egress import LocalEgress, LocalEgressGateway
from paperbench.sandbox._local_gc import WORKSPACE_PREFIX, remove_tree, write_owner
from paperbench.sandbox._local_mask import mask_private
from paperbench.sandbox._local_net import UserModeNetwork
from paperbench.sandbox._local_user import (
    INNER_SANDBOX_UID,
    OUTER_CAPS,
    SandboxUser,
    check_tools,
)
from paperbench.sandbox._seccomp import seccomp_fd, seccomp_program
from paperbench.sandbox._tree import (
    DEFAULT_LIMITS,
    ExtractReport,
    TreeLimits,
    folder_entries,
    ingest,
)
from paperbench.sandbox._tree_files import (
    copy_file_beneath,
    copy_out_beneath,
    make_dirs_beneath,
    open_dir_beneath,
    read_file_beneath,
    write_file_beneath,
)
from paperbench.sandbox._tree_tar import (
    repack,
)

log = logging.getLogger("paperbench.sandbox")

Isolation = Literal["auto", "bwrap", "none"]

SYSTEM_TOPS = frozenset(
    {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt", "proc", "sys", "dev"}
)
"""Top folders that are the host's, read-only; never part of a workspace."""
_RO_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
_FORBIDDEN_TOPS = frozenset({"run", "boot", "var", "proc", "sys", "dev"})
_BIND_DIR = ".paperbench"
_RO_SYSCTLS = ("abi", "crypto", "debug", "dev", "fs", "kernel", "net", "vm")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOME = "/root"
_HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_KILL_GRACE_S = 2.0
_CA_IN_SANDBOX = "/run/paperbench/ca-bundle.pem"
_SNAPSHOT_TIMEOUT_S = 1800.0

_python_cache: dict[str, tuple[str, list[str]]] = {}

NO_BWRAP_HINT = (
    "install bubblewrap (apt-get install bubblewrap), start Docker (scripts/ensure-docker.sh), "
    "or pass --allow-unsandboxed to run reproduce.sh as plain host subprocesses"
)
UNSANDBOXED_WARNING = (
    "the local sandbox runs WITHOUT bubblewrap: commands are PLAIN SUBPROCESSES that see "
    "the host filesystem and network. Install bubblewrap (apt-get install bubblewrap) or "
    "use --sandbox docker for untrusted code."
)


async def _resolve_python(name: str) -> tuple[str, list[str]]:
    """(bin folder, install prefixes) of the host's ``name`` interpreter, following shims."""
    if name in _python_cache:
        return _python_cache[name]
    exe = shutil.which(name)
    if exe is None:
        raise SandboxError(f"local sandbox: {name!r} not found on PATH; install Python 3")
    code = "import json,sys;print(json.dumps([sys.executable,sys.prefix,sys.base_prefix]))"
    proc = await asyncio.create_subprocess_exec(
        exe, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await proc.communicate()
    try:
        executable, prefix, base_prefix = json.loads(out)
    except ValueError:
        raise SandboxError(f"local sandbox: cannot run {exe} to find its prefix") from None
    result = (str(Path(executable).parent), list(dict.fromkeys([base_prefix, prefix])))
    _python_cache[name] = result
    return result


def _split(path: str) -> tuple[str, str]:
    """``/top/rest`` → ("top", "rest"), normalised. Raises for relative paths."""
    if not path.startswith("/"):
        raise SandboxError(f"sandbox paths are absolute, got {path!r}")
    norm = posixpath.normpath(path).lstrip("/")
    top, _, rest = norm.partition("/")
    return top, rest


class LocalBackend(SandboxBackend):
    """Starts :class:`LocalSandbox` workspaces under ``root`` (default: the temp folder).

    ``egress`` starts the proxy for ``network=filtered`` (default: a ``LocalEgressGateway``).
    ``isolation="auto"`` is bubblewrap; without it the backend refuses to start unless
    ``allow_unsandboxed`` (then ``none``, with a loud warning). ``isolation="none"`` is asked
    for explicitly and warned about the same way.

    Raises:
        SandboxUnavailableError: bubblewrap is needed and not installed.
    """

    name = "local"

    def __init__(
        self,
        root: Path | None = None,
        *,
        isolation: Isolation = "auto",
        python: str | None = "python3",
        ro_binds: list[Path] | None = None,
        cgroups: bool = True,
        egress: LocalEgressGateway | None = None,
        allow_unsandboxed: bool = False,
    ) -> None:
        self.root = root
        self.egress = egress
        have_bwrap = shutil.which("bwrap") is not None
        if isolation == "auto":
            if not have_bwrap and not allow_unsandboxed:
                raise SandboxUnavailableError(
                    "local sandbox: bubblewrap (bwrap) is not installed, so commands would run "
                    f"unsandboxed on the host: {NO_BWRAP_HINT}"
                )
            isolation = "bwrap" if have_bwrap else "none"
            reason = (
                "local backend: bubblewrap found"
                if have_bwrap
                else "bubblewrap is not installed and running unsandboxed was allowed "
                "(--allow-unsandboxed)"
            )
        elif isolation == "bwrap":
            if not have_bwrap:
                raise SandboxUnavailableError(
                    "local sandbox: bwrap not found; "
                    "install bubblewrap (apt-get install bubblewrap)"
                )
            reason = "local backend: bubblewrap asked for"
        else:
            reason = "local backend: isolation none asked for"
        if isolation == "bwrap":
            check_tools()
            seccomp_program()  # libseccomp is there, or a clear error now
        self.isolation: Literal["bwrap", "none"] = isolation
        self.isolation_kind: IsolationKind = "bubblewrap" if isolation == "bwrap" else "none"
        self.isolation_reason = reason
        if isolation == "none":
            log.warning(UNSANDBOXED_WARNING)
        self.python = python
        self.ro_binds = list(ro_binds or [])
        self.cgroups = cgroups

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        path_dirs: list[str] = []
        binds = [str(p) for p in self.ro_binds]
        if self.python:
            bindir, prefixes = await _resolve_python(self.python)
            path_dirs.append(bindir)
            binds += [p for p in prefixes if _split(p)[0] not in SYSTEM_TOPS]
        root = self.root or Path(tempfile.gettempdir())
        try:
            root.mkdir(parents=True, exist_ok=True)
            workspace = Path(tempfile.mkdtemp(prefix=WORKSPACE_PREFIX, dir=root))
            write_owner(workspace)
        except OSError as exc:
            raise SandboxError(
                f"local sandbox: cannot create a workspace in {root}: {exc}"
            ) from exc
        disk: DiskCap | None = None
        disk_cap: DiskCapKind | None = None
        if spec.limits.disk_mb is not None:
            try:
                disk = await asyncio.to_thread(DiskCap.create, workspace, spec.limits.disk_mb)
                disk_cap = "loop-ext4"
            except (DiskCapUnavailableError, SandboxError) as exc:
                if not spec.limits.allow_uncapped_disk or not isinstance(
                    exc, DiskCapUnavailableError
                ):
                    await asyncio.to_thread(remove_tree, workspace)
                    raise
                log.warning(
                    "the sandbox's disk is NOT capped in total (allowed; each file still is): %s",
                    exc,
                )
                disk_cap = "rlimit-fsize"
        cgroup = None
        if self.cgroups:
            cgroup = await asyncio.to_thread(
                Cgroup.create, workspace.name.rsplit("-", 1)[-1], spec.limits
            )
            if cgroup is not None:
                write_owner(workspace, dict.fromkeys(cgroup.dirs.values()))
        sb = LocalSandbox(
            spec,
            workspace,
            isolation=self.isolation,
            path=":".join([*path_dirs, DEFAULT_PATH]),
            ro_binds=list(dict.fromkeys(binds)),
            cgroup=cgroup,
            user=SandboxUser.new() if self.isolation == "bwrap" and os.geteuid() == 0 else None,
        )
        sb.disk, sb.disk_cap = disk, disk_cap
        try:
            await asyncio.to_thread(sb._prepare)
        except OSError as exc:
            await sb.stop()
            raise SandboxError(f"local sandbox: cannot prepare workspace: {exc}") from exc
        if spec.network == NetworkPolicy.FULL and self.isolation == "bwrap":
            try:
                sb._net = await UserModeNetwork.start(
                    workspace / "net",
                    keeper_argv=sb._bwrap_base(unshare_net=False),
                    bind_dir=sb.bind_dir,
                    allow=spec.allow_networks,
                )
            except BaseException:
                await sb.stop()
                raise
        if spec.network == NetworkPolicy.FILTERED:
            gateway = self.egress or LocalEgressGateway()
            try:
                sb._egress = await gateway.attach(
                    workspace,
                    spec,
                    isolation=self.isolation,
                    keeper_argv=[*sb._bwrap_base(unshare_net=True), *sb._ro_bind_args()],
                    keeper_env={"PATH": sb._path, "LANG": "C.UTF-8"},
                    bind_dir=sb.bind_dir,
                )
            except BaseException:
                await sb.stop()
                raise
        return sb


class LocalSandbox(Sandbox):
    """One local workspace. See the module docstring for what is and is not isolated."""

    def __init__(
        self,
        spec: SandboxSpec,
        workspace: Path,
        *,
        isolation: Literal["bwrap", "none"],
        path: str,
        ro_binds: list[str],
        cgroup: Cgroup | None,
        user: SandboxUser | None = None,
    ) -> None:
        self.spec = spec
        self.user = user
        """The host uid the commands run as (root only inside their user namespace); None
        when paperbench itself is not root (the commands then run as its own uid) or
        unsandboxed."""
        self.id = uuid.uuid4().hex[:12]
        self.workspace = workspace
        self.fs = workspace / "fs"
        self.isolation = isolation
        self._path = path
        self._ro_binds = ro_binds
        self._cgroup = cgroup
        self._running: set[asyncio.subprocess.Process] = set()
        self._stopped = False
        self._ca_file: Path | None = None
        self._egress: LocalEgress | None = None
        self._net: UserModeNetwork | None = None
        """``full`` under bubblewrap: the sandbox's own network namespace behind slirp4netns."""
        self.disk: DiskCap | None = None
        self.disk_cap: DiskCapKind | None = None
        """How ``limits.disk_mb`` is enforced: ``loop-ext4`` or ``rlimit-fsize`` (allowed)."""

    def disk_usage(self) -> DiskUsage | None:
        """Space on the capped disk (loop-ext4 only)."""
        return self.disk.usage() if self.disk is not None else None

    # ------------------------------------------------------------------ paths

    @property
    def hard_pids_limit(self) -> bool:
        """True when ``spec.limits.pids`` holds for the commands: a cgroup enforces it, or they
        run as a non-root sandbox user of their own, to whom RLIMIT_NPROC applies."""
        if self._cgroup is not None and self._cgroup.pids_limited:
            return True
        return (
            self.isolation == "bwrap"
            and self.spec.limits.pids is not None
            and (self.user is not None or os.geteuid() != 0)
        )

    @property
    def network_isolated(self) -> bool:
        return self.isolation == "bwrap" and self.spec.network != NetworkPolicy.FULL

    def host_path(self, path: str, *, for_write: bool = False) -> Path:
        """The host path behind sandbox path ``path``.

        Raises:
            SandboxError: ``path`` is relative, a system folder (for writes), or leaves the
                workspace through a link.
        """
        top, rest = _split(path)
        if not top:
            return self.fs
        if top in SYSTEM_TOPS or top in _FORBIDDEN_TOPS:
            if for_write:
                raise SandboxError(f"{path}: system folders are read-only in the local sandbox")
            return Path("/" + top) / rest
        host = self.fs / top / rest if rest else self.fs / top
        # Links are resolved on the host: refuse any that lead out of the workspace.
        real_fs = os.path.realpath(self.fs)
        probe = host if host.exists() or host.is_symlink() else host.parent
        while not probe.exists() and probe != self.fs:
            probe = probe.parent
        real = os.path.realpath(probe)
        if not (real == real_fs or real.startswith(real_fs + os.sep)):
            raise SandboxError(f"{path}: a link leads out of the sandbox workspace")
        return host

    def _owner(self) -> tuple[int, int] | None:
        return (self.user.uid, self.user.gid) if self.user is not None else None

    def _rel(self, path: str) -> str:
        """``path`` relative to the workspace's ``fs`` folder (a workspace path, never a
        system folder).

        Raises:
            SandboxError: ``path`` is relative, the root, or a system folder.
        """
        top, rest = _split(path)
        if not top:
            raise SandboxError("the sandbox root itself cannot be the target")
        if top in SYSTEM_TOPS or top in _FORBIDDEN_TOPS:
            raise SandboxError(f"{path}: system folders are read-only in the local sandbox")
        return f"{top}/{rest}" if rest else top

    def _make_dirs(self, path: str) -> None:
        """``mkdir -p`` of sandbox path ``path`` inside the workspace, never through a link,
        each new folder the sandbox user's."""
        make_dirs_beneath(self.fs, self._rel(path), owner=self._owner())

    @property
    def bind_dir(self) -> Path:
        """Where the files paperbench binds into every exec live (a CA bundle, resolv.conf):
        on the capped disk when there is one, so that /proc/self/mountinfo names no host
        folder; never bound as a folder itself."""
        return self.fs / _BIND_DIR

    def _tops(self) -> list[str]:
        return sorted(
            p.name
            for p in self.fs.iterdir()
            if p.is_dir() and not p.is_symlink() and p.name not in (_BIND_DIR, "lost+found")
        )

    def _prepare(self) -> None:
        self.fs.mkdir(exist_ok=True)  # the capped disk's mount point already exists
        self.bind_dir.mkdir(mode=0o755, exist_ok=True)
        for top in ("tmp", HOME.lstrip("/")):
            (self.fs / top).mkdir(exist_ok=True)
        (self.fs / "tmp").chmod(0o1777)
        workdir = self.spec.workdir
        if _split(workdir)[0] and _split(workdir)[0] not in SYSTEM_TOPS:
            self.host_path(workdir, for_write=True).mkdir(parents=True, exist_ok=True)
        # /etc/profile resets PATH in login shells; ~/.bash_profile puts the sandbox's back.
        path = self.spec.env.get("PATH", self._path)
        profile = self.fs / HOME.lstrip("/") / ".bash_profile"
        profile.write_text(
            "# written by paperbench: keep the sandbox PATH after /etc/profile\n"
            f"export PATH={_sh_quote(path)}\n"
            '[ -f "$HOME/.bashrc" ] && . "$HOME/.bashrc"\n'
        )
        # Mount points of host folders bound below a workspace folder (an interpreter in
        # /root/.pyenv): made here, so that bwrap does not make them root's and private.
        for src in self._ro_binds:
            if _split(src)[0] not in SYSTEM_TOPS | _FORBIDDEN_TOPS:
                (self.fs / src.lstrip("/")).mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            self.user.give(self.fs)
        if self.spec.ca_bundle is not None:
            parts = [_HOST_CA_BUNDLE.read_bytes()] if _HOST_CA_BUNDLE.exists() else []
            parts.append(Path(self.spec.ca_bundle).read_bytes())
            self._ca_file = self.bind_dir / "ca-bundle.pem"
            self._ca_file.write_bytes(b"\n".join(parts))

    # ------------------------------------------------------------------ exec

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {"PATH": self._path, "HOME": HOME, "LANG": "C.UTF-8"}
        if self.isolation == "none":
            env["HOME"] = str(self.fs / HOME.lstrip("/"))
            env["TMPDIR"] = str(self.fs / "tmp")
            env["PAPERBENCH_SANDBOX_ROOT"] = str(self.fs)
        if self._ca_file is not None:
            ca = (
                "/run/paperbench/ca-bundle.pem" if self.isolation == "bwrap" else str(self._ca_file)
            )
            for key in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT"):
                env[key] = ca
        env.update(self.spec.proxy_env)
        if self._egress is not None:
            env.update(self._egress.env)
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    def _bwrap_base(self, *, unshare_net: bool) -> list[str]:
        """bwrap with its namespaces, the read-only system folders, /proc and /dev."""
        argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
        argv += ["--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL"]
        argv += ["--hostname", "paperbench"]
        if unshare_net:
            argv.append("--unshare-net")
        for top in _RO_SYSTEM:
            if os.path.islink(f"/{top}"):  # merged /usr: /bin -> usr/bin
                argv += ["--symlink", os.readlink(f"/{top}"), f"/{top}"]
            else:
                argv += ["--ro-bind-try", f"/{top}", f"/{top}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # Kernel settings read-only whoever asks (bwrap leaves /proc/sys as it is). Not
        # user/: those limits belong to the user namespace, and --disable-userns sets one.
        for part in _RO_SYSCTLS:
            argv += ["--ro-bind-try", f"/proc/sys/{part}", f"/proc/sys/{part}"]
        return argv

    def _ro_bind_args(self) -> list[str]:
        return [arg for src in self._ro_binds for arg in ("--ro-bind-try", src, src)]

    def _bwrap_argv(self, workdir: str, seccomp: int) -> list[str]:
        """The outer bubblewrap (see ``_local_user``) and, after it, the drop to the sandbox
        user with the seccomp program in file descriptor ``seccomp``; the command follows."""
        # filtered and full: the exec joins the sandbox's network namespace in _preexec.
        joined = any(n is not None and n.netns_fd is not None for n in (self._egress, self._net))
        argv = self._bwrap_base(unshare_net=not joined)
        argv += mask_private(self.bind_dir / "empty")
        if self.spec.gpu is not None:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                argv += ["--dev-bind-try", str(dev), str(dev)]
        for top in self._tops():
            argv += ["--bind", str(self.fs / top), f"/{top}"]
        argv += self._ro_bind_args()
        if self._ca_file is not None or self._egress is not None:
            # bwrap would make it 0700, root's: closed to the sandbox user
            argv += ["--perms", "0755", "--dir", posixpath.dirname(_CA_IN_SANDBOX)]
        if self._ca_file is not None:
            argv += ["--ro-bind", str(self._ca_file), _CA_IN_SANDBOX]
        if self._egress is not None:
            argv += self._egress.exec_binds
        if self._net is not None:
            argv += self._net.exec_binds
        inner = INNER_SANDBOX_UID if self.spec.user == "sandbox" else 0
        if self.user is not None:
            argv += [*OUTER_CAPS, "--chdir", workdir, "--"]
            return argv + self.user.drop_argv(workdir=workdir, seccomp_fd=seccomp, inner_uid=inner)
        # paperbench is not root: one unprivileged bubblewrap, its uid root (or the sandbox
        # user) inside
        argv += ["--unshare-user", "--uid", str(inner), "--gid", str(inner), "--disable-userns"]
        argv += ["--seccomp", str(seccomp), "--chdir", workdir, "--"]
        return argv

    def _preexec(self) -> Callable[[], None]:
        limits = self.spec.limits
        procs_files = self._cgroup.procs_files if self._cgroup else []
        memory_cgroup = self._cgroup is not None and self._cgroup.memory_limited
        as_bytes = None if memory_cgroup or limits.memory_mb is None else limits.memory_mb << 20
        fsize = None if limits.disk_mb is None else limits.disk_mb << 20
        # RLIMIT_NPROC counts the processes of the sandbox's own uid: a hard limit for it.
        nproc = limits.pids if self.user is not None else None
        holder = self._egress or self._net
        join_netns = holder.join_netns() if holder is not None else None

        def preexec() -> None:  # runs in the child between fork and exec
            if join_netns is not None:
                join_netns()
            pid = str(os.getpid())
            for f in procs_files:
                with open(f, "w") as handle:
                    handle.write(pid)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if as_bytes is not None:
                resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

        return preexec

    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ExecResult:
        return await self._exec(
            cmd, timeout=timeout, workdir=workdir, env=env, output_limit=output_limit
        )

    async def _exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float,
        workdir: str | None,
        env: dict[str, str] | None,
        output_limit: int,
        stdout_file: int | None = None,
    ) -> ExecResult:
        """:meth:`exec`; with ``stdout_file``, the command's stdout goes to that host file
        descriptor (never read back into memory) instead of the result."""
        if self._stopped:
            raise SandboxError("the sandbox is stopped")
        argv = ["bash", "-lc", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise SandboxError("empty command")
        wd = posixpath.normpath(workdir or self.spec.workdir)
        top = _split(wd)[0]
        if top and top not in SYSTEM_TOPS and top not in _FORBIDDEN_TOPS:
            await asyncio.to_thread(self._make_dirs, wd)
        if self._egress is not None:
            self._egress.check_bridge()
        if self._net is not None:
            self._net.check_alive()
        pass_fds: tuple[int, ...] = ()
        if self.isolation == "bwrap":
            seccomp = seccomp_fd()
            pass_fds = (seccomp,)
            full_argv, cwd = [*self._bwrap_argv(wd, seccomp), *argv], str(self.workspace)
        else:
            full_argv, cwd = argv, str(self.host_path(wd))
        out, err = HeadTail(output_limit), HeadTail(output_limit)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _Protocol(loop),
                *full_argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout_file is None else stdout_file,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=self._env(env),
                start_new_session=True,
                preexec_fn=self._preexec(),
                pass_fds=pass_fds,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"cannot start {argv[0]!r} in the local sandbox: {exc}") from exc
        finally:
            for fd in pass_fds:
                os.close(fd)
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        self._running.add(proc)
        readers = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err))
        timed_out = False
        try:
            try:
                # Wait for the process itself, not its pipes (a child may hold them).
                await asyncio.wait_for(asyncio.shield(protocol.exited), timeout)
            except TimeoutError:
                timed_out = True
            # Nothing outlives its exec: kill the rest of the tree (the whole pid namespace
            # under bwrap, the process group otherwise).
            _killpg(proc.pid)
            await protocol.exited
            try:
                await asyncio.wait_for(asyncio.shield(readers), _KILL_GRACE_S)
            except TimeoutError:  # a process that left the group holds the pipe
                readers.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await readers
        except BaseException:
            _killpg(proc.pid)
            readers.cancel()
            raise
        finally:
            self._running.discard(proc)
            transport.close()
        returncode = transport.get_returncode()
        stdout, so_trunc = out.text()
        stderr, se_trunc = err.text()
        code = None if timed_out else returncode
        if code is not None and code < 0:
            code = 128 - code  # killed by a signal: report like a shell does
        return ExecResult(
            exit_code=code,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            stdout_truncated=so_trunc,
            stderr_truncated=se_trunc,
            duration_s=time.monotonic() - started,
        )

    # ------------------------------------------------------------------ files

    async def alive(self) -> bool:
        """Not stopped, and its workspace is still there."""
        return not self._stopped and self.workspace.is_dir()

    def _check_alive(self) -> None:
        if self._stopped:
            raise SandboxError("the sandbox is stopped")

    async def upload(self, src: Path, dest: str) -> None:
        """Copy a host file or folder into the workspace, never through a link the sandbox
        left there (one in the way is removed)."""
        self._check_alive()
        rel = self._rel(dest)
        src = Path(src)

        def copy() -> None:
            if src.is_dir():
                report = ExtractReport(dest=src, source_kind="folder")
                ingest(folder_entries(src), self.fs, report, owner=self._owner(), sub=rel)
            else:
                copy_file_beneath(self.fs, rel, src, owner=self._owner())

        try:
            await asyncio.to_thread(copy)
        except (OSError, ValueError) as exc:
            raise SandboxError(f"upload of {src} to {dest} failed: {exc}") from exc

    async def download(
        self, src: str, dest: Path, *, limits: TreeLimits = DEFAULT_LIMITS
    ) -> ExtractReport:
        """Copy a workspace file or folder to the host by the rule of
        :mod:`paperbench.sandbox._tree` (no link followed, links checked last, caps)."""
        self._check_alive()
        rel = self._rel(src)
        dest = Path(dest)

        def copy() -> ExtractReport:
            report = ExtractReport(dest=dest, source_kind="folder")
            try:
                fd = open_dir_beneath(self.fs, rel)
            except FileNotFoundError:
                report.bytes = copy_out_beneath(self.fs, rel, dest, limits.max_file_bytes)
                report.files = 1
                return report
            try:
                return ingest(
                    folder_entries(fd, max_depth=limits.max_depth + 1), dest, report, limits=limits
                )
            finally:
                os.close(fd)

        try:
            return await asyncio.to_thread(copy)
        except FileNotFoundError:
            raise SandboxError(f"{src}: no such file or folder in the sandbox") from None
        except (OSError, ValueError) as exc:
            raise SandboxError(f"download of {src} failed: {exc}") from exc

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_LIMIT) -> bytes:
        """Read a file; in the workspace without following any link (a link reads as missing)."""
        self._check_alive()
        top = _split(path)[0]
        try:
            if top in SYSTEM_TOPS or top in _FORBIDDEN_TOPS:  # the host's own, read-only
                data = await asyncio.to_thread(_read_host, self.host_path(path), max_bytes)
            else:
                data = await asyncio.to_thread(
                    read_file_beneath, self.fs, self._rel(path), max_bytes
                )
        except FileNotFoundError:
            raise SandboxError(f"{path}: no such file in the sandbox") from None
        except IsADirectoryError:
            raise SandboxError(f"{path}: is a folder") from None
        except (OSError, ValueError) as exc:
            raise SandboxError(f"{path}: cannot read: {exc}") from exc
        if len(data) > max_bytes:
            raise SandboxError(f"{path}: over the limit of {plural(max_bytes, 'byte')}")
        return data

    async def write_file(self, path: str, data: bytes) -> None:
        """Write a file in the workspace, never through a link (one in the way is removed)."""
        self._check_alive()
        rel = self._rel(path)
        if "/" not in rel:
            raise SandboxError(f"{path}: cannot write a file at the top level")
        try:
            await asyncio.to_thread(write_file_beneath, self.fs, rel, data, owner=self._owner())
        except (OSError, ValueError) as exc:
            raise SandboxError(f"{path}: cannot write: {exc}") from exc

    async def snapshot(self, path: str, dest: Path) -> None:
        """The archive is made INSIDE the sandbox (``tar`` as the sandbox's user, into a host
        file it cannot reach again), then repacked on the host by the rule of
        :mod:`paperbench.sandbox._tree`: the host never walks a workspace the sandbox can
        still change."""
        self._check_alive()
        rel = self._rel(path)
        try:
            os.close(await asyncio.to_thread(open_dir_beneath, self.fs, rel))
        except (FileNotFoundError, ValueError):
            raise SandboxError(f"{path}: no such folder in the sandbox") from None
        with tempfile.TemporaryFile(prefix="paperbench-snapshot-") as raw:
            result = await self._exec(
                ["tar", "--numeric-owner", "--ignore-failed-read", "-cf", "-", "."],
                timeout=_SNAPSHOT_TIMEOUT_S,
                workdir=path,
                env=None,
                output_limit=64 * 1024,
                stdout_file=raw.fileno(),
            )
            # tar exits 1 when a file changed while it read it: the archive is still whole.
            if result.exit_code not in (0, 1):
                detail = (result.stderr.strip().splitlines() or ["timed out"])[-1]
                raise SandboxError(f"snapshot of {path} failed: {detail}")
            raw.seek(0)

            def pack() -> None:
                with atomic_open(Path(dest)) as out:
                    repack(raw, out)

            try:
                await asyncio.to_thread(pack)
            except (OSError, tarfile.TarError) as exc:
                raise SandboxError(f"snapshot of {path} failed: {exc}") from exc

    # ------------------------------------------------------------------ lifecycle

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for proc in list(self._running):
            _killpg(proc.pid)
        if self._egress is not None:
            await self._egress.close()
            self._egress = None
        if self._net is not None:
            await self._net.close()
            self._net = None
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.remove)
        await asyncio.to_thread(remove_tree, self.workspace)


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Stream protocol that also says when the process exited, pipes open or not."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=2**16, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _read_host(path: Path, max_bytes: int) -> bytes:
    """A host system file the sandbox sees read-only (``/etc/...``): the host's own links."""
    if path.is_dir():
        raise IsADirectoryError(path)
    with open(path, "rb") as handle:
        return handle.read(max_bytes + 1)


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"
