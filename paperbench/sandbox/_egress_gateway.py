"""The egress proxy for Docker sandboxes: one proxy per sandbox, on its internal network.

``DockerEgressGateway`` is the ``egress`` the Docker backend takes: for a sandbox under
``network=filtered`` the backend creates an internal network (no route out) and calls
``attach(network, spec)``. The gateway starts an ``EgressProxy`` on the host, listening on that
network's gateway address, the one place a container on an internal network can reach. (Tested
with Docker Engine 20.10: a container on an ``--internal`` bridge reaches the host on the
gateway address and nothing beyond it.) The proxy refuses the host's own addresses, the
gateway included, so a sandbox cannot use it to reach host services.

The backend then:

- sets ``attachment.env`` in the container's environment (proxy and CA variables);
- after the container starts, ``await attachment.install(sandbox)``: writes the proxy's CA
  certificate to ``SANDBOX_CA_PATH`` and adds it to the system trust store (as root);
- on stop, ``await attachment.close()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paperbench.errors import EgressProxyError
from paperbench.sandbox._base import Sandbox, SandboxSpec
from paperbench.sandbox._egress import (
    SANDBOX_CA_PATH,
    EgressEndpoint,
    EgressProxy,
    EgressSettings,
    install_ca_command,
    proxy_inputs,
    sandbox_env,
)

__all__ = ["DockerEgressAttachment", "DockerEgressGateway", "network_gateway"]


async def network_gateway(api: Any, network: str) -> str:
    """The host's address on Docker network ``network`` (its IPAM gateway).

    Raises:
        EgressProxyError: the network does not exist or has no IPv4 gateway.
    """
    try:
        info = await asyncio.to_thread(api.inspect_network, network)
    except Exception as exc:
        raise EgressProxyError(f"cannot inspect Docker network {network}: {exc}") from exc
    for config in (info.get("IPAM") or {}).get("Config") or []:
        gateway = config.get("Gateway")
        if gateway and ":" not in gateway:
            return str(gateway).split("/", 1)[0]
    raise EgressProxyError(
        f"Docker network {network} has no IPv4 gateway: the egress proxy cannot listen on it"
    )


class DockerEgressAttachment:
    """A running proxy for one sandbox: what the backend puts into the container."""

    def __init__(self, proxy: EgressProxy, endpoint: EgressEndpoint) -> None:
        self.proxy = proxy
        self.endpoint = endpoint
        self.proxy_url = endpoint.url
        self.ca_path = SANDBOX_CA_PATH
        self.env: dict[str, str] = sandbox_env(endpoint)
        """Proxy variables and CA variables for the container's environment."""

    async def install(self, sandbox: Sandbox, *, timeout: float = 60.0) -> None:
        """Put the CA certificate into the sandbox and its system trust store (as root).

        Raises:
            SandboxError: the certificate could not be written.
        """
        await sandbox.write_file(self.ca_path, self.endpoint.ca_cert_path.read_bytes())
        await sandbox.exec(install_ca_command(self.ca_path), timeout=timeout)

    async def close(self) -> None:
        await self.proxy.stop()


class DockerEgressGateway:
    """Starts one egress proxy per filtered Docker sandbox (``DockerBackend(egress=...)``).

    ``api`` is a ``docker.APIClient``. ``ca_bundle`` adds CA certificates the proxy trusts
    upstream (besides the host's bundle) for every sandbox; a sandbox's own
    ``spec.ca_bundle`` is added too. ``resolve`` is for tests: names mapped to addresses.
    """

    def __init__(
        self,
        api: Any,
        *,
        ca_bundle: Path | None = None,
        upstream_proxy: str | None = None,
        resolve: Mapping[str, str] | None = None,
        python: Path | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.api = api
        self.ca_bundle = ca_bundle
        self.upstream_proxy = upstream_proxy
        self.resolve = dict(resolve or {})
        self.python = python
        self.log_dir = log_dir

    async def attach(self, network: str, spec: SandboxSpec) -> DockerEgressAttachment:
        """Start a proxy on ``network``'s gateway for ``spec`` (blacklist, log, CA bundle).

        Raises:
            EgressProxyError: no gateway, a bad blacklist, or the proxy did not start.
        """
        gateway = await network_gateway(self.api, network)
        inputs = proxy_inputs(spec, self.log_dir, network)
        bundles = [p for p in (self.ca_bundle, spec.ca_bundle) if p is not None]
        settings = EgressSettings(
            listen_host=gateway,
            upstream_ca_bundle=tuple(bundles),
            upstream_proxy=self.upstream_proxy,
            resolve=self.resolve,
            python=self.python,
            services=spec.host_services,
            allow=spec.allow_networks,
        )
        proxy = EgressProxy(inputs.blacklist, inputs.log_path, settings, harness=inputs.harness)
        endpoint = await proxy.start()
        return DockerEgressAttachment(proxy, endpoint)
