"""``paperbench run`` through the real CLI: the numbers and names a user reads (summary.json,
the terminal's tables, the HTML report) come from what ran."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall
from tests.judge.conftest import fake_llm  # noqa: F401  (a fixture used here)

PAPER = "calibration-binning"


def _text(html: str) -> str:
    """The HTML's text, tags dropped and spaces folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_leaderboard_names_the_model_that_ran_not_the_configs_default(
    tmp_path: Path,
    fake_llm: FakeLLMServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """basic's config says openai/gpt-4o; --agent-model openai/gpt-4o-mini is what runs, and
    every table says so."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-fake-server")
    fake_llm.script(
        FakeReply(tool_calls=(FakeToolCall(name="submit", arguments={"summary": "done"}),))
    )
    args = ["run", "--agent", "basic", "--agent-model", "openai/gpt-4o-mini"]
    args += ["--agent-base-url", fake_llm.openai_url, "--papers", PAPER, "--judge", "dummy"]
    args += ["--skip-reproduction", "--sandbox", "local", "--runs-dir", str(tmp_path / "runs")]
    result = CliRunner().invoke(app, [*args, "--group", "g"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert [r.body["model"] for r in fake_llm.requests] == ["gpt-4o-mini"]
    group = tmp_path / "runs" / "g"
    status = json.loads((group / PAPER / "basic" / "seed-0" / "status.json").read_text())
    assert status["model"] == "openai/gpt-4o-mini"

    summary = json.loads((group / "summary.json").read_text())
    [row] = summary["agents"]
    assert (row["agent"], row["model"], row["label"]) == ("basic", "openai/gpt-4o-mini", "basic")
    assert [r["model"] for r in summary["runs"]] == ["openai/gpt-4o-mini"]
    board = next(line for line in result.stdout.splitlines() if line.startswith("│ basic "))
    assert "openai/gpt-4o-mini" in board
    assert "openai/gpt-4o " not in result.stdout and "openai/gpt-4o\n" not in result.stdout
    index = _text((group / "report" / "index.html").read_text())
    assert "basic openai/gpt-4o-mini" in index
    assert "gpt-4o " not in index.replace("gpt-4o-mini", "")
