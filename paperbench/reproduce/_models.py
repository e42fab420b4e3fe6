"""The reproduction's data: its configuration, its metadata.json and their constants."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench.sandbox import (
    DiskCapKind,
    GpuRequest,
    IsolationKind,
    LeftOutFile,
    NetworkPolicy,
    SandboxConfig,
    SandboxLimits,
    SandboxUserKind,
    SkippedMember,
)
from paperbench.sandbox._internal_nets import IPNetwork

SCHEMA_VERSION = 1
"""The version of metadata.json's layout."""
SUBMISSION_PATH = "/submission"
"""Where the submission lies inside the reproducer sandbox (reproduce.sh runs there)."""
REPRODUCER_IMAGE = "paperbench-reproducer"
"""The reproducer image on Docker; the local backend runs on the host's own system and
python3 instead."""

Status = Literal[
    "success",
    "failed",
    "timed_out",
    "disk_full",
    "no_reproduce_script",
    "sandbox_error",
    "host_error",
    "cancelled",
]
"""How a reproduction ended (``ReproductionMetadata.status``)."""
DEFAULT_DISK_MB = 50 * 1024
"""The default cap of a reproduction's writable space (a sparse image: only what is written
takes room on the host)."""
LOG_NAME = "reproduce.log"
"""reproduce.sh's output, beside metadata.json and inside the executed submission."""
CREATION_TIME_NAME = "reproduce.log.creation_time"
"""Epoch seconds when reproduce.sh started, inside the executed submission (PaperBench's
judge reads it)."""
ARCHIVE_TOP = "submission"
"""executed.tar.gz holds the submission under this folder, as PaperBench's tarballs do."""
CRLF_HINT = (
    "reproduce.sh has Windows (CRLF) line endings, which bash reads as part of each command "
    "('$'\\r': command not found'); convert it with dos2unix or sed -i 's/\\r$//' reproduce.sh"
)
"""The hint a failing reproduce.sh with CRLF line endings gets (in the log and metadata)."""


class ReproduceConfig(BaseModel):
    """How to reproduce: plain data, buildable in another process."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(default=12 * 3600, gt=0)
    """Total time for ``reproduce.sh``, over all attempts."""
    salvage_retries: int = Field(default=2, ge=0)
    """New attempts, each in a fresh sandbox, after a run that failed fast."""
    salvage_window_s: float = Field(default=300.0, ge=0)
    """A run that exits non-zero within this many seconds counts as failing fast."""
    max_file_bytes: int | None = Field(default=50 * 1024 * 1024, ge=0)
    """Files bigger than this are left out of executed.tar.gz (and listed)."""
    log_limit_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    """reproduce.log keeps at most this many bytes (head and tail)."""
    hash_limit_bytes: int = Field(default=1024 * 1024 * 1024, ge=0)
    """Files bigger than this are compared by size and mtime instead of sha256."""
    remove_dirs: tuple[str, ...] = ("venv", ".venv")
    """Folders removed from the submission before the run (at any depth)."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    image: str | None = None
    """Reproducer image; None: paperbench's reproducer image (docker) or the host (local)."""
    limits: SandboxLimits = Field(default_factory=lambda: SandboxLimits(disk_mb=DEFAULT_DISK_MB))
    """Resources of the reproducer sandbox; the disk is capped by default."""
    network: NetworkPolicy = NetworkPolicy.FULL
    allow_networks: tuple[IPNetwork, ...] = ()
    """Internal ranges the reproduction may reach after all (``--allow-network``; see
    ``SandboxSpec.allow_networks``)."""
    gpu: GpuRequest | None = None
    user: SandboxUserKind = "root"
    """Who runs reproduce.sh: ``root`` (the sandbox's own superuser, as PaperBench runs it, so
    that a submission may install system packages) or ``sandbox``, an unprivileged user who
    owns the submission."""
    env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    """Environment for reproduce.sh (nothing from the host is passed otherwise). It may hold
    the agent's own API keys: never dumped, so never in metadata.json."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels on the reproducer sandbox, e.g. the run it belongs to (``paperbench.run``)."""
    strict_archive: bool = True
    """Refuse a submission with unsafe members (``..``, links out, devices) instead of
    leaving them out."""


class Attempt(BaseModel):
    """One run of reproduce.sh in its own sandbox (a reproduction retries a fast failure)."""

    model_config = ConfigDict(extra="forbid")

    attempt: int
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float = 0.0
    started_at: datetime
    log_tail: str = ""
    disk_full: bool = False
    """The sandbox's capped disk was full when the run ended (or the log says ENOSPC)."""
    error: str | None = None


class ChangedFiles(BaseModel):
    """Paths relative to the submission folder, sorted."""

    model_config = ConfigDict(extra="forbid")

    created: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)

    def __len__(self) -> int:
        return len(self.created) + len(self.modified) + len(self.deleted)


class ReproductionMetadata(BaseModel):
    """metadata.json of a reproduction."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    status: Status
    exit_code: int | None = None
    timed_out: bool = False
    wall_time_s: float = 0.0
    """Time of the final attempt's ``reproduce.sh``."""
    total_time_s: float = 0.0
    """Everything: extraction, sandboxes, all attempts, archiving."""
    changed_files: ChangedFiles = Field(default_factory=ChangedFiles)
    attempts: list[Attempt] = Field(default_factory=list)
    files_left_out: list[LeftOutFile] = Field(default_factory=list)
    removed_dirs: list[str] = Field(default_factory=list)
    skipped_members: list[SkippedMember] = Field(default_factory=list)
    """What of the submission was not copied into the sandbox, and why."""
    output_skipped: list[SkippedMember] = Field(default_factory=list)
    """What of the sandbox's /submission after the run was not copied back to the host, and
    why: links leaving the tree or running through another link, special files, what is over
    the caps (the host's rule for untrusted trees)."""
    output_skipped_more: int = 0
    """Further such entries, counted."""
    log_truncated: bool = False
    error: str | None = None
    submission: str
    sandbox_backend: str | None = None
    sandbox_image: str | None = None
    isolation: IsolationKind | None = None
    """How reproduce.sh was kept from the host: docker, bubblewrap or none."""
    isolation_reason: str | None = None
    """Why that isolation: asked for, or the fallback that was taken (and allowed)."""
    user: SandboxUserKind | None = None
    """Who ran reproduce.sh (``ReproduceConfig.user``)."""
    disk_cap_mb: int | None = None
    disk_cap: DiskCapKind | None = None
    """How the disk cap was enforced: storage_opt, loop-overlay, loop-ext4 (a read-only root:
    said in ``hints``), rlimit-fsize (per file only) or none (both only when an uncapped disk
    was allowed)."""
    hints: list[str] = Field(default_factory=list)
    """What may have gone wrong and how to fix it (e.g. CRLF line endings)."""
    started_at: datetime
    finished_at: datetime | None = None
    config: ReproduceConfig
