"""The faithful mode shows the model what PaperBench's SimpleJudge shows it: checked on the
requests the fake server received."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from paperbench.judge import build_view
from paperbench.papers import Paper, PaperSource
from paperbench.testing import FakeLLMServer, RecordedRequest, requested_schema

from .scripted import ScriptedJudge, all_text, last_user_text
from .test_grader import SCORES, _judge, by_word, grade

T0 = 1_700_000_000
"""reproduce.log.creation_time in these tests."""

RANKED = [
    "results.csv",
    "old.csv",
    "main.py",
    "README.md",
    "conf.json",
    "notes.tex",
    "big.py",
    "deep/a/b/c/d/e/far.py",
]


@pytest.fixture
def paper() -> Paper:
    return PaperSource.resolve(None).load("calibration-binning")


def _kind(request: RecordedRequest) -> str:
    if requested_schema(request) is not None:
        return "parsing"
    if "The criterion you grade now" in last_user_text(request):
        return "grading"
    return "ranking"


def _request(server: FakeLLMServer, kind: str, word: str) -> str:
    found = [all_text(r) for r in server.requests if _kind(r) == kind and word in last_user_text(r)]
    assert len(found) == 1, (kind, word, len(found))
    return found[0]


def _submission(
    root: Path, files: dict[str, str], *, new: set[str], stamp: str | None = str(T0)
) -> Path:
    """Files older than the log's creation time, except ``new`` (modified after it)."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        when = T0 + 100 if rel in new else T0 - 100
        os.utime(path, (when, when))
    if stamp is not None:
        (root / "reproduce.log.creation_time").write_text(stamp)
    return root


FILES = {
    "main.py": "def train_alpha():\n    return 'MAIN_CODE'\n",
    "README.md": "# Replication\nREADME_TEXT\n",
    "results.csv": "method,ece\nALPHA,NEW_RESULT\n",
    "old.csv": "method,ece\nALPHA,OLD_RESULT\n",
    "conf.json": '{"JSON_CONFIG": 1}\n',
    "notes.tex": "TEX_TABLE\n",
    "reproduce.sh": "#!/bin/bash\npython main.py > results.csv\n",
}


def test_each_category_sees_its_files(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=RANKED)
    view = build_view(_submission(tmp_path / "s", FILES, new={"results.csv"}))
    grade(fake_llm, view, paper, _judge(tmp_path, "simple-faithful"), tmp_path / "o")
    # Code Development: docs and code (.json is code), never a table
    tree = _request(fake_llm, "ranking", "ALPHA binning")
    assert "main.py" in tree and "conf.json" in tree and "README.md" in tree
    assert ".csv" not in tree and "notes.tex" not in tree
    shown = _request(fake_llm, "grading", "> ALPHA binning")
    assert "MAIN_CODE" in shown and "JSON_CONFIG" in shown and "README_TEXT" in shown
    assert "NEW_RESULT" not in shown and "OLD_RESULT" not in shown and "TEX_TABLE" not in shown
    # Result Analysis: docs and the tables changed after the log's creation time
    tree = _request(fake_llm, "ranking", "DELTA")
    assert "results.csv" in tree and "README.md" in tree
    assert "old.csv" not in tree and "main.py" not in tree and "notes.tex" not in tree
    shown = _request(fake_llm, "grading", "> DELTA")
    assert "NEW_RESULT" in shown and "README_TEXT" in shown
    assert "OLD_RESULT" not in shown and "MAIN_CODE" not in shown and "JSON_CONFIG" not in shown


def test_changed_means_modified_at_or_after_the_creation_time(tmp_path: Path) -> None:
    from paperbench.judge._faithful_files import is_changed, no_results

    view = build_view(_submission(tmp_path / "s", FILES, new={"results.csv"}))
    assert view.log_created == T0
    changed = {f.path for f in view.files if is_changed(view, f)}
    assert changed - {"reproduce.log.creation_time"} == {"results.csv"}
    assert not no_results(view)
    # no creation time and no log: PaperBench's fallback is "now", nothing changed
    view = build_view(_submission(tmp_path / "t", FILES, new=set(FILES), stamp=None))
    assert view.log_created is None and no_results(view)
    # without the stamp, the log's own mtime
    root = _submission(tmp_path / "u", FILES, new={"results.csv"}, stamp=None)
    (root / "reproduce.log").write_text("done\n")
    os.utime(root / "reproduce.log", (T0, T0))
    assert build_view(root).log_created == T0


def test_archive_members_keep_their_mtimes(tmp_path: Path) -> None:
    root = _submission(tmp_path / "s", FILES, new={"results.csv"})
    archive = tmp_path / "s.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="s")
    view = build_view(archive)
    assert view.log_created == T0
    mtimes = {f.path: f.mtime for f in view.files}
    assert mtimes["results.csv"] == T0 + 100 and mtimes["old.csv"] == T0 - 100


def test_no_changed_docs_or_tables_scores_result_analysis_zero_without_a_call(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=RANKED)
    # a changed code file does not count: only docs and tables are results
    view = build_view(_submission(tmp_path / "s", FILES, new={"main.py"}))
    result = grade(fake_llm, view, paper, _judge(tmp_path, "simple-faithful"), tmp_path / "o")
    assert not any("DELTA" in last_user_text(r) for r in fake_llm.requests)
    assert result.sources == {"llm": 3, "shortcut": 1} and result.invalid_leaves == 0
    assert result.scores_by_category["Result Analysis"] == 0


def test_a_large_file_is_read_to_200_kb_and_listed(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    lines = [f"# line {i:06d} {'x' * 40}\n" for i in range(6000)]  # 300 kB
    big = "".join(lines)
    assert len(big) > 300_000
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["big.py"])
    view = build_view(_submission(tmp_path / "s", {**FILES, "big.py": big}, new=set()))
    grade(fake_llm, view, paper, _judge(tmp_path, "simple-faithful"), tmp_path / "o")
    assert "big.py" in _request(fake_llm, "ranking", "ALPHA binning")
    shown = _request(fake_llm, "grading", "> ALPHA binning")
    kept = big[:200_000]
    last_whole = kept[: kept.rindex("\n") + 1].splitlines()[-1]
    assert lines[0].strip() in shown and last_whole in shown
    assert big[200_000:].splitlines()[1] not in shown
