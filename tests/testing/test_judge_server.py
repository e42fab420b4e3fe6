"""The offline judge server the docs give a newcomer answers every call of each judge mode:
no leaf is graded on a fallback (a failed shortlist, an unparsed answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.testing import FakeLLMServer
from paperbench.testing.judge_server import judge_handler

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calibration-binning" / "partial"


@pytest.mark.parametrize("judge", ["simple", "simple-faithful"])
def test_the_judge_server_answers_every_call_of_the_judge(tmp_path: Path, judge: str) -> None:
    server = FakeLLMServer(validate=True).start()
    server.handler = judge_handler(1.0)
    try:
        args = ["grade", str(EXAMPLE / "submission"), "--paper", EXAMPLE.parent.name]
        args += ["--log", str(EXAMPLE / "reproduce.log"), "--judge", judge, "--code-dev"]
        args += ["--base-url", server.openai_url, "--model", "openai/gpt-4o"]
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    grade = json.loads((tmp_path / "o" / "grading" / "grade.json").read_text())
    assert grade["selection_notes"] == {} and grade["invalid_leaves"] == 0, result.output
