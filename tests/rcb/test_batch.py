"""``run_tests`` preparing sandboxes ahead: every job gets a sandbox no other job used, every
sandbox is removed (after a failed test, a failed sandbox, a cancelled call), and the time
accounting adds up."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from paperbench.rcb import _test as rcbtest
from paperbench.sandbox import SandboxConfig, SandboxLimits
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

DOCKER = SandboxConfig(backend="docker")
LOCAL = SandboxConfig(backend="local")

PROBE = """import os
import socket
import sys

print("HOST", socket.gethostname(), "UID", os.getuid(), flush=True)
if os.path.exists("used.txt"):
    sys.exit("this sandbox was used before")
with open("used.txt", "w") as handle:
    handle.write("used")
"""
"""A test that says which sandbox it ran in and as whom, and fails in a used one."""
HOST = re.compile(r"^HOST (\S+) UID (\d+)$", re.MULTILINE)


def _paper(root: Path, name: str, test: str = PROBE) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "paper2code_test.py").write_text(test)
    (folder / "mod.py").write_text("X = 1\n")
    return folder


def _containers(client: Any, case: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.api.containers(
        all=True, filters={"label": f"paperbench.test-case={case}"}
    )
    return found


# --------------------------------------------------------------------------- no sandbox


def test_a_job_copy_never_writes_through_a_link_or_a_symlinked_folder(tmp_path: Path) -> None:
    paper = _paper(tmp_path, "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (paper / "lib").symlink_to(outside, target_is_directory=True)
    staged = tmp_path / "staged" / "p"
    rcbtest._stage(paper, (), staged)
    tree = tmp_path / "job" / "p"
    late = rcbtest._job_tree(
        staged, {"mod.py": "X = 2\n", "lib/x.py": "bad\n", "new/deep.py": "Y = 3\n"}, tree
    )
    assert late == [("lib/x.py", b"bad\n")]
    assert (tree / "mod.py").read_text() == "X = 2\n"
    assert (tree / "new" / "deep.py").read_text() == "Y = 3\n"
    assert (paper / "mod.py").read_text() == "X = 1\n"
    assert (staged / "mod.py").read_text() == "X = 1\n"
    assert not any(outside.iterdir()) and not (paper / "new").exists()


def test_prepare_ahead_below_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prepare_ahead"):
        asyncio.run(
            rcbtest.run_tests(
                [(_paper(tmp_path, "p"), {})], concurrency=1, sandbox=LOCAL, prepare_ahead=-1
            )
        )


# --------------------------------------------------------------------------- local


def test_one_at_a_time_the_seconds_and_the_overhead_add_up_to_the_wall_time(
    tmp_path: Path,
) -> None:
    paper = _paper(tmp_path, "p", "import time\ntime.sleep(0.3)\n")
    started = time.monotonic()
    outcomes = asyncio.run(
        rcbtest.run_tests([(paper, {})] * 4, concurrency=1, sandbox=LOCAL, timeout_s=60)
    )
    wall = time.monotonic() - started
    assert all(o.passed for o in outcomes), outcomes
    counted = sum(o.seconds + o.overhead_s for o in outcomes)
    assert wall * 0.9 <= counted <= wall, (counted, wall)


# --------------------------------------------------------------------------- docker


@pytest.fixture
def docker(request: pytest.FixtureRequest) -> Any:
    client = request.getfixturevalue("docker_client")
    request.getfixturevalue("reproducer_image")
    yield client
    sweep(client)


@pytest.mark.docker
def test_each_job_gets_its_own_fresh_sandbox_and_none_is_left_after_failures(
    docker: Any, tmp_path: Path
) -> None:
    case = f"batch-{secrets.token_hex(4)}"
    small = _paper(tmp_path, "small")
    big = _paper(tmp_path, "big")
    (big / "weights.bin").write_bytes(os.urandom(30 << 20))
    failing = {"paper2code_test.py": PROBE + "raise AssertionError('wrong on purpose')\n"}
    jobs = [(small, {}), (small, failing), (big, {}), (small, {}), (small, failing), (small, {})]
    outcomes = asyncio.run(
        rcbtest.run_tests(
            jobs,
            concurrency=2,
            sandbox=DOCKER,
            timeout_s=60,
            limits=SandboxLimits(cpus=1, memory_mb=512, pids=128, disk_mb=20),
            labels={**TEST_LABELS, "paperbench.test-case": case},
        )
    )
    classes = [o.error_class for o in outcomes]
    assert classes == [None, "assertion", "sandbox_error", None, "assertion", None], outcomes
    assert "does not fit in the sandbox's disk cap" in (outcomes[2].detail or "")
    seen = [HOST.search(o.output_tail) for i, o in enumerate(outcomes) if i != 2]
    assert all(seen), outcomes
    hosts = [m.group(1) for m in seen if m]
    assert len(set(hosts)) == len(hosts) == 5, hosts
    assert all(m.group(2) != "0" for m in seen if m), "a test ran as root"
    assert _containers(docker, case) == []


@pytest.mark.docker
@pytest.mark.parametrize("settle_s", [0.0, 4.0], ids=["while-starting", "once-prepared"])
def test_a_cancelled_batch_removes_every_sandbox_it_started(
    docker: Any, tmp_path: Path, settle_s: float
) -> None:
    """Cancelled while the sandboxes are still being started, and once the next ones wait
    prepared (and the first job's test runs)."""
    case = f"cancel-{secrets.token_hex(4)}"
    paper = _paper(tmp_path, "p", "import time\ntime.sleep(120)\n")

    async def cancel_once_prepared() -> int:
        run = asyncio.ensure_future(
            rcbtest.run_tests(
                [(paper, {})] * 6,
                concurrency=1,
                prepare_ahead=2,
                sandbox=DOCKER,
                timeout_s=300,
                labels={**TEST_LABELS, "paperbench.test-case": case},
            )
        )
        most = 0
        for _ in range(600):
            await asyncio.sleep(0.1)
            found = await asyncio.to_thread(_containers, docker, case)
            most = max(most, len(found))
            if sum(c["State"] == "running" for c in found) >= 3:
                break
        await asyncio.sleep(settle_s)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return most

    most = asyncio.run(cancel_once_prepared())
    assert most == 3, f"1 running and 2 prepared ahead expected, saw {most}"
    assert _containers(docker, case) == []
