"""The faithful mode against PaperBench's own functions, on the same inputs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from paperbench.judge import build_view
from paperbench.judge._faithful_files import category_files, ranking_tree
from paperbench.judge._faithful_log import fold_like_paperbench
from paperbench.papers import PaperSource
from paperbench.testing import FakeLLMServer

from .scripted import ScriptedJudge, all_text, last_user_text
from .test_grader import SCORES, _judge, by_word, grade, small_rubric
from .test_prompts import fenced_blocks
from .upstream import (
    UPSTREAM_ENV,
    generated_logs,
    paperbench_reads,
    prior_requirements,
    reduce_log,
    subtree_requirements,
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


SUBMISSION: dict[str, str | bytes] = {
    "main.py": "def train_alpha():\n    return 'MAIN_CODE'\n",
    "calib/binning.py": "def binning_estimator(x):\n    return 'BINNING_CODE'\n",
    "src/util.py": "UTIL_CODE = 1\n",
    "README.md": "# Replication\nREADME_TEXT\n",
    "results.csv": "method,ece\nALPHA,RESULT_ROW\n",
    "weights.pt": b"\x80\x03WEIGHTS\x00\xff\xfe" * 8,
}
ANSWER = [
    "binning.py",  # a bare name: not at the top, so not read
    "results.csv",  # outside Code Development's files: read
    "main.py",
    "main.py",  # named twice: read twice
    "weights.pt",  # binary: read, decoded as Latin-1
    "../secret.txt",  # outside the submission: PaperBench reads it, the host never does
    "/etc/passwd",  # an absolute path: PaperBench cannot label it, skipped
    "- README.md",  # not a path as written: skipped
    "src/../calib/binning.py",  # read, labelled as written
    "./README.md",
    "src/util.py",  # the eleventh line: past the ten read
]


def test_the_answer_is_read_as_written(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    root = tmp_path / "submission"
    for rel, content in SUBMISSION.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (root / rel).write_bytes(content)
        else:
            (root / rel).write_text(content)
    (tmp_path / "secret.txt").write_text("SECRET_OUTSIDE\n")
    answer = "\n".join(ANSWER)
    theirs = paperbench_reads(answer, root, 10)
    assert [label for label, _ in theirs] == [
        "results.csv", "main.py", "main.py", "weights.pt", "../secret.txt",
        "src/../calib/binning.py", "README.md",
    ]  # fmt: skip
    inside = [(label, text) for label, text in theirs if not label.startswith("../")]
    view = build_view(root)
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=ANSWER)
    paper = PaperSource.resolve(None).load("calibration-binning")
    grade(fake_llm, view, paper, _judge(tmp_path, "simple-faithful"), tmp_path / "out")
    request = next(
        all_text(r)
        for r in fake_llm.requests
        if "The criterion you grade now" in last_user_text(r) and "> ALPHA" in last_user_text(r)
    )
    blocks = [b for b in fenced_blocks(request) if b.startswith("file: ")]
    # the same files in the same order with the same labels and text, outside files left out
    assert [(b.split("\n", 1)[0][6:], b.split("\n", 1)[1]) for b in blocks] == inside
    assert "SECRET_OUTSIDE" not in request and "UTIL_CODE" not in request


def test_a_subtree_at_the_depth_limit_is_sent_in_its_own_texts(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    rubric = small_rubric()
    data = rubric.to_dict()
    root = tmp_path / "submission"
    for rel, content in SUBMISSION.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content if isinstance(content, bytes) else content.encode())
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["main.py"])
    paper = PaperSource.resolve(None).load("calibration-binning")
    judge = _judge(tmp_path, "simple-faithful")
    grade(fake_llm, build_view(root), paper, judge, tmp_path / "out", rubric=rubric, max_depth=2)
    grading = [
        all_text(r) for r in fake_llm.requests if "The criterion you grade now" in last_user_text(r)
    ]
    assert len(grading) == 2
    for node, word in zip(data["sub_tasks"], ["ALPHA", "DELTA"], strict=True):
        # both at level 2: each graded as one subtree
        criterion = subtree_requirements(node)
        (request,) = [t for t in grading if word in t.split("The criterion you grade now")[1]]
        # PaperBench's words for the subtree, and the criteria before it in their own texts
        assert "> " + criterion.replace("\n", "\n> ") in request
        prior = "".join(f"- {text}\n" for text in prior_requirements(data, node["id"]))
        assert "these come before the one you grade (do not grade them):\n\n" + prior in request
    assert any("- Method\n" in t for t in grading)
