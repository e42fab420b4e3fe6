"""Choosing a sandbox backend: Docker when an engine answers, else the local backend.

:class:`SandboxConfig` is plain data (it pickles and round-trips through JSON), so a worker in
another process (e.g. a Ray task) builds the same backend with ``await config.build()``.
The Docker module is imported only when Docker is chosen.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import SandboxUnavailableError
from paperbench.sandbox._base import SandboxBackend
from paperbench.sandbox._heartbeat import Heartbeat
from paperbench.sandbox._local import Isolation, LocalBackend

log = logging.getLogger("paperbench.sandbox")

BackendName = Literal["auto", "docker", "local"]
DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"
_PING_TIMEOUT_S = 3.0


class SandboxConfig(BaseModel):
    """Which sandbox backend to use and how to build it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: BackendName = "auto"
    """``auto``: Docker when an engine answers, else local with bubblewrap (said as a
    warning); never plain host subprocesses unless ``allow_unsandboxed``."""
    local_root: Path | None = None
    """Where local workspaces are created (default: the system temp folder)."""
    local_isolation: Isolation = "auto"
    """``auto``: bubblewrap, refused without it unless ``allow_unsandboxed``; ``none``: plain
    host subprocesses, asked for explicitly (with a loud warning)."""
    allow_unsandboxed: bool = False
    """Allow the local backend to fall back to plain host subprocesses when bubblewrap is
    missing (said loudly and recorded as isolation ``none``)."""
    local_python: str | None = "python3"
    """The host interpreter put first on the local sandbox's PATH (None: system PATH only)."""
    local_ro_binds: list[Path] = Field(default_factory=list)
    """Extra host folders the local sandbox sees read-only (bubblewrap only)."""
    local_cgroups: bool = True
    """Create a cgroup per local sandbox (hard pids/memory/CPU limits) when writable."""
    docker_base_url: str | None = None
    """The Docker engine (default: ``DOCKER_HOST`` or the local socket)."""

    async def build(self) -> SandboxBackend:
        """Build the backend this configuration names.

        Raises:
            SandboxUnavailableError: ``docker`` was asked for and no engine answers.
        """
        return await get_backend(self.backend, config=self)


def docker_url(base_url: str | None = None) -> str:
    return base_url or os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_URL


async def docker_engine_answers(base_url: str | None = None) -> bool:
    """Whether a Docker engine answers ``GET /_ping`` at ``base_url`` (unix or tcp)."""
    url = urlparse(docker_url(base_url))
    try:
        if url.scheme == "unix":
            if not Path(url.path).exists():
                return False
            conn = asyncio.open_unix_connection(url.path)
        elif url.scheme in ("tcp", "http"):
            conn = asyncio.open_connection(url.hostname or "localhost", url.port or 2375)
        else:
            return False
        reader, writer = await asyncio.wait_for(conn, _PING_TIMEOUT_S)
        try:
            writer.write(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), _PING_TIMEOUT_S)
        finally:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), _PING_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError):
        return False
    parts = line.split()
    return len(parts) >= 2 and parts[1] == b"200"


def _build_docker(config: SandboxConfig) -> SandboxBackend:
    module = importlib.import_module("paperbench.sandbox._docker")
    backend_cls = module.DockerBackend
    if config.docker_base_url:
        backend: SandboxBackend = backend_cls(base_url=config.docker_base_url)
    else:
        backend = backend_cls()
    return backend


def build_local(config: SandboxConfig) -> LocalBackend:
    return LocalBackend(
        config.local_root,
        isolation=config.local_isolation,
        python=config.local_python,
        ro_binds=list(config.local_ro_binds),
        cgroups=config.local_cgroups,
        allow_unsandboxed=config.allow_unsandboxed,
    )


async def get_backend(
    name: BackendName = "auto", *, config: SandboxConfig | None = None
) -> SandboxBackend:
    """The backend ``name`` (``auto``: Docker when an engine answers, else local).

    Raises:
        SandboxUnavailableError: ``docker`` was asked for and no engine answers.
    """
    cfg = (config or SandboxConfig()).model_copy(update={"backend": name})
    if name == "local":
        return build_local(cfg)
    url = docker_url(cfg.docker_base_url)
    if name == "docker":
        if not await docker_engine_answers(cfg.docker_base_url):
            raise SandboxUnavailableError(
                f"no Docker engine answers at {url}: start Docker "
                "(scripts/ensure-docker.sh) or use --sandbox local"
            )
        return _build_docker(cfg)
    if await docker_engine_answers(cfg.docker_base_url):
        backend = _build_docker(cfg)
        backend.isolation_reason = f"auto: a Docker engine answers at {url}"
        return backend
    try:
        local = build_local(cfg)
    except SandboxUnavailableError as exc:
        raise SandboxUnavailableError(f"no Docker engine answers at {url}, and {exc}") from None
    local.isolation_reason = f"auto: no Docker engine answers at {url}; {local.isolation_reason}"
    log.warning(
        "no Docker engine answers at %s: using the local sandbox backend (%s)",
        url,
        "bubblewrap" if local.isolation == "bwrap" else "NO isolation",
    )
    return local


LOCAL_IMAGE = "host"
"""What the local backend runs on: the host's own system (its image name in records)."""


async def stage_image(backend: SandboxBackend, name: str, image: str | None = None) -> str:
    """The image a stage runs in: ``image`` when given, else paperbench's image ``name``
    (``paperbench-agent``, ``paperbench-reproducer``) on Docker, built when missing, or the
    host's own system on the local backend.

    An ``image`` that names one of paperbench's own images without a tag (e.g.
    ``resources.image: paperbench-agent-cli``) and is missing from the engine, as on a fresh
    machine, is built here (said on the console) instead of failing at container start; one
    present is used as it is.

    Raises:
        SandboxError: the image cannot be found or built.
    """
    if image and (backend.name != "docker" or not await _own_image_missing(image)):
        return image
    if backend.name != "docker":
        return LOCAL_IMAGE
    from paperbench.sandbox._images import ensure_images

    wanted = image or name
    if not image:
        tags = await asyncio.to_thread(ensure_images, (wanted,))
        return tags[wanted]
    log.warning("the image %s is missing: building it (once)", image)
    with Heartbeat(_say) as say:  # its steps, and a line while one runs for minutes
        tags = await asyncio.to_thread(ensure_images, (wanted,), log=say)
    return tags[wanted]


def _say(line: str) -> None:
    """An image build's progress line, on the console (the sandbox's log)."""
    log.warning("%s", line)


async def _own_image_missing(image: str) -> bool:
    """Whether ``image`` is one of paperbench's own images named without a tag, missing."""
    from paperbench.sandbox._images import IMAGES, image_present

    if image not in IMAGES:
        return False
    return not await asyncio.to_thread(image_present, image)
