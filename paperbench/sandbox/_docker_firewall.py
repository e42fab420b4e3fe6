"""Host firewall rules that keep a Docker sandbox's network away from the host.

A container on a Docker bridge network reaches the host on the network's gateway address and
on every other address of the host's (a packet to any of them arrives on the network's bridge
interface through the INPUT chain): any host service bound to ``0.0.0.0`` would answer. So
every sandbox with a network gets a bridge network of its own, and rules inserted at the top
of INPUT, scoped to that bridge, close the host to it:

- ``filtered`` (an internal network whose only way out is the egress proxy on the gateway):

      -A INPUT -i <bridge> -p tcp --dport <proxy port> -j ACCEPT
      -A INPUT -i <bridge> -j DROP

- ``full`` (a routed network): ``-A INPUT -i <bridge> -j DROP``, and in FORWARD
  ``-i <bridge> -d 169.254.0.0/16 -j DROP`` (link-local and cloud metadata addresses, which
  are routed, not the host's).

Each rule carries the comment ``paperbench-egress:<network name>``, which is how it is found
again: :meth:`HostFirewall.remove` removes them with the network, adding them twice is a
no-op, and ``paperbench sandbox gc`` removes those whose bridge no longer exists or belongs to
a network it removes (:func:`stale_rules`, then :func:`remove_rule`). Needs root and
``iptables``; without them a sandbox with a network is refused.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
from collections.abc import Collection
from pathlib import Path

from paperbench.errors import SandboxError

COMMENT_PREFIX = "paperbench-egress:"
_TIMEOUT_S = 30.0
_CHAINS = ("INPUT", "FORWARD")
LINK_LOCAL = "169.254.0.0/16"


class FirewallError(SandboxError):
    """The host firewall rules for a filtered sandbox could not be set."""


def bridge_name(network_id: str) -> str:
    """The host interface of a user-defined bridge network (Docker's ``br-<id[:12]>``)."""
    return f"br-{network_id[:12]}"


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["iptables", "-w", "10", *args], capture_output=True, text=True, timeout=_TIMEOUT_S
    )


def firewall_problem() -> str | None:
    """Why the rules cannot be set here, or None."""
    if os.geteuid() != 0:
        return "closing the host to filtered sandboxes needs root (iptables)"
    if shutil.which("iptables") is None:
        return "closing the host to filtered sandboxes needs iptables (apt-get install iptables)"
    return None


class HostFirewall:
    """The INPUT rules of one filtered network (see the module docstring)."""

    def __init__(self, network_name: str, network_id: str, proxy_port: int | None) -> None:
        """``proxy_port``: the egress proxy's port on the gateway (filtered); None for a
        routed (full) network."""
        self.comment = COMMENT_PREFIX + network_name
        self.bridge = bridge_name(network_id)
        self.mode = "full" if proxy_port is None else "filtered"
        self.rules: list[tuple[str, list[str]]] = []
        if proxy_port is not None:
            accept = ["-i", self.bridge, "-p", "tcp", "--dport", str(proxy_port), "-j", "ACCEPT"]
            self.rules.append(("INPUT", accept))
        self.rules.append(("INPUT", ["-i", self.bridge, "-j", "DROP"]))
        if proxy_port is None:
            self.rules.append(("FORWARD", ["-i", self.bridge, "-d", LINK_LOCAL, "-j", "DROP"]))

    def _spec(self, rule: list[str]) -> list[str]:
        return [*rule, "-m", "comment", "--comment", self.comment]

    def install(self) -> None:
        """Insert the rules at the top of INPUT (ACCEPT before DROP); idempotent.

        Raises:
            FirewallError: no root, no iptables, or iptables refused.
        """
        problem = firewall_problem()
        if problem is not None:
            raise FirewallError(f"network={self.mode}: {problem}; use network none")
        for chain, rule in reversed(self.rules):  # each goes first: the ACCEPT ends up on top
            spec = self._spec(rule)
            if _iptables("-C", chain, *spec).returncode == 0:
                continue
            done = _iptables("-I", chain, "1", *spec)
            if done.returncode != 0:
                self.remove()
                raise FirewallError(
                    f"network={self.mode}: iptables -I {chain} {shlex.join(spec)} failed: "
                    f"{done.stderr.strip()}"
                )

    def remove(self) -> None:
        """Delete the rules (every copy); safe to call twice."""
        for chain, rule in self.rules:
            spec = self._spec(rule)
            for _ in range(16):
                if _iptables("-D", chain, *spec).returncode != 0:
                    break

    async def ainstall(self) -> None:
        await asyncio.to_thread(self.install)

    async def aremove(self) -> None:
        await asyncio.to_thread(self.remove)


def our_rules() -> list[str]:
    """The INPUT and FORWARD rules paperbench added (``iptables -S`` lines)."""
    if firewall_problem() is not None:
        return []
    lines = []
    for chain in _CHAINS:
        listing = _iptables("-S", chain)
        lines += [line for line in listing.stdout.splitlines() if COMMENT_PREFIX in line]
    return lines


def rule_bridge(line: str) -> str | None:
    """The bridge interface an ``iptables -S`` line of ours is scoped to."""
    words = shlex.split(line)
    return words[words.index("-i") + 1] if "-i" in words[:-1] else None


def stale_rules(going: Collection[str] = ()) -> list[str]:
    """Our rules (``iptables -S`` lines) whose bridge interface is gone or is one of ``going``
    (the bridges of networks about to be removed)."""
    stale = []
    for line in our_rules():
        bridge = rule_bridge(line)
        if bridge is not None and (bridge in going or not Path("/sys/class/net", bridge).exists()):
            stale.append(line)
    return stale


def remove_rule(line: str) -> str | None:
    """Delete one rule listed by :func:`stale_rules`, once its bridge is gone; None when
    deleted, else why not."""
    bridge = rule_bridge(line)
    if bridge is not None and Path("/sys/class/net", bridge).exists():
        return f"kept: its network (bridge {bridge}) is still there"
    words = shlex.split(line)
    if len(words) < 3 or words[0] != "-A" or words[1] not in _CHAINS:
        return "not a rule of paperbench's chains"
    done = _iptables("-D", words[1], *words[2:])
    if done.returncode != 0 and _iptables("-C", words[1], *words[2:]).returncode == 0:
        return f"iptables -D failed: {done.stderr.strip()}"
    return None
