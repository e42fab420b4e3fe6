"""Commands as the unprivileged user (``SandboxSpec.user == "sandbox"``) in Docker sandboxes.

In containers with pids, memory and disk limits (DESIGN.md §7).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from paperbench.sandbox._base import SandboxLimits

from .docker_fixtures import *  # noqa: F403  (the fixtures)

HOSTILE = SandboxLimits(memory_mb=256, pids=64, cpus=1.0, disk_mb=64)

WHO_AND_WHERE = r"""
id -u; id -g; id -G; whoami; echo "$HOME $USER $LOGNAME"; pwd
grep -E '^Cap(Eff|Prm)' /proc/self/status | tr -d '\t'
awk '/^Uid:/ {print "pid1 uid " $2}' /proc/1/status
for f in /submission/w /home/submission/w "$HOME/w" /tmp/w /opt/check/w \
         /submission/code/a.txt /opt/check/hidden.py \
         /etc/passwd /root/w /usr/local/w /home/w /opt/w; do
  if (echo x >> "$f") 2>/dev/null; then echo "write $f"; else echo "refused $f"; fi
done
python3 -c 'import os; os.setuid(0)' 2>/dev/null && echo "setuid 0" || echo "refused setuid 0"
stat -c '%u %n' /submission/code/a.txt /submission/code/sub /opt/check/hidden.py
"""


@pytest.mark.docker
def test_commands_run_as_the_unprivileged_user(
    start_sandbox: Any, run: Any, tmp_path: Path
) -> None:
    """uid 1000 with no capability, its own home; it can write the submission folders, its
    home, /tmp, a writable_dir and what the host put in, and nothing of root's; PID 1 is the
    watchdog (its real uid nobody's)."""
    sb = start_sandbox(
        limits=HOSTILE, user="sandbox", workdir="/submission", writable_dirs=("/opt/check",)
    )
    (tmp_path / "code" / "sub").mkdir(parents=True)
    (tmp_path / "code" / "a.txt").write_text("alpha\n")
    run(sb.upload(tmp_path / "code", "/submission/code"))
    run(sb.write_file("/opt/check/hidden.py", b"assert True\n"))
    r = run(sb.exec(WHO_AND_WHERE, timeout=30))
    assert r.exit_code == 0, r
    lines = r.stdout.splitlines()
    assert lines[:6] == [
        "1000",
        "1000",
        "1000",
        "sandbox",
        "/home/sandbox sandbox sandbox",
        "/submission",
    ]
    assert lines[6:9] == ["CapPrm:0000000000000000", "CapEff:0000000000000000", "pid1 uid 65534"]
    wrote = [line.split()[1] for line in lines if line.startswith("write ")]
    refused = [line.split()[1] for line in lines if line.startswith("refused ")]
    assert wrote == [
        "/submission/w",
        "/home/submission/w",
        "/home/sandbox/w",
        "/tmp/w",
        "/opt/check/w",
        "/submission/code/a.txt",
        "/opt/check/hidden.py",
    ]
    assert refused == ["/etc/passwd", "/root/w", "/usr/local/w", "/home/w", "/opt/w", "setuid"]
    assert lines[-3:] == [
        "1000 /submission/code/a.txt",
        "1000 /submission/code/sub",
        "1000 /opt/check/hidden.py",
    ]
    assert run(sb.read_file("/submission/code/a.txt")) == b"alpha\nx\n"


@pytest.mark.docker
def test_timeout_kills_the_users_tree_from_inside(start_sandbox: Any, run: Any) -> None:
    """Without the host's cgroup kill: the killer runs in the container as the user (root
    without CAP_SYS_PTRACE cannot read another user's environments)."""
    sb = start_sandbox(limits=HOSTILE, user="sandbox")
    sb.procs = None
    r = run(
        sb.exec(
            "setsid sleep 1301 & nohup sleep 1302 >/dev/null 2>&1 & echo up; sleep 1300",
            timeout=1.5,
        )
    )
    assert r.timed_out and r.stdout == "up\n" and "process tree killed" in r.stderr, r
    ps = run(sb.exec("ps -eo user,args", timeout=10)).stdout
    assert "sleep 13" not in ps, ps


@pytest.mark.docker
def test_root_stays_the_default(start_sandbox: Any, run: Any) -> None:
    sb = start_sandbox()
    r = run(sb.exec("id -u; echo $HOME", timeout=10))
    assert r.stdout == "0\n/root\n" and sb.user is None
