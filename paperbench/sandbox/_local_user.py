"""Who a local sandbox's commands are: root only inside a user namespace, a non-root uid outside.

paperbench runs as root on its machines, and a process that is root on the host can write the
kernel's settings (``/proc/sys``), read the host's secrets and keyrings whatever namespaces it
is in. So no command of a bubblewrap sandbox runs as host root. Each exec is two bubblewraps:

1. the *outer* one, started by paperbench as root, builds the sandbox: its pid, ipc, uts,
   cgroup, mount and (unless ``full`` without a network keeper) network namespaces, the
   read-only system folders, the workspace, ``/proc`` and ``/dev``. Being root it can bind any
   host path the command needs (an interpreter under ``/root``, a workspace below a private
   temp folder). It keeps only CAP_SETUID and CAP_SETGID, for step 2;
2. ``setpriv`` switches to the sandbox's own uid and gid (``SandboxUser``: a number no account
   uses, one per sandbox), clears the supplementary groups, the bounding set and every
   capability;
3. the *inner* one, now unprivileged, creates a user namespace in which that uid is root
   (``--uid 0``), forbids further user namespaces (``--disable-userns``), keeps the view the
   outer one built (``--dev-bind / /``) and loads the seccomp filter (``_seccomp``) just before
   the command.

So the command sees itself as root with a home of ``/root``, while the kernel sees a non-root
uid with no capabilities and ``no_new_privs``: ``/proc/sys`` and other root-only kernel
interfaces refuse its writes, root-only host files (``/etc/shadow``) refuse its reads, the
host's keyrings are invisible to it, and RLIMIT_NPROC holds (the kernel does not apply it to
root). Files the command writes belong to that uid on the host; files paperbench writes into
the workspace are given to it (``give``).
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from paperbench.errors import SandboxUnavailableError

UID_BASE = 1_100_000_000
"""Sandbox uids are drawn from [UID_BASE, UID_BASE + UID_SPAN): far above any account's."""
UID_SPAN = 1 << 24

SETPRIV_HINT = "install util-linux (apt-get install util-linux) for setpriv"


@dataclass(frozen=True)
class SandboxUser:
    """The host uid and gid of one sandbox's commands (root inside its user namespace)."""

    uid: int
    gid: int

    @classmethod
    def new(cls) -> SandboxUser:
        n = UID_BASE + secrets.randbelow(UID_SPAN)
        return cls(n, n)

    def give(self, path: Path) -> None:
        """Hand ``path`` (a file or a whole folder, links not followed) to this user."""
        if path.is_dir() and not path.is_symlink():
            for folder, dirs, files in os.walk(path):
                for name in (*dirs, *files):
                    os.lchown(os.path.join(folder, name), self.uid, self.gid)
        os.lchown(path, self.uid, self.gid)

    def drop_argv(self, *, workdir: str, seccomp_fd: int, inner_uid: int = 0) -> list[str]:
        """What the outer bubblewrap runs: setpriv to this user, then the inner bubblewrap,
        up to its ``--`` (the command follows). ``inner_uid``: who the command is inside its
        user namespace (0, or ``INNER_SANDBOX_UID`` for ``SandboxSpec.user == "sandbox"``)."""
        setpriv = [
            "setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--",
        ]  # fmt: skip
        inner = [
            "bwrap", "--unshare-user", "--uid", str(inner_uid), "--gid", str(inner_uid),
            "--disable-userns",
            "--dev-bind", "/", "/", "--seccomp", str(seccomp_fd), "--chdir", workdir, "--",
        ]  # fmt: skip
        return [*setpriv, *inner]


INNER_SANDBOX_UID = 1000
"""Who a command of a ``user="sandbox"`` sandbox is inside its user namespace: not root even
there (the same uid as the Docker backend's unprivileged user)."""

OUTER_CAPS = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
"""The outer bubblewrap keeps only what setpriv needs to switch users."""


def check_tools() -> None:
    """Refuse to start when the drop to a sandbox user cannot be made.

    Raises:
        SandboxUnavailableError: no setpriv, or this process is not root (the outer
            bubblewrap must be able to switch users).
    """
    if shutil.which("setpriv") is None:
        raise SandboxUnavailableError(f"local sandbox: setpriv not found; {SETPRIV_HINT}")
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "local sandbox: bubblewrap isolation needs root (it runs each command as a "
            "sandbox uid of its own); run as root or use --sandbox docker"
        )
