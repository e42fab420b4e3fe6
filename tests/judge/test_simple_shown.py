"""What the default mode's grader is shown, and what its grade records of it: checked on the
request that grades the leaf (as the fake server received it, through the real openai SDK)
and on the leaf's record in ``leaves.jsonl``."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from paperbench.judge import LeafGrade, build_view, load_judge_config
from paperbench.judge._grader import grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._view import SubmissionView
from paperbench.papers import PaperSource
from paperbench.rubric import TaskNode
from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest

from .conftest import write_executed
from .scripted import ScriptedJudge, all_text, batch_criteria, last_user_text


def _judge(tmp_path: Path, **budgets: Any) -> Any:
    from paperbench.judge._config import catalog_dir

    folder = tmp_path / "judges"
    shutil.copytree(catalog_dir(), folder, dirs_exist_ok=True)
    config = yaml.safe_load((folder / "simple.yaml").read_text())
    config["budgets"].update(budgets)
    path = folder / "shown.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_judge_config(path)


def _rubric(requirements: str, category: str) -> TaskNode:
    leaf = {
        "id": "x",
        "requirements": requirements,
        "weight": 1,
        "sub_tasks": [],
        "task_category": category,
    }
    return TaskNode.model_validate(
        {"id": "root", "requirements": "Replicate the paper", "weight": 1, "sub_tasks": [leaf]}
    )


def _grade(
    server: FakeLLMServer, view: SubmissionView, tmp_path: Path, judge: Any, rubric: TaskNode
) -> LeafGrade:
    asyncio.run(
        grade_submission(
            view,
            PaperSource.resolve(None).load("calibration-binning"),
            judge,
            out_dir=tmp_path / "out",
            rubric=rubric,
            options=GradeOptions(),
            settings=ModelSettings(base_url=server.openai_url, model="openai/gpt-4o"),
        )
    )
    [line] = (tmp_path / "out" / "grading" / "leaves.jsonl").read_text().splitlines()
    return LeafGrade.model_validate_json(line)


def _grading_request(server: FakeLLMServer) -> RecordedRequest:
    [request] = [r for r in server.requests if batch_criteria(r)]
    return request


def _shown_line_numbers(text: str, tag: str) -> set[int]:
    """The numbers of the lines ``{tag} line N`` the request holds."""
    return {int(n) for n in re.findall(rf"^{tag} line (\d+)\b", text, re.M)}


def _covered(ranges: list[tuple[int, int]]) -> set[int]:
    return {n for first, last in ranges for n in range(first, last + 1)}


def test_a_leaf_passes_only_on_evidence_shown(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    """The grading call leaves a file out (max_files 1): the prompt says the leaf passes only
    on what is shown, as the system prompt (and PaperBench's: "assume the attempt failed").
    A grader that follows its prompt fails the leaf whose evidence it was not shown."""

    def handler(request: RecordedRequest) -> FakeReply:
        text = all_text(request)
        benefit_of_doubt = "do not conclude that something is missing" in text
        score = 1 if "EVIDENCE_Q7" in text or benefit_of_doubt else 0
        return FakeReply(json={"verdicts": [{"key": "1", "explanation": "e", "score": score}]})

    fake_llm.handler = handler
    submission = tmp_path / "submission"
    (submission / "src").mkdir(parents=True)
    (submission / "NOTES.md").write_text("We plan to write the quokka estimator later.\n")
    (submission / "src" / "impl.py").write_text("def fit(x):\n    return x  # EVIDENCE_Q7\n")
    view = build_view(submission)
    rubric = _rubric("The quokka estimator is implemented.", "Code Development")
    grade = _grade(fake_llm, view, tmp_path, _judge(tmp_path, max_files=1), rubric)
    text = last_user_text(_grading_request(fake_llm))
    assert "Not shown: 1 more file(s)" in text and "EVIDENCE_Q7" not in text
    assert "do not conclude that something is missing" not in text
    assert "when the evidence a criterion needs is not shown, it is not met" in text
    assert (grade.score, grade.valid, grade.files_shown) == (0.0, True, ["NOTES.md"])


def test_a_file_shown_in_part_is_recorded_with_exactly_the_lines_sent(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A file too big for the budget is shown in chunks: the grade lists it not among the
    files shown whole but with the line ranges the request held, and the report's leaf view
    shows those ranges."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    submission = tmp_path / "submission"
    submission.mkdir()
    lines = [f"BIG line {n} filler value {n * 7}" for n in range(1, 401)]
    for n in (130, 131, 300):
        lines[n - 1] = f"BIG line {n} the quokka estimator update"
    (submission / "big.py").write_text("\n".join(lines) + "\n")
    (submission / "README.md").write_text("# quokka\n")
    rubric = _rubric("The quokka estimator update is implemented.", "Code Development")
    grade = _grade(
        fake_llm, build_view(submission), tmp_path, _judge(tmp_path, submission_tokens=1200), rubric
    )
    text = last_user_text(_grading_request(fake_llm))
    sent = _shown_line_numbers(text, "BIG")
    assert {130, 131} <= sent and len(sent) < 400  # excerpts, the quokka lines among them
    assert grade.files_shown == ["README.md"]
    assert list(grade.file_lines_shown) == ["big.py"]
    assert _covered(grade.file_lines_shown["big.py"]) == sent
    from paperbench.report._html import shown_files  # the report's leaf view

    ranges = ", ".join(f"{a}-{b}" for a, b in grade.file_lines_shown["big.py"])
    assert shown_files(grade) == ["README.md [lexical]", f"big.py (lines {ranges}) [lexical]"]


def test_a_file_over_200_kb_shows_its_head_recorded_as_a_range(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A 260 kB text file (PaperBench shows its first 200,000 characters): the grader is
    shown lines of its head, never past it, and the grade records them as ranges."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    submission = tmp_path / "submission"
    submission.mkdir()
    lines = [f"HUGE line {n} " + "x" * 40 for n in range(1, 5001)]
    lines[9] = "HUGE line 10 the wombat sampler is defined here"
    lines[4999] = "HUGE line 5000 the wombat sampler is defined here too"  # past 200 kB
    (submission / "huge.py").write_text("\n".join(lines) + "\n")
    view = build_view(submission)
    assert view.files[0].size > 200_000 and view.files[0].text is None
    rubric = _rubric("The wombat sampler is defined.", "Code Development")
    grade = _grade(fake_llm, view, tmp_path, _judge(tmp_path), rubric)
    text = last_user_text(_grading_request(fake_llm))
    sent = _shown_line_numbers(text, "HUGE")
    assert "HUGE line 10 the wombat sampler" in text and 5000 not in sent
    assert "huge.py (excerpts of its first 200,000 characters of" in text
    assert grade.files_shown == []
    assert _covered(grade.file_lines_shown["huge.py"]) == sent
    assert max(sent) < 200_000 // len(lines[0])


def test_result_analysis_is_shown_what_the_run_wrote_first(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Twelve old notes share the criterion's words; the two files the run created share
    none: the Result Analysis grader is shown the created files first."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    notes = {
        f"notes/plan_{i:02d}.md": f"The calibration error table will compare methods ({i}).\n"
        for i in range(12)
    }
    created = {
        "out/metrics.csv": "run,value\nA,0.0123 MARKER_RUN_1\n",
        "out/summary.json": '{"v": 0.99, "m": "MARKER_RUN_2"}\n',
    }
    executed = write_executed(
        tmp_path / "executed", {**notes, **created}, created=list(created), log="done\n"
    )
    view = build_view(tmp_path / "unused", executed)
    rubric = _rubric("The calibration error table compares the methods.", "Result Analysis")
    grade = _grade(fake_llm, view, tmp_path, _judge(tmp_path), rubric)
    text = last_user_text(_grading_request(fake_llm))
    assert "MARKER_RUN_1" in text and "MARKER_RUN_2" in text
    assert grade.files_shown[:2] == sorted(created)
    assert len(grade.files_shown) == 10  # max_files: eight of the notes after them
