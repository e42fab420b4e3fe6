"""What only root may read on the host is not in a local sandbox at all.

The local backend binds the host's system folders read-only. A sandbox's commands run as a
non-root uid, so root-only files there already refuse them; this hides them too: an empty
file over every file of ``/etc`` and ``/opt`` that other users may not read (``/etc/shadow``,
``/etc/gshadow``, a service's keys) and an empty tmpfs over such folders
(``/etc/ssl/private``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
from pathlib import Path

_PRIVATE_TOPS = ("etc", "opt")
"""Bound system folders searched for what only root may read (/usr holds no secrets and is
too large to walk at every start)."""


@functools.cache
def _host_private_paths() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(files, folders) under /etc and /opt that other users may not read: /etc/shadow,
    /etc/gshadow, /etc/ssl/private, a service's keys. Walked once per process."""
    files: list[str] = []
    folders: list[str] = []
    for top in _PRIVATE_TOPS:
        for folder, dirs, names in os.walk(f"/{top}", onerror=lambda _: None):
            for name in list(dirs):
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IROTH:
                        folders.append(path)
                        dirs.remove(name)  # hidden whole
            for name in names:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    if stat.S_ISREG(st.st_mode) and not st.st_mode & stat.S_IROTH:
                        files.append(path)
    return tuple(files), tuple(folders)


def mask_private(empty: Path) -> list[str]:
    """bwrap arguments that put an empty file (``empty``, made here) over every host file of
    the bound system folders that only root may read, and an empty tmpfs over such folders:
    the sandbox does not see them at all, not only cannot read them."""
    files, folders = _host_private_paths()
    if files and not empty.exists():
        empty.touch(mode=0o444)
    argv: list[str] = []
    for path in files:
        argv += ["--ro-bind", str(empty), path]
    for path in folders:
        argv += ["--perms", "0555", "--tmpfs", path]
    return argv
