"""Running a paper's test in a sandbox (paperbench.rcb._test): a tiny paper folder of our own
(a numpy module with a snippet, its reference twin and a unittest test), filled with right,
wrong, crashing, hanging, networking, disk- and memory-filling code, on Docker and on the local
backend (bubblewrap); a backend that cannot start; the output classifier on its own."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from paperbench.errors import InputError
from paperbench.rcb import _test as rcbtest
from paperbench.sandbox import SandboxConfig, SandboxLimits
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

NO_ENGINE = SandboxConfig(backend="docker", docker_base_url="unix:///nonexistent.sock")
LOCAL = SandboxConfig(backend="local")

MODULE = '''import numpy as np


def scale(x):
    """Twice x."""
    # <paper2code name="scale">
    return np.asarray(x, dtype=float) * 2.0
    # </paper2code name="scale">
'''

TEST = """import os
import unittest

import numpy as np

from mod import scale
from mod_ref import scale as scale_ref


class TestScale(unittest.TestCase):
    def test_matches_the_reference(self):
        x = np.arange(5.0)
        np.testing.assert_allclose(scale(x), scale_ref(x))

    def test_hidden_file_is_not_there(self):
        self.assertFalse(os.path.exists("hidden.txt"), "hidden.txt was copied in")


if __name__ == "__main__":
    unittest.main()
"""


def _filled(body: str, head: str = "") -> str:
    """MODULE with the snippet's body replaced (indented 4 spaces)."""
    lines = "\n".join("    " + line if line else "" for line in body.splitlines())
    start = MODULE.index("    return np.asarray")
    end = MODULE.index("    # </paper2code")
    return head + MODULE[:start] + lines + "\n" + MODULE[end:]


@pytest.fixture
def paper(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-paper"
    (folder / "sub").mkdir(parents=True)
    (folder / "mod.py").write_text(MODULE)
    (folder / "mod_ref.py").write_text(MODULE)
    (folder / "paper2code_test.py").write_text(TEST)
    (folder / "paper2code_paper.tex").write_text("\\section{Scale} We double x.\n")
    (folder / "hidden.txt").write_text("the reference answer\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return folder


class Backend:
    """One backend under test: how to run on it, and its clean-up."""

    def __init__(self, name: str, config: SandboxConfig, labels: dict[str, str]) -> None:
        self.name = name
        self.config = config
        self.labels = labels

    def run(self, folder: Path, files: dict[str, str], **kwargs: Any) -> Any:
        kwargs.setdefault("timeout_s", 60.0)
        return asyncio.run(
            rcbtest.run_test(
                folder,
                files,
                sandbox=self.config,
                labels=self.labels,
                hide=["hidden.txt"],
                **kwargs,
            )
        )


@pytest.fixture(params=["docker", "local"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "local":
        yield Backend("local", LOCAL, {})
        return
    request.applymarker(pytest.mark.docker)
    client = request.getfixturevalue("docker_client")
    request.getfixturevalue("reproducer_image")  # built once per session
    try:
        yield Backend("docker", SandboxConfig(backend="docker"), TEST_LABELS)
    finally:
        sweep(client)


# --------------------------------------------------------------------------- in a sandbox


def test_the_reference_passes_and_times_are_split(backend: Backend, paper: Path) -> None:
    outcome = backend.run(paper, {"mod.py": MODULE})
    assert outcome.passed and outcome.error_class is None, outcome
    assert outcome.exit_code == 0 and outcome.detail is None
    assert "Ran 2 tests" in outcome.output_tail and "OK" in outcome.output_tail
    assert 0 < outcome.seconds < 30 and 0 < outcome.overhead_s < 30


def test_a_wrong_answer_is_an_assertion_and_the_paper_folder_is_untouched(
    backend: Backend, paper: Path
) -> None:
    outcome = backend.run(paper, {"mod.py": _filled("return np.asarray(x) * 3.0")})
    assert not outcome.passed and outcome.error_class == "assertion", outcome
    assert outcome.exit_code == 1
    assert outcome.detail.startswith("AssertionError") and "tolerance" in outcome.detail
    assert "FAIL: test_matches_the_reference" in outcome.output_tail
    assert (paper / "mod.py").read_text() == MODULE  # written over a copy, never the original


def test_syntax_error(backend: Backend, paper: Path) -> None:
    outcome = backend.run(paper, {"mod.py": _filled("return np.asarray(x * (2.0")})
    assert not outcome.passed and outcome.error_class == "syntax", outcome
    assert outcome.detail.startswith("SyntaxError")


def test_name_error(backend: Backend, paper: Path) -> None:
    outcome = backend.run(paper, {"mod.py": _filled("return np.asarray(x) * factor")})
    assert not outcome.passed and outcome.error_class == "name", outcome
    assert "name 'factor' is not defined" in outcome.detail


def test_import_error(backend: Backend, paper: Path) -> None:
    body = "import not_a_package_anywhere\nreturn x"
    outcome = backend.run(paper, {"mod.py": _filled(body)})
    assert not outcome.passed and outcome.error_class == "import", outcome
    assert "not_a_package_anywhere" in outcome.detail


def test_a_crash_is_runtime(backend: Backend, paper: Path) -> None:
    outcome = backend.run(paper, {"mod.py": _filled("return np.asarray(x).reshape(7, 9)")})
    assert not outcome.passed and outcome.error_class == "runtime", outcome
    assert outcome.detail.startswith("ValueError")


def test_a_hang_is_killed_at_the_timeout(backend: Backend, paper: Path) -> None:
    started = time.monotonic()
    outcome = backend.run(paper, {"mod.py": _filled("while True:\n    pass")}, timeout_s=3)
    assert time.monotonic() - started < 40
    assert not outcome.passed and outcome.error_class == "timeout", outcome
    assert outcome.exit_code is None and "3 s timeout" in outcome.detail
    assert 2.5 < outcome.seconds < 20


def _host_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    return ["127.0.0.1", *[a for a in out.stdout.split() if ":" not in a]]


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_the_test_has_no_network(backend: Backend, paper: Path, listener: int) -> None:
    hosts = _host_addresses()
    body = (
        "import socket\n"
        f"for host in {hosts!r}:\n"
        "    try:\n"
        f"        socket.create_connection((host, {listener}), 3).close()\n"
        "        return np.asarray(x, dtype=float) * 2.0\n"
        "    except OSError as exc:\n"
        "        print(host, exc)\n"
        "raise ConnectionError('no host answered')"
    )
    # the same code passes with the network (on the host): only the sandbox stops it
    with socket.create_connection(("127.0.0.1", listener), 3):
        pass
    outcome = backend.run(paper, {"mod.py": _filled(body)})
    assert not outcome.passed and outcome.error_class == "runtime", outcome
    assert "ConnectionError: no host answered" in outcome.detail


def test_filling_the_disk_is_a_runtime_failure_saying_so(backend: Backend, paper: Path) -> None:
    body = (
        "with open('fill.bin', 'wb') as out:\n"
        "    for _ in range(10_000):\n"
        "        out.write(b'x' * (1 << 20))\n"
        "        out.flush()\n"
        "return x"
    )
    limits = SandboxLimits(memory_mb=1024, pids=256, disk_mb=64)
    outcome = backend.run(paper, {"mod.py": _filled(body)}, limits=limits, timeout_s=60)
    assert not outcome.passed and outcome.error_class == "runtime", outcome
    assert "disk" in outcome.detail and "64 MB" in outcome.detail and "full" in outcome.detail


def test_filling_the_memory_is_a_runtime_failure_saying_so(backend: Backend, paper: Path) -> None:
    body = "hog = b'x' * (2 << 30)\nreturn x"
    limits = SandboxLimits(memory_mb=256, pids=256, disk_mb=256)
    outcome = backend.run(paper, {"mod.py": _filled(body)}, limits=limits, timeout_s=60)
    assert not outcome.passed and outcome.error_class == "runtime", outcome
    assert "memory" in outcome.detail and "256 MB" in outcome.detail


def test_hidden_paths_and_history_are_not_copied_in(backend: Backend, paper: Path) -> None:
    check = "import os\nassert not os.path.exists('.git'), 'the clone history was copied'\n"
    extra = {"mod.py": MODULE, "sub/check.py": check}
    test = TEST.replace("import unittest\n", "import unittest\n\nimport sub.check  # noqa\n")
    extra["paper2code_test.py"] = test
    assert backend.run(paper, extra).passed
    shown = asyncio.run(
        rcbtest.run_test(paper, {}, sandbox=backend.config, labels=backend.labels, timeout_s=60)
    )
    assert not shown.passed and shown.error_class == "assertion", shown
    assert "hidden.txt was copied in" in shown.detail


def test_a_paper_folder_too_big_for_the_disk_cap_is_a_sandbox_error(
    backend: Backend, paper: Path
) -> None:
    (paper / "weights.bin").write_bytes(b"\x01" * (40 << 20))
    limits = SandboxLimits(memory_mb=1024, pids=256, disk_mb=20)
    outcome = backend.run(paper, {}, limits=limits)
    assert outcome.error_class == "sandbox_error", outcome
    assert "does not fit in the sandbox's disk cap of 20 MB" in outcome.detail


def test_many_jobs_keep_their_order(backend: Backend, paper: Path) -> None:
    wrong = _filled("return np.asarray(x) * 3.0")
    jobs = [
        rcbtest.RcbJob(paper, {"mod.py": MODULE if i % 2 == 0 else wrong}, ["hidden.txt"])
        for i in range(4)
    ]
    jobs.append(rcbtest.RcbJob(paper, {"mod.py": MODULE}))  # the same paper, nothing hidden
    outcomes = asyncio.run(
        rcbtest.run_tests(
            jobs, concurrency=2, sandbox=backend.config, labels=backend.labels, timeout_s=60
        )
    )
    assert [o.passed for o in outcomes] == [True, False, True, False, False], outcomes
    assert "tolerance" in outcomes[1].detail and "hidden.txt" in outcomes[4].detail


def test_at_most_concurrency_sandboxes_at_once(paper: Path) -> None:
    slow = _filled("import time\ntime.sleep(1.5)\nreturn np.asarray(x, dtype=float) * 2.0")
    jobs = [(paper, {"mod.py": slow})] * 4
    started = time.monotonic()
    outcomes = asyncio.run(rcbtest.run_tests(jobs, concurrency=2, sandbox=LOCAL, timeout_s=60))
    wall = time.monotonic() - started
    # hidden.txt is there (no hide): one test fails, the slow one ran
    assert all(o.error_class == "assertion" for o in outcomes), outcomes
    assert all(o.seconds >= 1.5 for o in outcomes)
    assert wall >= 3.0, f"4 jobs of 1.5 s, 2 at once, took {wall:.1f} s"


# --------------------------------------------------------------------------- no sandbox


def test_a_backend_that_cannot_start_is_a_sandbox_error_not_an_exception(paper: Path) -> None:
    outcome = asyncio.run(rcbtest.run_test(paper, {"mod.py": MODULE}, sandbox=NO_ENGINE))
    assert not outcome.passed and outcome.error_class == "sandbox_error", outcome
    assert outcome.detail is not None and "no Docker engine answers" in outcome.detail
    assert "\n" not in outcome.detail and outcome.exit_code is None


def test_every_job_of_a_backend_that_cannot_start_is_a_sandbox_error(paper: Path) -> None:
    outcomes = asyncio.run(rcbtest.run_tests([(paper, {})] * 3, concurrency=2, sandbox=NO_ENGINE))
    assert [o.error_class for o in outcomes] == ["sandbox_error"] * 3


@pytest.mark.docker
def test_a_missing_image_is_a_sandbox_error(paper: Path, request: pytest.FixtureRequest) -> None:
    client = request.getfixturevalue("docker_client")
    try:
        outcome = asyncio.run(
            rcbtest.run_test(
                paper,
                {},
                sandbox=SandboxConfig(backend="docker"),
                image="paperbench-test-no-such-image:missing",
                labels=TEST_LABELS,
            )
        )
    finally:
        sweep(client)
    assert outcome.error_class == "sandbox_error" and outcome.detail, outcome
    assert "\n" not in outcome.detail


def test_a_folder_without_its_test_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"has no paper2code_test\.py") as info:
        asyncio.run(rcbtest.run_test(tmp_path, {}, sandbox=NO_ENGINE))
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize("path", ["../escape.py", "/etc/passwd", "a/../../b.py"])
def test_a_file_outside_the_paper_folder_is_refused(paper: Path, path: str) -> None:
    with pytest.raises(ValueError, match="inside the paper folder"):
        asyncio.run(rcbtest.run_test(paper, {path: "x = 1\n"}, sandbox=NO_ENGINE))


# --------------------------------------------------------------------------- classifier

UNITTEST_ERROR = """E.
======================================================================
ERROR: test_x (paper2code_test.T.test_x)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/home/rcb/p/paper2code_test.py", line 9, in test_x
    scale(1)
  File "/home/rcb/p/mod.py", line 4, in scale
    return x + y
           ^
NameError: name 'y' is not defined
======================================================================
FAIL: test_y (paper2code_test.T.test_y)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/home/rcb/p/paper2code_test.py", line 12, in test_y
    self.assertEqual(1, 2)
AssertionError: 1 != 2

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1, errors=1)
"""

CHAINED = """Traceback (most recent call last):
  File "t.py", line 3, in f
    d["k"]
KeyError: 'k'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "t.py", line 5, in <module>
    raise AssertionError("no key")
AssertionError: no key
"""


@pytest.mark.parametrize(
    ("output", "expected", "says"),
    [
        (UNITTEST_ERROR, "name", "NameError: name 'y' is not defined"),
        (UNITTEST_ERROR.replace("NameError: name 'y'", "TypeError: 'y'"), "runtime", "TypeError"),
        (UNITTEST_ERROR.split("=" * 70 + "\nFAIL")[0], "name", "NameError"),
        (CHAINED, "assertion", "AssertionError: no key"),
        (
            "  File 'm.py', line 2\n    def f(\n         ^\nSyntaxError: '(' was never closed\n",
            "syntax",
            "SyntaxError",
        ),
        ("IndentationError: expected an indented block\n", "syntax", "IndentationError"),
        ("ModuleNotFoundError: No module named 'torchx'\n", "import", "torchx"),
        ("torch.OutOfMemoryError: CUDA out of memory\n", "runtime", "OutOfMemoryError"),
        ("FAIL: test_z (t.T.test_z)\nmy.CustomFailure happened\n", "assertion", "FAIL: test_z"),
        ("Max Error: 0.5\nsomething went wrong\n", "runtime", "something went wrong"),
        ("", "runtime", "no output"),
    ],
)
def test_classify_failure(output: str, expected: str, says: str) -> None:
    error_class, detail = rcbtest.classify_failure(output)
    assert error_class == expected and says in detail, (error_class, detail)
    assert "\n" not in detail


def _runs_the_test(client: Any, container: str) -> bool:
    """Whether the container's processes include the problem's test (paper2code_test.py)."""
    try:
        top = client.api.top(container)
    except docker.errors.APIError:  # not running yet
        return False
    return any("paper2code_test.py" in " ".join(row) for row in top.get("Processes") or [])


@pytest.mark.docker
def test_a_sandbox_that_dies_during_the_test_is_a_sandbox_error(
    paper: Path, request: pytest.FixtureRequest
) -> None:
    client = request.getfixturevalue("docker_client")
    request.getfixturevalue("reproducer_image")
    slow = _filled("import time\ntime.sleep(60)\nreturn x")
    labels = {**TEST_LABELS, "paperbench.test-case": "dies"}

    async def kill_it_once_running() -> None:
        for _ in range(300):
            await asyncio.sleep(0.1)
            found = await asyncio.to_thread(
                client.api.containers, filters={"label": "paperbench.test-case=dies"}
            )
            if found and await asyncio.to_thread(_runs_the_test, client, found[0]["Id"]):
                await asyncio.to_thread(client.api.kill, found[0]["Id"])
                return

    async def both() -> Any:
        killer = asyncio.create_task(kill_it_once_running())
        outcome = await rcbtest.run_test(
            paper,
            {"mod.py": slow},
            sandbox=SandboxConfig(backend="docker"),
            labels=labels,
            timeout_s=60,
        )
        await killer
        return outcome

    started = time.monotonic()
    try:
        outcome = asyncio.run(both())
    finally:
        sweep(client)
    assert time.monotonic() - started < 50
    assert outcome.error_class == "sandbox_error" and outcome.detail, outcome
    assert "\n" not in outcome.detail
