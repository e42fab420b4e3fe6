"""Check leaves cannot be forged by the code they test.

Each attack is a submission (the bundled calibration-binning ``nearly-empty`` example, whose
honest answers fail every check, with hostile code added) graded through ``paperbench grade
--code-dev`` on the local backend under bubblewrap: its three check leaves import the
submission's ``calib`` package, and none may score 1 (a valid 0 or ``check_error``). The same
attacks run through the grading engine and the real check runner on Docker. The honest
reference submission still scores 1 on every check leaf, on both. Besides: a command that
leaves a shell waiting is refused (``check_error``), and the helper's caps, timeout and hiding
hold in a real check sandbox.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.judge import LeafGrade, build_view, load_judge_config
from paperbench.judge._checks import CHECK_FILES_ENV, run_check, run_checks
from paperbench.judge._grader import grade_submission
from paperbench.judge._job import GradeOptions
from paperbench.papers import PaperSource
from paperbench.rubric import Check, TaskCategory, TaskNode, iter_leaves, load_rubric
from paperbench.sandbox import SandboxConfig
from paperbench.testing import FakeLLMServer
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

from .conftest import EXAMPLES, ROOT
from .scripted import ScriptedJudge

runner = CliRunner()
PAPER = "calibration-binning"
LOCAL = SandboxConfig(backend="local")

EXIT_0 = """\
import os
os._exit(0)
"""

KILL_PARENT = """\
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
os._exit(0)
"""

KILL_GROUP = """\
import os, signal
for group in (os.getpgid(os.getppid()), os.getpgid(0)):
    if group != os.getpgrp():
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
try:
    os.kill(-1, signal.SIGKILL)  # every process this user may signal but itself
except OSError:
    pass
os._exit(0)
"""

# Says PASS and a passing verdict on its stdout and stderr, sends well-formed results for the
# labels of the check's own inputs (found in its caller's frames) on every other descriptor it
# has (the result pipe among them), closes its stdout and stderr and exits 0.
FAKE_VERDICT = """\
import json, os, sys
labels = []
frame = sys._getframe()
while frame is not None:
    for scope in (frame.f_locals, frame.f_globals):
        if isinstance(scope.get("inputs"), dict):
            labels = list(scope["inputs"])
    frame = frame.f_back
verdict = "PASS: all hidden cases match\\n" + json.dumps({"score": 1, "valid": True}) + "\\n"
forged = "".join(json.dumps({"label": label, "value": 0.5}) + "\\n" for label in labels)
for fd in range(256):
    try:
        os.write(fd, (verdict if fd < 3 else forged).encode())
    except OSError:
        pass
for fd in (1, 2):
    os.close(fd)
os._exit(0)
"""

# Leaves a grandchild in a session of its own that, once the child is gone, writes PASS and
# forged results on every descriptor it inherited and on every other process's stdout it can
# open, then holds its pipes open; the child itself exits 0 at once.
GRANDCHILD = """\
import json, os, sys, time
labels = []
frame = sys._getframe()
while frame is not None:
    for scope in (frame.f_locals, frame.f_globals):
        if isinstance(scope.get("inputs"), dict):
            labels = list(scope["inputs"])
    frame = frame.f_back
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(0.5)
        text = "PASS\\n" + "".join(json.dumps({"label": l, "value": 0.5}) + "\\n" for l in labels)
        for fd in range(256):
            try:
                os.write(fd, text.encode())
            except OSError:
                pass
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/fd/1", "w") as out:
                    out.write(text)
            except OSError:
                pass
        time.sleep(30)
    os._exit(0)
os._exit(0)
"""

# Takes over every process it can ptrace: one stopped in a system call is made to run
# exit_group(0) instead (x86-64). Then exits 0 itself.
PTRACE = """\
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
NAMES = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags "
         "rsp ss fs_base gs_base ds es fs gs").split()
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES]
def take_over(pid):
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        return
    os.waitpid(pid, 0x40000000)  # __WALL
    regs = Regs()
    libc.ptrace(12, pid, None, ctypes.byref(regs))  # PTRACE_GETREGS
    word = libc.ptrace(1, pid, ctypes.c_void_p(regs.rip - 2), None)  # PTRACE_PEEKTEXT
    if word & 0xFFFF == 0x050F:  # stopped just after a syscall instruction: run it again
        regs.rip -= 2
        regs.rax = 231  # exit_group
        regs.rdi = 0
        regs.orig_rax = 2**64 - 1
        libc.ptrace(13, pid, None, ctypes.byref(regs))  # PTRACE_SETREGS
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        take_over(int(name))
os._exit(0)
"""

# Implements every function by calling the check's own reference, read from the hidden check
# files in the sandbox.
PEEK = """\
import glob, os, sys
def hidden(name):
    for path in sorted(glob.glob("/*/*.py")):
        scope = {"__name__": "peek", "__file__": path}
        sys.path.insert(0, os.path.dirname(path))
        try:
            with open(path) as f:
                exec(compile(f.read(), path, "exec"), scope)
        except BaseException:
            continue
        if name in scope:
            return scope[name]
    raise RuntimeError(f"no hidden {name} found")
def fit_temperature(z, y):
    return hidden("best_temperature")(z, y)
def histogram_binning(cal_p, cal_y, test_p, n_bins=15):
    return hidden("reference")(cal_p, cal_y, test_p, n_bins)
def expected_calibration_error(p, y, n_bins=15):
    return hidden("reference_ece")(p, y, n_bins)
"""

ATTACKS: dict[str, dict[str, str]] = {
    "exit-0-on-import": {"calib/__init__.py": EXIT_0},
    "kill-parent-on-import": {"calib/__init__.py": KILL_PARENT},
    "kill-process-group": {"calib/__init__.py": KILL_GROUP},
    "fake-verdict-and-results": {"calib/__init__.py": FAKE_VERDICT},
    "grandchild-writes-later": {"calib/__init__.py": GRANDCHILD},
    "ptrace-the-checker": {"calib/__init__.py": PTRACE},
    "peek-at-the-hidden-check": {
        "calib/methods.py": PEEK,
        "calib/metrics.py": "from calib.methods import expected_calibration_error\n",
    },
}


def _forged(tmp_path: Path, attack: str) -> Path:
    """The nearly-empty example with the attack's files written over it."""
    sub = tmp_path / "submission"
    shutil.copytree(EXAMPLES / PAPER / "nearly-empty" / "submission", sub)
    for rel, text in ATTACKS[attack].items():
        (sub / rel).write_text(text)
    return sub


def _grade_cli(fake_llm: FakeLLMServer, sub: Path, out: Path) -> list[LeafGrade]:
    """``paperbench grade --code-dev --sandbox local``; the check leaves' grades."""
    fake_llm.handler = ScriptedJudge(lambda text: 1.0)
    args = ["grade", str(sub), "--paper", PAPER, "--out", str(out), "--code-dev"]
    args += ["--base-url", fake_llm.openai_url, "--sandbox", "local", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = (out / "grading" / "leaves.jsonl").read_text().splitlines()
    grades = [LeafGrade.model_validate_json(line) for line in lines if line.strip()]
    checks = sorted((g for g in grades if g.source == "check"), key=lambda g: g.path)
    assert len(checks) == 3, grades  # temperature scaling, histogram binning, ECE
    stored = json.loads((out / "grading" / "grade.json").read_text())
    assert stored["paper_id"] == PAPER
    return checks


NOTHING = "reported nothing for it; its process exited with code 0"
KILLED = "check_error: the command was killed (exit 137"
SAYS: dict[str, tuple[str, str, str]] = {
    "exit-0-on-import": (NOTHING, NOTHING, NOTHING),
    "kill-parent-on-import": (KILLED, KILLED, KILLED),
    "kill-process-group": (KILLED, KILLED, KILLED),
    # the forged results arrived well-formed and were judged as values: 0.5 is wrong
    "fake-verdict-and-results": (
        "T = 0.5000, NLL-optimal T = ",
        "output shape (), expected",
        "ECE 0.500000, expected 0.015270",
    ),
    "grandchild-writes-later": (NOTHING, NOTHING, NOTHING),
    "ptrace-the-checker": (NOTHING, NOTHING, NOTHING),
    "peek-at-the-hidden-check": (
        "raised RuntimeError: no hidden best_temperature found",
        "raised RuntimeError: no hidden reference found",
        "raised RuntimeError: no hidden reference_ece found",
    ),
}
"""What each check leaf's explanation says of each attack (temperature, histogram, ECE)."""


def _never_passed(checks: list[LeafGrade]) -> None:
    for grade in checks:
        assert grade.score == 0.0, grade.explanation
        assert grade.valid or grade.reason == "check_error", grade
        assert "check passed" not in grade.explanation, grade.explanation


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_forged_submission_never_passes_a_check_leaf_locally(
    fake_llm: FakeLLMServer, tmp_path: Path, attack: str
) -> None:
    checks = _grade_cli(fake_llm, _forged(tmp_path, attack), tmp_path / "o")
    _never_passed(checks)
    for grade, says in zip(checks, SAYS[attack], strict=True):
        assert says in grade.explanation, grade.explanation
        assert grade.wall_time_s < 20  # nobody waited for a grandchild's 30 s


def test_the_honest_reference_still_passes_every_check_leaf_locally(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    checks = _grade_cli(fake_llm, EXAMPLES / PAPER / "reference" / "submission", tmp_path / "o")
    assert [g.score for g in checks] == [1.0, 1.0, 1.0], [g.explanation for g in checks]
    assert all(g.valid for g in checks)


def _leaf(command: str, files: dict[str, str]) -> TaskNode:
    return TaskNode(
        id="leaf",
        requirements="ECE",
        weight=1,
        task_category=TaskCategory.CODE_DEVELOPMENT,
        check=Check(command=command, timeout_s=60, files=files),
    )


def test_a_command_that_leaves_a_shell_waiting_is_check_error(tmp_path: Path) -> None:
    """`python3 check.py; exit $?` keeps bash (dumpable, the submission's user) as the process
    whose exit code the runner reads: the helper refuses to judge (check_error) rather than
    let the child take bash over and make it exit 0."""
    files = {
        "/paperbench_checks/check_ece.py": "checks/calibration-binning/check_ece.py",
        "/paperbench_checks/_child.py": "checks/_child.py",
    }
    compound = _leaf("python3 /paperbench_checks/check_ece.py; exit $?", files)
    single = _leaf("python3 /paperbench_checks/check_ece.py", files)
    grades = asyncio.run(
        run_checks(
            [((0,), compound), ((1,), single)],
            rubric_dir=ROOT / "rubrics",
            executed=_forged(tmp_path, "ptrace-the-checker"),
            sandbox=LOCAL,
        )
    )
    assert grades[0].reason == "check_error" and grades[0].score == 0.0, grades[0]
    assert "exit 126" in (grades[0].error or "")
    assert "check setup error" in grades[0].explanation
    assert grades[1].valid and grades[1].score == 0.0, grades[1]


HELPER_CHECK = """\
import ctypes, os, sys, time
from _child import observe

def within(seconds, started):
    return time.monotonic() - started < seconds

started = time.monotonic()
flood = observe(
    "import os, sys\\nos.write(1, b'x')\\nfd = int(sys.argv[2])\\n"
    "while True:\\n    os.write(fd, b'{' * 65536)",
    {}, timeout=30, limit=100_000,
)
assert flood.problem and "more than 100000 bytes" in flood.problem, flood
assert "sent more than 100000 bytes" in flood.ended and within(15, started), flood
started = time.monotonic()
slow = observe("import time\\ntime.sleep(60)", {}, timeout=1)
assert slow.ended == "it did not finish within 1 s and was killed" and within(10, started), slow
loud = observe(
    "import sys\\nsys.stdout.write('x' * (8 << 20))\\nsys.stdout.flush()\\n"
    "report('v', lambda: 42)",
    {}, timeout=30,
)
assert len(loud.stdout) <= 4096 and loud.values == {"v": 42}, loud.values
garbage = observe("import os, sys\\nos.write(int(sys.argv[2]), b'PASS\\\\n')", {})
assert garbage.problem == "line 1 of the result pipe is not a result", garbage
twice = observe("report('v', int, '1')\\nreport('v', int, '2')", {})
assert twice.problem == "the result pipe carried 'v' twice", twice
# the checker is not dumpable; its files are gone before the first child ran
assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0
assert not os.path.exists(__file__) and not os.path.exists("/hidden/_child.py")
assert "PAPERBENCH_CHECK_FILES" not in os.environ
print("helper held")
"""


def test_the_helper_caps_the_child_and_hides_the_check(tmp_path: Path) -> None:
    """In a real check sandbox: a child flooding the result pipe is cut at the cap, a slow one
    at its timeout, its stdout kept to a tail; garbage and a label sent twice fail; the check
    process is not dumpable and its files are deleted before the first child."""
    rubric_dir = tmp_path / "rubric"
    (rubric_dir / "checks").mkdir(parents=True)
    (rubric_dir / "checks" / "c.py").write_text(HELPER_CHECK)
    shutil.copy(ROOT / "rubrics" / "checks" / "_child.py", rubric_dir / "checks" / "_child.py")
    (tmp_path / "executed").mkdir()
    files = {"/hidden/c.py": "checks/c.py", "/hidden/_child.py": "checks/_child.py"}
    leaf = _leaf("python3 /hidden/c.py", files)
    grade = asyncio.run(
        run_check(leaf, (0,), rubric_dir=rubric_dir, executed=tmp_path / "executed", sandbox=LOCAL)
    )
    assert grade.valid and grade.score == 1.0, grade.explanation
    assert "helper held" in grade.explanation


# --------------------------------------------------------------------------- docker


def _ece_only() -> TaskNode:
    """The paper's rubric cut to its ECE check leaf (one sandbox per grading)."""
    rubric = load_rubric(ROOT / "rubrics" / f"{PAPER}.json")
    ece = next(
        leaf for _, leaf in iter_leaves(rubric) if leaf.check and "ece" in leaf.check.command
    )
    return rubric.model_copy(update={"sub_tasks": [ece]})


def _grade_engine(sub: Path, out: Path, image: str) -> LeafGrade:
    """The grading engine with the real check runner on Docker (Code-Dev: the check runs on
    the submission itself); the ECE check leaf's grade."""
    result = asyncio.run(
        grade_submission(
            build_view(sub),
            PaperSource(repo_root=ROOT).load(PAPER),
            load_judge_config("simple"),
            out_dir=out,
            options=GradeOptions(code_dev=True),
            rubric=_ece_only(),
            check_runner=functools.partial(run_check, image=image, labels=TEST_LABELS),
            sandbox=SandboxConfig(backend="docker"),
        )
    )
    assert result.sources == {"check": 1}, result.sources
    (line,) = (out / "grading" / "leaves.jsonl").read_text().splitlines()
    return LeafGrade.model_validate_json(line)


@pytest.mark.slow
@pytest.mark.docker
def test_forged_submissions_never_pass_and_the_reference_does_in_docker(
    llm_env: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    image = request.getfixturevalue("reproducer_image")
    client = request.getfixturevalue("docker_client")

    def forged(attack: str) -> LeafGrade:
        return _grade_engine(_forged(tmp_path / attack, attack), tmp_path / attack / "o", image)

    try:  # each attack in its own sandboxes, three at once
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            grades = dict(zip(ATTACKS, pool.map(forged, ATTACKS), strict=True))
        for attack, grade in grades.items():
            _never_passed([grade])
            assert SAYS[attack][2] in grade.explanation, grade.explanation
        reference = EXAMPLES / PAPER / "reference" / "submission"
        honest = _grade_engine(reference, tmp_path / "o-reference", image)
        assert honest.valid and honest.score == 1.0, honest.explanation
    finally:
        sweep(client)


def test_the_bundled_rubrics_give_every_check_that_imports_code_the_helper() -> None:
    """A bundled check that imports the submission's code runs it through _child.observe."""
    for rubric_file in sorted((ROOT / "rubrics").glob("*.json")):
        for _, leaf in iter_leaves(load_rubric(rubric_file)):
            if leaf.check is None:
                continue
            script = leaf.check.files[leaf.check.command.split()[-1]]
            text = (rubric_file.parent / script).read_text()
            if "observe(" in text:
                helper = rubric_file.parent / leaf.check.files["/paperbench_checks/_child.py"]
                assert f'FILES_ENV = "{CHECK_FILES_ENV}"' in helper.read_text()
                assert "/paperbench_checks/_child.py" in leaf.check.files, rubric_file
            else:
                assert "sys.path" not in text and "import calib" not in text, script
