"""Finding and removing orphaned Docker objects (``paperbench sandbox gc``).

An object labelled ``paperbench.managed=true`` is an orphan when the process that created it
(its ``paperbench.owner`` label) no longer runs on this host, or, for a container, when it has
stopped. Objects owned by another host are left alone unless ``everything`` is asked for.
Images are never touched here.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from paperbench.sandbox import _docker_labels as L

ObjectKind = Literal["container", "network", "volume"]
IMAGE_KINDS = ("image", "base-image")
"""The kinds of our images, whose labels (but no owner) a container made from one inherits."""
OrphanKind = Literal["container", "network", "volume", "workspace", "cgroup", "firewall-rule"]


class Orphan(BaseModel):
    """One thing a crashed run left behind: a Docker object, a local sandbox's workspace or
    cgroup, or a host firewall rule (one row of ``paperbench sandbox gc``)."""

    model_config = ConfigDict(extra="forbid")

    kind: OrphanKind
    id: str
    name: str
    owner: str
    created: str
    reason: str
    removed: bool = False
    error: str | None = None


def _reason(labels: dict[str, str], everything: bool, stopped: bool = False) -> str | None:
    alive = L.owner_alive(labels.get(L.OWNER))
    if everything:
        return "asked to remove all" if alive is not False else "owner process gone"
    if alive is False:
        return "owner process gone"
    if stopped:
        return "container stopped"
    return None


def find_orphans(client: Any, *, everything: bool = False) -> list[Orphan]:
    """Managed containers, networks and volumes whose owner is gone (all of them with
    ``everything``).

    A container that carries only the labels it inherited from one of our images (kind
    ``image`` or ``base-image``, no owner) was not made by paperbench: a step of an image build
    under way, or a plain ``docker run`` of the image. It is never an orphan (removing it
    killed builds in flight)."""
    api = client.api
    flt = {"label": f"{L.MANAGED}=true"}
    found: list[Orphan] = []
    for c in api.containers(all=True, filters=flt):
        labels = c.get("Labels") or {}
        if labels.get(L.KIND) in IMAGE_KINDS and not labels.get(L.OWNER):
            continue
        stopped = c.get("State") not in ("running", "paused", "restarting", "created")
        reason = _reason(labels, everything, stopped)
        if reason:
            names = c.get("Names") or [""]
            found.append(_orphan("container", c["Id"], names[0].lstrip("/"), labels, reason))
    for n in api.networks(filters=flt):
        labels = n.get("Labels") or {}
        reason = _reason(labels, everything)
        if reason:
            found.append(_orphan("network", n["Id"], n.get("Name", ""), labels, reason))
    for v in (api.volumes(filters=flt) or {}).get("Volumes") or []:
        labels = v.get("Labels") or {}
        reason = _reason(labels, everything)
        if reason:
            found.append(_orphan("volume", v["Name"], v["Name"], labels, reason))
    return found


def _orphan(kind: ObjectKind, oid: str, name: str, labels: dict[str, str], reason: str) -> Orphan:
    return Orphan(
        kind=kind,
        id=oid[:12] if kind != "volume" else oid,
        name=name,
        owner=labels.get(L.OWNER, "?"),
        created=labels.get(L.CREATED, "?"),
        reason=reason,
    )


def reap(client: Any, orphans: list[Orphan]) -> list[Orphan]:
    """Remove ``orphans``: containers first (they hold networks and volumes)."""
    api = client.api
    order = {"container": 0, "network": 1, "volume": 2}
    out = []
    for item in sorted(orphans, key=lambda o: order[o.kind]):
        try:
            if item.kind == "container":
                api.remove_container(item.id, force=True, v=True)
            elif item.kind == "network":
                # Disconnect anything still attached (e.g. a proxy whose owner died).
                with contextlib.suppress(Exception):
                    for cid in api.inspect_network(item.id).get("Containers") or {}:
                        api.disconnect_container_from_network(cid, item.id, force=True)
                api.remove_network(item.id)
            else:
                api.remove_volume(item.id, force=True)
            out.append(item.model_copy(update={"removed": True}))
        except Exception as exc:
            explanation = getattr(exc, "explanation", None) or str(exc)
            out.append(item.model_copy(update={"error": str(explanation).replace("\n", " ")}))
    return out


def reap_all(*, dry_run: bool = False, everything: bool = False) -> tuple[list[Orphan], str | None]:
    """Everything crashed runs left behind: Docker objects whose creator is gone, then local
    workspaces, cgroups and capped disks whose owner is gone, then the firewall rules of
    networks that are gone or removed here (Docker's, and the chains of local sandboxes whose
    network uid runs nothing). Returns the orphans and, when no Docker engine
    answers, why only local sandboxes were checked.

    A dry run takes the same path and lists exactly what a real one would remove: the rules
    of a network that gc removes are listed with it (a real gc keeps, and reports, the rules
    of a network it failed to remove)."""
    from paperbench.errors import SandboxUnavailableError
    from paperbench.sandbox._docker import connect
    from paperbench.sandbox._docker_firewall import (
        bridge_name,
        remove_rule,
        rule_bridge,
        stale_rules,
    )
    from paperbench.sandbox._local_gc import reap_local_orphans
    from paperbench.sandbox._local_net import remove_stale_chain, stale_chains

    # Containers first: their capped disks (loop-mounted images) are reaped with the local
    # workspaces, once nothing uses them.
    orphans: list[Orphan] = []
    unavailable = None
    going: set[str] = set()
    try:
        client = connect()
    except SandboxUnavailableError as exc:
        unavailable = f"{exc}; only local sandboxes were checked"
    else:
        found = find_orphans(client, everything=everything)
        going = {bridge_name(o.id) for o in found if o.kind == "network"}
        orphans.extend(found if dry_run else reap(client, found))
    orphans.extend(reap_local_orphans(dry_run=dry_run))
    for rule in stale_rules(going):
        item = Orphan(
            kind="firewall-rule",
            id=rule,
            name=rule,
            owner="?",
            created="?",
            reason="its network is removed with it"
            if rule_bridge(rule) in going
            else "its network is gone",
        )
        if not dry_run:
            error = remove_rule(rule)
            item = item.model_copy(update={"removed": error is None, "error": error})
        orphans.append(item)
    for chain in stale_chains():  # of local full sandboxes whose network is gone
        item = Orphan(
            kind="firewall-rule",
            id=chain,
            name=chain,
            owner="?",
            created="?",
            reason="its sandbox's network is gone",
        )
        if not dry_run:
            error = remove_stale_chain(chain)
            item = item.model_copy(update={"removed": error is None, "error": error})
        orphans.append(item)
    return orphans, unavailable
