"""PID 1 of a Docker sandbox: a watchdog bound to the life of the process that owns it.

Nothing outlives its owner. The container is created with stdin open and ``StdinOnce``; before
it starts, the owner attaches to its stdin (:class:`Lifeline`) and holds that connection for
the sandbox's life without sending a byte. PID 1 (:func:`init_argv`) reads its stdin and exits
at end of file. When the owner process ends, however it ends (``kill -9`` included), the kernel
closes its connection, the engine closes the container's stdin (``StdinOnce``), PID 1 exits,
and the kernel kills every process in the container's pid namespace: the container stops
within a second, whether or not anyone runs ``paperbench sandbox gc`` (which still removes what
a stopped container leaves: the container itself, its network and firewall rules, a
loop-mounted disk). Nothing in the attach path times out while the sandbox idles: no byte
travels either way, so the client's socket timeout never applies, and the engine has none.
The socket is not inherited by the owner's child processes (Python opens it close-on-exec).

What untrusted root inside the container could try, and why it fails:

- hold the write end of PID 1's stdin (``open("/proc/1/fd/0", O_WRONLY)``), so the end of file
  never comes, or trace PID 1 (``ptrace``) to stop it or change what it does: PID 1 runs under
  ``setpriv`` with a real uid (``INIT_RUID``) that differs from its effective and saved uid
  (``INIT_EUID``), no group and no capability. The kernel lets a process trace another, or
  open its ``/proc/<pid>/fd``, ``mem`` or ``environ``, only when the caller's uid equals all
  three of the target's (and its gid all three gids) or the caller has ``CAP_SYS_PTRACE``;
  no uid equals two different ones, and the sandbox has no ``CAP_SYS_PTRACE``. (It is also not
  dumpable: an exec whose effective uid differs from the real one makes it so, unless the
  host set ``fs.suid_dumpable=1``.)
- signal PID 1: the kernel drops a signal sent from inside a pid namespace to its init unless
  the init handles it; ``bash -p -c`` handles only ``SIGCHLD`` (which reaps children), and
  ``SIGKILL``/``SIGSTOP`` never reach it from inside. Killing it, were it possible, would only
  stop the container.
- leave processes behind: when PID 1 exits, the kernel kills everything in its pid namespace,
  and root in the sandbox cannot make another one (no ``CAP_SYS_ADMIN``).

PID 1 also reaps orphans (bash reaps every child on ``SIGCHLD``), as the container's init
must. It needs ``setpriv`` (util-linux, essential in Debian) and bash in the image.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

INIT_RUID = 65534
"""PID 1's real uid and gid (``nobody``/``nogroup``)."""
INIT_EUID = 65533
"""PID 1's effective and saved uid and gid: never equal to the real ones (see above)."""
WATCH_SCRIPT = "while read -r _; do :; done; exit 0"
"""PID 1's script: builtins only; it ends at the end of its stdin."""
NO_SETPRIV_HINT = "the image needs setpriv (Debian: util-linux) for the sandbox's init"


def init_argv() -> list[str]:
    """The container's entrypoint: the watchdog as PID 1 (see the module docstring)."""
    ids = [f"--ruid={INIT_RUID}", f"--euid={INIT_EUID}"]
    ids += [f"--rgid={INIT_RUID}", f"--egid={INIT_EUID}", "--clear-groups"]
    return ["setpriv", *ids, "--", "bash", "-p", "-c", WATCH_SCRIPT]


class Lifeline:
    """The owner's attach to the container's stdin, held for the sandbox's life."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        """What the SDK gave: a socket, or a file object over one (``_sock``)."""

    @classmethod
    def attach(cls, api: Any, container_id: str) -> Lifeline:
        """Attach to the stdin of a created container (before it starts: if the owner dies
        in between, the container never runs). Blocking: call it in a worker thread.

        Raises:
            docker.errors.APIError: the engine refused.
        """
        return cls(api.attach_socket(container_id, params={"stdin": 1, "stream": 1}))

    def cut(self) -> None:
        """Close the connection: PID 1 exits, and with it the container."""
        raw = getattr(self.sock, "_sock", self.sock)
        with contextlib.suppress(Exception):  # already closed, or the engine is gone
            raw.shutdown(socket.SHUT_RDWR)
        for closable in (self.sock, raw, getattr(self.sock, "_response", None)):
            if closable is not None:
                with contextlib.suppress(Exception):
                    closable.close()
