"""``paperbench rcb validate`` through the real CLI on this project's small problem set, in
the local sandbox: every reference passes and every empty fill fails; a problem whose test
does not check it is reported, with exit code 1."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from tests.rcb.broken import copy_pset

pytestmark = pytest.mark.slow

runner = CliRunner()


def _validate(root: Path, *more: str) -> tuple[int, list[dict[str, object]]]:
    args = ["rcb", "validate", "--rcb-dir", str(root), "--sandbox", "local", "--json", *more]
    result = runner.invoke(app, args)
    return result.exit_code, json.loads(result.stdout)


def test_the_small_set_is_sound(tmp_path: Path) -> None:
    code, rows = _validate(copy_pset(tmp_path), "--concurrency", "tests=2")
    assert code == 0, rows
    assert len(rows) == 8 and sum(int(str(r["code_lines"])) for r in rows) == 19
    for row in rows:
        assert row["reference"]["passed"] is True  # type: ignore[index]
        assert row["empty"]["passed"] is False  # type: ignore[index]
        assert row["empty"]["error_class"] in ("assertion", "runtime", "name")  # type: ignore[index]


def test_a_problem_its_test_does_not_check_is_reported(tmp_path: Path) -> None:
    root = copy_pset(tmp_path)
    test = root / "pset" / "softmax-temperature" / "paper2code_test.py"
    test.write_text(re.sub(r"def test_entropy", "def _unused_entropy", test.read_text()))
    code, rows = _validate(root, "--papers", "softmax-temperature")
    assert code == 1
    bad = [r["problem"] for r in rows if r["empty"]["passed"]]  # type: ignore[index]
    assert bad == ["softmax-temperature/entropy"]
    result = runner.invoke(
        app, ["rcb", "validate", "--rcb-dir", str(root), "--sandbox", "local", "--papers",
              "softmax-temperature"],
    )  # fmt: skip
    assert result.exit_code == 1 and "3/4 problems sound" in result.stdout, result.output
    # piped, each finished test is a plain progress line on stderr
    progress = [x for x in result.stderr.splitlines() if x.startswith("tests: ")]
    assert len(progress) == 5 and progress[-1].startswith("tests: 5/5 done, "), result.stderr
    assert any(x.endswith("softmax-temperature reference passed") for x in progress), progress


def test_a_reference_that_fails_for_a_missing_library_names_the_image(tmp_path: Path) -> None:
    root = copy_pset(tmp_path)
    test = root / "pset" / "ema-smoothing" / "paper2code_test.py"
    test.write_text(f"import rcb_absent_library\n{test.read_text()}")
    args = ["rcb", "validate", "--rcb-dir", str(root), "--sandbox", "local", "--papers"]
    result = runner.invoke(app, [*args, "ema-smoothing"])
    assert result.exit_code == 1, result.output
    assert "0/4 problems sound" in result.stdout
    assert (
        "for the failing references: build ResearchCodeBench's image with `paperbench images "
        "build paperbench-rcb` and give `rcb validate --sandbox docker --image paperbench-rcb`"
    ) in " ".join(result.stdout.split())
