"""``./dev``: a bad setting is one line naming it, before any set-up."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("workers", ["four", "0", "04", "-2", "1.5"])
def test_a_bad_worker_count_is_one_line_naming_it(workers: str) -> None:
    env = {**os.environ, "PAPERBENCH_TEST_WORKERS": workers}
    proc = subprocess.Popen(
        [str(ROOT / "dev"), "test"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a check that let it through starts the suite: kill it all
    )
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 2
    assert out == ""
    assert err == (
        "./dev test: PAPERBENCH_TEST_WORKERS: expected a number of workers above 0, "
        f"got '{workers}'\n"
    )
