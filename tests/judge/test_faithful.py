"""The faithful mode shows the model what PaperBench's SimpleJudge shows it: checked on the
requests the fake server received."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from paperbench.judge import build_view
from paperbench.papers import Paper, PaperSource
from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest, requested_schema

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
    # Result Analysis: docs and the tables changed after the log's creation time
    tree = _request(fake_llm, "ranking", "DELTA")
    assert "results.csv" in tree and "README.md" in tree
    assert "old.csv" not in tree and "main.py" not in tree and "notes.tex" not in tree
    # the files shown are those the answer names, whatever the category: PaperBench reads
    # every path named (test_faithful_vs_paperbench.py: test_the_answer_is_read_as_written)
    for leaf in ("> ALPHA binning", "> DELTA"):
        shown = _request(fake_llm, "grading", leaf)
        assert all(w in shown for w in ("MAIN_CODE", "NEW_RESULT", "OLD_RESULT", "TEX_TABLE"))


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


WINDOWED_MODEL = "openai/chatgpt-4o-latest"
"""A model the limits table does not know (as one behind a compatible endpoint), so that its
window is the config's ``budgets.context_window``; it counts tokens as gpt-4o does."""


def _windowed(tmp_path: Path, window: int) -> Any:
    """The faithful config with ``window`` as the window of :data:`WINDOWED_MODEL`."""
    from paperbench.judge import load_judge_config
    from paperbench.llm import context_window

    assert context_window(WINDOWED_MODEL) is None
    judge = _judge(tmp_path, "simple-faithful")
    text = judge.path.read_text().replace("context_window: 200000", f"context_window: {window}")
    # no reasoning effort: OpenAI refuses one for a model it does not know to reason
    text = text.replace(
        "{model: openai/o3-mini-2025-01-31, reasoning_effort: high}", "openai/o3-mini-2025-01-31"
    )
    judge.path.write_text(text)
    return load_judge_config(judge.path)


def test_the_file_that_does_not_fit_is_cut_to_fill_the_room(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.llm import count_tokens

    lines = [f"# row {i:05d} of the big file\n" for i in range(4000)]
    files = {**FILES, "big.py": "".join(lines)}
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["main.py", "big.py", "README.md"])
    paper_tokens = count_tokens(paper.paper_text(), "openai/gpt-4o")
    # room for the files (Code Development: no log): 3000 tokens
    judge = _windowed(tmp_path, paper_tokens + 10_000 + 2000 + 3000)
    view = build_view(_submission(tmp_path / "s", files, new=set()))
    grade(fake_llm, view, paper, judge, tmp_path / "o", model=WINDOWED_MODEL)
    shown = _request(fake_llm, "grading", "> ALPHA binning")
    assert "MAIN_CODE" in shown
    kept = [line.strip() for line in lines if line.strip() in shown]
    assert 100 < len(kept) < len(lines)  # cut, not dropped
    assert kept == [line.strip() for line in lines[: len(kept)]]  # the head, whole lines
    assert "README_TEXT" not in shown  # nothing after the cut file


def test_the_log_is_folded_and_its_first_half_window_kept(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.llm import count_tokens

    log = "".join(f"step {i} loss 0.{i:04d} lr 0.001\n" for i in range(500))
    log += "".join(f"EVAL{i:05d} seed result table row {i * 7919 % 1000}\n" for i in range(20_000))
    log += "FINAL_LINE accuracy 0.9\n"
    root = _submission(tmp_path / "s", FILES, new={"results.csv"})
    (root / "reproduce.log").write_text(log)
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["main.py"])
    paper_tokens = count_tokens(paper.paper_text(), "openai/gpt-4o")
    window = 2 * paper_tokens + 40_000
    grade(
        fake_llm,
        build_view(root),
        paper,
        _windowed(tmp_path, window),
        tmp_path / "o",
        model=WINDOWED_MODEL,
    )
    shown = _request(fake_llm, "grading", "GAMMA")
    # 500 lines of one template folded into the first plus a count
    assert "step 0 loss 0.0000 lr 0.001\n  (repeated 500 times)" in shown
    assert "step 1 loss" not in shown
    # the head of the folded log is kept, the end is cut
    assert "EVAL00000" in shown and "FINAL_LINE" not in shown
    start = shown.index("step 0 loss")
    end = shown.index("\n", shown.rindex("EVAL"))
    assert count_tokens(shown[start:end], "openai/gpt-4o") <= window // 2


def test_a_deep_tree_keeps_four_folders(tmp_path: Path) -> None:
    from paperbench.judge._faithful_files import ranking_tree

    root = tmp_path / "s"
    for i in range(400):
        path = root / "a" / "b" / "c" / "d" / "e" / f"deep_{i:03d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("X = 1\n")
    (root / "a" / "b" / "c" / "d" / "four.py").write_text("Y = 2\n")
    (root / "README.md").write_text("top\n")
    view = build_view(root)
    paths = [f.path for f in view.files]
    tree = ranking_tree(view, paths, 2000, "openai/gpt-4o")
    assert "four.py" in tree and "deep_000.py" not in tree
    assert "deep_000.py" in ranking_tree(view, paths, 100_000, "openai/gpt-4o")


def test_twenty_thousand_files_grade_with_a_tree_that_fits(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.llm import count_tokens

    root = tmp_path / "s"
    for i in range(19_999):
        path = root / f"pkg{i % 20}" / "a" / "b" / f"mod_{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"X = {i}\n")
    (root / "main.py").write_text("def train_alpha():\n    return 'MAIN_CODE'\n")
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["main.py"])
    paper_tokens = count_tokens(paper.paper_text(), "openai/gpt-4o")
    window = paper_tokens + 30_000
    view = build_view(root)
    assert len(view.files) == 20_000
    result = grade(
        fake_llm, view, paper, _windowed(tmp_path, window), tmp_path / "o", model=WINDOWED_MODEL
    )
    assert result.invalid_leaves == 0
    ranking = [r for r in fake_llm.requests if _kind(r) == "ranking"]
    assert ranking
    for request in ranking:
        text = all_text(request)
        # too long even four folders deep: cut at the end, and the prompt fits the window
        assert count_tokens(text, "openai/gpt-4o") < window
        assert "main.py" in text and "mod_00000.py" in text and "mod_19989.py" not in text
    assert "MAIN_CODE" in _request(fake_llm, "grading", "> ALPHA binning")


def test_a_cut_off_verdict_is_asked_again_with_more_room(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    seen: list[int] = []

    def cut_once(text: str) -> FakeReply | None:
        if "GAMMA" in text and not seen:
            seen.append(1)
            return FakeReply(text="Expected ... Found ... (cut", stop="max_tokens")
        return None

    from paperbench.judge import load_judge_config

    fake_llm.handler = ScriptedJudge(by_word(SCORES), fault=cut_once)
    view = build_view(_submission(tmp_path / "s", FILES, new={"results.csv"}))
    judge = _judge(tmp_path, "simple-faithful")
    # the grading role without a max_output_tokens (the fake server refuses max_tokens for
    # o3-mini on a custom endpoint, so the retry is shown with gpt-4.1)
    text = judge.path.read_text().replace(
        "grading: {model: openai/o3-mini-2025-01-31, reasoning_effort: high}",
        "grading: openai/gpt-4.1",
    )
    judge.path.write_text(text)
    result = grade(fake_llm, view, paper, load_judge_config(judge.path), tmp_path / "o", model=None)
    assert result.invalid_leaves == 0
    grading = [r for r in fake_llm.requests if _kind(r) == "grading"]
    # no limit on the answer unless the config sets one
    limits = {key for r in grading for key in r.body if "max" in key and "tokens" in key}
    gamma = [r for r in grading if "> GAMMA" in last_user_text(r)]
    assert len(gamma) == 2
    assert not any("tokens" in k for k in gamma[0].body if "max" in k)
    retry = {k: v for k, v in gamma[1].body.items() if "max" in k and "tokens" in k}
    assert retry and all(v >= 20_000 for v in retry.values())
    assert limits == set(retry)
    others = [r for r in grading if r not in gamma]
    assert others and not any("max" in k and "tokens" in k for r in others for k in r.body)


def test_a_reasoning_grader_gets_no_answer_limit(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(by_word(SCORES))
    view = build_view(_submission(tmp_path / "s", FILES, new={"results.csv"}))
    judge = _judge(tmp_path, "simple-faithful")
    result = grade(fake_llm, view, paper, judge, tmp_path / "o", model=None)
    assert result.invalid_leaves == 0
    grading = [r for r in fake_llm.requests if _kind(r) == "grading"]
    assert {r.model for r in grading} == {"o3-mini-2025-01-31"} and len(grading) == 4
    assert not any("max" in k and "tokens" in k for r in grading for k in r.body)


def _wide_rubric(n: int) -> Any:
    from paperbench.rubric import TaskNode

    leaves = [
        {
            "id": f"s{i}",
            "requirements": f"SIB{i:02d} ALPHA part {i}",
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Development",
        }
        for i in range(n)
    ]
    return TaskNode.model_validate(
        {"id": "root", "requirements": "ROOT_REQ", "weight": 1, "sub_tasks": leaves}
    )


def test_every_preceding_criterion_is_shown(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(by_word(SCORES))
    view = build_view(_submission(tmp_path / "s", FILES, new=set()))
    judge = _judge(tmp_path, "simple-faithful")
    grade(fake_llm, view, paper, judge, tmp_path / "o", rubric=_wide_rubric(30))
    last = _request(fake_llm, "grading", "> SIB29")
    # no cap (the simple mode shows 20 earlier siblings at most)
    assert all(f"SIB{i:02d}" in last for i in range(29)) and "ROOT_REQ" in last


def test_the_paper_with_a_cap_shows_its_last_five() -> None:
    from paperbench.judge._faithful import prior_for

    rubric = _wide_rubric(30)
    assert len(prior_for(rubric, (29,), "calibration-binning")) == 30
    capped = prior_for(rubric, (29,), "pinn")
    assert capped == [f"SIB{i:02d} ALPHA part {i}" for i in range(24, 29)]
    assert prior_for(rubric, (), "pinn") == []


def test_judge_eval_takes_the_same_shortcut_on_a_paperbench_archive(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    import asyncio
    from dataclasses import dataclass

    from paperbench.judge._gold import grade_gold
    from paperbench.judge._job import ModelSettings
    from paperbench.rubric import TaskNode

    from .test_grader import small_rubric

    # a JudgeEval submission: the log and its creation time inside, results older than it
    root = _submission(tmp_path / "s", FILES, new={"main.py"})
    (root / "reproduce.log").write_text("done\n")
    archive = tmp_path / "submission.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname="submission")

    @dataclass(frozen=True)
    class Gold:
        paper_id: str = "calibration-binning"
        name: str = "calibration-binning/old-results"
        submission: Path = archive
        log: Path | None = None
        data_dir: Path | None = None

        def rubric(self) -> TaskNode:
            return small_rubric()

    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=RANKED)
    tree = asyncio.run(
        grade_gold(
            Gold(),
            _judge(tmp_path, "simple-faithful"),
            out_root=tmp_path / "eval",
            settings=ModelSettings(base_url=fake_llm.openai_url, model="openai/gpt-4o"),
        )
    )
    assert not any("DELTA" in last_user_text(r) for r in fake_llm.requests)
    assert any("GAMMA" in last_user_text(r) for r in fake_llm.requests)
    (results,) = [n for n in tree.sub_tasks if n.id == "B"]
    assert results.score == 0


def test_a_paper_longer_than_the_window_is_cut_from_the_end(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    import json

    from .test_grader import small_rubric

    folder = tmp_path / "data" / "papers" / "toy"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("id: toy\ntitle: A toy paper\n")
    text = "PAPER_HEAD\n" + "".join(f"Section {i}: words about binning.\n" for i in range(4000))
    text += "PAPER_TAIL\n"
    (folder / "paper.md").write_text(text)
    (folder / "rubric.json").write_text(json.dumps(small_rubric().to_dict()))
    toy = PaperSource.resolve(tmp_path / "data").load("toy")
    fake_llm.handler = ScriptedJudge(by_word(SCORES))
    view = build_view(_submission(tmp_path / "s", FILES, new={"results.csv"}))
    grade(fake_llm, view, toy, _windowed(tmp_path, 20_000), tmp_path / "o", model=WINDOWED_MODEL)
    shown = _request(fake_llm, "grading", "> ALPHA binning")
    assert "PAPER_HEAD" in shown and "PAPER_TAIL" not in shown
    ranking = _request(fake_llm, "ranking", "ALPHA binning")
    assert "PAPER_HEAD" in ranking and "PAPER_TAIL" not in ranking
