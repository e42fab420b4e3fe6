"""A cap that keeps files out of the judge's view is said on every leaf, in grade.json and in
the report, from a real grading (the faithful judge against the fake LLM server)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.judge import build_view, grade_submission, load_judge_config, read_result
from paperbench.judge._grader import LEAVES_FILE, LeafStore
from paperbench.judge._job import ModelSettings
from paperbench.papers import PaperSource
from paperbench.rubric import iter_leaves
from paperbench.sandbox import TreeLimits
from paperbench.testing import FakeLLMServer
from tests.judge.scripted import ScriptedJudge
from tests.judge.test_grader import FILES, small_rubric
from tests.report.group import build_group

RUN = ("p-alpha", "agent-a", "seed-0")
VIEW_MAX_DEPTH = TreeLimits().max_depth
"""The view enters folders as deep as the sandbox's cap on an untrusted tree."""
CUT = f"1 folder deeper than {VIEW_MAX_DEPTH} levels not entered: what they hold is not listed"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_cut_of_the_view_is_said_on_each_leaf_and_in_the_report(env: Path) -> None:
    submission = env / "submission"
    for rel, content in FILES.items():
        (submission / rel).parent.mkdir(parents=True, exist_ok=True)
        (submission / rel).write_text(str(content))
    deep = submission.joinpath(*["d"] * (VIEW_MAX_DEPTH + 1))
    deep.mkdir(parents=True)
    (deep / "hidden.py").write_text("X = 1\n")
    view = build_view(submission)
    assert view.cuts == [CUT]
    group = build_group(env)
    folder = group.joinpath(*RUN)
    shutil.rmtree(folder / "grading")
    paper = PaperSource.resolve(None).load("calibration-binning")
    with FakeLLMServer() as server:
        server.handler = ScriptedJudge(lambda _: 1.0)
        asyncio.run(
            grade_submission(
                view,
                paper,
                load_judge_config("simple-faithful"),
                out_dir=folder,
                rubric=small_rubric(),
                settings=ModelSettings(base_url=server.openai_url, model="openai/gpt-4o"),
            )
        )
    result = read_result(folder)
    assert result.view_cuts == [CUT]
    leaves = list(iter_leaves(result.tree()))
    assert len(leaves) == 4
    assert all(node.judge_metadata and node.judge_metadata["notes"] == [CUT] for _, node in leaves)
    stored = LeafStore(folder / "grading" / LEAVES_FILE).read()
    assert len(stored) == 4 and all(grade.notes == [CUT] for grade in stored.values())
    report = CliRunner().invoke(app, ["report", str(group)], env={"COLUMNS": "200"})
    assert report.exit_code == 0, report.output
    page = (group / "report" / "runs" / "p-alpha--agent-a--seed-0.html").read_text()
    assert 'id="view-cuts"' in page
    assert page.count(f"the judge's view was cut: {CUT}") == 4
