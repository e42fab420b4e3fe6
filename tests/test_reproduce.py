"""The reproduction stage on the local backend (bubblewrap when installed), and its CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.errors import InputError, UnsafeArchiveError
from paperbench.reproduce import (
    ReproduceConfig,
    ReproductionMetadata,
    default_out_dir,
    reproduce_submission,
)
from paperbench.sandbox import SandboxConfig
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(REPO.glob("examples/*/reference/submission"))


def _config(**fields: object) -> ReproduceConfig:
    base: dict[str, object] = {
        "sandbox": SandboxConfig(backend="local"),
        "timeout_s": 60,
        "salvage_retries": 0,
    }
    base.update(fields)
    return ReproduceConfig.model_validate(base)


def _submission(root: Path, script: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if script:
        (root / "reproduce.sh").write_text("set -e\n" + script)
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _run(sub: Path, out: Path, **fields: object) -> ReproductionMetadata:
    return asyncio.run(reproduce_submission(sub, out, _config(**fields)))


def _names(out: Path) -> set[str]:
    with tarfile.open(out / "executed.tar.gz") as tar:
        return {m.name for m in tar.getmembers() if m.isfile()}


def test_success_writes_log_metadata_and_executed_archive(tmp_path: Path) -> None:
    sub = _submission(
        tmp_path / "sub",
        "echo to-stdout; echo to-stderr >&2\nmkdir -p results\necho 42 > results/out.txt\n"
        "echo changed >> data.txt\nrm old.txt\n",
        {"data.txt": "orig\n", "old.txt": "bye\n", "keep.txt": "same\n"},
    )
    out = tmp_path / "out"
    meta = _run(sub, out)
    assert meta.status == "success" and meta.exit_code == 0 and not meta.timed_out
    assert meta.changed_files.created == ["results/out.txt"]
    assert meta.changed_files.modified == ["data.txt"]
    assert meta.changed_files.deleted == ["old.txt"]
    assert meta.sandbox_backend == "local" and meta.sandbox_image == "host"
    assert meta.started_at <= meta.finished_at  # type: ignore[operator]
    assert len(meta.attempts) == 1 and meta.wall_time_s > 0
    log = (out / "reproduce.log").read_text()
    assert "to-stdout" in log and "to-stderr" in log
    on_disk = ReproductionMetadata.model_validate_json((out / "metadata.json").read_text())
    assert on_disk.status == "success" and on_disk.config.timeout_s == 60
    assert _names(out) == {"reproduce.sh", "data.txt", "keep.txt", "results/out.txt"}
    assert sorted(p.name for p in out.iterdir()) == [
        "executed.tar.gz",
        "metadata.json",
        "reproduce.log",
    ]
    assert (sub / "old.txt").exists()  # the input is never touched


def test_fast_failure_is_salvaged_and_every_attempt_recorded(tmp_path: Path) -> None:
    # Fails on the first two attempts (a counter kept outside the sandbox would be cheating:
    # each attempt starts from the same submission, so it fails every time).
    sub = _submission(tmp_path / "sub", "echo attempt-output\nexit 4\n")
    meta = _run(sub, tmp_path / "out", salvage_retries=2, salvage_window_s=30)
    assert meta.status == "failed" and meta.exit_code == 4
    assert [a.exit_code for a in meta.attempts] == [4, 4, 4]
    assert [a.attempt for a in meta.attempts] == [1, 2, 3]
    assert all("attempt-output" in a.log_tail for a in meta.attempts)


def test_slow_failure_is_not_retried(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "exit 2\n")
    meta = _run(sub, tmp_path / "out", salvage_retries=2, salvage_window_s=0)
    assert meta.status == "failed" and len(meta.attempts) == 1


def test_timeout(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo started\nsleep 300 &\nsleep 300\n")
    meta = _run(sub, tmp_path / "out", timeout_s=1.0, salvage_retries=2)
    assert meta.status == "timed_out" and meta.timed_out and meta.exit_code is None
    assert len(meta.attempts) == 1 and meta.wall_time_s < 10
    assert "started" in (tmp_path / "out" / "reproduce.log").read_text()


def test_no_reproduce_script_is_a_status(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "", {"main.py": "print(1)"})
    meta = _run(sub, tmp_path / "out")
    assert meta.status == "no_reproduce_script" and meta.attempts == []
    assert _names(tmp_path / "out") == {"main.py"}
    assert (tmp_path / "out" / "reproduce.log").read_text() == ""


def test_venv_folders_removed_and_not_archived(tmp_path: Path) -> None:
    sub = _submission(
        tmp_path / "sub",
        "test ! -e venv && test ! -e pkg/.venv && echo no-venvs\n"
        "mkdir -p .venv/lib && echo x > .venv/lib/made-by-run\n",
        {"venv/bin/python": "fake", "pkg/.venv/x": "fake", "pkg/mod.py": ""},
    )
    meta = _run(sub, tmp_path / "out")
    assert meta.status == "success", meta.attempts
    assert meta.removed_dirs == ["pkg/.venv", "venv"]
    assert "no-venvs" in (tmp_path / "out" / "reproduce.log").read_text()
    assert not any(".venv" in n or n.startswith("venv") for n in _names(tmp_path / "out"))
    assert any(f.path == ".venv/" for f in meta.files_left_out)


def test_large_files_left_out_of_executed_archive(tmp_path: Path) -> None:
    sub = _submission(
        tmp_path / "sub",
        "head -c 5000 /dev/zero > big.bin\necho small > small.txt\n",
    )
    meta = _run(sub, tmp_path / "out", max_file_bytes=1000)
    assert [(f.path, f.size) for f in meta.files_left_out] == [("big.bin", 5000)]
    assert "big.bin" in meta.changed_files.created
    assert _names(tmp_path / "out") == {"reproduce.sh", "small.txt"}


def test_archive_input_under_one_top_folder(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "mysub", "echo from-archive > made.txt\n")
    arc = tmp_path / "mysub.tar.gz"
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(sub, arcname="mysub")
    meta = _run(arc, tmp_path / "out")
    assert meta.status == "success"
    assert meta.changed_files.created == ["made.txt"]


def test_unsafe_archive_is_refused(tmp_path: Path) -> None:
    arc = tmp_path / "bad.tar"
    with tarfile.open(arc, "w") as tar:
        info = tarfile.TarInfo("../escape.sh")
        tar.addfile(info)
    with pytest.raises(UnsafeArchiveError, match="escape"):
        _run(arc, tmp_path / "out")
    with pytest.raises(InputError, match="not found"):
        _run(tmp_path / "missing", tmp_path / "out2")


def test_log_is_capped(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "head -c 300000 /dev/zero | tr '\\0' 'a'\necho END\n")
    meta = _run(sub, tmp_path / "out", log_limit_bytes=4096)
    log = (tmp_path / "out" / "reproduce.log").read_text()
    assert meta.log_truncated and len(log) < 5000 and log.rstrip().endswith("END")


def test_default_out_dir() -> None:
    assert default_out_dir(Path("/x/sub.tar.gz")) == Path("/x/sub.reproduction")
    assert default_out_dir(Path("/x/sub")) == Path("/x/sub.reproduction")


def test_config_round_trips_for_other_processes() -> None:
    cfg = _config(timeout_s=5)
    assert ReproduceConfig.model_validate_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValueError, match="extra"):
        ReproduceConfig.model_validate({"timeout": 5})


# --------------------------------------------------------------------------- CLI

runner = CliRunner()


def test_cli_success_and_json(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo hi > made.txt\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["reproduce", str(sub), "--sandbox", "local", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "success" in result.output
    result = runner.invoke(
        app, ["reproduce", str(sub), "--sandbox", "local", "--out", str(out), "--json"]
    )
    assert json.loads(result.stdout)["changed_files"]["created"] == ["made.txt"]


def test_cli_default_out_beside_the_input_and_failure_exit_code(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "exit 1\n")
    result = runner.invoke(
        app, ["reproduce", str(sub), "--sandbox", "local", "--retries", "0", "--timeout", "30"]
    )
    assert result.exit_code == 3, result.output
    assert (tmp_path / "sub.reproduction" / "metadata.json").exists()


@pytest.mark.parametrize("kind", ["missing", "junk-archive", "unsafe"])
def test_cli_bad_input_is_one_line_exit_1(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "input.tar.gz"
    if kind == "junk-archive":
        path.write_bytes(b"garbage")
    elif kind == "unsafe":
        with tarfile.open(path, "w:gz") as tar:
            tar.addfile(tarfile.TarInfo("/etc/evil"))
    result = runner.invoke(app, ["reproduce", str(path), "--sandbox", "local"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in result.output


# --------------------------------------------------------------------------- bundled examples


@pytest.mark.skipif(not EXAMPLES, reason="no bundled example submission in examples/")
def test_bundled_example_reproduces_locally(tmp_path: Path) -> None:
    example = EXAMPLES[0]
    sub = tmp_path / "submission"
    shutil.copytree(example, sub)
    meta = _run(sub, tmp_path / "out", timeout_s=120)
    assert meta.status == "success", (tmp_path / "out" / "reproduce.log").read_text()[-2000:]
    assert meta.changed_files.created


# --------------------------------------------------------------------------- docker


@pytest.mark.docker
def test_reproduce_in_docker(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    image = request.getfixturevalue("reproducer_image")
    client = request.getfixturevalue("docker_client")
    sub = _submission(
        tmp_path / "sub",
        "python3 -c 'import numpy; print(numpy.__name__)' > made.txt\nexit 0\n",
        {"venv/x": "fake"},
    )
    try:
        meta = _run(
            sub,
            tmp_path / "out",
            sandbox=SandboxConfig(backend="docker"),
            image=image,
            labels=TEST_LABELS,
        )
    finally:
        sweep(client)
    assert meta.status == "success", meta
    assert meta.sandbox_backend == "docker" and meta.sandbox_image == image
    assert meta.changed_files.created == ["made.txt"] and meta.removed_dirs == ["venv"]
