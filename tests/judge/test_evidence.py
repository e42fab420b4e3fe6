"""The default mode never grades a leaf on a context that lacks its evidence, and shuffles the
criteria's order between samples: checked on what the model was shown (the requests the fake
server received), through the real grading path and the real openai SDK."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import yaml

from paperbench.judge import LeafGrade, build_view, load_judge_config
from paperbench.judge._grader import GradeResult, grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.papers import Paper, PaperSource
from paperbench.rubric import TaskNode
from paperbench.testing import FakeLLMServer, FakeReply

from .scripted import ScriptedJudge, batch_criteria, last_user_text

WORDS = ["quokka", "wombat", "dingo", "numbat", "bilby", "possum"]


def _rubric() -> TaskNode:
    leaves = [
        {
            "id": f"l{i}",
            "requirements": f"The {word} estimator is implemented as the paper describes.",
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Development",
            "finegrained_task_category": None,
        }
        for i, word in enumerate(WORDS)
    ]
    return TaskNode.model_validate(
        {
            "id": "root",
            "requirements": "Replicate the paper",
            "weight": 1,
            "sub_tasks": [{"id": "m", "requirements": "Method", "weight": 1, "sub_tasks": leaves}],
        }
    )


def _submission(root: Path) -> Path:
    """One file per leaf, each ~700 tokens of its own word."""
    for word in WORDS:
        body = "".join(
            f"def {word}_step_{j}(x):\n    # the {word} estimator update\n    return x + {j}\n"
            for j in range(40)
        )
        path = root / "src" / f"{word}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    (root / "README.md").write_text("# Replication\n")
    return root


def _judge(tmp_path: Path, **budgets: Any) -> Any:
    """The catalog's simple judge with some budgets changed (its prompts beside it)."""
    from paperbench.judge._config import catalog_dir

    folder = tmp_path / "judges"
    shutil.copytree(catalog_dir(), folder, dirs_exist_ok=True)
    config = yaml.safe_load((folder / "simple.yaml").read_text())
    config["budgets"].update(budgets)
    path = folder / "evidence.yaml"
    path.write_text(yaml.safe_dump(config))
    return load_judge_config(path)


def _grade(
    server: FakeLLMServer,
    tmp_path: Path,
    judge: Any,
    samples: int = 1,
    *,
    rubric: dict[str, Any] | None = None,
    log: Path | None = None,
) -> GradeResult:
    paper: Paper = PaperSource.resolve(None).load("calibration-binning")
    view = build_view(_submission(tmp_path / "submission"), log=log)
    return asyncio.run(
        grade_submission(
            view,
            paper,
            judge,
            out_dir=tmp_path / "out",
            rubric=TaskNode.model_validate(rubric) if rubric is not None else _rubric(),
            options=GradeOptions(samples=samples),
            settings=ModelSettings(base_url=server.openai_url, model="openai/gpt-4o"),
        )
    )


def test_a_batch_over_budget_is_split_until_every_leaf_sees_its_evidence(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """Six sibling leaves whose files cannot all fit one call's budget: no leaf is graded
    without its own file, so the batch is split (more than one call), and every call that
    grades a leaf shows that leaf's file."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    result = _grade(fake_llm, tmp_path, _judge(tmp_path, submission_tokens=600))
    assert result.coverage == 1 and result.invalid_leaves == 0
    grading = [r for r in fake_llm.requests if batch_criteria(r)]
    assert len(grading) > 1  # the one batch of six did not fit: it was split
    graded_words = set()
    for request in grading:
        text = last_user_text(request)
        for _, requirements in batch_criteria(request):
            i = next(i for i, w in enumerate(WORDS) if w in requirements)
            assert f"src/{WORDS[i]}.py" in text, f"{WORDS[i]} graded without its file"
            graded_words.add(WORDS[i])
    assert graded_words == set(WORDS)


def test_one_call_when_the_budget_holds_every_leafs_evidence(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    _grade(fake_llm, tmp_path, _judge(tmp_path, submission_tokens=20000))
    grading = [r for r in fake_llm.requests if batch_criteria(r)]
    assert len(grading) == 1 and len(batch_criteria(grading[0])) == len(WORDS)


def test_the_criteria_order_is_shuffled_between_samples_and_recorded(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    _grade(fake_llm, tmp_path, _judge(tmp_path, submission_tokens=20000), samples=3)
    grading = [r for r in fake_llm.requests if batch_criteria(r)]
    orders = [[req for _, req in batch_criteria(r)] for r in grading]
    assert len(orders) == 3
    assert orders[1] != orders[0] or orders[2] != orders[0]
    assert all(sorted(order) == sorted(orders[0]) for order in orders)  # same criteria
    lines = (tmp_path / "out" / "grading" / "leaves.jsonl").read_text().splitlines()
    leaves = [LeafGrade.model_validate_json(line) for line in lines]
    assert len(leaves) == len(WORDS)
    # each recorded position is where that leaf's criterion stood in that sample's prompt
    for leaf in leaves:
        word = WORDS[int(leaf.leaf_id[1:])]
        assert [s.position for s in leaf.samples] == [
            next(k for k, text in enumerate(order, start=1) if word in text) for order in orders
        ]


def _room(request: Any) -> int:
    body = request.body
    return int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)


def test_the_answer_room_grows_with_the_batch_and_a_cut_off_answer_splits_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """An answer cut off at its room never makes its leaves invalid while a smaller call can
    still be tried: the batch is split, and a leaf alone is asked once with twice the room."""
    judge = ScriptedJudge(lambda _: 1.0)

    def handler(request: Any) -> Any:
        criteria = batch_criteria(request)
        wombat = any("wombat" in text for _, text in criteria)
        if len(criteria) > 2 or (wombat and (len(criteria) > 1 or _room(request) < 20_000)):
            return FakeReply(json={"verdicts": []}, stop="max_tokens")
        return judge(request)

    fake_llm.handler = handler
    result = _grade(fake_llm, tmp_path, _judge(tmp_path, submission_tokens=20000))
    assert result.invalid_leaves == 0 and result.coverage == 1
    rooms = [(len(batch_criteria(r)), _room(r)) for r in fake_llm.requests if batch_criteria(r)]
    assert rooms[0] == (6, 10_000 + 1_500 * 5)  # the catalog's answer_tokens, +1,500 each
    assert (3, 10_000 + 1_500 * 2) in rooms  # split in halves
    assert (1, 2 * 10_000) in rooms  # wombat alone, cut off once, asked with twice the room


def test_the_model_is_told_what_was_not_shown_and_when_changes_are_unknown(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A plain folder (no reproduction's metadata): the Result Analysis heading says which
    files the run changed is not known, and files left out are said to be left out, with
    the rule that a criterion whose evidence is not shown is not met."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    rubric = _rubric().to_dict()
    rubric["sub_tasks"][0]["sub_tasks"].append(
        {
            "id": "r0",
            "requirements": "The results table shows the quokka estimator ahead.",
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Result Analysis",
            "finegrained_task_category": None,
        }
    )
    _grade(fake_llm, tmp_path, _judge(tmp_path, submission_tokens=600), rubric=rubric)
    texts = {
        batch_criteria(r)[0][1]: last_user_text(r) for r in fake_llm.requests if batch_criteria(r)
    }
    analysis = next(t for c, t in texts.items() if "results table" in c)
    assert "run created or changed is not known" in analysis
    left_out = [t for t in texts.values() if "Not shown:" in t]
    assert left_out and all("left out for room or by kind" in t for t in left_out)
    assert all("evidence a criterion needs is not shown, it is not met" in t for t in left_out)


def test_code_execution_is_shown_the_log_lines_that_speak_of_its_criterion(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A long log that does not fold (every line different) and does not fit: besides its
    head and tail, the grader of a Code Execution leaf sees the lines in the middle that
    share the criterion's words."""
    import random

    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    rng = random.Random(0)
    vocabulary = [f"{a}{b}" for a in "bcdfgklmnprstvz" for b in ("ar", "el", "ion", "ox", "um")]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(12)) for _ in range(3000)]
    lines[1500] = "kangaroo sweep started with emu regularisation"
    lines[1501] = "kangaroo sweep finished: emu regularisation helped, accuracy 0.91"
    log = tmp_path / "reproduce.log"
    log.write_text("\n".join(lines) + "\n")
    rubric = _rubric().to_dict()
    rubric["sub_tasks"][0]["sub_tasks"] = [
        {
            "id": "ce",
            "requirements": "The kangaroo sweep is run with emu regularisation.",
            "weight": 1,
            "sub_tasks": [],
            "task_category": "Code Execution",
            "finegrained_task_category": None,
        }
    ]
    judge = _judge(tmp_path, submission_tokens=3000)
    _grade(fake_llm, tmp_path, judge, rubric=rubric, log=log)
    view = build_view(tmp_path / "submission", log=log)  # the log as the judge's view held it
    [request] = [r for r in fake_llm.requests if batch_criteria(r)]
    text = last_user_text(request)
    assert "kangaroo sweep finished: emu regularisation helped" in text
    assert lines[0] in text and lines[-1] in text  # the head and the tail as before
    assert "lines left out around the lines that speak of the criteria" in text
    # leaves.jsonl records which lines of the log the grader was shown
    [line] = (tmp_path / "out" / "grading" / "leaves.jsonl").read_text().splitlines()
    shown = LeafGrade.model_validate_json(line).log_lines_shown
    assert view.log is not None
    held = view.log.text.split("\n")  # the log as the view holds it (lines numbered from 1)
    assert shown[0][0] == 1 and shown[-1][1] == len(held)  # the head, the tail
    at = held.index(lines[1501]) + 1
    assert any(first <= at <= last for first, last in shown)  # the kangaroo lines, in place
    assert sum(last - first + 1 for first, last in shown) < len(held)
