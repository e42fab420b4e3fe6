"""The address ranges a sandbox never reaches unless asked: one list for every backend and mode.

``full`` means the public internet. The host firewall rules of both backends
(``_docker_firewall``, ``_local_net``) refuse :data:`INTERNAL_NETWORKS` to a ``full`` sandbox,
and the egress proxy of ``filtered`` refuses the same list (``_egress_addon``, which loads this
file by path: standard library only). The list is written as CIDRs on purpose, not taken from
``ipaddress``'s ``is_private``, which also counts the documentation ranges (192.0.2.0/24,
198.51.100.0/24, 203.0.113.0/24) as private: package mirrors answer from those in some
networks, and must stay reachable.

``--allow-network CIDR`` opens one range of the list on purpose (``SandboxSpec.allow_networks``).
Two things stay refused whatever is opened: every address of the host's own (rules of their
own, applied first), and :data:`CLOUD_METADATA`, the cloud metadata services, which hand out
the machine's credentials to whoever asks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

INTERNAL_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598), often a provider's internal network
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata
        "172.16.0.0/12",  # private (RFC 1918)
        "192.0.0.0/24",  # IETF protocol assignments (RFC 6890), local use
        "192.168.0.0/16",  # private (RFC 1918)
        "198.18.0.0/15",  # benchmarking (RFC 2544), used for internal test networks
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::ffff:0:0/96",  # IPv4-mapped (the IPv4 rules decide; never on the wire)
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): reaches internal IPv4 addresses
        "fc00::/7",  # unique local addresses (ULA)
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, internal where still used)
        "ff00::/8",  # multicast
    )
)
"""Not the public internet: refused to ``full`` and ``filtered`` sandboxes unless opened."""

CLOUD_METADATA: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "169.254.169.254/32",  # AWS, GCP, Azure, Oracle, DigitalOcean, OpenStack
        "169.254.170.2/32",  # AWS ECS task credentials
        "100.100.100.200/32",  # Alibaba Cloud
        "fd00:ec2::254/128",  # AWS (IPv6)
    )
)
"""Refused even inside a range that ``--allow-network`` opens."""


def of_version(networks: Iterable[IPNetwork], version: int) -> list[IPNetwork]:
    """The networks of one IP version (4 or 6)."""
    return [n for n in networks if n.version == version]


def parse_allowed(text: str) -> IPNetwork:
    """One ``--allow-network`` value: a CIDR (or a single address) inside
    :data:`INTERNAL_NETWORKS`, not only cloud metadata.

    Raises:
        ValueError: why not, in one line (without the flag's name).
    """
    value = text.strip()
    try:
        network = ipaddress.ip_network(value)
    except ValueError:
        try:
            loose = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ValueError(
                f"{text!r} is not an IP range; give a CIDR such as 10.1.0.0/16 or fd00:1::/64"
            ) from None
        raise ValueError(f"{value} has host bits set; the range is {loose}") from None
    if not any(network.overlaps(n) for n in of_version(INTERNAL_NETWORKS, network.version)):
        raise ValueError(
            f"{network} is not a private, link-local or other internal range: a full sandbox "
            "reaches it already, there is nothing to open"
        )
    if any(_within(network, m) for m in CLOUD_METADATA):
        raise ValueError(f"{network} is a cloud metadata address, which is never opened")
    return network


def _within(network: IPNetwork, outer: IPNetwork) -> bool:
    return network.network_address in outer and network.broadcast_address in outer


def refusal(address: IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why ``address`` is refused by range (``cloud metadata address``, ``private address``),
    or None. The host's own addresses are not known here: the callers check them first."""
    same = [n for n in allowed if n.version == address.version]
    if any(address in n for n in of_version(CLOUD_METADATA, address.version)):
        return "cloud metadata address"
    if any(address in n for n in same):
        return None
    if any(address in n for n in of_version(INTERNAL_NETWORKS, address.version)):
        return "private address"
    return None


def describe(allowed: Sequence[IPNetwork]) -> str:
    """What opening ``allowed`` means, for the console and the logs."""
    ranges = ", ".join(str(n) for n in allowed)
    return (
        f"--allow-network: the sandbox may reach {ranges} (otherwise refused as internal); "
        "the host's own addresses and the cloud metadata addresses stay refused"
    )
