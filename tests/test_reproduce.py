"""The reproduction stage on the local backend (bubblewrap when installed), and its CLI."""

from __future__ import annotations

import asyncio
import json
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.errors import InputError, UnsafeArchiveError
from paperbench.reproduce import (
    DEFAULT_DISK_MB,
    ReproduceConfig,
    ReproductionMetadata,
    default_out_dir,
    reproduce_submission,
)
from paperbench.sandbox import GpuRequest, NetworkPolicy, SandboxConfig, SandboxLimits, SandboxSpec
from paperbench.sandbox._disk import DiskCap
from paperbench.sandbox._docker import host_config_args
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


LOGS = {"reproduce.log", "reproduce.log.creation_time"}


def _names(out: Path) -> set[str]:
    """Files of executed.tar.gz, relative to its top folder ``submission/`` (PaperBench's)."""
    with tarfile.open(out / "executed.tar.gz") as tar:
        members = tar.getmembers()
    assert all(m.name == "submission" or m.name.startswith("submission/") for m in members)
    return {m.name.removeprefix("submission/") for m in members if m.isfile()}


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
    assert _names(out) == {"reproduce.sh", "data.txt", "keep.txt", "results/out.txt", *LOGS}
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
    assert _names(tmp_path / "out") == {"reproduce.sh", "small.txt", *LOGS}


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


def test_default_out_dir_differs_for_a_folder_and_its_tarball() -> None:
    assert default_out_dir(Path("/x/sub.tar.gz")) == Path("/x/sub.tar.gz.reproduction")
    assert default_out_dir(Path("/x/sub")) == Path("/x/sub.reproduction")


def test_config_round_trips_for_other_processes() -> None:
    cfg = _config(timeout_s=5)
    assert ReproduceConfig.model_validate_json(cfg.model_dump_json()) == cfg
    with pytest.raises(ValueError, match="extra"):
        ReproduceConfig.model_validate({"timeout": 5})


def test_executed_submission_holds_the_log_where_paperbench_reads_it(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo hello-log\n")
    out = tmp_path / "out"
    before = int(time.time())
    meta = _run(sub, out)
    assert meta.status == "success"
    with tarfile.open(out / "executed.tar.gz") as tar:
        log = tar.extractfile("submission/reproduce.log")
        started = tar.extractfile("submission/reproduce.log.creation_time")
        assert log is not None and started is not None
        inside = log.read().decode()
        created = int(started.read().decode().strip())
    assert "hello-log" in inside and inside == (out / "reproduce.log").read_text()
    assert before <= created <= int(time.time())
    # The files paperbench adds are no change the submission made.
    assert meta.changed_files.created == []


def test_metadata_records_isolation_and_disk_cap(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo ok\n")
    meta = _run(sub, tmp_path / "out")
    assert meta.isolation == "bubblewrap" and meta.isolation_reason
    assert meta.disk_cap_mb == DEFAULT_DISK_MB and meta.disk_cap == "loop-ext4"
    on_disk = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert on_disk["isolation"] == "bubblewrap" and on_disk["disk_cap"] == "loop-ext4"


def test_endless_writer_ends_as_disk_full_not_a_traceback(tmp_path: Path) -> None:
    sub = _submission(
        tmp_path / "sub", "i=0; while :; do head -c 4000000 /dev/zero > f$i; i=$((i+1)); done\n"
    )
    free_before = shutil.disk_usage(tmp_path).free
    meta = _run(
        sub,
        tmp_path / "out",
        limits=SandboxLimits(disk_mb=32),
        salvage_retries=2,
        max_file_bytes=1000,
    )
    assert meta.status == "disk_full" and len(meta.attempts) == 1  # no retry
    assert meta.attempts[0].disk_full and meta.disk_cap == "loop-ext4"
    log = (tmp_path / "out" / "reproduce.log").read_text()
    assert "No space left on device" in log
    assert "[paperbench: the sandbox's disk cap of 32 MB is full" in log
    assert free_before - shutil.disk_usage(tmp_path).free <= 40 << 20


def test_crlf_script_that_fails_gets_a_hint(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "reproduce.sh").write_bytes(b"echo hi\r\nexit 0\r\n")
    meta = _run(sub, tmp_path / "out")
    assert meta.status == "failed"
    assert any("CRLF" in hint for hint in meta.hints)
    assert "dos2unix" in (tmp_path / "out" / "reproduce.log").read_text()
    assert (sub / "reproduce.sh").read_bytes() == b"echo hi\r\nexit 0\r\n"  # never rewritten


def test_host_disk_full_is_a_recorded_failure(tmp_path: Path) -> None:
    """The host's own disk fills while writing executed.tar.gz: status host_error."""
    small = tmp_path / "small"
    small.mkdir()
    disk = DiskCap.create(small, 16, mount_name="out")
    try:
        sub = _submission(tmp_path / "sub", "head -c 20000000 /dev/urandom > noise.bin\n")
        meta = _run(sub, disk.mountpoint, max_file_bytes=None)
        assert meta.status == "host_error", meta.error
        assert meta.error is not None and "No space left on device" in meta.error
        on_disk = json.loads((disk.mountpoint / "metadata.json").read_text())
        assert on_disk["status"] == "host_error"
        assert not (disk.mountpoint / "executed.tar.gz").exists()
    finally:
        disk.remove()


# --------------------------------------------------------------------------- CLI

runner = CliRunner()


def test_cli_success_and_json(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo hi > made.txt\n")
    out = tmp_path / "out"
    result = runner.invoke(app, ["reproduce", str(sub), "--sandbox", "local", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "success" in result.output
    result = runner.invoke(
        app, ["reproduce", str(sub), "--sandbox", "local", "--out", str(out), "--json", "--force"]
    )
    assert json.loads(result.stdout)["changed_files"]["created"] == ["made.txt"]


def test_cli_default_out_beside_the_input_and_failure_exit_code(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "exit 1\n")
    result = runner.invoke(
        app,
        [
            "reproduce",
            str(sub),
            "--sandbox",
            "local",
            "--retries",
            "0",
            "--reproduce-timeout",
            "30s",
        ],
    )
    assert result.exit_code == 3, result.output
    meta = ReproductionMetadata.model_validate_json(
        (tmp_path / "sub.reproduction" / "metadata.json").read_text()
    )
    assert meta.config.timeout_s == 30


def test_cli_without_resource_flags_takes_the_reproduction_defaults(tmp_path: Path) -> None:
    """--reproduce-timeout, --memory, --disk, --network and --gpus default to None on the
    command line (one default for every command): a reproduction then gets its own."""
    sub = _submission(tmp_path / "sub", "echo hi\n")
    args = ["reproduce", str(sub), "--sandbox", "local", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    config = ReproductionMetadata.model_validate_json(result.stdout).config
    assert config.timeout_s == 12 * 3600 == ReproduceConfig().timeout_s
    assert (config.limits.memory_mb, config.limits.disk_mb) == (8192, DEFAULT_DISK_MB)
    assert config.network == NetworkPolicy.FULL and config.gpu is None


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


def test_cli_refuses_a_non_empty_out_unless_force(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo hi\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["reproduce", str(sub), "--sandbox", "local", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--force" in result.output
    assert "Traceback" not in result.output and not (out / "metadata.json").exists()
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    assert (out / "metadata.json").exists() and (out / "notes.txt").exists()


def test_cli_resource_flags_reach_the_sandbox(tmp_path: Path) -> None:
    sub = _submission(tmp_path / "sub", "echo hi\n")
    out = tmp_path / "out"
    args = ["reproduce", str(sub), "--sandbox", "local", "--out", str(out), "--json"]
    flags = ["--cpus", "1.5", "--memory", "2048", "--disk", "64", "--gpus", "2"]
    result = runner.invoke(app, [*args, *flags, "--network", "none"])
    assert result.exit_code == 0, result.output
    meta = ReproductionMetadata.model_validate_json(result.stdout)
    limits = meta.config.limits
    assert (limits.cpus, limits.memory_mb, limits.disk_mb) == (1.5, 2048, 64)
    assert meta.config.network == NetworkPolicy.NONE and meta.disk_cap_mb == 64
    assert meta.config.gpu == GpuRequest(count=2)
    # What the Docker engine would be sent (no GPU on this machine).
    spec = SandboxSpec(image="x", limits=limits, gpu=meta.config.gpu)
    args_sent = host_config_args(
        spec, network_mode="none", disk_mounts=[], tmpfs={}, storage_size_mb=None
    )
    [request] = args_sent["device_requests"]
    assert request["Count"] == 2 and request["Capabilities"] == [["gpu"]]
    assert args_sent["nano_cpus"] == 1_500_000_000 and args_sent["mem_limit"] == "2048m"
    no_gpus = runner.invoke(app, [*args, "--force", "--gpus", "0"])
    assert no_gpus.exit_code == 0, no_gpus.output
    assert ReproductionMetadata.model_validate_json(no_gpus.stdout).config.gpu is None


@pytest.mark.parametrize(
    "flags",
    [
        ["--disk", "5"],
        ["--gpus", "-1"],
        ["--gpus", "0,1"],
        ["--gpus", "all"],
        ["--cpus", "0"],
        ["--memory", "1"],
        ["--reproduce-timeout", "0"],
        ["--reproduce-timeout", "soon"],
    ],
)
def test_cli_new_flags_validate_their_values(tmp_path: Path, flags: list[str]) -> None:
    sub = _submission(tmp_path / "sub", "echo hi\n")
    result = runner.invoke(app, ["reproduce", str(sub), "--sandbox", "local", *flags])
    assert result.exit_code == 2, result.output
    assert flags[0] in result.output and "Traceback" not in result.output
    assert not (tmp_path / "sub.reproduction").exists()


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


@pytest.mark.docker
def test_endless_writer_in_docker_ends_as_disk_full(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    image = request.getfixturevalue("reproducer_image")
    client = request.getfixturevalue("docker_client")
    sub = _submission(
        tmp_path / "sub", "i=0; while :; do head -c 4000000 /dev/zero > f$i; i=$((i+1)); done\n"
    )
    free_before = shutil.disk_usage(tempfile.gettempdir()).free
    try:
        meta = _run(
            sub,
            tmp_path / "out",
            sandbox=SandboxConfig(backend="docker"),
            image=image,
            labels=TEST_LABELS,
            limits=SandboxLimits(disk_mb=64),
            max_file_bytes=1000,
        )
    finally:
        sweep(client)
    assert meta.status == "disk_full", meta
    assert meta.isolation == "docker" and meta.disk_cap == "loop-overlay"
    log = (tmp_path / "out" / "reproduce.log").read_text()
    assert "No space left on device" in log and "disk cap of 64 MB is full" in log
    assert free_before - shutil.disk_usage(tempfile.gettempdir()).free <= 72 << 20


# --------------------------------------------------------------------------- the package


def test_reproduce_is_a_package_like_its_peers() -> None:
    """Its public names are pinned with every package's (tests/test_public_api.py)."""
    assert not (REPO / "paperbench" / "reproduce.py").exists()
    assert not (REPO / "paperbench" / "reproduce_cli.py").exists()
