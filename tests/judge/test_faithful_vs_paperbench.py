"""The faithful mode against PaperBench's own functions, on the same inputs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from paperbench.judge import build_view
from paperbench.judge._faithful_files import category_files, ranking_tree
from paperbench.judge._faithful_log import fold_like_paperbench

from .upstream import (
    UPSTREAM_ENV,
    generated_logs,
    reduce_log,
    upstream_git,
    upstream_reduce_log,
    walked_files,
)

MODEL = "openai/gpt-4o"

LOGS = generated_logs()
needs_upstream = pytest.mark.skipif(
    upstream_git() is None, reason=f"set {UPSTREAM_ENV} to a git directory of openai/preparedness"
)


@pytest.mark.parametrize("name", list(LOGS))
def test_the_log_folds_as_paperbench_folds_it(name: str) -> None:
    assert fold_like_paperbench(LOGS[name]) == reduce_log(LOGS[name])


def test_a_drain3_ini_in_the_working_folder_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = LOGS["two-token lines"]
    before = fold_like_paperbench(log)
    (tmp_path / "drain3.ini").write_text("[DRAIN]\nsim_th = 0.99\ndepth = 3\n")
    monkeypatch.chdir(tmp_path)
    assert fold_like_paperbench(log) == before


@needs_upstream
def test_the_reference_fold_is_paperbench_s_own_code() -> None:
    theirs = upstream_reduce_log()
    for name, log in LOGS.items():
        assert reduce_log(log) == theirs(log), name


def _tree_paths(tree: str) -> list[str]:
    """The file paths of a fenced ranking tree, in the order it lists them."""
    lines = tree.split("\n")[2:-1]  # the opening marker, the label; the closing marker
    folders: list[str] = []
    out: list[str] = []
    for line in lines:
        depth = (len(line) - len(line.lstrip(" "))) // 4
        name = line.strip()
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name[:-1])
        else:
            out.append("/".join([*folders, name]))
    return out


BULK = {
    "a big folder sorts before the top folder's files": "data/shards/shard_{:04d}.json",
    "a big subfolder sorts before src's own modules": "src/generated/gen_{:04d}.py",
}


@pytest.mark.parametrize("layout", list(BULK))
def test_a_tree_too_long_is_cut_in_walk_order(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "s"
    files = ["README.md", "reproduce.sh", "requirements.txt", "train.py"]
    files += ["src/model.py", "src/data.py"]
    files += [BULK[layout].format(i) for i in range(2500 - len(files))]
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    view = build_view(root)
    paths = [f.path for f in category_files(view, "Code Development")]
    assert len(paths) == 2500
    shown = _tree_paths(ranking_tree(view, paths, 4000, MODEL))
    walked = [p for p in walked_files(root) if p in set(paths)]
    # the paths PaperBench's walk meets first, in its order, cut where the room ends
    assert 100 < len(shown) < len(walked)
    assert shown == walked[: len(shown)]
    assert {"README.md", "reproduce.sh", "requirements.txt", "train.py"} <= set(shown)
    if layout.endswith("src's own modules"):
        assert {"src/model.py", "src/data.py"} <= set(shown)


def test_every_file_is_listed_past_twenty_thousand(tmp_path: Path) -> None:
    archive = tmp_path / "submission.tar"
    with tarfile.open(archive, "w") as tar:
        for i in range(20_050):
            member = tarfile.TarInfo(f"outputs/run_{i:05d}.json")
            member.size = 2
            tar.addfile(member, io.BytesIO(b"{}"))
        model = b"def model():\n    return 'LAST_MODULE'\n"
        member = tarfile.TarInfo("src/model.py")
        member.size = len(model)
        tar.addfile(member, io.BytesIO(model))
    view = build_view(archive)
    # PaperBench walks every file: nothing is left unlisted, nothing is cut
    assert len(view.files) == 20_051
    assert view.files_not_listed == 0 and view.cuts == []
    assert "src/model.py" in [f.path for f in category_files(view, "Code Development")]
