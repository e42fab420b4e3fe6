"""Host firewall rules that keep a Docker sandbox's network away from the host and, under
``full``, on the public internet.

A container on a Docker bridge network reaches the host on the network's gateway address and
on every other address of the host's (a packet to any of them arrives on the network's bridge
interface through the INPUT chain): any host service bound to ``0.0.0.0`` would answer. So
every sandbox with a network gets a bridge network of its own, and rules inserted at the top
of INPUT, scoped to that bridge, close the host to it:

- ``filtered`` (an internal network whose only way out is the egress proxy on the gateway):

      -A INPUT -i <bridge> -p tcp --dport <proxy port> -j ACCEPT
      -A INPUT -i <bridge> -j DROP

- ``full`` (a routed network): ``-A INPUT -i <bridge> -j DROP``, and at the top of FORWARD
  ``-i <bridge> -j paperbench-<bridge>``, a chain of the network's own
  (``_iptables.internet_only_chain``) that lets DNS to the host's resolvers through (Docker's
  embedded DNS queries them from the container's side), refuses the cloud metadata addresses,
  returns the ranges opened with ``--allow-network``, and refuses every other private,
  link-local, ULA or otherwise internal range (``_internal_nets``). The host's own addresses
  never reach FORWARD: the INPUT rule refuses them whatever is opened.

When the bridge has IPv6 (an address of global scope), the same rules go into ip6tables.

Each INPUT and FORWARD rule carries the comment ``paperbench-egress:<network name>``, which is
how it is found again: :meth:`HostFirewall.remove` removes them and the chain with the
network, adding them twice is a no-op, and ``paperbench sandbox gc`` removes those whose bridge
no longer exists or belongs to a network it removes (:func:`stale_rules`, then
:func:`remove_rule`, which deletes a rule's chain with it). Needs root and ``iptables``;
without them a sandbox with a network is refused.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path

from paperbench.errors import SandboxError
from paperbench.sandbox import _iptables as ipt
from paperbench.sandbox._internal_nets import IPNetwork
from paperbench.sandbox._iptables import Family

COMMENT_PREFIX = "paperbench-egress:"
CHAIN_PREFIX = "paperbench-br-"
_CHAINS = ("INPUT", "FORWARD")
_V6_PREFIX = "ip6tables "
"""How :func:`our_rules` marks an ip6tables line (an iptables line has no prefix)."""


class FirewallError(SandboxError):
    """The host firewall rules for a filtered sandbox could not be set."""


def bridge_name(network_id: str) -> str:
    """The host interface of a user-defined bridge network (Docker's ``br-<id[:12]>``)."""
    return f"br-{network_id[:12]}"


def chain_name(bridge: str) -> str:
    """The FORWARD chain of a ``full`` network's bridge (28 characters at most)."""
    return "paperbench-" + bridge


def bridge_has_ipv6(bridge: str) -> bool:
    """Whether ``bridge`` has an IPv6 address of global scope (a ULA counts): the network
    was made with IPv6, so its containers have it too."""
    try:
        lines = Path("/proc/net/if_inet6").read_text().splitlines()
    except OSError:
        return False
    return any(w[-1] == bridge and w[3] == "00" for w in (line.split() for line in lines) if w)


def firewall_problem() -> str | None:
    """Why the rules cannot be set here, or None."""
    if os.geteuid() != 0:
        return "closing the host to filtered sandboxes needs root (iptables)"
    if shutil.which("iptables") is None:
        return "closing the host to filtered sandboxes needs iptables (apt-get install iptables)"
    return None


class HostFirewall:
    """The INPUT and FORWARD rules of one sandbox network (see the module docstring)."""

    def __init__(
        self,
        network_name: str,
        network_id: str,
        proxy_port: int | None,
        allow: Sequence[IPNetwork] = (),
    ) -> None:
        """``proxy_port``: the egress proxy's port on the gateway (filtered); None for a
        routed (full) network. ``allow``: the ranges ``--allow-network`` opens (full)."""
        self.comment = COMMENT_PREFIX + network_name
        self.bridge = bridge_name(network_id)
        self.chain = chain_name(self.bridge)
        self.mode = "full" if proxy_port is None else "filtered"
        self.allow = tuple(allow)
        self.families: list[Family] = [4]
        self.rules: list[tuple[str, list[str]]] = []
        if proxy_port is not None:
            accept = ["-i", self.bridge, "-p", "tcp", "--dport", str(proxy_port), "-j", "ACCEPT"]
            self.rules.append(("INPUT", accept))
        self.rules.append(("INPUT", ["-i", self.bridge, "-j", "DROP"]))
        if proxy_port is None:
            self.rules.append(("FORWARD", ["-i", self.bridge, "-j", self.chain]))

    def _spec(self, rule: list[str]) -> list[str]:
        return [*rule, "-m", "comment", "--comment", self.comment]

    def install(self) -> None:
        """Make the FORWARD chain (full), then insert the rules at the top of INPUT and
        FORWARD (ACCEPT before DROP); idempotent. In ip6tables too when the bridge has IPv6.

        Raises:
            FirewallError: no root, no iptables (ip6tables for a network with IPv6), or
                iptables refused.
        """
        problem = firewall_problem()
        if problem is None and bridge_has_ipv6(self.bridge):
            self.families = [4, 6]
            if not ipt.available(6):
                problem = "the network has IPv6: closing it needs ip6tables"
        if problem is not None:
            raise FirewallError(f"network={self.mode}: {problem}; use network none")
        for family in self.families:
            try:
                self._install(family)
            except FirewallError:
                self.remove()
                raise

    def _install(self, family: Family) -> None:
        if self.mode == "full":
            lines = ipt.internet_only_chain(self.chain, self.allow, family, ipt.dns_rules(family))
            done = ipt.restore(family, lines)
            if done.returncode != 0:
                raise FirewallError(
                    f"network=full: {ipt.binary(family)}-restore could not make the chain "
                    f"{self.chain}: {done.stderr.strip()}"
                )
        for chain, rule in reversed(self.rules):  # each goes first: the ACCEPT ends up on top
            spec = self._spec(rule)
            if ipt.run(family, "-C", chain, *spec).returncode == 0:
                continue
            done = ipt.run(family, "-I", chain, "1", *spec)
            if done.returncode != 0:
                raise FirewallError(
                    f"network={self.mode}: {ipt.binary(family)} -I {chain} {shlex.join(spec)} "
                    f"failed: {done.stderr.strip()}"
                )

    def remove(self) -> None:
        """Delete the rules (every copy) and the chain; safe to call twice."""
        for family in self.families:
            if not ipt.available(family):
                continue
            for chain, rule in self.rules:
                spec = self._spec(rule)
                for _ in range(16):
                    if ipt.run(family, "-D", chain, *spec).returncode != 0:
                        break
            if self.mode == "full":
                ipt.delete_chain(family, self.chain)

    async def ainstall(self) -> None:
        await asyncio.to_thread(self.install)

    async def aremove(self) -> None:
        await asyncio.to_thread(self.remove)


def _families() -> list[Family]:
    both: list[Family] = [4, 6]
    return [f for f in both if ipt.available(f)]


def _line(family: Family, line: str) -> str:
    return line if family == 4 else _V6_PREFIX + line


def _split(line: str) -> tuple[Family, list[str]]:
    """An :func:`our_rules` or :func:`stale_rules` line: its family and its words."""
    if line.startswith(_V6_PREFIX):
        return 6, shlex.split(line[len(_V6_PREFIX) :])
    return 4, shlex.split(line)


def _target(words: list[str]) -> str:
    return words[words.index("-j") + 1] if "-j" in words[:-1] else ""


def our_rules() -> list[str]:
    """The INPUT and FORWARD rules paperbench added (``iptables -S`` lines; ip6tables lines
    start with ``ip6tables``)."""
    if firewall_problem() is not None:
        return []
    lines = []
    for family in _families():
        for chain in _CHAINS:
            listing = ipt.run(family, "-S", chain)
            ours = [line for line in listing.stdout.splitlines() if COMMENT_PREFIX in line]
            lines += [_line(family, line) for line in ours]
    return lines


def rule_bridge(line: str) -> str | None:
    """The bridge interface an :func:`our_rules` line is scoped to (for a chain's ``-N``
    line, the bridge it is named after)."""
    _, words = _split(line)
    if words[:1] == ["-N"] and len(words) == 2 and words[1].startswith(CHAIN_PREFIX):
        return words[1].removeprefix("paperbench-")
    return words[words.index("-i") + 1] if "-i" in words[:-1] else None


def _gone(bridge: str | None, going: Collection[str]) -> bool:
    return bridge is not None and (bridge in going or not Path("/sys/class/net", bridge).exists())


def stale_rules(going: Collection[str] = ()) -> list[str]:
    """Our rules (:func:`our_rules` lines) whose bridge interface is gone or is one of
    ``going`` (the bridges of networks about to be removed), and the ``-N`` lines of our
    FORWARD chains left without their rule (removing a rule removes its chain)."""
    stale = [line for line in our_rules() if _gone(rule_bridge(line), going)]
    jumped = {(family, _target(words)) for family, words in map(_split, stale)}
    for family in _families() if firewall_problem() is None else []:
        for chain in ipt.chains(family, CHAIN_PREFIX):
            line = _line(family, f"-N {chain}")
            if (family, chain) not in jumped and _gone(rule_bridge(line), going):
                stale.append(line)
    return stale


def remove_rule(line: str) -> str | None:
    """Delete one rule listed by :func:`stale_rules` (and the chain it leads to), once its
    bridge is gone; None when deleted, else why not."""
    bridge = rule_bridge(line)
    if bridge is not None and Path("/sys/class/net", bridge).exists():
        return f"kept: its network (bridge {bridge}) is still there"
    family, words = _split(line)
    if words[:1] == ["-N"] and bridge is not None:
        return ipt.delete_chain(family, words[1])
    if len(words) < 3 or words[0] != "-A" or words[1] not in _CHAINS:
        return "not a rule of paperbench's chains"
    done = ipt.run(family, "-D", words[1], *words[2:])
    if done.returncode != 0 and ipt.run(family, "-C", words[1], *words[2:]).returncode == 0:
        return f"{ipt.binary(family)} -D failed: {done.stderr.strip()}"
    target = _target(words)
    if target.startswith(CHAIN_PREFIX):
        return ipt.delete_chain(family, target)
    return None
