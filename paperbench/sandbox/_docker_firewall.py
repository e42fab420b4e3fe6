"""Host firewall rules that leave a filtered sandbox only the egress proxy on the host.

A container on an internal Docker network reaches the host on the network's gateway address:
the egress proxy listens there, but so would any host service bound to ``0.0.0.0``. Packets
from the container to the host arrive on the network's bridge interface through the INPUT
chain, so two rules, inserted at the top of INPUT, scoped to that interface, close it:

    -A INPUT -i <bridge> -p tcp --dport <proxy port> -j ACCEPT
    -A INPUT -i <bridge> -j DROP

Both carry the comment ``paperbench-egress:<network name>``, which is how they are found again:
:meth:`HostFirewall.close` removes them with the network, adding them twice is a no-op, and
:func:`reap_firewall_rules` (``paperbench sandbox gc``) removes those whose bridge no longer
exists. Needs root and ``iptables``; without them a filtered sandbox is refused.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from paperbench.errors import SandboxError

COMMENT_PREFIX = "paperbench-egress:"
_TIMEOUT_S = 30.0


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

    def __init__(self, network_name: str, network_id: str, proxy_port: int) -> None:
        self.comment = COMMENT_PREFIX + network_name
        self.bridge = bridge_name(network_id)
        self.rules: list[list[str]] = [
            ["-i", self.bridge, "-p", "tcp", "--dport", str(proxy_port), "-j", "ACCEPT"],
            ["-i", self.bridge, "-j", "DROP"],
        ]

    def _spec(self, rule: list[str]) -> list[str]:
        return [*rule, "-m", "comment", "--comment", self.comment]

    def install(self) -> None:
        """Insert the rules at the top of INPUT (ACCEPT before DROP); idempotent.

        Raises:
            FirewallError: no root, no iptables, or iptables refused.
        """
        problem = firewall_problem()
        if problem is not None:
            raise FirewallError(f"network=filtered: {problem}; use network none or full")
        for rule in reversed(self.rules):  # each goes first: the ACCEPT ends up on top
            spec = self._spec(rule)
            if _iptables("-C", "INPUT", *spec).returncode == 0:
                continue
            done = _iptables("-I", "INPUT", "1", *spec)
            if done.returncode != 0:
                self.remove()
                raise FirewallError(
                    f"network=filtered: iptables -I INPUT {shlex.join(spec)} failed: "
                    f"{done.stderr.strip()}"
                )

    def remove(self) -> None:
        """Delete the rules (every copy); safe to call twice."""
        for rule in self.rules:
            spec = self._spec(rule)
            for _ in range(16):
                if _iptables("-D", "INPUT", *spec).returncode != 0:
                    break

    async def ainstall(self) -> None:
        await asyncio.to_thread(self.install)

    async def aremove(self) -> None:
        await asyncio.to_thread(self.remove)


def our_rules() -> list[str]:
    """The INPUT rules paperbench added (``iptables -S`` lines)."""
    if firewall_problem() is not None:
        return []
    listing = _iptables("-S", "INPUT")
    return [line for line in listing.stdout.splitlines() if COMMENT_PREFIX in line]


def reap_firewall_rules(dry_run: bool = False) -> list[str]:
    """Remove (unless ``dry_run``) our rules whose bridge interface is gone; return them."""
    stale = []
    for line in our_rules():
        words = shlex.split(line)
        if "-i" not in words:
            continue
        bridge = words[words.index("-i") + 1]
        if Path("/sys/class/net", bridge).exists():
            continue
        stale.append(line)
        if not dry_run and words[:2] == ["-A", "INPUT"]:
            _iptables("-D", "INPUT", *words[2:])
    return stale
