"""``paperbench.grade(GradeSettings)`` and ``paperbench.judge_eval(JudgeEvalSettings)``:
``paperbench grade`` and ``paperbench judge-eval`` from Python, on the settings the commands are
made from."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import paperbench
from paperbench.errors import UsageError
from paperbench.judge import GradeSettings, JudgeEvalSettings, LeafGrade, LoadedJudge
from paperbench.rubric import load_graded

from .conftest import EXAMPLES

EXAMPLE = EXAMPLES / "calibration-binning" / "partial"


def test_grade_from_python_takes_the_settings_of_the_command(llm_env: Path, tmp_path: Path) -> None:
    started: list[tuple[str, int]] = []
    leaves: list[LeafGrade] = []

    def on_start(judge: LoadedJudge, n: int) -> None:
        started.append((judge.identity.name, n))

    settings = GradeSettings(
        submission=EXAMPLE / "submission",
        paper="calibration-binning",
        judges=["dummy"],
        log=EXAMPLE / "reproduce.log",
        out=tmp_path / "o",
    )
    graded = paperbench.grade(
        settings, on_start=on_start, on_leaf=lambda judge, grade: leaves.append(grade)
    )
    assert graded.out_dir == tmp_path / "o" and graded.agreement is None
    (result,) = graded.results
    assert result.score == 1.0 and result.leaves == len(leaves) > 0
    assert started == [("dummy", len(leaves))]
    assert load_graded(tmp_path / "o" / "grading" / "grade.json").score == 1.0


def test_judge_eval_from_python_writes_its_report(llm_env: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    settings = JudgeEvalSettings(
        judges=["dummy"],
        papers=["calibration-binning"],
        concurrency={"submissions": 1},
        out=tmp_path / "out",
    )
    assert settings.concurrency == {"submissions": 1, "leaves": 16}
    report = paperbench.judge_eval(
        settings, progress=lambda done, total, judge, gold: seen.append((done, total))
    )
    (config,) = report.configs
    assert config.judge.name == "dummy" and config.overall.leaves > 0
    subs = len(report.golds)
    assert subs > 0 and seen == [(n, subs) for n in range(1, subs + 1)]
    assert (tmp_path / "out" / "report.json").is_file()


def test_a_bad_setting_is_refused_in_one_line_before_any_file(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with pytest.raises(UsageError, match=r"^--reference: only with --style papercoder$"):
        paperbench.grade(
            GradeSettings(
                submission=EXAMPLE / "submission",
                paper="calibration-binning",
                judges=["dummy"],
                reference=EXAMPLE / "submission",
                out=out,
            )
        )
    with pytest.raises(UsageError, match=r"^--judge dummy: given twice"):
        paperbench.grade(
            GradeSettings(
                submission=EXAMPLE / "submission",
                paper="calibration-binning",
                judges=["dummy", "dummy"],
                out=out,
            )
        )
    assert not out.exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(UsageError, match=r"^--out .*: the folder is not empty"):
        paperbench.judge_eval(JudgeEvalSettings(judges=["dummy"], out=full))
    assert sorted(p.name for p in full.iterdir()) == ["x"]
    with pytest.raises(ValidationError, match="unknown stage 'gpu'"):
        JudgeEvalSettings(concurrency={"gpu": 1})
    with pytest.raises(ValidationError, match="at least 1 item"):
        GradeSettings(submission=tmp_path, paper="calibration-binning", judges=[])
