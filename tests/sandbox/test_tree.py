"""The host's rule for untrusted trees (``paperbench.sandbox._tree``): hostile archives and
folders are refused or left out with a note, never written or read outside their tree."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest

from paperbench.errors import InputError, UnsafeArchiveError
from paperbench.sandbox import (
    TreeLimits,
    make_tar_gz,
    read_file_beneath,
    remove_tree,
    safe_extract,
    write_file_beneath,
)


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz"):
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _special(name: str, kind: bytes, link: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info, None


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "sandbox" / "dest"


def _outside(tmp_path: Path) -> set[str]:
    """Everything under tmp_path except the destination and the archives."""
    return {
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if "dest" not in p.parts and not p.name.endswith((".tar", ".tgz", ".gz"))
    } - {"sandbox"}


def test_dotdot_and_absolute_paths_are_left_out(tmp_path: Path, dest: Path) -> None:
    arc = _tar(
        tmp_path / "a.tar.gz",
        [
            _file("ok.txt", b"fine"),
            _file("../escape.txt"),
            _file("sub/../../escape2.txt"),
            _file("/etc/evil.txt"),
            _file("/abs-escape.txt"),
        ],
    )
    report = safe_extract(arc, dest)
    assert _tree(dest) == {"ok.txt"}
    reasons = {s.name: s.reason for s in report.skipped}
    assert reasons["../escape.txt"] == "path with '..'"
    assert reasons["sub/../../escape2.txt"] == "path with '..'"
    assert reasons["/etc/evil.txt"] == "absolute path"
    assert reasons["/abs-escape.txt"] == "absolute path"
    assert _outside(tmp_path) == set()
    assert not Path("/abs-escape.txt").exists()


def test_symlinks_pointing_outside_are_left_out(tmp_path: Path, dest: Path) -> None:
    arc = _tar(
        tmp_path / "s.tar",
        [
            _special("abs", tarfile.SYMTYPE, "/etc/passwd"),
            _special("up", tarfile.SYMTYPE, "../../outside"),
            _special("inner", tarfile.SYMTYPE, "data/real.txt"),
            _file("data/real.txt", b"real"),
            # A write through the link that was refused must not happen either.
            _file("up/through.txt", b"evil"),
        ],
        mode="w",
    )
    report = safe_extract(arc, dest)
    skipped = {s.name for s in report.skipped}
    assert {"abs", "up"} <= skipped
    assert os.readlink(dest / "inner") == "data/real.txt"
    assert (dest / "inner").read_text() == "real"
    assert not (tmp_path / "outside").exists()
    assert not (dest / "abs").is_symlink()


def test_symlink_chain_cannot_redirect_a_later_file(tmp_path: Path, dest: Path) -> None:
    # d/e -> ..  (inside: the root), a -> d/e (inside), then b -> a/.. escapes physically.
    arc = _tar(
        tmp_path / "c.tar",
        [
            _special("d", tarfile.DIRTYPE),
            _special("d/e", tarfile.SYMTYPE, ".."),
            _special("a", tarfile.SYMTYPE, "d/e"),
            _special("b", tarfile.SYMTYPE, "a/.."),
            _file("b/escaped.txt", b"evil"),
        ],
        mode="w",
    )
    report = safe_extract(arc, dest)
    assert not (dest.parent / "escaped.txt").exists()
    assert any(s.name == "b" for s in report.skipped)


def test_hard_links_outside_are_left_out_inside_are_copies(tmp_path: Path, dest: Path) -> None:
    arc = _tar(
        tmp_path / "h.tar",
        [
            _file("real.txt", b"data"),
            _special("copy.txt", tarfile.LNKTYPE, "real.txt"),
            _special("evil", tarfile.LNKTYPE, "/etc/passwd"),
            _special("evil2", tarfile.LNKTYPE, "../../x"),
            _special("dangling", tarfile.LNKTYPE, "not-in-archive"),
        ],
        mode="w",
    )
    report = safe_extract(arc, dest)
    assert (dest / "copy.txt").read_bytes() == b"data"
    assert os.stat(dest / "copy.txt").st_ino != os.stat(dest / "real.txt").st_ino
    assert {s.name for s in report.skipped} == {"evil", "evil2", "dangling"}


def test_device_files_and_fifos_are_left_out(tmp_path: Path, dest: Path) -> None:
    dev = tarfile.TarInfo("dev/sda")
    dev.type, dev.devmajor, dev.devminor = tarfile.BLKTYPE, 8, 0
    arc = _tar(
        tmp_path / "d.tar",
        [
            (dev, None),
            _special("null", tarfile.CHRTYPE),
            _special("pipe", tarfile.FIFOTYPE),
            _file("ok", b"1"),
        ],
        mode="w",
    )
    report = safe_extract(arc, dest)
    reasons = {s.name: s.reason for s in report.skipped}
    assert reasons == {"dev/sda": "device file", "null": "device file", "pipe": "FIFO"}
    assert _tree(dest) == {"ok"}


def test_strict_raises_naming_the_member_and_file(tmp_path: Path, dest: Path) -> None:
    arc = _tar(tmp_path / "x.tgz", [_file("ok"), _file("../bad")])
    with pytest.raises(UnsafeArchiveError) as info:
        safe_extract(arc, dest, strict=True)
    assert "x.tgz" in str(info.value) and "'../bad'" in str(info.value)
    assert "\n" not in str(info.value)


def test_single_top_folder_is_stripped(tmp_path: Path, dest: Path) -> None:
    arc = _tar(
        tmp_path / "t.tar.gz",
        [
            _special("submission", tarfile.DIRTYPE),
            _file("submission/reproduce.sh", b"echo hi"),
            _file("submission/src/a.py", b"print(1)"),
        ],
    )
    report = safe_extract(arc, dest)
    assert report.stripped_prefix == "submission"
    assert _tree(dest) == {"reproduce.sh", "src", "src/a.py"}
    assert report.files == 2 and report.bytes == len(b"echo hi") + len(b"print(1)")


def test_top_level_files_or_two_folders_are_not_stripped(tmp_path: Path) -> None:
    two = _tar(tmp_path / "two.tar", [_file("a/x"), _file("b/y")], mode="w")
    assert safe_extract(two, tmp_path / "d1").stripped_prefix is None
    lone = _tar(tmp_path / "lone.tar", [_file("only-file")], mode="w")
    report = safe_extract(lone, tmp_path / "d2")
    assert report.stripped_prefix is None and _tree(tmp_path / "d2") == {"only-file"}
    dot = _tar(tmp_path / "dot.tar", [_file("./top/x"), _file("./top/y")], mode="w")
    assert safe_extract(dot, tmp_path / "d3").stripped_prefix == "top"
    assert safe_extract(dot, tmp_path / "d4", strip_top=False).stripped_prefix is None


def test_setuid_and_world_writable_bits_are_dropped(tmp_path: Path, dest: Path) -> None:
    arc = _tar(tmp_path / "m.tar", [_file("run", b"#!", mode=0o6777)], mode="w")
    safe_extract(arc, dest)
    assert (dest / "run").stat().st_mode & 0o7777 == 0o755


def test_file_object_and_unreadable_archives(tmp_path: Path, dest: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("f.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    buf.seek(0)
    assert safe_extract(buf, dest).files == 1
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive at all")
    with pytest.raises(InputError, match=r"junk\.tar\.gz: cannot read archive"):
        safe_extract(junk, tmp_path / "j")
    with pytest.raises(InputError, match="not found"):
        safe_extract(tmp_path / "missing.tar", tmp_path / "m")


def test_size_cap(tmp_path: Path, dest: Path) -> None:
    arc = _tar(tmp_path / "big.tar", [_file("a", b"x" * 1000), _file("b", b"y" * 1000)], "w")
    report = safe_extract(arc, dest, limits=TreeLimits(max_bytes=1500))
    assert _tree(dest) == {"a"} and report.bytes == 1000
    assert report.skipped[0].name == "b" and "1500 bytes in all" in report.skipped[0].reason
    with pytest.raises(UnsafeArchiveError, match="1500 bytes in all"):
        safe_extract(arc, tmp_path / "strict", limits=TreeLimits(max_bytes=1500), strict=True)


def test_folders_pass_through_with_the_same_checks(tmp_path: Path, dest: Path) -> None:
    src = tmp_path / "folder" / "only-top"
    (src / "sub").mkdir(parents=True)
    (src / "reproduce.sh").write_text("echo")
    (src / "sub" / "x").write_text("x")
    (src / "link-in").symlink_to("sub/x")
    (src / "link-out").symlink_to("/etc/passwd")
    os.mkfifo(src / "fifo")
    report = safe_extract(tmp_path / "folder", dest)
    assert report.source_kind == "folder" and report.stripped_prefix == "only-top"
    assert _tree(dest) == {"reproduce.sh", "sub", "sub/x", "link-in"}
    assert {s.name: s.reason for s in report.skipped} == {
        "only-top/fifo": "FIFO",  # named as in the source: it was noted before the strip
        "link-out": "link to an absolute path ('/etc/passwd')",
    }


def test_make_tar_gz_leaves_out_large_files_and_outside_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "venv" / "lib").mkdir(parents=True)
    (src / "venv" / "lib" / "x").write_text("x")
    (src / "small.txt").write_text("s")
    (src / "big.bin").write_bytes(b"b" * 5000)
    (src / "in").symlink_to("small.txt")
    (src / "out").symlink_to("/etc/passwd")
    os.mkfifo(src / "fifo")
    dest = tmp_path / "o" / "executed.tar.gz"
    left = make_tar_gz(src, dest, max_file_bytes=1000, exclude_dirs=frozenset({"venv"}))
    assert {(f.path, f.reason.split(" ")[0]) for f in left} == {
        ("big.bin", "over"),
        ("out", "link"),
        ("fifo", "FIFO"),
        ("venv/", "excluded"),
    }
    assert next(f for f in left if f.path == "big.bin").size == 5000
    with tarfile.open(dest) as tar:
        assert sorted(tar.getnames()) == ["in", "small.txt"]
    # Round trip through safe_extract.
    report = safe_extract(dest, tmp_path / "back")
    assert report.skipped == [] and (tmp_path / "back" / "in").read_text() == "s"
    assert [p.name for p in dest.parent.iterdir()] == ["executed.tar.gz"]


# --------------------------------------------------------------------------- attacks


def _ladder(prefix: str, levels: int) -> list[tuple[str, str]]:
    """Links that each stay inside the tree when read alone, but together climb ``levels``
    folders above it: ``a/b/up -> ../..`` is the root, ``esc1 -> a/b/up/..`` is the root's
    parent, ``a/b/e2 -> ../../esc1/..`` its parent, and so on."""
    links = [(f"{prefix}a/b/up", "../.."), (f"{prefix}esc1", "a/b/up/..")]
    for n in range(2, levels + 1):
        links.append((f"{prefix}a/b/e{n}", f"../../esc{n - 1}/.."))
        links.append((f"{prefix}esc{n}", f"a/b/e{n}"))
    return links


def test_a_ladder_of_links_never_leads_a_write_or_read_out(tmp_path: Path) -> None:
    victim = tmp_path / "victim.pth"
    victim.write_bytes(b"original")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET-BYTES")
    dest = tmp_path / "deep" / "er" / "executed"
    depth = len(dest.parts) + 2
    members: list[tuple[tarfile.TarInfo, bytes | None]] = [_special("a/b", tarfile.DIRTYPE)]
    members += [_special(n, tarfile.SYMTYPE, t) for n, t in _ladder("", depth)]
    rel_victim = str(victim).lstrip("/")
    members.append(_special("reproduce.log", tarfile.SYMTYPE, f"esc{depth}/{rel_victim}"))
    members.append(_special("notes.md", tarfile.SYMTYPE, f"esc{depth}/{str(secret).lstrip('/')}"))
    arc = _tar(tmp_path / "ladder.tar", members, mode="w")
    report = safe_extract(arc, dest, strip_top=False)
    # Only the first rung stays (it is a real link to the root); every link through a link goes.
    kept = {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_symlink()}
    assert kept == {"a/b/up"}
    assert {"reproduce.log", "notes.md", "esc1"} <= {s.name for s in report.skipped}
    # The host writes the log where it belongs, and nowhere else.
    write_file_beneath(dest, "reproduce.log", b"attacker-controlled log")
    assert victim.read_bytes() == b"original"
    assert not (dest / "reproduce.log").is_symlink()
    # Packing and extracting again keeps the rule.
    left = make_tar_gz(dest, tmp_path / "again.tar.gz")
    assert left == []
    again = safe_extract(tmp_path / "again.tar.gz", tmp_path / "again", strip_top=False)
    assert again.skipped == []
    assert b"SECRET" not in (tmp_path / "again.tar.gz").read_bytes()


def test_writes_beneath_a_tree_never_follow_links(tmp_path: Path) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "victim").write_bytes(b"original")
    (tree / "reproduce.log").symlink_to(outside / "victim")
    (tree / "logs").symlink_to(outside)
    (tree / "rel").symlink_to("../outside/victim")
    write_file_beneath(tree, "reproduce.log", b"x")
    write_file_beneath(tree, "logs/victim", b"y")
    write_file_beneath(tree, "rel", b"z")
    assert (outside / "victim").read_bytes() == b"original"
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (tree / "logs").is_dir() and not (tree / "logs").is_symlink()
    with pytest.raises(FileNotFoundError):
        read_file_beneath(tree, "link-to-victim-missing", 100)
    (tree / "peek").symlink_to(outside / "victim")
    with pytest.raises(FileNotFoundError):
        read_file_beneath(tree, "peek", 100)


@pytest.mark.parametrize("source", ["folder", "archive"])
def test_a_tree_deeper_than_the_cap_is_cut_without_recursion(tmp_path: Path, source: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    fd = os.open(src, os.O_RDONLY)
    try:  # 1,100 folders deep, made relative to descriptors (the path is too long to name)
        for _ in range(1100):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("deep")
    finally:
        os.close(fd)
    (src / "top.txt").write_text("top")
    if source == "archive":
        left = make_tar_gz(src, tmp_path / "deep.tar.gz", limits=TreeLimits(max_depth=2000))
        assert left == []
        origin: Path = tmp_path / "deep.tar.gz"
    else:
        origin = src
    report = safe_extract(origin, tmp_path / "out", strip_top=False)
    assert (tmp_path / "out" / "top.txt").read_text() == "top"
    assert [s.reason for s in report.skipped] == [
        "deeper than 128 folders: this and everything as deep left out"
    ]
    depth = max(len(p.relative_to(tmp_path / "out").parts) for p in (tmp_path / "out").rglob("*"))
    assert depth == 128
    remove_tree(src)  # no recursion either (shutil.rmtree of Python 3.11 would fail here)
    assert not src.exists()


def test_entry_cap_and_per_file_head(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(10):
        (src / f"f{i}.txt").write_bytes(b"x" * 100)
    report = safe_extract(
        src,
        tmp_path / "out",
        strip_top=False,
        limits=TreeLimits(max_entries=4, max_file_bytes=10, keep_head=True),
    )
    kept = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert kept == ["f0.txt", "f1.txt", "f2.txt", "f3.txt"]
    assert all((tmp_path / "out" / k).stat().st_size == 10 for k in kept)
    assert report.skipped[-1].reason == "over the cap of 4 entries: the rest left out"


def test_sockets_and_fifos_in_a_folder_are_notes_not_hangs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    os.mkfifo(src / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    (src / "ok").write_text("ok")
    try:
        report = safe_extract(src, tmp_path / "out", strip_top=False)
        left = make_tar_gz(src, tmp_path / "out.tar.gz")
    finally:
        sock.close()
    assert {s.name: s.reason for s in report.skipped} == {"pipe": "FIFO", "sock": "socket"}
    assert {f.path for f in left} == {"pipe", "sock"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ok"]


def test_a_folder_swapped_for_a_link_while_it_is_read_is_never_followed(tmp_path: Path) -> None:
    """A race run in a loop: one thread swaps ``d`` between a folder and a link to a secret
    folder of the host, the host copies and packs the tree meanwhile."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "f").write_bytes(b"HOST-SECRET")
    live = tmp_path / "live"
    live.mkdir()
    stop = threading.Event()

    def swap() -> None:
        d, tmp = live / "d", live / "d.new"
        while not stop.is_set():
            tmp.mkdir()
            (tmp / "f").write_bytes(b"sandbox")
            os.rename(tmp, d) if not d.exists() and not d.is_symlink() else None
            if d.is_symlink():
                d.unlink()
            else:
                shutil.rmtree(d, ignore_errors=True)
            with contextlib.suppress(FileExistsError):
                os.symlink(secret, d)
            shutil.rmtree(tmp, ignore_errors=True)

    worker = threading.Thread(target=swap)
    worker.start()
    rounds = 0
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            out = tmp_path / f"out{rounds}"
            safe_extract(live, out, strip_top=False)
            for f in out.rglob("*"):
                assert not (f.is_file() and f.read_bytes() == b"HOST-SECRET")
            shutil.rmtree(out)
            make_tar_gz(live, tmp_path / "snap.tar.gz")
            assert b"HOST-SECRET" not in gzip.decompress((tmp_path / "snap.tar.gz").read_bytes())
            rounds += 1
    finally:
        stop.set()
        worker.join()
    assert rounds > 10
