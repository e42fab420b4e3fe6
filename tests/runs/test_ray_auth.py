"""``paperbench run --executor ray`` against a real Ray head that uses token authentication,
joined without the token: one line that says so, exit code 1, no traceback, no line of Ray's
retry log, and no group folder, so that the same command works once the token is set."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))
TOKEN = "0123456789abcdef0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def token_head() -> Iterator[str]:
    temp = Path(tempfile.mkdtemp(prefix="pba", dir="/tmp"))  # short: Ray's socket paths
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    log = temp / "head.out"
    args = ["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=1"]
    args += ["--disable-usage-stats", "--include-dashboard=false", f"--temp-dir={temp}"]
    with log.open("wb") as out:
        head = subprocess.Popen(
            [RAY, "start", *args, "--block"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while b"--block" not in log.read_bytes():
            assert head.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the head did not start"
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=2)  # a throwaway head: no need to wait out Ray's shutdown
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=10)


def test_a_cluster_that_refuses_this_process_is_said_in_one_line(
    token_head: str, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["RAY_AUTH_MODE"] = "disabled"
    # Ray tries to reach the cluster for 2 s instead of its default ~20 s: the same refusal
    env["RAY_gcs_server_port_wait_time_s"] = "2"
    args = [sys.executable, "-m", "paperbench", "run", "--runs-dir", str(runs), "--group", "g"]
    args += ["--executor", "ray", "--ray-address", token_head, "--judge", "dummy"]
    args += ["--sandbox", "local", "--papers", "calibration-binning", "--no-report"]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --ray-address {token_head}: cannot join the Ray cluster")
    assert "token" in lines[0] and "RAY_AUTH_MODE=token" in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert not runs.exists()  # the same command, the token set, starts the group afresh
