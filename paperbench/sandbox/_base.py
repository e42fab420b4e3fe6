"""The sandbox contract every backend implements.

A sandbox is an isolated place to run commands: a Docker container or a local workspace.
Paths given to a sandbox are *sandbox paths* (absolute POSIX paths such as
``/home/submission``), whatever the backend.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from paperbench.errors import SandboxError
from paperbench.sandbox._capture import cap_text
from paperbench.sandbox._internal_nets import IPNetwork
from paperbench.sandbox._tree import DEFAULT_LIMITS, ExtractReport, TreeLimits

DEFAULT_OUTPUT_LIMIT = 1_000_000
"""Bytes kept of each of stdout and stderr per exec (head and tail)."""

LABEL_PREFIX = "paperbench"
"""Every container, network and volume paperbench creates carries ``paperbench.*`` labels."""


class NetworkPolicy(StrEnum):
    """What network a sandbox gets."""

    NONE = "none"
    """No network at all."""
    FULL = "full"
    """Unrestricted network (the backend's default bridge)."""
    FILTERED = "filtered"
    """Only through paperbench's egress proxy, which refuses blacklisted URLs and logs all."""


class GpuRequest(BaseModel):
    """GPUs to attach: ``count`` (-1 for all) or explicit ``device_ids``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int | None = None
    device_ids: list[str] | None = None
    capabilities: list[str] = Field(default_factory=lambda: ["gpu"])

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if (self.count is None) == (self.device_ids is None):
            raise ValueError("give exactly one of count or device_ids")
        return self


class SandboxLimits(BaseModel):
    """Resource limits; ``None`` means the backend's default (unlimited where it has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float | None = None
    memory_mb: int | None = 8192
    pids: int | None = 1024
    disk_mb: int | None = None
    """Size cap of the writable area (None: uncapped). A backend that cannot enforce it
    refuses to start unless ``allow_uncapped_disk``."""
    allow_uncapped_disk: bool = False
    """Run without a disk cap when ``disk_mb`` cannot be enforced (said and recorded)."""


SandboxUserKind = Literal["root", "sandbox"]
"""Who runs a sandbox's commands (``SandboxSpec.user``)."""


class HostService(BaseModel):
    """A service on the host that a sandbox under ``network=filtered`` may reach, and only
    it: plain HTTP to ``http://{name}:{port}`` through the egress proxy, which sends it to
    ``target_host:target_port`` (e.g. the model gateway of an external agent on the host's
    loopback). Every other address of the host stays refused; the responses are streamed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")
    """The host name the sandbox uses (e.g. ``model-gateway.paperbench``)."""
    port: int = Field(ge=1, le=65535)
    target_host: str = "127.0.0.1"
    target_port: int = Field(ge=1, le=65535)

    @property
    def url(self) -> str:
        """What the sandbox uses: ``http://{name}:{port}``."""
        return f"http://{self.name}:{self.port}"


class SandboxSpec(BaseModel):
    """Everything needed to start one sandbox: plain data, buildable in another process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    network: NetworkPolicy = NetworkPolicy.NONE
    blacklist: list[str] = Field(default_factory=list)
    """The paper's blacklist: URLs refused by the egress proxy under ``network=filtered``,
    each refusal logged with reason ``blacklist`` (what the monitor judges)."""
    harness_blacklist: list[str] = Field(default_factory=list)
    """URLs the harness itself refuses (a command agent's model providers: it reaches its
    model only through the gateway), each refusal logged with reason ``harness blacklist``,
    apart from the paper's. A URL on both lists is refused as the paper's."""
    network_log: Path | None = None
    """Where the egress proxy writes its request log (JSON lines) under ``filtered``."""
    gpu: GpuRequest | None = None
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """The only environment the sandbox sees besides the image's own: nothing from the host.
    Left out of the repr: it may hold a key passed in by name."""
    workdir: str = "/"
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels, e.g. the run a sandbox belongs to (``paperbench.run``)."""
    writable_dirs: tuple[str, ...] = ()
    """Folders (absolute sandbox paths) that must be writable besides the backend's own,
    e.g. where hidden check files go. A backend with a read-only root and a capped disk puts
    them on that disk too."""
    ca_bundle: Path | None = None
    """Extra CA certificates (PEM) to trust inside the sandbox, e.g. a corporate TLS proxy's."""
    proxy_env: dict[str, str] = Field(default_factory=dict, repr=False)
    """Standard proxy variables (HTTPS_PROXY, ...) passed in only when asked for. Left out of
    the repr: a proxy URL may hold a password."""
    host_services: tuple[HostService, ...] = ()
    """Host services reachable by name through the egress proxy (``network=filtered``
    only: the one way a sandbox reaches the host)."""
    allow_networks: tuple[IPNetwork, ...] = ()
    """Internal ranges (private, link-local, ULA, ...: ``_internal_nets``) the sandbox may
    reach after all (``--allow-network``): directly under ``full``, through the egress proxy
    under ``filtered``. The host's own addresses and the cloud metadata addresses stay
    refused even inside them."""
    user: SandboxUserKind = "root"
    """Who runs the commands (``exec``): ``root``, the sandbox's own superuser, or
    ``sandbox``, an unprivileged user who owns ``/submission``, ``/home/submission``, its home
    and the ``writable_dirs`` the sandbox makes for it, and what is uploaded or written in
    after the start. The backend's own machinery stays privileged either way. How a backend
    makes that user is its own (the Docker backend: uid 1000)."""

    @model_validator(mode="after")
    def _services_need_the_proxy(self) -> Self:
        if self.host_services and self.network is not NetworkPolicy.FILTERED:
            names = ", ".join(s.url for s in self.host_services)
            raise ValueError(
                f"host services ({names}) are reached through the egress proxy: they need "
                f"network=filtered, not {self.network.value}"
            )
        return self

    @model_validator(mode="after")
    def _opened_ranges_need_a_network(self) -> Self:
        if self.allow_networks and self.network is NetworkPolicy.NONE:
            raise ValueError("allow_networks opens ranges of a network: not with network=none")
        return self


class ExecResult(BaseModel):
    """What one command did. Output is capped: head and tail kept, the cut said in the text."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int | None
    """None when the command was killed for its timeout."""
    stdout: str
    stderr: str
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0


def cap_output(data: bytes, limit: int = DEFAULT_OUTPUT_LIMIT) -> tuple[str, bool]:
    """Decode ``data`` keeping at most ``limit`` bytes: the head and the tail, with the cut said."""
    if len(data) <= limit:
        return cap_text(data, b"", len(data), limit)
    half = limit // 2
    return cap_text(data[:half], data[len(data) - half :], len(data), limit)


def read_ca_bundle(path: Path, error: type[SandboxError] = SandboxError) -> bytes:
    """The PEM certificates in host file ``path``, or ``error`` with one line saying why not."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read the CA bundle ({exc.strerror})") from exc
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise error(f"{path}: not a PEM CA bundle (no BEGIN CERTIFICATE)")
    return data


@dataclass(frozen=True)
class DiskUsage:
    """Space on a sandbox's capped disk."""

    total_bytes: int
    free_bytes: int

    @property
    def full(self) -> bool:
        """Less than 1 MiB (or 0.5 %) left: a writer hit the cap."""
        return self.free_bytes < max(1 << 20, self.total_bytes // 200)


class Sandbox(abc.ABC):
    """One running sandbox. Use as ``async with await backend.start(spec) as sb: ...``."""

    spec: SandboxSpec
    disk_cap: DiskCapKind | None = None
    """How ``spec.limits.disk_mb`` is enforced (None: no cap was asked for)."""
    disk_cap_note: str | None = None
    """What that cap leaves out (e.g. a read-only root), with the fix; said when it is made."""

    def disk_usage(self) -> DiskUsage | None:
        """Space left on the capped disk, where the backend can tell (else None)."""
        return None

    @abc.abstractmethod
    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> ExecResult:
        """Run ``cmd`` (a string runs under ``bash -lc``). On timeout the whole process tree
        is killed and ``timed_out`` is set.

        Raises:
            SandboxError: the sandbox is gone or the command could not be started.
        """

    @abc.abstractmethod
    async def upload(self, src: Path, dest: str) -> None:
        """Copy a host file or folder to sandbox path ``dest`` (created with its parents).

        Raises:
            SandboxError: the copy failed.
        """

    @abc.abstractmethod
    async def download(
        self, src: str, dest: Path, *, limits: TreeLimits = DEFAULT_LIMITS
    ) -> ExtractReport:
        """Copy sandbox path ``src`` (file or folder) to host path ``dest`` by the rule of
        :mod:`paperbench.sandbox._tree` (no link followed, links checked after the whole tree
        exists, special files refused, ``limits``); return what was left out.

        Raises:
            SandboxError: ``src`` does not exist or the copy failed.
        """

    @abc.abstractmethod
    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_LIMIT) -> bytes:
        """Read a sandbox file.

        Raises:
            SandboxError: the file does not exist, is a folder, or is over ``max_bytes``.
        """

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes) -> None:
        """Write a sandbox file, creating its parents.

        Raises:
            SandboxError: the write failed.
        """

    @abc.abstractmethod
    async def snapshot(self, path: str, dest: Path) -> None:
        """Write sandbox folder ``path`` as a tar.gz archive at host path ``dest`` (atomically),
        taken inside the sandbox (never by walking a tree it can still change) and written by
        the rule of :mod:`paperbench.sandbox._tree`.

        Raises:
            SandboxError: ``path`` does not exist or the archive could not be written.
        """

    async def alive(self) -> bool:
        """Whether the sandbox still runs (a cheap probe; never raises). The default runs
        ``true`` with a short timeout; backends with a direct way to ask override it."""
        try:
            result = await asyncio.wait_for(self.exec("true", timeout=15), 30)
        except (SandboxError, TimeoutError):
            return False
        return result.exit_code == 0

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop and remove the sandbox and everything it created. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


DiskCapKind = Literal["storage_opt", "loop-overlay", "loop-ext4", "rlimit-fsize", "none"]
"""How a sandbox enforces ``limits.disk_mb``: the engine's ``storage_opt`` size, an overlay of
the image whose upper layer is on a loop-mounted ext4 image (the whole root writable), some
folders on such an image (the rest of the root read-only), a per-file size limit only, or not at
all (allowed by ``allow_uncapped_disk``)."""

IsolationKind = Literal["docker", "bubblewrap", "none"]
"""How a backend's sandboxes are isolated from the host: what a run records."""


class SandboxBackend(abc.ABC):
    """Starts sandboxes of one kind.

    ``isolation_kind`` says how its sandboxes are kept from the host and ``isolation_reason``
    why this backend was chosen (asked for, or a fallback): a run records both.
    """

    name: str
    isolation_kind: IsolationKind
    isolation_reason: str = ""

    @abc.abstractmethod
    async def start(self, spec: SandboxSpec) -> Sandbox:
        """Start a sandbox.

        Raises:
            SandboxUnavailableError: the backend does not answer.
            SandboxError: the sandbox could not be created.
        """
