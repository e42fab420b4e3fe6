"""The sandbox images: ``paperbench-agent`` and ``paperbench-reproducer`` (built by default),
``paperbench-rcb`` (ResearchCodeBench's tests: torch, jax, timm...; built only by name) and
``paperbench-agent-cli`` (the external agents: Claude Code, Codex CLI, mini-SWE-agent at the
versions of :data:`BUILD_ARGS`; built only by name).

No registry is needed. The base is bootstrapped from Debian's packages with ``debootstrap``
(bookworm, minbase, every package either image needs) from the mirror this machine's apt uses,
imported into the engine as ``paperbench-base:<hash>``, and shared by every image. Each image is
then built through the SDK from ``docker/Dockerfile.<name>`` ``FROM`` that base. With
``base_image`` a pulled image replaces the bootstrap (the Dockerfiles install what it lacks).

Every image is tagged by a hash of its inputs (Dockerfile text, package list, suite, base, CA
bundle), e.g. ``paperbench-reproducer:3f9c0a1b2c4d``, and also ``:latest``; an existing tag means
nothing to do. Extra CA certificates and the host's proxy variables go in only when asked.
The builds have no network, except those of :data:`NETWORK_IMAGES` (pip installs from PyPI,
npm installs from the npm registry).

:func:`ensure_derived_image` builds a derived image: any image present plus shell commands run
on it as root (a ``command`` agent's ``install:``), ``paperbench-agent-custom:<hash>`` over the
base's id, the commands and the CA/proxy inputs, with the registry builds' network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import ImageBuildError
from paperbench.sandbox import _docker_labels as L
from paperbench.sandbox._base import read_ca_bundle
from paperbench.sandbox._egress import DEFAULT_HOST_CA_BUNDLE

RECIPE_VERSION = "1"
SUITE = "bookworm"
VARIANT = "minbase"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
BASE_REPO = "paperbench-base"
IMAGES: dict[str, tuple[str, ...]] = {
    "paperbench-agent": (
        "bash",
        "ca-certificates",
        "curl",
        "git",
        "python3",
        "python3-venv",
        "python3-pip",
        "build-essential",
        "procps",
    ),
    "paperbench-reproducer": (
        "bash",
        "ca-certificates",
        "curl",
        "git",
        "python3",
        "python3-venv",
        "python3-pip",
        "python3-numpy",
        "procps",
    ),
    # its Python packages come from PyPI (docker/Dockerfile.rcb); these are all in the base
    "paperbench-rcb": (
        "bash",
        "ca-certificates",
        "curl",
        "python3",
        "python3-venv",
        "python3-pip",
        "procps",
    ),
    # what paperbench-agent has; its Dockerfile apt-installs nodejs and npm (Debian's npm, 350
    # node-* packages, breaks debootstrap: "Failure while configuring base packages"; nodejs alone
    # in the base would add 92 MB to every image), then Claude Code and Codex CLI from the npm
    # registry and mini-SWE-agent from PyPI (docker/Dockerfile.agent-cli)
}
IMAGES["paperbench-agent-cli"] = IMAGES["paperbench-agent"]  # an agent image, and more
BUILD_ARGS: dict[str, dict[str, str]] = {
    "paperbench-agent-cli": {
        "CLAUDE_CODE_VERSION": "2.1.197",  # npm @anthropic-ai/claude-code
        "CODEX_VERSION": "0.169.0",  # npm @openai/codex
        "MINI_SWE_AGENT_VERSION": "2.4.6",  # PyPI mini-swe-agent
        "LITELLM_VERSION": "1.110.2",  # PyPI litellm (mini-SWE-agent's model client)
    },
}
"""Pinned versions an image's Dockerfile takes as build arguments (``ARG NAME``); part of the
image's tag, so a changed pin means a new image."""
DEFAULT_IMAGES: tuple[str, ...] = ("paperbench-agent", "paperbench-reproducer")
"""What ``paperbench images build`` builds when no name is given (``paperbench-rcb`` is
several GB: built only by name, or when an RCB command first needs it; so is
``paperbench-agent-cli``)."""
NETWORK_IMAGES: frozenset[str] = frozenset({"paperbench-rcb", "paperbench-agent-cli"})
"""Images whose build reaches a package registry (PyPI, npm). Without ``--ca-bundle`` they trust
the host's CA bundle, as the host does (TLS to the registry may be re-signed by a proxy)."""
BASE_PACKAGES: tuple[str, ...] = tuple(sorted({p for pkgs in IMAGES.values() for p in pkgs}))
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
LOCK_FILE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "paperbench" / ("images.lock")
)

Log = Callable[[str], None]


class ImageOptions(BaseModel):
    """What ``paperbench images build`` takes."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    ca_bundle: Path | None = None
    """Extra CA certificates (PEM) baked into both images' trust store."""
    base_image: str | None = None
    """Use this (pulled) image as the base instead of bootstrapping one."""
    rebuild: bool = False
    """Rebuild even when the tags exist."""
    proxy_env: dict[str, str] = Field(default_factory=dict)
    """Proxy variables passed to the build (only when asked for: ``proxy_from_host()``)."""
    mirror: str | None = None
    """Debian mirror for debootstrap (default: the one this machine's apt uses)."""
    docker_dir: Path = DOCKER_DIR


def proxy_from_host() -> dict[str, str]:
    """The standard proxy variables set in this process's environment."""
    return {k: v for k in PROXY_VARS if (v := os.environ.get(k))}


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian archive URL this machine's apt uses (one-line and deb822 sources)."""
    files = [apt_dir / "sources.list"]
    folder = apt_dir / "sources.list.d"
    if folder.is_dir():
        files += sorted(folder.glob("*.list")) + sorted(folder.glob("*.sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.findall(r"^URIs:\s*(.+)$", stanza, re.M)
            suites = re.findall(r"^Suites:\s*(.+)$", stanza, re.M)
            for uri_line in uris:
                for uri in uri_line.split():
                    if _debian_archive(uri) and any(SUITE in s.split() for s in suites):
                        return str(uri).rstrip("/")
        for line in text.splitlines():
            parts = [p for p in line.split() if not p.startswith("[")]
            if (
                len(parts) >= 3
                and parts[0] == "deb"
                and parts[2] == SUITE
                and _debian_archive(parts[1])
            ):
                return parts[1].rstrip("/")
    return DEFAULT_MIRROR


def _debian_archive(uri: str) -> bool:
    return uri.startswith(("http://", "https://")) and uri.rstrip("/").endswith("/debian")


def _hash(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def base_tag() -> str:
    """``paperbench-base:<hash of the bootstrap recipe>``."""
    arch = platform.machine()
    return f"{BASE_REPO}:{_hash(RECIPE_VERSION, SUITE, VARIANT, arch, *BASE_PACKAGES)}"


def _ca_bytes(ca_bundle: Path | None) -> bytes:
    return b"" if ca_bundle is None else read_ca_bundle(ca_bundle, ImageBuildError)


def _image_ca(name: str, opts: ImageOptions) -> bytes:
    """The extra CA certificates baked into ``name``: ``--ca-bundle``, else the host's bundle
    for an image of :data:`NETWORK_IMAGES`, else none."""
    if opts.ca_bundle is None and name in NETWORK_IMAGES and DEFAULT_HOST_CA_BUNDLE.is_file():
        return _ca_bytes(DEFAULT_HOST_CA_BUNDLE)
    return _ca_bytes(opts.ca_bundle)


def dockerfile(name: str, docker_dir: Path = DOCKER_DIR) -> str:
    path = docker_dir / f"Dockerfile.{name.removeprefix('paperbench-')}"
    try:
        return path.read_text()
    except OSError as exc:
        raise ImageBuildError(f"{path}: missing Dockerfile ({exc.strerror})") from exc


def image_tag(name: str, base_ref: str, opts: ImageOptions) -> str:
    """``<name>:<hash of Dockerfile, packages, suite, base, CA bundle, build arguments>``."""
    ca_hash = hashlib.sha256(_image_ca(name, opts)).hexdigest()
    inputs = (
        RECIPE_VERSION,
        SUITE,
        base_ref,
        dockerfile(name, opts.docker_dir),
        *IMAGES[name],
        ca_hash,
        *(f"{k}={v}" for k, v in sorted(BUILD_ARGS.get(name, {}).items())),
    )
    return f"{name}:{_hash(*inputs)}"


def _exists(client: Any, ref: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return str(client.api.inspect_image(ref)["Id"])
    except ImageNotFound:
        return None


def image_present(ref: str, *, client: Any = None) -> bool:
    """Whether the engine has the image ``ref``."""
    if client is None:
        from paperbench.sandbox._docker import connect

        client = connect()
    return _exists(client, ref) is not None


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- the base


def bootstrap_base(client: Any, tag: str, mirror: str, log: Log) -> None:
    """debootstrap into a temp folder, tar it, import it as ``tag``.

    Raises:
        ImageBuildError: debootstrap is missing or failed, or the import failed.
    """
    tool = shutil.which("debootstrap")
    if tool is None:
        raise ImageBuildError(
            "debootstrap is not installed: run scripts/ensure-docker.sh (or apt-get install "
            "debootstrap), or pass --base-image NAME where a registry is reachable"
        )
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root: run as root or pass --base-image NAME")
    with tempfile.TemporaryDirectory(prefix="paperbench-base-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "root"
        cmd = [
            tool,
            f"--variant={VARIANT}",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(root),
            mirror,
        ]
        log(f"debootstrap {SUITE} from {mirror} (about a minute)")
        started = time.monotonic()
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if proc.returncode != 0:
            tail = " | ".join(proc.stdout.strip().splitlines()[-5:])
            raise ImageBuildError(f"debootstrap failed (exit {proc.returncode}): {tail}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        log(f"debootstrap done in {time.monotonic() - started:.0f}s; importing")
        archive = Path(tmp) / "root.tar"
        tar = subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(archive), "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if tar.returncode != 0:
            raise ImageBuildError(f"tar of the bootstrapped base failed: {tar.stderr.strip()}")
        repo, _, version = tag.partition(":")
        changes = [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["bash"]',
            *(f"LABEL {k}={v}" for k, v in L.labels("base-image").items() if k != L.OWNER),
        ]
        try:
            client.api.import_image(src=str(archive), repository=repo, tag=version, changes=changes)
        except Exception as exc:
            raise ImageBuildError(f"importing the base image failed: {exc}") from exc
    if _exists(client, tag) is None:
        raise ImageBuildError(f"the base image {tag} is missing after its import")


def ensure_base(client: Any, opts: ImageOptions, log: Log) -> tuple[str, str]:
    """The base image to build FROM and the reference its images hash: ``(from, ref)``."""
    if opts.base_image:
        image_id = _exists(client, opts.base_image)
        if image_id is None:
            log(f"pulling {opts.base_image}")
            try:
                client.images.pull(opts.base_image)
            except Exception as exc:
                raise ImageBuildError(f"cannot pull {opts.base_image}: {exc}") from exc
            image_id = _exists(client, opts.base_image)
        return opts.base_image, f"{opts.base_image}@{image_id}"
    tag = base_tag()
    if opts.rebuild or _exists(client, tag) is None:
        bootstrap_base(client, tag, opts.mirror or debian_mirror(), log)
    else:
        log(f"{tag} is up to date")
    return tag, tag


# --------------------------------------------------------------------------- the images


def _context(name: str, opts: ImageOptions) -> io.BytesIO:
    return _tar_context(dockerfile(name, opts.docker_dir), _image_ca(name, opts))


def _tar_context(dockerfile_text: str, extra_ca: bytes) -> io.BytesIO:
    """A build context of the Dockerfile and the CA bundle it installs."""
    files = {"Dockerfile": dockerfile_text.encode(), "extra-ca.crt": extra_ca}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for fname, data in files.items():
            info = tarfile.TarInfo(fname)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build_image(
    client: Any, name: str, tag: str, base_from: str, opts: ImageOptions, log: Log
) -> None:
    """Build ``tag`` from ``docker/Dockerfile.<name>`` FROM ``base_from``; tag ``:latest`` too.

    Raises:
        ImageBuildError: the build failed (the last lines of its log are in the message).
    """
    log(f"building {tag}")
    labels = {k: v for k, v in L.labels("image").items() if k != L.OWNER}
    buildargs = {"BASE": base_from, **BUILD_ARGS.get(name, {}), **opts.proxy_env}
    lines: list[str] = []
    try:
        for chunk in client.api.build(
            fileobj=_context(name, opts),
            custom_context=True,
            tag=tag,
            buildargs=buildargs,
            labels=labels,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
            network_mode=(
                None if opts.base_image or opts.proxy_env or name in NETWORK_IMAGES else "none"
            ),
        ):
            if "stream" in chunk:
                new = chunk["stream"].splitlines()
                lines.extend(new)
                for line in new:
                    if _STEP.match(_ANSI.sub("", line)):  # what the build is at, as it starts
                        log(_step_line(name, _ANSI.sub("", line)))
            if "error" in chunk:
                tail = " | ".join([*lines[-4:], chunk["error"].strip()])
                raise ImageBuildError(f"building {tag} failed: {tail}")
    except ImageBuildError:
        raise
    except Exception as exc:
        raise ImageBuildError(f"building {tag} failed: {exc}") from exc
    repo = tag.partition(":")[0]
    client.api.tag(tag, repo, "latest")


def _step_line(name: str, line: str) -> str:
    """``building paperbench-rcb: step 3/9: RUN pip install ...`` (cut at 160 characters)."""
    match = re.match(r"^Step (\d+/\d+) : (.*)$", line)
    said = f"step {match.group(1)}: {match.group(2)}" if match else line
    said = " ".join(said.split())
    return f"building {name}: " + (said if len(said) <= 160 else said[:157] + "...")


def ensure_images(
    names: tuple[str, ...] = DEFAULT_IMAGES,
    opts: ImageOptions | None = None,
    *,
    client: Any = None,
    log: Log | None = None,
) -> dict[str, str]:
    """Build whichever of ``names`` (default: :data:`DEFAULT_IMAGES`) is missing or out of
    date; return ``{name: tag}``.

    Raises:
        SandboxUnavailableError: no Docker engine answers.
        ImageBuildError: the base or an image could not be built.
    """
    opts = opts or ImageOptions()
    say: Log = log or (lambda _msg: None)
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise ImageBuildError(f"unknown image {unknown[0]!r}: expected one of {sorted(IMAGES)}")
    if client is None:
        from paperbench.sandbox._docker import connect

        client = connect(timeout=900)
    tags: dict[str, str] = {}
    with _lock():
        wanted = {}
        for name in names:
            base_ref = opts.base_image or base_tag()
            wanted[name] = image_tag(name, base_ref, opts)
        missing = [n for n in names if opts.rebuild or _exists(client, wanted[n]) is None]
        if opts.base_image:  # the tag depends on the pulled image's id
            missing = list(names)
        if missing:
            base_from, base_ref = ensure_base(client, opts, say)
            for name in names:
                tag = image_tag(name, base_ref, opts)
                if opts.rebuild or _exists(client, tag) is None:
                    build_image(client, name, tag, base_from, opts, say)
                else:
                    say(f"{tag} is up to date")
                tags[name] = tag
        else:
            for name in names:
                say(f"{wanted[name]} is up to date")
            tags = wanted
    return tags


# --------------------------------------------------------------------------- derived images

DERIVED_REPO = "paperbench-agent-custom"
_DERIVED_PREAMBLE = (
    "COPY extra-ca.crt /usr/local/share/ca-certificates/paperbench-extra.crt",
    "RUN if [ -s /usr/local/share/ca-certificates/paperbench-extra.crt ]; then "
    "update-ca-certificates; else rm /usr/local/share/ca-certificates/paperbench-extra.crt; fi",
    "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "
    "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt "
    "PIP_CERT=/etc/ssl/certs/ca-certificates.crt "
    "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
    "USER root",
)
"""What a derived image's Dockerfile has between its ``FROM`` and its commands."""
_NOISE = ("--->", "Removing intermediate container", "Step ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"^Step (\d+)/\d+ : ")


class DerivedBuildError(ImageBuildError):
    """A derived image's build failed; ``index`` is the command that failed (None: another
    step), ``tail`` the last lines of the build's log."""

    def __init__(self, message: str, *, index: int | None, tail: str) -> None:
        super().__init__(message)
        self.index = index
        self.tail = tail


def derived_dockerfile(base: str, commands: Sequence[str]) -> str:
    """``FROM base``, the CA certificates, then one ``RUN`` per command (as root)."""
    runs = [f"RUN {json.dumps(['/bin/sh', '-c', c])}" for c in commands]
    return "\n".join([f"FROM {base}", *_DERIVED_PREAMBLE, *runs]) + "\n"


def derived_tag(
    base_id: str, commands: Sequence[str], opts: ImageOptions, repo: str = DERIVED_REPO
) -> str:
    """``<repo>:<hash of the base image's id, the commands, the CA bundle, the proxy>``."""
    ca_hash = hashlib.sha256(_derived_ca(opts)).hexdigest()
    proxy = [f"{k}={v}" for k, v in sorted(opts.proxy_env.items())]
    inputs = (RECIPE_VERSION, "derived", base_id, derived_dockerfile("BASE", commands), ca_hash)
    return f"{repo}:{_hash(*inputs, *proxy)}"


def _derived_ca(opts: ImageOptions) -> bytes:
    """As an image of :data:`NETWORK_IMAGES`: ``--ca-bundle``, else the host's bundle."""
    if opts.ca_bundle is None and DEFAULT_HOST_CA_BUNDLE.is_file():
        return _ca_bytes(DEFAULT_HOST_CA_BUNDLE)
    return _ca_bytes(opts.ca_bundle)


def ensure_derived_image(
    base: str,
    commands: Sequence[str],
    opts: ImageOptions | None = None,
    *,
    client: Any = None,
    log: Log | None = None,
    repo: str = DERIVED_REPO,
) -> str:
    """The image ``base`` with ``commands`` run on it as root, one ``RUN`` each, in order:
    ``<repo>:<hash>`` (:func:`derived_tag`), built once through the SDK with the network of the
    registry builds (the host's CA bundle trusted, proxy variables when asked) and reused
    while the tag exists. ``base`` must exist in the engine.

    Raises:
        SandboxUnavailableError: no Docker engine answers.
        ImageBuildError: ``base`` is missing.
        DerivedBuildError: the build failed (the failing command's index and the log's tail).
    """
    opts = opts or ImageOptions()
    say: Log = log or (lambda _msg: None)
    if client is None:
        from paperbench.sandbox._docker import connect

        client = connect(timeout=900)
    base_id = _exists(client, base)
    if base_id is None:
        raise ImageBuildError(f"the base image {base} is missing from the Docker engine")
    tag = derived_tag(base_id, commands, opts, repo)
    with _lock():
        if not opts.rebuild and _exists(client, tag) is not None:
            say(f"{tag} is up to date")
            return tag
        started = time.monotonic()
        say(f"building {tag} FROM {base} ({len(commands)} install commands)")
        _build_derived(client, tag, base_id, commands, opts, say)
        say(f"built {tag} in {time.monotonic() - started:.0f}s")
    return tag


def _build_derived(
    client: Any, tag: str, base_id: str, commands: Sequence[str], opts: ImageOptions, say: Log
) -> None:
    buf = _tar_context(derived_dockerfile(base_id, commands), _derived_ca(opts))
    first = 2 + len(_DERIVED_PREAMBLE)  # the step of the first command (FROM is step 1)
    step = 0
    lines: list[str] = []

    def fail(error: str) -> DerivedBuildError:
        said = [x.strip() for x in lines if x.strip() and not x.strip().startswith(_NOISE)]
        tail = " | ".join([*said[-4:], error.strip()])
        index = step - first if first <= step < first + len(commands) else None
        what = f"install command {index} failed" if index is not None else "failed"
        return DerivedBuildError(f"building {tag} {what}: {tail}", index=index, tail=tail)

    labels = {k: v for k, v in L.labels("image").items() if k != L.OWNER}
    try:
        for chunk in client.api.build(
            fileobj=buf,
            custom_context=True,
            tag=tag,
            buildargs=dict(opts.proxy_env),
            labels=labels,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
        ):
            for line in _ANSI.sub("", str(chunk.get("stream", ""))).splitlines():
                if match := _STEP.match(line):
                    step = int(match.group(1))
                ours = first <= step < first + len(commands)  # an install command's step
                if ours and line.strip() and not line.strip().startswith(_NOISE[:2]):
                    say(line.strip())
                lines.append(line)
            if "error" in chunk:
                raise fail(str(chunk["error"]))
    except ImageBuildError:
        raise
    except Exception as exc:
        raise fail(str(exc)) from exc


def describe(client: Any) -> list[dict[str, Any]]:
    """The paperbench images present in the engine (for ``paperbench images list``)."""
    out = []
    for image in client.api.images(filters={"label": f"{L.MANAGED}=true"}):
        out.append(
            {
                "tags": image.get("RepoTags") or [],
                "id": str(image.get("Id", ""))[7:19],
                "size_mb": round(int(image.get("Size", 0)) / 1e6),
                "kind": (image.get("Labels") or {}).get(L.KIND, ""),
            }
        )
    return out


__all__ = [
    "BUILD_ARGS",
    "DEFAULT_IMAGES",
    "DERIVED_REPO",
    "IMAGES",
    "NETWORK_IMAGES",
    "DerivedBuildError",
    "ImageOptions",
    "base_tag",
    "debian_mirror",
    "derived_tag",
    "describe",
    "ensure_derived_image",
    "ensure_images",
    "image_present",
    "image_tag",
    "proxy_from_host",
]
