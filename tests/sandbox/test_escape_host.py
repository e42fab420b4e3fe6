"""Attacks on the host's handling of what comes OUT of a sandbox (``paperbench.sandbox._tree``).

Each test is written as an attacker would: a submission or an agent that leaves links (absolute
ones, and ladders of relative links that each stay inside the tree alone but climb out
together), special files, trees deeper than any recursion limit, bombs, and races run in a
loop. They run against real sandboxes on both backends and the real CLI, and assert on the
host's state: a target file's bytes and owner, what a fake model server received, what a
snapshot holds, what is left on disk.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import tarfile
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.judge import build_view
from paperbench.sandbox import LocalBackend, Sandbox, SandboxSpec
from paperbench.testing import FakeLLMServer
from tests.fixtures import clean_env, fake_llm  # noqa: F401
from tests.judge.scripted import ScriptedJudge
from tests.sandbox.docker_fixtures import (  # noqa: F401
    TEST_LABELS,
    docker_client,
    docker_images,
    reproducer_image,
    sweep,
)

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "calibration-binning" / "partial"
LEVELS = 14
"""Rungs of the ladder: more than the depth of any host folder the tree lands in."""

BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


def ladder_script(target: Path, name: str) -> str:
    """Shell lines making ``name`` a link that reaches the host path ``target`` through a
    ladder of relative links, each of which points inside the tree when read alone."""
    lines = ["mkdir -p a/b", "ln -s ../.. a/b/up", "ln -s a/b/up/.. esc1"]
    for n in range(2, LEVELS + 1):
        lines.append(f"ln -s ../../esc{n - 1}/.. a/b/e{n}")
        lines.append(f"ln -s a/b/e{n} esc{n}")
    lines.append(f"ln -sfn esc{LEVELS}{target} {name}")
    return "\n".join(lines) + "\n"


def _victim(path: Path, data: bytes) -> tuple[bytes, int, int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, 0o600)
    st = path.stat()
    return data, st.st_uid, st.st_mode


def _unchanged(path: Path, before: tuple[bytes, int, int]) -> None:
    st = path.stat()
    assert (path.read_bytes(), st.st_uid, st.st_mode) == before


def _links_stay_inside(archive: Path) -> None:
    """Every link of ``archive`` points, through real entries only (never another link),
    inside its tree: followed one component at a time as the kernel would."""
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    kinds = {m.name: "dir" if m.isdir() else "file" for m in members if not m.issym()}
    for m in members:
        if not m.issym():
            continue
        assert not m.linkname.startswith("/"), (m.name, m.linkname)
        parts = m.name.split("/")[:-1]
        for comp in (c for c in m.linkname.split("/") if c not in ("", ".")):
            if comp == "..":
                assert parts, (m.name, m.linkname)  # above the tree's top
                parts.pop()
                continue
            parts.append(comp)
            assert kinds.get("/".join(parts)) is not None, (m.name, m.linkname)


def _reproduce(sub: Path, out: Path, backend: str, *extra: str) -> dict[str, object]:
    args = ["reproduce", str(sub), "--sandbox", backend, "--out", str(out), "--json", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 3), result.output  # 3: reproduce.sh failed
    assert "Traceback" not in result.output
    meta: dict[str, object] = json.loads((out / "metadata.json").read_text())
    return meta


# --------------------------------------------------------------------------- class 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_links_left_by_reproduce_sh_never_write_the_host(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """reproduce.log and its creation time left as links (one absolute, one a ladder of
    relative links) at a host file: the host writes the log through neither."""
    if backend == "docker":
        request.getfixturevalue("reproducer_image")
    victim, victim2 = tmp_path / "site" / "evil.pth", tmp_path / "site" / "other.pth"
    before, before2 = _victim(victim, b"import os\n"), _victim(victim2, b"# keep\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "reproduce.sh").write_text(
        ladder_script(victim2, "reproduce.log.creation_time")
        + f"ln -sfn {victim} reproduce.log\necho results > out.txt\necho ran\n"
    )
    meta = _reproduce(sub, tmp_path / "out", backend)
    assert meta["status"] == "success", meta
    _unchanged(victim, before)
    _unchanged(victim2, before2)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["evil.pth", "other.pth"]
    skipped = {s["name"].rsplit("/", 1)[-1] for s in meta["output_skipped"]}  # type: ignore[union-attr]
    assert {"reproduce.log", "reproduce.log.creation_time", "esc1"} <= skipped
    _links_stay_inside(tmp_path / "out" / "executed.tar.gz")
    with tarfile.open(tmp_path / "out" / "executed.tar.gz") as tar:
        log = tar.getmember("submission/reproduce.log")
        assert log.isfile() and log.size > 0


# --------------------------------------------------------------------------- class 2


def test_the_judge_never_reads_through_links_of_a_submission(
    fake_llm: FakeLLMServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A submission whose reproduce.log and files are links to host files: what the model
    provider receives holds none of their bytes."""
    secret = tmp_path / "host" / "secret.txt"
    _victim(secret, b"HOST-SECRET-7f3a9c")
    sub = tmp_path / "submission"
    (sub / "src").mkdir(parents=True)
    (sub / "reproduce.sh").write_text("python3 src/main.py\n")
    (sub / "src" / "main.py").write_text("print('calibration')\n")
    (sub / "reproduce.log").symlink_to(secret)
    (sub / "src" / "notes.md").symlink_to(secret)
    (sub / "results").symlink_to(secret.parent)
    fake_llm.handler = ScriptedJudge(lambda text: 1.0)
    args = ["grade", str(sub), "--paper", "calibration-binning", "--out", str(tmp_path / "o")]
    args += ["--base-url", fake_llm.openai_url, "--model", "openai/gpt-4o"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert fake_llm.requests
    for request in fake_llm.requests:
        assert "HOST-SECRET" not in json.dumps(request.body)


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshots_of_a_live_sandbox_hold_no_link_chain(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """The agent leaves a ladder of links and an absolute link in /home/submission: the
    snapshot (what submission.tar.gz is made of) keeps only links that stay inside."""
    secret = tmp_path / "host" / "secret.txt"
    _victim(secret, b"HOST-SECRET-snap")

    async def body(sb: Sandbox) -> None:
        script = ladder_script(secret, "leak") + f"ln -s {secret} abs\necho x > real.txt\n"
        got = await sb.exec(script, timeout=60, workdir="/home/submission")
        assert got.exit_code == 0, got
        await sb.snapshot("/home/submission", tmp_path / "snap.tar.gz")

    _in_sandbox(backend, request, tmp_path, body)
    _links_stay_inside(tmp_path / "snap.tar.gz")
    with tarfile.open(tmp_path / "snap.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"real.txt", "a/b/up"} <= names and not {"leak", "abs", "esc1"} & names
    assert b"HOST-SECRET" not in gzip.decompress((tmp_path / "snap.tar.gz").read_bytes())


def _in_sandbox(backend: str, request: pytest.FixtureRequest, tmp_path: Path, body) -> None:  # type: ignore[no-untyped-def]
    spec: dict[str, object] = {"workdir": "/home/submission", "labels": TEST_LABELS}
    if backend == "docker":
        from paperbench.sandbox._docker import DockerBackend

        image = request.getfixturevalue("reproducer_image")
        client = request.getfixturevalue("docker_client")
        made: object = DockerBackend()
        spec["image"] = image
    else:
        client = None
        made = LocalBackend(tmp_path / "ws")
        spec["image"] = "host"

    async def main() -> None:
        sb = await made.start(SandboxSpec.model_validate(spec))  # type: ignore[attr-defined]
        try:
            await body(sb)
        finally:
            await sb.stop()

    try:
        asyncio.run(main())
    finally:
        if client is not None:
            sweep(client)


# --------------------------------------------------------------------------- class 3


def test_a_snapshot_race_never_puts_a_host_file_in_the_archive(tmp_path: Path) -> None:
    """Local backend: while snapshots are taken, a command in the sandbox swaps a folder for
    a link to a root-only host folder in a loop, for a few seconds."""
    secret_dir = tmp_path / "root-only"
    _victim(secret_dir / "key", b"HOST-SECRET-race")
    os.chmod(secret_dir, 0o700)
    swap = (
        "end=$((SECONDS+4)); while [ $SECONDS -lt $end ]; do "
        "mkdir -p d.new && echo mine > d.new/key && rm -rf d && mv d.new d; "
        f"rm -rf d; ln -sfn {secret_dir} d; done"
    )

    async def main() -> None:
        sb = await LocalBackend(tmp_path / "ws").start(
            SandboxSpec(image="host", workdir="/home/submission")
        )
        try:
            racer = asyncio.ensure_future(sb.exec(swap, timeout=30))
            n = 0
            while not racer.done():
                dest = tmp_path / f"snap{n}.tar.gz"
                await sb.snapshot("/home/submission", dest)
                assert b"HOST-SECRET" not in gzip.decompress(dest.read_bytes())
                _links_stay_inside(dest)
                dest.unlink()
                n += 1
            assert (await racer).exit_code == 0
            assert n >= 3
        finally:
            await sb.stop()

    asyncio.run(main())


# --------------------------------------------------------------------------- class 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_files_and_a_deep_tree_are_a_failing_submission_not_an_infra_error(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """A failing reproduce.sh that leaves a FIFO, a socket and a tree 1,100 folders deep:
    the reproduction is ``failed`` (graded as such), never ``sandbox_error``, and grading it
    works."""
    if backend == "docker":
        request.getfixturevalue("reproducer_image")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "reproduce.sh").write_text(
        "mkfifo pipe\n"
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"\n"
        "python3 -c \"import os\nfor _ in range(1100):\n os.mkdir('d'); os.chdir('d')\n"
        "open('leaf', 'w').write('deep')\"\n"
        "echo done > out.txt\nexit 1\n"
    )
    meta = _reproduce(sub, tmp_path / "out", backend)
    assert meta["status"] == "failed", meta
    reasons = {s["name"].rsplit("/", 1)[-1]: s["reason"] for s in meta["output_skipped"]}  # type: ignore[union-attr]
    if backend == "local":
        assert reasons["pipe"] == "FIFO" and reasons["sock"] == "socket"
    assert any(r.startswith("deeper than 128 folders") for r in reasons.values())
    args = [
        "grade",
        str(sub),
        "--executed",
        str(tmp_path / "out"),
        "--paper",
        "calibration-binning",
    ]
    result = runner.invoke(app, [*args, "--judge", "dummy", "--out", str(tmp_path / "g")])
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- class 9


@pytest.mark.slow
def test_the_judges_view_caps_a_huge_log_and_a_tar_bomb(tmp_path: Path) -> None:
    """A 40 MB reproduce.log and a member that expands to 2 GB: the view holds at most its
    caps in memory and writes nothing to disk."""
    archive = tmp_path / "executed.tar.gz"
    line = b"epoch 1 loss 0.5 " + b"x" * 60 + b"\n"
    log = line * (40 * 1024 * 1024 // len(line))
    with (
        gzip.open(archive, "wb", compresslevel=1) as gz,
        tarfile.open(fileobj=gz, mode="w|") as tar,
    ):  # type: ignore[call-overload]
        for name, data in (
            ("submission/reproduce.sh", b"python3 run.py\n"),
            ("submission/reproduce.log", log),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        bomb = tarfile.TarInfo("submission/results/zeros.txt")
        bomb.size = 2 * 1024**3
        tar.addfile(bomb, _Zeros(bomb.size))
    assert archive.stat().st_size < 12 * 1024 * 1024
    executed = tmp_path / "executed"
    executed.mkdir()
    os.replace(archive, executed / "executed.tar.gz")
    (executed / "metadata.json").write_text(json.dumps({"status": "success"}))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    old = tempfile.tempdir
    tempfile.tempdir = str(scratch)
    written = [0]
    done = threading.Event()

    def watch() -> None:  # the most the view ever wrote under the temporary folder
        while not done.wait(0.05):
            sizes = [p.stat().st_size for p in scratch.rglob("*") if p.is_file()]
            written[0] = max(written[0], sum(sizes))

    watcher = threading.Thread(target=watch)
    watcher.start()
    tracemalloc.start()
    try:
        started = time.monotonic()
        view = build_view(tmp_path / "sub-unused", executed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        tempfile.tempdir = old
        done.set()
        watcher.join()
    print(f"peak {peak / 2**20:.0f} MiB, written {written[0]} bytes")
    assert peak < 100 * 1024 * 1024, peak
    assert written[0] == 0 and list(scratch.iterdir()) == []  # nothing extracted to disk
    assert view.log is not None and view.log.raw_bytes == len(log)
    assert "cut by the view" in view.log.text
    zeros = view.file("results/zeros.txt")
    assert zeros is not None and zeros.size == 2 * 1024**3 and zeros.text is None
    assert time.monotonic() - started < 120


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.left, 1 << 20)
        b[:n] = bytes(n)
        self.left -= n
        return n
