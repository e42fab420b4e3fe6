"""The Docker backend: one container per sandbox, driven through the docker SDK.

The SDK is synchronous; every call runs in a worker thread so the API stays async.

Isolation and limits:

- the container's init is a watchdog bound to the owner's life (``_docker_init``): the owner
  holds an attach to its stdin, and when the owner process dies, however it dies, PID 1 exits
  and the container stops with everything in it. Code inside can neither trace it, open its
  stdin nor signal it; it reaps orphans. Commands run through ``docker exec``;
- system calls: our seccomp profile, Docker's default minus what the local backend refuses
  (io_uring among them; ``_seccomp``), never the engine's own default;
- privileges: ``no-new-privileges`` (no setuid binary, no file capability raises them) and
  only the capabilities in ``CAPABILITIES`` (every other one dropped: no ``SYS_PTRACE``, no
  ``NET_RAW``, ``MKNOD``, ``AUDIT_WRITE``, ``SETFCAP``, ``SETPCAP``, ``SYS_CHROOT`` or
  ``NET_BIND_SERVICE``); with ``spec.user == "sandbox"`` commands run as uid 1000, set up
  right after the start (``_docker_user``), while the backend's own work stays root;
- ``cpus`` → ``nano_cpus``; ``memory_mb`` → ``mem_limit`` = ``memswap_limit`` (no swap);
  ``pids`` → ``pids_limit``; ``gpu`` → ``device_requests``;
- ``disk_mb``: overlay2 ``storage_opt`` size where the engine supports it (its data root on
  xfs with pquota: what ``scripts/ensure-docker.sh`` gives the dockerd it starts). Otherwise a
  sparse ext4 image of ``disk_mb`` MB loop-mounted on the host (``_disk``) holds the upper layer
  of an overlay of the image's own layers (``loop-overlay``): every top-level folder of that
  overlay (/usr, /var, /etc, /home, /tmp, ...; and /submission) is bound into the container, so
  everything stays writable (``apt-get install`` works) and every write counts against the cap;
  only new top-level entries fail (the root itself is read-only), and ``/run`` is a 16 MB tmpfs.
  When the image's layers are not overlay2 folders on this host (another storage driver, a
  remote engine), only ``WRITABLE_DIRS`` (/submission, /home, /root, /tmp, /var, /etc,
  /usr/local) are volumes on the image, filled from the image on first use, and the rest of the
  root is read-only (``loop-ext4``): said as a warning and in ``disk_cap_note``, with the fix.
  The image is unmounted and deleted with the sandbox. When neither can be done the start is
  refused unless ``limits.allow_uncapped_disk`` (then a warning, and ``disk_cap == "none"``);
- the environment is ``spec.env`` (plus ``spec.proxy_env`` and CA variables when asked), never
  the host's; the Docker socket is never mounted;
- network ``none`` → no interface; ``full`` → a routed bridge network of its own, closed to
  every address of the host and to link-local addresses by host firewall rules on its bridge
  interface; ``filtered`` → an internal network (no route out) whose only way to the host is
  the egress proxy's port: the same rules drop the rest (``_docker_firewall``).

Commands run one ``docker exec`` each (``_docker_run``): output streamed and capped head and
tail, the whole process tree killed on timeout, the exit code from the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from paperbench.errors import SandboxError, SandboxUnavailableError
from paperbench.sandbox import _docker_labels as L
from paperbench.sandbox._base import (
    DiskCapKind,
    DiskUsage,
    GpuRequest,
    IsolationKind,
    NetworkPolicy,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
)
from paperbench.sandbox._disk import (
    UNCAPPED_HINT,
    DiskCap,
    DiskCapUnavailableError,
)
from paperbench.sandbox._docker_exec import cgroup_procs_path
from paperbench.sandbox._docker_files import (
    CA_PATH,
    DockerFiles,
    docker_error,
)
from paperbench.sandbox._docker_firewall import HostFirewall
from paperbench.sandbox._docker_init import NO_SETPRIV_HINT, Lifeline, init_argv
from paperbench.sandbox._docker_run import DockerRun
from paperbench.sandbox._docker_user import SandboxUser
from paperbench.sandbox._local_gc import WORKSPACE_PREFIX, remove_tree, write_owner
from paperbench.sandbox._seccomp import docker_profile

WRITABLE_DIRS = ("/submission", "/home", "/root", "/tmp", "/var", "/etc", "/usr/local")
"""Folders kept writable (on the capped disk) when the root filesystem is read-only
(``loop-ext4``); under ``loop-overlay`` all are, and these are made when missing."""
RUN_TMPFS = {"/run": "rw,nosuid,nodev,size=16m,mode=755"}

log = logging.getLogger("paperbench.sandbox")

CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")
"""All a sandbox's root keeps: what package managers need as root (apt and dpkg chown files and
drop to ``_apt`` with setuid/setgid; pip writes where root's files are) and what root's
commands use to signal processes of another user. A test installs with apt and pip under
exactly this set."""

CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
API_VERSION = "1.41"
_IMAGE_HINT = "build it with `paperbench images build`"


def engine_hint(base_url: str | None) -> str:
    where = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return f"no Docker engine answers at {where}: run scripts/ensure-docker.sh or start dockerd"


async def _making(call: Callable[[], object]) -> None:
    """Run ``call``, an engine call that makes something the sandbox must later remove and
    records it on the sandbox, in a thread. A cancellation waits for the call to end before
    it is raised, so that the clean-up that follows finds what it made: left to run on
    alone, the call would make a container (or network, or attach) after the clean-up."""
    task = asyncio.ensure_future(asyncio.to_thread(call))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        raise


def connect(base_url: str | None = None, timeout: float = 120.0) -> Any:
    """A docker SDK client that answered a ping.

    Raises:
        SandboxUnavailableError: the SDK is missing or no engine answers.
    """
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        raise SandboxUnavailableError("the docker SDK is missing: pip install 'docker>=7'") from exc
    # A fixed API version (Engine 20.10+) skips the SDK's version probe, one round trip less.
    version = os.environ.get("DOCKER_API_VERSION", API_VERSION)
    url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if url.startswith("unix://") and not Path(url.removeprefix("unix://")).exists():
        raise SandboxUnavailableError(engine_hint(base_url))  # (the SDK would leak a socket)
    try:
        client = (
            docker.DockerClient(  # type: ignore[attr-defined]
                base_url=base_url, timeout=int(timeout), version=version
            )
            if base_url
            else docker.from_env(timeout=int(timeout), version=version)  # type: ignore[attr-defined]
        )
    except Exception as exc:
        raise SandboxUnavailableError(engine_hint(base_url)) from exc
    try:
        client.ping()
    except Exception as exc:
        client.close()
        raise SandboxUnavailableError(engine_hint(base_url)) from exc
    return client


def device_requests(gpu: GpuRequest | None) -> list[Any]:
    """``device_requests`` for a GPU request (empty without one)."""
    if gpu is None:
        return []
    from docker.types import DeviceRequest

    if gpu.device_ids is not None:
        return [DeviceRequest(device_ids=list(gpu.device_ids), capabilities=[gpu.capabilities])]
    return [DeviceRequest(count=gpu.count, capabilities=[gpu.capabilities])]


def sandbox_env(spec: SandboxSpec) -> dict[str, str]:
    """The container environment: only what the spec names."""
    env = dict(spec.env)
    if spec.proxy_env:
        env.update(spec.proxy_env)
    if spec.ca_bundle is not None:
        env.update({name: CA_PATH for name in CA_ENV})
    return env


def host_config_args(
    spec: SandboxSpec,
    *,
    network_mode: str,
    disk_mounts: list[Any],
    tmpfs: dict[str, str],
    storage_size_mb: int | None,
    read_only: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``APIClient.create_host_config`` (pure: tests inspect them)."""
    lim = spec.limits
    args: dict[str, Any] = {
        "network_mode": network_mode,
        "security_opt": ["no-new-privileges", f"seccomp={docker_profile()}"],
        "privileged": False,
        "mounts": disk_mounts,
        "tmpfs": tmpfs,
        "device_requests": device_requests(spec.gpu),
        "init": False,
        "cap_drop": ["ALL"],
        "cap_add": list(CAPABILITIES),
    }
    if read_only:
        args["read_only"] = True
    if lim.cpus is not None:
        args["nano_cpus"] = int(lim.cpus * 1_000_000_000)
    if lim.memory_mb is not None:
        args["mem_limit"] = f"{lim.memory_mb}m"
        args["memswap_limit"] = f"{lim.memory_mb}m"
    if lim.pids is not None:
        args["pids_limit"] = lim.pids
    if storage_size_mb is not None:
        args["storage_opt"] = {"size": f"{storage_size_mb}M"}
    return args


class EgressAttachment(Protocol):
    """A running egress proxy reachable from one internal network.

    Optional members the backend uses when present: ``env`` (the container's proxy and CA
    variables; without it the four proxy variables are set to ``proxy_url``) and
    ``async install(sandbox)`` (called once the container runs, e.g. to trust the proxy's CA).
    """

    proxy_url: str
    """e.g. ``http://<proxy address on the internal network>:3128``."""

    async def close(self) -> None: ...


class EgressGateway(Protocol):
    """Starts the egress proxy for a sandbox (``paperbench.sandbox._egress_gateway``)."""

    async def attach(self, network: str, spec: SandboxSpec) -> EgressAttachment:
        """Start a proxy connected to the internal Docker network ``network`` (and to a
        network with a route out), refusing ``spec.blacklist`` and logging to
        ``spec.network_log``."""
        ...


def _default_gateway(api: Any) -> EgressGateway:
    try:
        from paperbench.sandbox._egress_gateway import DockerEgressGateway
    except ImportError as exc:
        raise SandboxError(
            f"network=filtered is not available: the egress proxy cannot be loaded ({exc}); "
            "reinstall paperbench, or use network=none or network=full"
        ) from exc
    gateway: EgressGateway = DockerEgressGateway(api)
    return gateway


def _container_env(sb: DockerSandbox) -> dict[str, str]:
    """The container's environment: the spec's (:func:`sandbox_env`) and the egress proxy's."""
    env = sandbox_env(sb.spec)
    if sb.egress is not None:
        egress_env = getattr(sb.egress, "env", None)
        if egress_env is None:
            names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
            egress_env = dict.fromkeys(names, sb.egress.proxy_url)
        env.update(egress_env)
    return env


class DockerBackend(SandboxBackend):
    """Sandboxes as Docker containers.

    ``work_dirs`` are folders kept writable on a loop-mounted image of ``disk_mb`` MB when the
    engine has no ``storage_opt`` support: under ``loop-overlay`` their top folders are made when
    the image lacks them; under ``loop-ext4`` they are the only writable ones.
    ``egress`` provides the proxy for ``network=filtered``.
    """

    name = "docker"
    isolation_kind: IsolationKind = "docker"
    isolation_reason = "Docker backend asked for"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        work_dirs: tuple[str, ...] = WRITABLE_DIRS,
        egress: EgressGateway | None = None,
        client: Any = None,
        disk_root: Path | None = None,
    ) -> None:
        self.base_url = base_url
        self.work_dirs = work_dirs
        self.disk_root = disk_root
        """Where capped disks are made (default: the temp folder, where gc looks)."""
        self.egress = egress
        self._client = client
        self._storage_opt_ok: bool | None = None

    async def client(self) -> Any:
        if self._client is None:
            self._client = await asyncio.to_thread(connect, self.base_url)
        return self._client

    async def start(self, spec: SandboxSpec) -> DockerSandbox:
        client = await self.client()
        sandbox = DockerSandbox(spec, client, "pb-" + secrets.token_hex(6))
        try:
            await self._create(sandbox)
            if spec.user == "sandbox":
                await sandbox.set_up_user()
        except BaseException:
            await asyncio.shield(sandbox.stop())
            raise
        return sandbox

    async def _create(self, sb: DockerSandbox) -> None:
        spec = sb.spec
        base_labels = {**spec.labels, L.SANDBOX: sb.id}
        network_mode = "none"
        if spec.network is not NetworkPolicy.NONE:
            network_mode = await self._network(sb, base_labels)
        env = _container_env(sb)
        cid = await self._container(sb, network_mode, env, base_labels)
        await self._start_init(sb, cid)
        install = getattr(sb.egress, "install", None)
        if install is not None:
            await install(sb)

    async def _network(self, sb: DockerSandbox, base_labels: dict[str, str]) -> str:
        """The sandbox's own network, its host firewall rules installed (and for
        ``filtered`` the egress proxy attached to it); its name."""
        spec = sb.spec
        api = sb.api
        # A bridge of its own, closed to the host (HostFirewall): on Docker's default
        # bridge a container reaches every service of the host's. Filtered: internal, its
        # only way out the egress proxy on the gateway.
        filtered = spec.network is NetworkPolicy.FILTERED
        network_mode = f"{sb.id}-net"

        def create() -> None:
            net = api.create_network(
                network_mode,
                driver="bridge",
                internal=filtered,
                labels=L.labels("network", base_labels),
            )
            sb.networks.append(net["Id"])

        await _making(create)
        port: int | None = None
        if filtered:
            if self.egress is None:
                self.egress = _default_gateway(api)
            sb.egress = await self.egress.attach(network_mode, spec)
            port = urlparse(sb.egress.proxy_url).port
            if port is None:
                raise SandboxError(f"egress proxy URL without a port: {sb.egress.proxy_url}")
        sb.firewall = HostFirewall(network_mode, sb.networks[-1], port, spec.allow_networks)
        await _making(sb.firewall.install)
        return network_mode

    async def _container(
        self, sb: DockerSandbox, network_mode: str, env: dict[str, str], base_labels: dict[str, str]
    ) -> str:
        """Create the sandbox's container (not started), its disk capped by ``storage_opt``
        or, where the engine refuses it, by a loop-mounted image (``_disk_volumes``); its id."""
        spec = sb.spec
        api = sb.api
        mounts: list[Any] = []
        tmpfs: dict[str, str] = {}
        storage_mb: int | None = None
        disk = spec.limits.disk_mb
        if disk is not None:
            if self._storage_opt_ok is not False:
                storage_mb = disk
            else:
                mounts, tmpfs = await self._disk_volumes(sb, disk, base_labels)

        def create(storage: int | None, mnts: list[Any], tmp: dict[str, str]) -> None:
            hc = api.create_host_config(
                **host_config_args(
                    spec,
                    network_mode=network_mode,
                    disk_mounts=mnts,
                    tmpfs=tmp,
                    storage_size_mb=storage,
                    read_only=sb.disk is not None,
                )
            )
            config = api.create_container_config(
                spec.image,
                command=[],
                entrypoint=init_argv(),
                environment=[f"{k}={v}" for k, v in env.items()],
                working_dir=spec.workdir,
                labels=L.labels("sandbox", base_labels),
                host_config=hc,
                detach=True,
                stdin_open=True,
                stop_signal="SIGKILL",
            )
            config["StdinOnce"] = True  # the owner's attach ends → PID 1's stdin ends
            created = api.create_container_from_config(config, name=sb.id)
            sb.container_id = str(created["Id"])

        try:
            await _making(lambda: create(storage_mb, mounts, tmpfs))
            if storage_mb is not None:
                self._storage_opt_ok = True
                sb.disk_cap = "storage_opt"
        except Exception as exc:
            if storage_mb is None or "storage-opt" not in str(exc):
                raise self._create_error(exc, spec) from exc
            self._storage_opt_ok = False
            mounts, tmpfs = await self._disk_volumes(sb, disk or 0, base_labels)
            try:
                await _making(lambda: create(None, mounts, tmpfs))
            except Exception as exc2:
                raise self._create_error(exc2, spec) from exc2
        assert sb.container_id is not None
        return sb.container_id

    async def _start_init(self, sb: DockerSandbox, cid: str) -> None:
        """Attach the owner's lifeline to the container's init, install the CA bundle, start
        it and find its init's process (refused when the init stopped as it started)."""
        spec = sb.spec
        api = sb.api

        def attach() -> None:
            sb.lifeline = Lifeline.attach(api, cid)

        try:
            await _making(attach)
        except Exception as exc:
            raise docker_error(exc, f"cannot attach to sandbox {sb.id}'s init") from exc
        if spec.ca_bundle is not None:
            await sb.install_ca_bundle(spec.ca_bundle)
        try:
            await asyncio.to_thread(api.start, cid)
            info = await asyncio.to_thread(api.inspect_container, cid)
        except Exception as exc:
            if "setpriv" in str(exc):
                raise SandboxError(
                    f"cannot start sandbox from image {spec.image}: {NO_SETPRIV_HINT}"
                ) from exc
            raise docker_error(exc, f"cannot start sandbox from image {spec.image}") from exc
        if not info["State"].get("Running"):  # its init failed (what it said is in the log)
            said = await asyncio.to_thread(_log_tail, api, cid)
            raise SandboxError(f"sandbox from image {spec.image} stopped as it started: {said}")
        init_pid = int(info["State"].get("Pid") or 0)
        if init_pid > 0:
            sb.init_pid = init_pid
            sb.procs = cgroup_procs_path(init_pid, cid)
            sb.init_ticks = L.start_ticks(init_pid) if sb.procs is not None else None

    async def _disk_volumes(
        self, sb: DockerSandbox, disk_mb: int, base_labels: dict[str, str]
    ) -> tuple[list[Any], dict[str, str]]:
        """Mounts putting the sandbox's writable space on a loop-mounted image of ``disk_mb`` MB
        (see the module docstring); none when the cap cannot be made and an uncapped disk was
        allowed.

        Raises:
            DiskCapUnavailableError: the cap cannot be made and an uncapped disk was not allowed.
        """
        root = self.disk_root or Path(tempfile.gettempdir())
        folder = root / f"{WORKSPACE_PREFIX}{sb.id}-disk"
        try:

            def make_folder() -> None:
                folder.mkdir()
                write_owner(folder)
                sb.disk_folder = folder

            def make_disk() -> None:
                sb.disk = DiskCap.create(folder, disk_mb)

            await _making(make_folder)
            await _making(make_disk)
        except (DiskCapUnavailableError, OSError) as exc:
            if not sb.spec.limits.allow_uncapped_disk:
                if isinstance(exc, OSError):
                    raise DiskCapUnavailableError(
                        f"cannot cap the sandbox disk: {exc}; {UNCAPPED_HINT}"
                    ) from exc
                raise
            log.warning("the sandbox's disk is NOT capped (allowed): %s", exc)
            sb.disk_cap = "none"
            return [], {}
        disk = sb.disk
        assert disk is not None  # made above
        sb.read_only_root = True
        layers, why = await self._image_layers(sb)
        if layers is not None:
            try:
                top = await asyncio.to_thread(disk.overlay, layers)
                dirs = await asyncio.to_thread(
                    _overlay_dirs, top, _writable(self.work_dirs, sb.spec.writable_dirs)
                )
            except (DiskCapUnavailableError, OSError) as exc:
                why = str(exc)
            else:
                sb.disk_cap = "loop-overlay"
                sb.writable_dirs = dirs
                return _binds(top, dirs), dict(RUN_TMPFS)
        sb.disk_cap = "loop-ext4"
        sb.disk_cap_note = read_only_note(why)
        log.warning("%s", sb.disk_cap_note)
        return await self._work_volumes(sb, disk, base_labels), dict(RUN_TMPFS)

    async def _image_layers(self, sb: DockerSandbox) -> tuple[list[str] | None, str]:
        """The host folders of the image's layers, topmost first (None, and why, when the
        engine does not keep them in overlay2 folders on this host)."""
        try:
            info = await asyncio.to_thread(sb.api.inspect_image, sb.spec.image)
        except Exception as exc:
            raise self._create_error(exc, sb.spec) from exc
        driver = info.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        if driver.get("Name") != "overlay2" or not data.get("UpperDir"):
            return None, f"the engine's storage driver is {driver.get('Name') or 'unknown'}"
        layers = [data["UpperDir"], *(d for d in (data.get("LowerDir") or "").split(":") if d)]
        missing = [d for d in layers if not await asyncio.to_thread(os.path.isdir, d)]
        if missing:
            return None, f"the image's layers are not on this host ({missing[0]})"
        return layers, ""

    async def _work_volumes(
        self, sb: DockerSandbox, disk: DiskCap, base_labels: dict[str, str]
    ) -> list[Any]:
        """Volumes for ``work_dirs`` on the capped disk, filled from the image on first use."""
        from docker.types import Mount

        sb.writable_dirs = _writable(self.work_dirs, sb.spec.writable_dirs)
        mounts = []
        for i, folder_in in enumerate(sb.writable_dirs):
            source = disk.mountpoint / f"d{i}"
            await asyncio.to_thread(source.mkdir)
            name = f"{sb.id}-disk{i}"
            await asyncio.to_thread(
                sb.api.create_volume,
                name,
                driver="local",
                driver_opts={"type": "none", "o": "bind", "device": str(source)},
                labels=L.labels("volume", base_labels),
            )
            sb.volumes.append(name)
            mounts.append(Mount(target=folder_in, source=name, type="volume"))
        return mounts

    @staticmethod
    def _create_error(exc: Exception, spec: SandboxSpec) -> SandboxError:
        from docker.errors import ImageNotFound

        if isinstance(exc, ImageNotFound) or "No such image" in str(exc):
            return SandboxError(f"image {spec.image} not found: {_IMAGE_HINT}")
        return docker_error(exc, f"cannot create a sandbox from image {spec.image}")


class DockerSandbox(DockerRun, DockerFiles, Sandbox):
    """One container. Paths are container paths."""

    def __init__(self, spec: SandboxSpec, client: Any, sandbox_id: str) -> None:
        self.spec = spec
        self.client = client
        self.api = client.api
        self.id = sandbox_id
        self.container_id: str | None = None
        self.networks: list[str] = []
        self.volumes: list[str] = []
        self.egress: EgressAttachment | None = None
        self.init_pid: int | None = None
        self.init_ticks: str | None = None
        self.procs: Path | None = None
        self._stopped = False
        self._dead: str | None = None
        self.user: SandboxUser | None = None
        self.lifeline: Lifeline | None = None
        """The owner's hold on PID 1 (``_docker_init``): cut, the container stops."""
        self.firewall: HostFirewall | None = None
        """INPUT rules leaving a filtered sandbox only the proxy port on the host."""
        self.disk: DiskCap | None = None
        self.disk_folder: Path | None = None
        self.disk_cap: DiskCapKind | None = None
        """How ``limits.disk_mb`` is enforced: ``storage_opt``, ``loop-overlay``, ``loop-ext4``
        or ``none``."""
        self.disk_cap_note: str | None = None
        """What the disk cap leaves out (a read-only root under ``loop-ext4``), with the fix."""

    def disk_usage(self) -> DiskUsage | None:
        """Space on the capped disk (loop caps only; storage_opt reports none)."""
        return self.disk.usage() if self.disk is not None else None

    def __repr__(self) -> str:
        return f"DockerSandbox(id={self.id!r}, image={self.spec.image!r})"

    def _cid(self) -> str:
        if self._stopped or self.container_id is None:
            raise SandboxError(f"sandbox {self.id} is stopped")
        if self._dead:
            raise SandboxError(f"sandbox {self.id} is gone: {self._dead}")
        return self.container_id

    async def alive(self) -> bool:
        """The container still runs (asked of the engine, not by an exec)."""
        if self._stopped or self._dead or self.container_id is None:
            return False
        return await self._alive()

    # ------------------------------------------------------------------ stop

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        lifeline, self.lifeline = self.lifeline, None
        if lifeline is not None:  # PID 1 exits: nothing in the container runs on
            await asyncio.to_thread(lifeline.cut)
        await asyncio.to_thread(self._remove_all)
        if self.egress is not None:
            with contextlib.suppress(Exception):
                await self.egress.close()
            self.egress = None
            await asyncio.to_thread(self._remove_networks)
        if self.firewall is not None:
            await self.firewall.aremove()
            self.firewall = None

    def _remove_all(self) -> None:
        from docker.errors import NotFound

        if self.container_id is not None:
            with contextlib.suppress(NotFound):
                self.api.remove_container(self.container_id, force=True, v=True)
        else:  # created under its name but the id never came back
            with contextlib.suppress(Exception):
                self.api.remove_container(self.id, force=True, v=True)
        for name in self.volumes:
            with contextlib.suppress(NotFound):
                self.api.remove_volume(name, force=True)
        if self.disk_folder is not None:
            with contextlib.suppress(OSError):
                remove_tree(self.disk_folder)
        self._remove_networks()

    def _remove_networks(self) -> None:
        from docker.errors import NotFound

        for net in list(self.networks):
            try:
                self.api.remove_network(net)
                self.networks.remove(net)
            except NotFound:
                self.networks.remove(net)
            except Exception:  # still in use by the proxy: removed after it closes
                pass


def _log_tail(api: Any, cid: str) -> str:
    """The last lines a stopped container wrote, for an error message."""
    try:
        raw = api.logs(cid, tail=5)
    except Exception as exc:
        return f"(no log: {exc})"
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return text.strip()[-500:] or "(nothing)"


NOT_BOUND = frozenset({"dev", "proc", "sys", "run"})
"""Top-level folders the engine provides (and ``/run``, a tmpfs): never bound from the disk."""


def _overlay_dirs(top: Path, wanted: tuple[str, ...]) -> tuple[str, ...]:
    """The top-level folders of the overlaid root ``top`` to bind into the container: every
    real folder of the image, and the top folder of each of ``wanted`` (made when missing)."""
    names = {e.name for e in os.scandir(top) if e.is_dir(follow_symlinks=False)}
    mtab = top / "etc" / "mtab"
    if "etc" in names and not os.path.lexists(mtab):  # as the engine's init layer has it
        mtab.symlink_to("/proc/mounts")
    for folder in wanted:
        first = posixpath.normpath(folder).strip("/").split("/")[0]
        if first and first not in names and not (top / first).is_symlink():
            (top / first).mkdir(mode=0o755)
            names.add(first)
    return tuple(f"/{n}" for n in sorted(names - NOT_BOUND))


def _binds(top: Path, dirs: tuple[str, ...]) -> list[Any]:
    from docker.types import Mount

    return [Mount(target=d, source=str(top / d.lstrip("/")), type="bind") for d in dirs]


def read_only_note(why: str) -> str:
    """What a loop-ext4 cap leaves out, why, and the fixes (said and recorded)."""
    return (
        f"the sandbox's root file system is read-only under this disk cap (loop-ext4: {why}); "
        f"only {', '.join(WRITABLE_DIRS)} are writable, so apt-get install fails. Fix: run "
        "scripts/ensure-docker.sh (dockerd on an XFS data root with pquota, storage_opt caps) "
        "or pass --allow-uncapped-disk"
    )


def _writable(base: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    """``base`` and the folders of ``extra`` that no folder of ``base`` already holds."""
    out = list(base)
    for folder in (posixpath.normpath(f) for f in extra):
        inside = any(folder == d or folder.startswith(d.rstrip("/") + "/") for d in out)
        if folder != "/" and not inside:
            out.append(folder)
    return tuple(out)
