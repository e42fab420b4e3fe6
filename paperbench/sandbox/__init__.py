"""Sandboxes: where agents and reproductions run. One contract, several backends.

Importing this package is light: the Docker backend (and its SDK) is imported only when used,
through :func:`get_backend` or the lazy ``DockerBackend`` attribute.
"""

from __future__ import annotations

import importlib
from typing import Any

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

_LAZY = {
    "CA_BUNDLE_VARS": "paperbench.sandbox._egress",
    "DockerBackend": "paperbench.sandbox._docker",
    "DockerEgressGateway": "paperbench.sandbox._egress_gateway",
    "EgressProxy": "paperbench.sandbox._egress",
    "EgressSettings": "paperbench.sandbox._egress",
    "NetworkLogEntry": "paperbench.sandbox._egress",
    "read_network_log": "paperbench.sandbox._egress",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
