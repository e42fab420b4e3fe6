"""Cases where `simple-faithful` parted from PaperBench's SimpleJudge (issue 28), each built
and checked on what the fake server received."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from paperbench.judge import build_view
from paperbench.papers import Paper, PaperSource
from paperbench.testing import FakeLLMServer

from .scripted import ScriptedJudge, all_text, last_user_text
from .test_grader import SCORES, _judge, by_word, grade

T0 = 1_700_000_000
"""reproduce.log.creation_time in these tests."""

FILES = {
    "main.py": "def train_alpha():\n    return 'MAIN_CODE'\n",
    "README.md": "# Replication\nREADME_TEXT\n",
    "results.csv": "method,ece\nALPHA,SAME_BYTES_RESULT\n",
    "reproduce.sh": "#!/bin/bash\npython main.py > results.csv\n",
}


@pytest.fixture
def paper() -> Paper:
    return PaperSource.resolve(None).load("calibration-binning")


def _executed(out: Path, files: dict[str, str], *, written: set[str]) -> Path:
    """An executed submission as `paperbench reproduce` writes it: ``written`` were written
    by the run (mtime after the log's creation time) with the bytes they had before, so the
    metadata's content comparison lists no change."""
    staged = out / "_staged" / "submission"
    for rel, content in files.items():
        path = staged / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        when = T0 + 100 if rel in written else T0 - 100
        os.utime(path, (when, when))
    (staged / "reproduce.log").write_text("done\n")
    (staged / "reproduce.log.creation_time").write_text(f"{T0}\n")
    with tarfile.open(out / "executed.tar.gz", "w:gz") as tar:
        tar.add(staged, arcname="submission")
    (out / "reproduce.log").write_text("done\n")
    metadata = {
        "status": "success",
        "exit_code": 0,
        "changed_files": {"created": [], "modified": [], "deleted": []},
    }
    (out / "metadata.json").write_text(json.dumps(metadata))
    return out


@pytest.mark.parametrize("mode", ["simple-faithful", "simple"])
def test_an_output_written_again_with_the_same_bytes_is_shown(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path, mode: str
) -> None:
    executed = _executed(tmp_path / "x", FILES, written={"results.csv"})
    view = build_view(tmp_path / "unused", executed)
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["results.csv", "README.md"])
    result = grade(fake_llm, view, paper, _judge(tmp_path, mode), tmp_path / "o")
    asked = [all_text(r) for r in fake_llm.requests if "DELTA" in last_user_text(r)]
    assert asked, "the Result Analysis leaf was scored without a call"
    assert any("SAME_BYTES_RESULT" in text for text in asked)
    assert result.sources.get("shortcut", 0) == 0
