"""iptables and ip6tables for the host firewall rules of sandboxes (``_docker_firewall``,
``_local_net``): running them, and the chain that keeps a ``full`` sandbox on the internet.

A ``full`` sandbox's traffic passes one chain of its own (a Docker network's from FORWARD, a
local sandbox's slirp4netns uid's from OUTPUT)::

    -A <chain> ... (the caller's head: e.g. the host's own addresses are left to other rules)
    -A <chain> -d <cloud metadata address> -j REJECT     each of CLOUD_METADATA
    -A <chain> -d <range opened with --allow-network> -j RETURN
    -A <chain> -d <internal range> -j REJECT             each of INTERNAL_NETWORKS

RETURN, not ACCEPT: an opened range is only no longer refused by paperbench; the operator's
rules and Docker's own (network isolation) still apply after the chain.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from typing import Literal

from paperbench.sandbox._internal_nets import (
    CLOUD_METADATA,
    INTERNAL_NETWORKS,
    IPNetwork,
    of_version,
)

Family = Literal[4, 6]
_TIMEOUT_S = 30.0
_WAIT_S = "10"


def binary(family: Family) -> str:
    return "iptables" if family == 4 else "ip6tables"


def available(family: Family) -> bool:
    return shutil.which(binary(family)) is not None


def run(family: Family, *args: str) -> subprocess.CompletedProcess[str]:
    """``iptables -w 10 ARGS`` (or ip6tables)."""
    return subprocess.run(
        [binary(family), "-w", _WAIT_S, *args], capture_output=True, text=True, timeout=_TIMEOUT_S
    )


def restore(family: Family, lines: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Apply ``lines`` (``iptables -S`` syntax, filter table) in one transaction, keeping
    every other rule (``--noflush``). A chain declared (``:name``) is created, or emptied."""
    text = "\n".join(["*filter", *lines, "COMMIT", ""])
    return subprocess.run(
        [f"{binary(family)}-restore", "-w", _WAIT_S, "--noflush"],
        input=text,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
    )


def internet_only_chain(
    chain: str, allowed: Sequence[IPNetwork], family: Family, head: Sequence[str] = ()
) -> list[str]:
    """``iptables-restore`` lines that (re)make ``chain``: after ``head`` (rule bodies),
    cloud metadata refused, ``allowed`` returned, every internal range refused."""
    reject = ["-j", "REJECT"]
    lines = [f":{chain} - [0:0]"]
    lines += [f"-A {chain} {rule}" for rule in head]
    lines += [f"-A {chain} -d {n} {' '.join(reject)}" for n in of_version(CLOUD_METADATA, family)]
    lines += [f"-A {chain} -d {n} -j RETURN" for n in of_version(allowed, family)]
    lines += [
        f"-A {chain} -d {n} {' '.join(reject)}" for n in of_version(INTERNAL_NETWORKS, family)
    ]
    return lines


def chains(family: Family, prefix: str) -> list[str]:
    """The user-defined chains whose name starts with ``prefix``."""
    if not available(family):
        return []
    listing = run(family, "-S")
    names = [line.split()[1] for line in listing.stdout.splitlines() if line.startswith("-N ")]
    return [n for n in names if n.startswith(prefix)]


def delete_chain(family: Family, chain: str) -> str | None:
    """Empty and delete ``chain``: None when it is gone, else why not."""
    run(family, "-F", chain)
    done = run(family, "-X", chain)
    if done.returncode == 0 or chain not in chains(family, chain):
        return None
    return f"{binary(family)} -X {chain} failed: {done.stderr.strip()}"
