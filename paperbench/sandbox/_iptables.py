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

The host's resolvers are often on a private address (a cloud's or an office's), and both
slirp4netns and Docker's embedded DNS send their queries from the sandbox's side: port 53 of
each resolver the host names (:func:`host_resolvers`) is let through first (:func:`dns_rules`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from paperbench.sandbox._internal_nets import (
    CLOUD_METADATA,
    INTERNAL_NETWORKS,
    IPAddress,
    IPNetwork,
    of_version,
)

Family = Literal[4, 6]
_TIMEOUT_S = 30.0
_WAIT_S = "10"
RESOLV_FILES = (Path("/etc/resolv.conf"), Path("/run/systemd/resolve/resolv.conf"))
"""The host's resolver, and the upstream servers of systemd-resolved's stub (Docker's
embedded DNS uses those when the host's resolver is a loopback stub)."""
DOCKER_DAEMON_JSON = Path("/etc/docker/daemon.json")


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


def host_resolvers(
    files: Sequence[Path] = RESOLV_FILES, daemon_json: Path | None = DOCKER_DAEMON_JSON
) -> list[IPAddress]:
    """The name servers the host names: ``nameserver`` lines of ``files``, and the ``dns``
    list of the Docker daemon's configuration."""
    names: list[str] = []
    for path in files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in path.read_text().splitlines():
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver":
                    names.append(words[1])
    if daemon_json is not None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            names += [str(n) for n in json.loads(daemon_json.read_text()).get("dns") or []]
    found: list[IPAddress] = []
    for name in names:
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(name.split("%", 1)[0])
            if address not in found:
                found.append(address)
    return found


def dns_rules(family: Family, resolvers: Sequence[IPAddress] | None = None) -> list[str]:
    """Chain rule bodies that let DNS (port 53, UDP and TCP) to the host's resolvers through."""
    servers = host_resolvers() if resolvers is None else resolvers
    bits = 32 if family == 4 else 128
    return [
        f"-d {server}/{bits} -p {proto} --dport 53 -j RETURN"
        for server in servers
        if server.version == family
        for proto in ("udp", "tcp")
    ]


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
