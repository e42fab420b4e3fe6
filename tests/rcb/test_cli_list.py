"""``paperbench rcb list`` through the real CLI: the table, --json, where the problem set
comes from, and every malformed input as one error line with file and line (exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from paperbench.cli import app
from tests.rcb.broken import MALFORMED, PSET
from tests.rcb.test_load import EXPECTED

runner = CliRunner()


def _run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return runner.invoke(
        app, ["rcb", "list", *args], env={"COLUMNS": "200", "PAPERBENCH_RCB_DIR": "", **(env or {})}
    )


def test_json_lists_every_problem_with_its_code_lines_and_depth() -> None:
    result = _run(["--rcb-dir", str(PSET.parent), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    got = [(r["paper"], r["snippet"], r["code_lines"], r["depth"], r["parent"]) for r in rows]
    assert got == EXPECTED
    assert {r["file"] for r in rows} == {"ema.py", "softmax.py"}
    assert {r["test"] for r in rows} == {"paper2code_test.py"}
    assert rows[0]["id"] == "ema-smoothing/ema recursion"
    assert rows[0]["line"] == 10


def test_the_table_shows_papers_problems_indented_by_depth_and_totals() -> None:
    result = _run(["--rcb-dir", str(PSET)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 papers, 8 problems, 19 code lines" in out
    assert "│ ema recursion " in out
    assert "│   ema update " in out
    assert "│   stable exponent " in out
    assert "softmax.py:22" in out
    assert out.count("paper2code_test.py") == 2  # once per paper


def test_the_environment_variable_names_the_problem_set() -> None:
    result = _run(["--json"], env={"PAPERBENCH_RCB_DIR": str(PSET.parent)})
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.output)) == 8


def test_no_problem_set_says_how_to_get_one() -> None:
    result = _run([])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "--rcb-dir" in result.output
    assert "clone https://github.com/PatrickHua/ResearchCodeBench" in result.output


@pytest.mark.parametrize("case", list(MALFORMED))
def test_every_malformed_set_is_one_error_line_with_file_and_line(
    tmp_path: Path, case: str
) -> None:
    bad = MALFORMED[case]
    root, culprit = bad.make(tmp_path)
    result = _run(["--rcb-dir", str(root)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {culprit}"), (lines[0], culprit)
    assert bad.words in lines[0]
