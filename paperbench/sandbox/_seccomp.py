"""The seccomp filters: the local backend's commands (built with libseccomp), and the profile
of every Docker sandbox, both from one deny list (``DENIED``).

The filter is a deny list in the spirit of Docker's default profile: everything is allowed
except the system calls that reach the kernel's global state or widen the attack surface and
that an experiment never needs. They fail with ``EPERM`` (``clone3`` with ``ENOSYS``, so that
the C library falls back to ``clone``, whose namespace flags the filter can inspect):

- kernel and machine state: modules, kexec, reboot, swap, clock and time setting, accounting,
  quotas, ``syslog``, ``sysfs``, ``iopl``/``ioperm``;
- the kernel keyrings (``add_key``, ``keyctl``, ``request_key``): the host's keys stay unseen;
- namespaces and mounts (``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag,
  ``mount`` and the new mount API, ``pivot_root``, ``chroot``);
- wide attack surfaces: ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``,
  ``open_by_handle_at``/``name_to_handle_at``, ``kcmp``, ``process_vm_readv``/``writev``.

``ptrace`` stays allowed: a command's own pid namespace holds only its own processes, and
debuggers and profilers (gdb, py-spy) are ordinary research tools.

The program is compiled once per process (libseccomp through ``pyseccomp``, a ctypes binding
with libseccomp's own Python API) and handed to bubblewrap as a file descriptor
(``bwrap --seccomp FD``), which loads it just before it runs the command.

Docker (:func:`docker_profile`): Docker's default profile (an allow list; shipped as
``paperbench/_data/seccomp/docker-default.json``, copied from moby) with every call of
``DENIED`` taken out of its allow rules, so that the engine's own default (which on Docker
20.10 allows io_uring) is never what a sandbox gets. Its other rules stay as Docker wrote them:
``clone`` without namespace flags and ``clone3`` failing with ``ENOSYS`` (as here), ``ptrace``
allowed, and the calls that need a capability the sandbox does not keep refused.
"""

from __future__ import annotations

import errno
import json
import os
from functools import cache
from importlib import resources
from typing import Any

from paperbench.errors import SandboxUnavailableError

DENIED = (
    # kernel and machine state
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "acct", "quotactl", "syslog", "sysfs", "iopl", "ioperm", "lookup_dcookie",
    "vhangup", "uselib", "ustat", "_sysctl",
    # keyrings
    "add_key", "keyctl", "request_key",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # attack surface
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "open_by_handle_at", "name_to_handle_at", "kcmp",
    "process_vm_readv", "process_vm_writev",
)  # fmt: skip
"""System calls that fail with EPERM inside the local sandbox, and in Docker sandboxes."""

DOCKER_DEFAULT = "_data/seccomp/docker-default.json"
"""Docker's default profile, as moby ships it (package data of ``paperbench``)."""

_CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)


@cache
def seccomp_program() -> bytes:
    """The compiled BPF program (cached per process).

    Raises:
        SandboxUnavailableError: libseccomp (or its binding) is missing.
    """
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:  # the binding loads libseccomp.so.2 at import
        raise SandboxUnavailableError(
            f"local sandbox: libseccomp is not available ({exc}); "
            "install it (apt-get install libseccomp2) and reinstall paperbench"
        ) from exc
    flt = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            flt.add_rule(deny, name)
        except (ValueError, RuntimeError, OSError):
            continue  # a call this architecture does not have
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for bit in _CLONE_NEW_FLAGS:
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, bit, bit))
    fd = os.memfd_create("paperbench-seccomp-build", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def seccomp_fd() -> int:
    """A new file descriptor holding the program, at offset 0, for ``bwrap --seccomp FD``.

    The caller passes it to the child and closes it after the spawn.
    """
    program = seccomp_program()
    fd = os.memfd_create("paperbench-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


@cache
def docker_profile() -> str:
    """The seccomp profile of every Docker sandbox, as JSON for ``security_opt``
    (``seccomp=<profile>``): Docker's default profile minus ``DENIED``.

    Raises:
        SandboxUnavailableError: the shipped profile is missing or not an allow list.
    """
    try:
        text = resources.files("paperbench").joinpath(DOCKER_DEFAULT).read_text("utf-8")
        profile: dict[str, Any] = json.loads(text)
    except (OSError, ValueError) as exc:
        raise SandboxUnavailableError(
            f"Docker sandbox: cannot read its seccomp profile ({exc}); reinstall paperbench"
        ) from exc
    if profile.get("defaultAction") != "SCMP_ACT_ERRNO":  # else removing a rule allows
        raise SandboxUnavailableError(
            f"Docker sandbox: {DOCKER_DEFAULT} is not an allow list; reinstall paperbench"
        )
    denied = set(DENIED)
    rules = []
    for rule in profile["syscalls"]:
        if rule.get("action") == "SCMP_ACT_ALLOW":
            names = [name for name in rule["names"] if name not in denied]
            if not names:
                continue
            rule = {**rule, "names": names}
        rules.append(rule)
    return json.dumps({**profile, "syscalls": rules}, separators=(",", ":"))
