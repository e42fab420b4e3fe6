"""Labels on the Docker objects paperbench creates, and who owns them.

Every container, network and volume carries ``paperbench.managed=true``, a ``paperbench.kind``
and ``paperbench.owner=<host>:<pid>:<start ticks>``: the process that created it. An object
whose owner process is gone (on this host) is an orphan that ``paperbench sandbox gc`` reaps.
The start time guards against a recycled pid.
"""

from __future__ import annotations

import functools
import os
import socket
from datetime import UTC, datetime
from typing import Literal

from paperbench.sandbox._base import LABEL_PREFIX

MANAGED = f"{LABEL_PREFIX}.managed"
KIND = f"{LABEL_PREFIX}.kind"
OWNER = f"{LABEL_PREFIX}.owner"
CREATED = f"{LABEL_PREFIX}.created"
BACKEND = f"{LABEL_PREFIX}.backend"
SANDBOX = f"{LABEL_PREFIX}.sandbox"
"""The id of the sandbox a network or volume belongs to."""

Kind = Literal["sandbox", "network", "volume", "egress", "test", "base-image", "image"]


def start_ticks(pid: int) -> str | None:
    """The process start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", errors="replace")
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


@functools.cache
def owner_id() -> str:
    """``<host>:<pid>:<start ticks>`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{start_ticks(os.getpid()) or '?'}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the owner process still runs: True/False on this host, None for another host."""
    if not owner:
        return False
    try:
        host, pid_text, ticks = owner.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return None
    if owner == owner_id():
        return True
    current = start_ticks(pid)
    return current is not None and (ticks == "?" or current == ticks)


def labels(kind: Kind, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels of a new object: ``extra`` first, so ours cannot be overridden."""
    out = dict(extra or {})
    out.update(
        {
            MANAGED: "true",
            KIND: kind,
            OWNER: owner_id(),
            BACKEND: "docker",
            CREATED: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    return out
