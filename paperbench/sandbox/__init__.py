"""Sandboxes: where agents and reproductions run. One contract, several backends.

Importing this package is light: each name imports its module when first used, and the Docker
backend (and its SDK) only through :func:`get_backend` or ``DockerBackend``.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.sandbox._base import (
        DEFAULT_OUTPUT_LIMIT,
        DiskCapKind,
        DiskUsage,
        ExecResult,
        GpuRequest,
        HostService,
        IsolationKind,
        NetworkPolicy,
        Sandbox,
        SandboxBackend,
        SandboxLimits,
        SandboxSpec,
        SandboxUserKind,
        cap_output,
    )
    from paperbench.sandbox._blacklist import Blacklist, BlacklistHit, read_blacklist
    from paperbench.sandbox._docker import DockerBackend
    from paperbench.sandbox._egress import (
        CA_BUNDLE_VARS,
        EgressProxy,
        EgressSettings,
        NetworkLogEntry,
        read_network_log,
    )
    from paperbench.sandbox._egress_gateway import DockerEgressGateway
    from paperbench.sandbox._local import LocalBackend, LocalSandbox
    from paperbench.sandbox._select import (
        LOCAL_IMAGE,
        SandboxConfig,
        docker_engine_answers,
        get_backend,
        stage_image,
    )
    from paperbench.sandbox._tree import (
        Entry,
        ExtractReport,
        LeftOutFile,
        SkippedMember,
        TreeLimits,
        folder_entries,
        safe_extract,
        tar_entries,
    )
    from paperbench.sandbox._tree_files import (
        read_file_beneath,
        remove_tree,
        write_file_beneath,
    )
    from paperbench.sandbox._tree_tar import (
        make_tar_gz,
        repack,
    )

__all__ = [
    "CA_BUNDLE_VARS",
    "DEFAULT_OUTPUT_LIMIT",
    "LOCAL_IMAGE",
    "Blacklist",
    "BlacklistHit",
    "DiskCapKind",
    "DiskUsage",
    "DockerBackend",
    "DockerEgressGateway",
    "EgressProxy",
    "EgressSettings",
    "Entry",
    "ExecResult",
    "ExtractReport",
    "GpuRequest",
    "HostService",
    "IsolationKind",
    "LeftOutFile",
    "LocalBackend",
    "LocalSandbox",
    "NetworkLogEntry",
    "NetworkPolicy",
    "Sandbox",
    "SandboxBackend",
    "SandboxConfig",
    "SandboxLimits",
    "SandboxSpec",
    "SandboxUserKind",
    "SkippedMember",
    "TreeLimits",
    "cap_output",
    "docker_engine_answers",
    "folder_entries",
    "get_backend",
    "make_tar_gz",
    "read_blacklist",
    "read_file_beneath",
    "read_network_log",
    "remove_tree",
    "repack",
    "safe_extract",
    "stage_image",
    "tar_entries",
    "write_file_beneath",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
