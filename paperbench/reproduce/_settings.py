"""What one reproduction is asked to do, as ``paperbench reproduce`` and
``paperbench.run_reproduction()`` take it: :class:`ReproduceSettings`, one typed model (each
field marked with a :class:`~paperbench._flags.Flag` is an argument or option of the command,
its default the field's); :func:`prepare_reproduction` checks it and makes the
:class:`ReproduceConfig` the stage runs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench._console import warning
from paperbench._flags import (
    AllowNetworks,
    AllowUnsandboxed,
    Cpus,
    DiskMb,
    Flag,
    Gpus,
    MemoryMb,
    SandboxBackendOption,
)
from paperbench.errors import UsageError
from paperbench.reproduce._files import default_out_dir
from paperbench.reproduce._models import DEFAULT_DISK_MB, ReproduceConfig
from paperbench.sandbox import GpuRequest, NetworkPolicy, SandboxConfig, SandboxUserKind
from paperbench.sandbox._internal_nets import describe

_DEFAULTS = ReproduceConfig()


class ReproduceSettings(BaseModel):
    """A submission's reproduce.sh in a fresh sandbox, into an output folder.

    The defaults are the command line's: the sandbox that answers, network ``full``, 12 hours,
    the reproducer image, a disk cap, and the folder <submission>.reproduction beside it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    submission: Annotated[Path, Flag("submission", argument=True)] = Field(
        description="A submission folder or a .tar / .tar.gz / .tgz archive."
    )
    out: Annotated[Path | None, Flag("--out", shared=True)] = Field(
        default=None, description="The output folder (default: <submission>.reproduction)."
    )
    force: Annotated[bool, Flag("--force")] = Field(
        default=False, description="Write into an --out folder that is not empty."
    )
    sandbox: SandboxBackendOption = "auto"
    allow_unsandboxed: AllowUnsandboxed = False
    timeout_s: Annotated[float | None, Flag("--reproduce-timeout", shared=True)] = Field(
        default=None, gt=0, description="Time of reproduce.sh in seconds (default: 12 hours)."
    )
    image: Annotated[str | None, Flag("--image", shared=True)] = Field(
        default=None, description="The sandbox's image (default: paperbench-reproducer)."
    )
    retries: Annotated[int, Flag("--retries")] = Field(
        default=_DEFAULTS.salvage_retries,
        ge=0,
        description=f"Salvage retries, each in a new sandbox, after a run that fails within "
        f"{_DEFAULTS.salvage_window_s:.0f} s.",
    )
    cpus: Cpus = None
    memory_mb: MemoryMb = None
    disk_mb: DiskMb = None
    allow_uncapped_disk: Annotated[bool, Flag("--allow-uncapped-disk", shared=True)] = Field(
        default=False, description="Run without a disk cap where one cannot be enforced."
    )
    gpus: Gpus = None
    network: Annotated[
        Literal["none", "full", "filtered"] | None, Flag("--network", shared=True)
    ] = Field(default=None, description="The sandbox's network (default: full).")
    allow_networks: AllowNetworks = ()
    sandbox_user: Annotated[SandboxUserKind, Flag("--sandbox-user")] = Field(
        default=_DEFAULTS.user,
        description="Who runs reproduce.sh: root (the sandbox's own superuser, as PaperBench "
        "runs it) or sandbox (an unprivileged user who owns the submission).",
    )


@dataclass(frozen=True)
class PreparedReproduction:
    """A reproduction checked, before its sandbox starts."""

    submission: Path
    out_dir: Path
    config: ReproduceConfig


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: exists and is not a folder; give another --out")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise UsageError(
            f"--out {out_dir}: the folder exists and is not empty; pass --force to overwrite "
            "the reproduction's files in it, or give another --out"
        )


def prepare_reproduction(settings: ReproduceSettings) -> PreparedReproduction:
    """``settings`` checked (the network, the output folder) and made into the stage's
    :class:`ReproduceConfig`; internal ranges let through said as a warning.

    Raises:
        UsageError: a bad value or folder, naming its flag.
    """
    s = settings
    chosen = NetworkPolicy(s.network) if s.network is not None else _DEFAULTS.network
    if s.allow_networks and chosen is NetworkPolicy.NONE:
        raise UsageError("--allow-network: the sandbox has no network (--network none)")
    out_dir = s.out or default_out_dir(s.submission)
    _check_out_dir(out_dir, s.force)
    if s.allow_networks:
        warning(describe(s.allow_networks))
    limits = _DEFAULTS.limits
    disk = s.disk_mb if s.disk_mb is not None else limits.disk_mb or DEFAULT_DISK_MB
    config = ReproduceConfig(
        timeout_s=s.timeout_s or _DEFAULTS.timeout_s,
        salvage_retries=s.retries,
        image=s.image,
        sandbox=SandboxConfig(backend=s.sandbox, allow_unsandboxed=s.allow_unsandboxed),
        limits=limits.model_copy(
            update={
                "cpus": s.cpus if s.cpus is not None else limits.cpus,
                "memory_mb": s.memory_mb if s.memory_mb is not None else limits.memory_mb,
                "disk_mb": disk,
                "allow_uncapped_disk": s.allow_uncapped_disk,
            }
        ),
        gpu=GpuRequest(count=s.gpus) if s.gpus else None,
        network=chosen,
        allow_networks=s.allow_networks,
        user=s.sandbox_user,
    )
    return PreparedReproduction(s.submission, out_dir, config)
