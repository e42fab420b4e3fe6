from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from paperbench.errors import InputError
from paperbench.judge import SubmissionView, ViewLimits, build_view
from paperbench.judge._view import classify

from .conftest import EXAMPLES, example, write_executed


@pytest.mark.parametrize("folder", sorted(p for p in EXAMPLES.glob("*/*") if p.is_dir()))
def test_every_bundled_example_builds_a_view(folder: Path) -> None:
    view = build_view(folder / "submission", log=folder / "reproduce.log")
    assert view.files, folder
    assert all(f.text is not None for f in view.files if f.kind in ("code", "doc"))
    assert (view.reproduce_sh is not None) == (folder / "submission" / "reproduce.sh").is_file()
    assert view.log is not None and view.log.raw_bytes == (folder / "reproduce.log").stat().st_size
    assert view.reproduction is None and not view.changes_known


def test_kinds_of_the_partial_example() -> None:
    submission, log = example("calibration-binning", "partial")
    view = build_view(submission, log=log)
    kinds = {f.path: f.kind for f in view.files}
    assert kinds["README.md"] == "doc"
    assert kinds["calib/metrics.py"] == "code"
    assert kinds["reproduce.sh"] == "code"
    assert view.reproduce_sh == (submission / "reproduce.sh").read_text()


def test_the_view_round_trips_through_json() -> None:
    submission, log = example("momentum-conditioning", "buggy")
    view = build_view(submission, log=log)
    again = SubmissionView.model_validate_json(view.model_dump_json())
    assert again == view


def test_git_venvs_caches_and_node_modules_are_skipped_by_exact_name(make_submission) -> None:  # type: ignore[no-untyped-def]
    root = make_submission(
        {
            "main.py": "print(1)\n",
            ".git/config": "[core]\n",
            "venv/lib/x.py": "x = 1\n",
            "myenv/pyvenv.cfg": "home = /usr\n",
            "myenv/lib/site.py": "y = 2\n",
            "pkg/__pycache__/m.cpython-311.pyc": b"\x00\x01",
            "web/node_modules/a/index.js": "1;\n",
            "pkg.egg-info/PKG-INFO": "Name: pkg\n",
            "src/myvenv_tools/helper.py": "z = 3\n",
        }
    )
    view = build_view(root)
    assert [f.path for f in view.files] == ["main.py", "src/myvenv_tools/helper.py"]
    assert view.skipped_dirs == [
        ".git", "myenv", "pkg.egg-info", "pkg/__pycache__", "venv", "web/node_modules"
    ]  # fmt: skip


def test_binary_and_oversized_files_are_listed_but_never_read(make_submission) -> None:  # type: ignore[no-untyped-def]
    root = make_submission(
        {
            "weights.pt": b"PK\x03\x04" + bytes(range(256)) * 4,
            "blob.dat": b"abc\x00def" * 100,
            "big.py": "x = 1\n" * 50_000,
            "small.py": "y = 2\n",
        }
    )
    view = build_view(root, limits=ViewLimits(max_file_bytes=100_000))
    by_path = {f.path: f for f in view.files}
    assert (by_path["weights.pt"].kind, by_path["weights.pt"].unread) == ("binary", "binary")
    assert (by_path["blob.dat"].kind, by_path["blob.dat"].unread) == ("binary", "binary")
    assert (by_path["big.py"].kind, by_path["big.py"].unread) == ("code", "oversized")
    assert by_path["big.py"].size == 300_000
    assert all(by_path[p].text is None for p in ("weights.pt", "blob.dat", "big.py"))
    assert by_path["small.py"].text == "y = 2\n"


def test_classify_by_name_and_content() -> None:
    assert classify("Makefile", None) == "code"
    assert classify("results/metrics.json", b"{}") == "data"
    assert classify("notes.txt", b"hello") == "doc"
    assert classify("odd.txt", b"\x00\x00") == "binary"
    assert classify("LICENSE", b"MIT") == "doc"
    assert classify("weird.xyz", b"text") == "other"


def test_a_tarball_with_a_top_folder_gives_the_same_files(tmp_path: Path) -> None:
    submission, _ = example("calibration-binning", "partial")
    archive = tmp_path / "sub.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(submission, arcname="submission")
    from_tar = build_view(archive)
    from_dir = build_view(submission)
    assert from_tar.files == from_dir.files


def test_an_executed_submission_gives_outputs_changes_and_its_log(tmp_path: Path) -> None:
    executed = write_executed(
        tmp_path / "executed",
        {
            "reproduce.sh": "python3 run.py\n",
            "run.py": "print('ece 0.1')\n",
            "README.md": "# x\n",
            "results/metrics.json": '{"ece": 0.1}\n',
            "results/plot.png": b"\x89PNG\r\n\x1a\n\x00\x00",
        },
        created=["results/metrics.json", "results/plot.png"],
        modified=["README.md"],
        log="ece 0.1\n",
    )
    view = build_view(tmp_path / "not-read-when-executed-has-files", executed)
    changed = {f.path: f.changed for f in view.files}
    assert changed == {
        "README.md": "modified",
        "reproduce.sh": None,
        "results/metrics.json": "created",
        "results/plot.png": "created",
        "run.py": None,
    }
    assert view.changes_known
    assert view.log is not None and view.log.text == "ece 0.1"
    assert view.log.source == str(executed / "reproduce.log")
    assert view.reproduction is not None and view.reproduction.status == "success"


def test_an_executed_folder_without_metadata_is_one_error_naming_it(tmp_path: Path) -> None:
    submission, _ = example("calibration-binning", "partial")
    (tmp_path / "out").mkdir()
    with pytest.raises(InputError) as info:
        build_view(submission, tmp_path / "out")
    assert str(tmp_path / "out") in str(info.value)
    assert "paperbench reproduce" in str(info.value)


def test_bad_metadata_names_the_json_path(tmp_path: Path) -> None:
    submission, _ = example("calibration-binning", "partial")
    out = tmp_path / "out"
    out.mkdir()
    (out / "metadata.json").write_text(json.dumps({"status": "success", "exit_code": "zero"}))
    with pytest.raises(InputError) as info:
        build_view(submission, out)
    assert "metadata.json: $.exit_code:" in str(info.value)


def test_a_long_log_is_folded_and_cut_with_head_and_tail_kept(tmp_path: Path) -> None:
    submission, _ = example("calibration-binning", "partial")
    lines = ["setting up"] + [f"step {i}: {'x' * (i % 7)} token{i}" for i in range(20_000)]
    lines += ["FINAL ECE 0.0197"]
    log = tmp_path / "reproduce.log"
    log.write_text("\n".join(lines) + "\n")
    view = build_view(submission, log=log, limits=ViewLimits(log_max_tokens=2_000))
    assert view.log is not None
    assert view.log.raw_lines == len(lines)
    assert view.log.lines_cut > 0
    shown = view.log.text.split("\n")
    assert shown[0] == "setting up"
    assert shown[-1] == "FINAL ECE 0.0197"
    assert any("cut here" in line for line in shown)


def test_a_missing_log_file_is_an_error(tmp_path: Path) -> None:
    submission, _ = example("calibration-binning", "partial")
    with pytest.raises(InputError, match="no such log file"):
        build_view(submission, log=tmp_path / "nope.log")


def test_a_folder_holding_one_folder_is_read_from_inside_it(make_submission) -> None:  # type: ignore[no-untyped-def]
    root = make_submission({"repo/main.py": "x = 1\n", "repo/reproduce.sh": "python3 main.py\n"})
    view = build_view(root)
    assert [f.path for f in view.files] == ["main.py", "reproduce.sh"]
    assert view.reproduce_sh == "python3 main.py\n"


def test_links_are_listed_never_followed(make_submission, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "outside.txt"
    secret.write_text("host secret\n")
    root = make_submission({"main.py": "x = 1\n"})
    (root / "leak.txt").symlink_to(secret)
    (root / "leakdir").symlink_to(tmp_path)
    view = build_view(root)
    by_path = {f.path: f for f in view.files}
    assert by_path["leak.txt"].unread == "symlink" and by_path["leak.txt"].text is None
    assert by_path["leakdir"].unread == "symlink"
    assert "host secret" not in view.model_dump_json()


def test_a_missing_submission_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        build_view(tmp_path / "nope")


def test_the_log_is_read_where_reproduce_puts_it_inside_executed_tar_gz(tmp_path: Path) -> None:
    """`paperbench reproduce` archives the submission under ``submission/`` with
    ``submission/reproduce.log`` and its creation time; with no log beside metadata.json
    the view reads that one."""

    staged = tmp_path / "staged" / "submission"
    staged.mkdir(parents=True)
    (staged / "main.py").write_text("print(1)\n")
    (staged / "reproduce.log").write_text("epoch 1 done\n")
    (staged / "reproduce.log.creation_time").write_text("1700000000\n")
    out = tmp_path / "executed"
    out.mkdir()
    with tarfile.open(out / "executed.tar.gz", "w:gz") as tar:
        tar.add(staged, arcname="submission")
    (out / "metadata.json").write_text(json.dumps({"status": "success", "changed_files": {}}))
    view = build_view(tmp_path / "unused", out)
    assert view.log is not None and "epoch 1 done" in view.log.text
    assert view.file("main.py") is not None
    (out / "reproduce.log").write_text("beside metadata\n")
    beside = build_view(tmp_path / "unused", out)
    assert beside.log is not None and "beside metadata" in beside.log.text
