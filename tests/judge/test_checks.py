"""Check leaves: the bundled rubrics' checks on the bundled examples' executed submissions, on
the local backend (bubblewrap) and on Docker; timeouts, crashes, refused check files, and a
sandbox that cannot start."""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from paperbench.errors import InputError
from paperbench.judge import LeafGrade
from paperbench.judge._checks import CHECK_LIMITS, CheckRunner, run_check, run_checks
from paperbench.reproduce import ReproduceConfig, reproduce_submission
from paperbench.rubric import Check, NodePath, TaskCategory, TaskNode, iter_leaves, load_rubric
from paperbench.sandbox import SandboxConfig
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

ROOT = Path(__file__).resolve().parents[2]
RUBRICS = ROOT / "rubrics"
PAPERS = ("calibration-binning", "momentum-conditioning")
KINDS = ("reference", "buggy", "nearly-empty", "partial")
LOCAL = SandboxConfig(backend="local")
NO_ENGINE = SandboxConfig(backend="docker", docker_base_url="unix:///nonexistent/docker.sock")


def _check_leaves(paper: str) -> list[tuple[NodePath, TaskNode]]:
    rubric = load_rubric(RUBRICS / f"{paper}.json")
    return [(path, leaf) for path, leaf in iter_leaves(rubric) if leaf.check is not None]


def _gold_scores(paper: str, kind: str) -> dict[NodePath, float]:
    """The gold grade's score of every check leaf of an example."""
    data = json.loads((ROOT / "examples" / paper / kind / "expected_result.json").read_text())
    out: dict[NodePath, float] = {}
    for path, _ in _check_leaves(paper):
        node = data
        for index in path:
            node = node["sub_tasks"][index]
        out[path] = float(node["score"])
    return out


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """The output folder of `paperbench reproduce` (local backend) for every bundled example."""
    base = tmp_path_factory.mktemp("executed")
    config = ReproduceConfig(sandbox=LOCAL, timeout_s=300, salvage_retries=0)

    async def one(paper: str, kind: str) -> Path:
        out = base / f"{paper}-{kind}"
        sub = ROOT / "examples" / paper / kind / "submission"
        meta = await reproduce_submission(sub, out, config)
        assert meta.status in ("success", "no_reproduce_script"), (paper, kind, meta)
        return out

    async def all_examples() -> dict[tuple[str, str], Path]:
        pairs = [(paper, kind) for paper in PAPERS for kind in KINDS]
        outs = await asyncio.gather(*(one(paper, kind) for paper, kind in pairs))
        return dict(zip(pairs, outs, strict=True))

    return asyncio.run(all_examples())


def _leaf(check: Check, category: TaskCategory = TaskCategory.CODE_DEVELOPMENT) -> TaskNode:
    return TaskNode(
        id="leaf",
        requirements="a check",
        weight=1,
        task_category=category,
        check=check,
    )


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A small executed submission: a folder with one module and a rubric folder beside it."""
    sub = tmp_path / "executed"
    sub.mkdir()
    (sub / "mod.py").write_text("VALUE = 42\n")
    rubric_dir = tmp_path / "rubric"
    (rubric_dir / "checks").mkdir(parents=True)
    (rubric_dir / "checks" / "c.py").write_text(
        "import sys; sys.path.insert(0, '.'); import mod; sys.exit(0 if mod.VALUE == 42 else 1)\n"
    )
    (tmp_path / "secret.py").write_text("print('outside')\n")
    return tmp_path


def _run(leaf: TaskNode, base: Path, sandbox: SandboxConfig = LOCAL, **kw: object) -> LeafGrade:
    return asyncio.run(
        run_check(
            leaf,
            (0, 1),
            rubric_dir=base / "rubric",
            executed=base / "executed",
            sandbox=sandbox,
            **kw,  # type: ignore[arg-type]
        )
    )


# --------------------------------------------------------------------------- bundled examples


@pytest.mark.parametrize("paper", PAPERS)
@pytest.mark.parametrize("kind", KINDS)
def test_bundled_checks_agree_with_the_gold_grades_locally(
    executed: dict[tuple[str, str], Path], paper: str, kind: str
) -> None:
    leaves = _check_leaves(paper)
    assert leaves, f"{paper}: the bundled rubric has no check leaf"
    grades = asyncio.run(
        run_checks(leaves, rubric_dir=RUBRICS, executed=executed[paper, kind], sandbox=LOCAL)
    )
    assert [g.path for g in grades] == [path for path, _ in leaves]
    assert all(g.valid and g.source == "check" and g.reason is None for g in grades), grades
    got = {g.path: g.score for g in grades}
    assert got == _gold_scores(paper, kind), [g.explanation for g in grades]
    for grade, (_, leaf) in zip(grades, leaves, strict=True):
        assert grade.leaf_id == leaf.id and grade.category == leaf.task_category
        assert leaf.check is not None and leaf.check.command in grade.explanation
        assert ("exit_code=0" in grade.explanation) == (grade.score == 1.0)


def test_executed_archive_and_plain_folder_are_accepted(
    executed: dict[tuple[str, str], Path], tmp_path: Path
) -> None:
    out = executed["calibration-binning", "buggy"]
    plain = tmp_path / "plain"
    with tarfile.open(out / "executed.tar.gz") as tar:
        tar.extractall(plain, filter="data")
    leaves = _check_leaves("calibration-binning")
    want = _gold_scores("calibration-binning", "buggy")
    for source in (out / "executed.tar.gz", plain / "submission"):
        grades = asyncio.run(run_checks(leaves, rubric_dir=RUBRICS, executed=source, sandbox=LOCAL))
        assert {g.path: g.score for g in grades} == want, source


# --------------------------------------------------------------------------- outcomes


def test_pass_and_hidden_file_copied_in_through_a_bound_check_runner(tiny: Path) -> None:
    files = {"/hidden/c.py": "checks/c.py"}
    check = Check(command="python3 /hidden/c.py", timeout_s=30, files=files)
    runner: CheckRunner = functools.partial(
        run_check, rubric_dir=tiny / "rubric", executed=tiny / "executed", sandbox=LOCAL
    )

    async def grade_leaf() -> LeafGrade:
        return await runner(_leaf(check), (0, 1))

    grade = asyncio.run(grade_leaf())
    assert grade.valid and grade.score == 1.0 and grade.path == (0, 1), grade
    assert "exit_code=0 timed_out=false" in grade.explanation


def test_timeout_is_check_error_not_a_valid_0(tiny: Path) -> None:
    grade = _run(_leaf(Check(command="echo started; sleep 60", timeout_s=1)), tiny)
    assert not grade.valid and grade.score == 0.0 and grade.reason == "check_error", grade
    assert grade.error == "the check timed out after 1 s and was killed"
    assert "timed_out=true" in grade.explanation and "timed out after 1 s" in grade.explanation
    assert "check_error" in grade.explanation and "started" in grade.explanation


@pytest.mark.parametrize(
    ("command", "code", "says"),
    [
        ("echo trying >&2; /dev/null", 126, "cannot be executed"),
        ("no-such-command-paperbench-xyz", 127, "command not found"),
        ("echo about to die; kill -KILL $$", 137, "SIGKILL"),
    ],
)
def test_exit_126_127_137_are_check_error(tiny: Path, command: str, code: int, says: str) -> None:
    grade = _run(_leaf(Check(command=command, timeout_s=30)), tiny)
    assert not grade.valid and grade.score == 0.0 and grade.reason == "check_error", grade
    assert grade.error is not None and says in grade.error and f"exit {code}" in grade.error
    assert f"exit_code={code}" in grade.explanation and "check_error" in grade.explanation


def test_a_failing_check_stays_a_valid_0(tiny: Path) -> None:
    grade = _run(_leaf(Check(command="echo wrong value; exit 1", timeout_s=30)), tiny)
    assert grade.valid and grade.score == 0.0 and grade.reason is None and grade.error is None
    assert grade.explanation.startswith("check failed:") and "exit_code=1" in grade.explanation


def test_a_missing_check_file_is_check_error_without_a_sandbox(tiny: Path) -> None:
    """The leaf is invalid, never a valid 0; no sandbox starts (the engine does not exist)."""
    check = Check(command="python3 /hidden/c.py", files={"/hidden/c.py": "checks/missing.py"})
    for sandbox in (NO_ENGINE, LOCAL):
        grade = _run(_leaf(check), tiny, sandbox=sandbox)
        assert not grade.valid and grade.score == 0.0 and grade.reason == "check_error", grade
        assert (
            grade.error is not None and "cannot read check file 'checks/missing.py'" in grade.error
        )
        assert '$.sub_tasks[0].sub_tasks[1].check.files["/hidden/c.py"]' in grade.error
        assert "\n" not in grade.error and "no Docker engine" not in grade.error


def test_crash_records_exit_code_and_a_capped_output_tail(tiny: Path) -> None:
    command = (
        "python3 -c \"import sys; print('x' * 200000); "
        "sys.stderr.write('Traceback: boom\\n'); raise SystemExit(3)\""
    )
    grade = _run(_leaf(Check(command=command, timeout_s=30)), tiny)
    assert grade.valid and grade.score == 0.0, grade
    assert "exited 3" in grade.explanation and "exit_code=3" in grade.explanation
    assert "Traceback: boom" in grade.explanation
    assert len(grade.explanation) < 5000


def test_each_check_gets_a_fresh_sandbox(tiny: Path) -> None:
    """Two checks that each fail if the other's leftover is there both pass."""
    command = "test ! -e /submission/left-by-a-check && touch /submission/left-by-a-check"
    leaves = [((i,), _leaf(Check(command=command, timeout_s=30))) for i in range(3)]
    grades = asyncio.run(
        run_checks(
            leaves,
            rubric_dir=tiny / "rubric",
            executed=tiny / "executed",
            sandbox=LOCAL,
            concurrency=1,
        )
    )
    assert [g.path for g in grades] == [(0,), (1,), (2,)]
    assert [g.score for g in grades] == [1.0, 1.0, 1.0], [g.explanation for g in grades]


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_check_has_no_network(tiny: Path, listener: int) -> None:
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), 2)"
    command = f'python3 -c "{connect}"'
    grade = _run(_leaf(Check(command=command, timeout_s=30)), tiny)
    assert grade.valid and grade.score == 0.0, grade
    assert "ConnectionRefusedError" in grade.explanation or "unreachable" in grade.explanation


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"/hidden/c.py": "../secret.py"}, "outside the rubric's folder"),
        ({"hidden/c.py": "checks/c.py"}, "must be absolute"),
    ],
)
def test_bad_check_file_is_refused_in_one_line_before_any_sandbox(
    tiny: Path, files: dict[str, str], says: str
) -> None:
    check = Check(command="true", files=files)
    with pytest.raises(InputError) as info:
        _run(_leaf(check), tiny, sandbox=NO_ENGINE)
    line = str(info.value)
    assert "\n" not in line and says in line
    key = next(iter(files))
    assert f'$.sub_tasks[0].sub_tasks[1].check.files["{key}"]' in line


def test_missing_executed_submission_is_an_input_error(tiny: Path) -> None:
    with pytest.raises(InputError, match="output folder of `paperbench reproduce`"):
        asyncio.run(
            run_check(
                _leaf(Check(command="true")),
                (0,),
                rubric_dir=tiny / "rubric",
                executed=tiny / "nowhere",
                sandbox=LOCAL,
            )
        )


# --------------------------------------------------------------------------- check_error


def test_sandbox_that_cannot_start_is_check_error(tiny: Path) -> None:
    grade = _run(_leaf(Check(command="true")), tiny, sandbox=NO_ENGINE)
    assert not grade.valid and grade.score == 0.0 and grade.reason == "check_error", grade
    assert grade.error is not None and "no Docker engine answers" in grade.error
    assert "\n" not in grade.error


def test_reproduction_without_executed_archive_is_check_error(tiny: Path) -> None:
    out = tiny / "executed"
    shutil.rmtree(out)
    out.mkdir()
    (out / "metadata.json").write_text('{"status": "sandbox_error", "submission": "sub"}')
    grade = _run(_leaf(Check(command="true")), tiny)
    assert not grade.valid and grade.reason == "check_error", grade
    assert grade.error is not None and "no executed.tar.gz" in grade.error


def test_a_submission_with_its_own_metadata_json_is_a_plain_folder(tiny: Path) -> None:
    (tiny / "executed" / "metadata.json").write_text('{"model": "resnet", "status": "ok"}')
    grade = _run(_leaf(Check(command="test -f metadata.json && test -f mod.py")), tiny)
    assert grade.valid and grade.score == 1.0, grade


def test_default_limits_are_capped() -> None:
    assert CHECK_LIMITS.memory_mb and CHECK_LIMITS.pids and CHECK_LIMITS.disk_mb


# --------------------------------------------------------------------------- docker


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("kind", ["reference", "buggy"])
def test_bundled_checks_agree_with_the_gold_grades_in_docker(
    executed: dict[tuple[str, str], Path], kind: str, request: pytest.FixtureRequest
) -> None:
    image = request.getfixturevalue("reproducer_image")
    client = request.getfixturevalue("docker_client")
    docker = SandboxConfig(backend="docker")
    try:
        for paper in PAPERS:
            grades = asyncio.run(
                run_checks(
                    _check_leaves(paper),
                    rubric_dir=RUBRICS,
                    executed=executed[paper, kind],
                    sandbox=docker,
                    image=image,
                    labels=TEST_LABELS,
                )
            )
            assert all(g.valid for g in grades), grades
            assert {g.path: g.score for g in grades} == _gold_scores(paper, kind), [
                g.explanation for g in grades
            ]
    finally:
        sweep(client)


@pytest.mark.docker
def test_timeout_and_crash_in_docker(tiny: Path, request: pytest.FixtureRequest) -> None:
    image = request.getfixturevalue("reproducer_image")
    client = request.getfixturevalue("docker_client")
    docker = SandboxConfig(backend="docker")
    try:
        slow = _run(
            _leaf(Check(command="sleep 60", timeout_s=1)),
            tiny,
            sandbox=docker,
            image=image,
            labels=TEST_LABELS,
        )
        crash = _run(
            _leaf(Check(command="echo dying >&2; kill -SEGV $$", timeout_s=30)),
            tiny,
            sandbox=docker,
            image=image,
            labels=TEST_LABELS,
        )
    finally:
        sweep(client)
    assert not slow.valid and slow.reason == "check_error", slow
    assert slow.score == 0.0 and "timed_out=true" in slow.explanation
    assert crash.valid and crash.score == 0.0 and "dying" in crash.explanation, crash
    assert "exit_code=0" not in crash.explanation


@pytest.mark.docker
def test_missing_image_is_check_error(tiny: Path, request: pytest.FixtureRequest) -> None:
    client = request.getfixturevalue("docker_client")
    try:
        grade = _run(
            _leaf(Check(command="true")),
            tiny,
            sandbox=SandboxConfig(backend="docker"),
            image="paperbench-test-no-such-image:missing",
            labels=TEST_LABELS,
        )
    finally:
        sweep(client)
    assert not grade.valid and grade.reason == "check_error", grade
    assert grade.error is not None and "\n" not in grade.error
