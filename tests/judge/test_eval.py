from __future__ import annotations

import asyncio
import copy
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paperbench.errors import InputError, LfsPointerError, UsageError
from paperbench.judge import (
    GoldSubmission,
    LoadedJudge,
    judge_eval,
    load_gold_set,
    load_judge_config,
)
from paperbench.judge._eval import (
    LeafPair,
    ShapeMismatchError,
    binary_metrics,
    by_category,
    compare_trees,
    tree_cost,
)
from paperbench.rubric import GradedTaskNode, aggregate, load_graded

from ..rubric.trees import graded_leaf, graded_node

CD, CE, RA = "Code Development", "Code Execution", "Result Analysis"


def gold_tree() -> dict[str, Any]:
    """Six leaves: gold verdicts 1 0 1 (dev), 1 0 (exec), 0 (results)."""
    return graded_node(
        graded_node(graded_leaf(1.0), graded_leaf(0.0), graded_leaf(1.0, weight=2)),
        graded_node(graded_leaf(1.0, category=CE), graded_leaf(0.0, category=CE), weight=2),
        graded_leaf(0.0, category=RA),
    )


def predict(gold: dict[str, Any], verdicts: list[tuple[float, bool]]) -> GradedTaskNode:
    """The gold tree with its leaves' scores and validity replaced, in pre-order."""
    tree = copy.deepcopy(gold)
    stack, leaves = [tree], []
    while stack:
        node = stack.pop()
        if node["sub_tasks"]:
            stack.extend(reversed(node["sub_tasks"]))
        else:
            leaves.append(node)
    for node, (score, valid) in zip(leaves, verdicts, strict=True):
        node.update(score=score, valid_score=valid, explanation="judge")
    return aggregate(GradedTaskNode.model_validate(tree))


# pred: 1 1 0 (dev), 1 0 (exec), results invalid (stores 0.7, counts as nothing)
PREDICTED = [(1.0, True), (1.0, True), (0.0, True), (1.0, True), (0.0, True), (0.7, False)]


def test_metrics_on_a_small_tree_match_the_hand_computed_values() -> None:
    gold = gold_tree()
    pairs = compare_trees(GradedTaskNode.model_validate(gold), predict(gold, PREDICTED))
    assert [(p.path, p.category, p.gold, p.predicted, p.valid) for p in pairs] == [
        ((0, 0), CD, 1.0, 1.0, True),
        ((0, 1), CD, 0.0, 1.0, True),
        ((0, 2), CD, 1.0, 0.0, True),
        ((1, 0), CE, 1.0, 1.0, True),
        ((1, 1), CE, 0.0, 0.0, True),
        ((2,), RA, 0.0, 0.0, False),
    ]
    m = binary_metrics(pairs)
    # valid (gold, pred): (1,1) (0,1) (1,0) (1,1) (0,0): 3 of 5 right
    # pass: precision 2/3 (2 of 3 predicted), recall 2/3 (2 of 3 gold); fail: 1/2, 1/2
    assert (m.leaves, m.graded, m.invalid, m.gold_passes, m.gold_fails) == (6, 5, 1, 3, 2)
    assert m.invalid_share == pytest.approx(1 / 6)
    assert m.accuracy == pytest.approx(0.6)
    assert m.precision == pytest.approx(7 / 12)
    assert m.recall == pytest.approx(7 / 12)
    assert m.f1 == pytest.approx(7 / 12)


def test_metrics_per_category_and_invalid_leaves_counted_apart() -> None:
    gold = gold_tree()
    pairs = compare_trees(GradedTaskNode.model_validate(gold), predict(gold, PREDICTED))
    cats = by_category(pairs)
    assert list(cats) == [CD, CE, RA]
    dev = cats[CD]
    # (1,1) (0,1) (1,0): pass P 1/2 R 1/2 F1 1/2; fail P 0 R 0 F1 0
    assert dev.accuracy == pytest.approx(1 / 3)
    assert (dev.precision, dev.recall, dev.f1) == (0.25, 0.25, 0.25)
    assert (cats[CE].accuracy, cats[CE].f1) == (1.0, 1.0)
    results = cats[RA]
    assert (results.leaves, results.graded, results.invalid, results.invalid_share) == (
        1,
        0,
        1,
        1.0,
    )
    assert results.accuracy is results.f1 is None


def test_macro_averages_over_the_classes_present_as_scikit_learn() -> None:
    def pair(gold: float, predicted: float) -> LeafPair:
        return LeafPair(path=(0,), category=CD, gold=gold, predicted=predicted, valid=True)

    only_passes = binary_metrics([pair(1, 1), pair(1, 1)])
    assert (only_passes.precision, only_passes.recall, only_passes.f1) == (1.0, 1.0, 1.0)
    # gold 1 1, pred 1 0: pass P 1 R 1/2 F1 2/3; fail (never gold) P 0 R 0 F1 0
    mixed = binary_metrics([pair(1, 1), pair(1, 0)])
    assert mixed.precision == pytest.approx(0.5)
    assert mixed.recall == pytest.approx(0.25)
    assert mixed.f1 == pytest.approx(1 / 3)
    # a score of 0.5 passes, 0.49 fails
    assert binary_metrics([pair(0.5, 1.0), pair(0.49, 0.0)]).accuracy == 1.0


def test_a_predicted_tree_of_another_shape_is_refused_with_its_path() -> None:
    gold = gold_tree()
    fewer = copy.deepcopy(gold)
    del fewer["sub_tasks"][1]["sub_tasks"][1]
    with pytest.raises(ShapeMismatchError, match=r"gold.json: \$\.sub_tasks\[1\]: .*with 1 "):
        compare_trees(
            GradedTaskNode.model_validate(gold),
            aggregate(GradedTaskNode.model_validate(fewer)),
            file="gold.json",
        )
    other_id = copy.deepcopy(gold)
    other_id["sub_tasks"][2]["id"] = "elsewhere"
    with pytest.raises(ShapeMismatchError, match=r"\$\.sub_tasks\[2\]: .*'elsewhere'"):
        compare_trees(GradedTaskNode.model_validate(gold), GradedTaskNode.model_validate(other_id))


def test_tree_cost_sums_the_leaves_or_takes_the_roots() -> None:
    gold = gold_tree()
    tree = gold_tree()
    tree["sub_tasks"][2]["judge_metadata"] = {"cost": {"input_tokens": 100, "cost_usd": 0.5}}
    tree["sub_tasks"][0]["sub_tasks"][0]["judge_metadata"] = {
        "cost": {"input_tokens": 20, "output_tokens": 3, "requests": 1, "cost_usd": 0.25}
    }
    cost = tree_cost(GradedTaskNode.model_validate(tree))
    assert (cost.input_tokens, cost.output_tokens, cost.requests, cost.cost_usd) == (
        120,
        3,
        1,
        0.75,
    )
    tree["sub_tasks"][2]["judge_metadata"]["cost"]["cost_usd"] = None  # an unpriced model
    assert tree_cost(GradedTaskNode.model_validate(tree)).cost_usd is None
    gold["judge_metadata"] = {"cost": {"input_tokens": 7}}
    assert tree_cost(GradedTaskNode.model_validate(gold)).input_tokens == 7
    gold["judge_metadata"] = {"cost": {"input_tokens": "many"}}
    with pytest.raises(InputError, match=r"\$\.judge_metadata\.cost"):
        tree_cost(GradedTaskNode.model_validate(gold))


# --- gold sets -----------------------------------------------------------------------------


def test_the_bundled_examples_load_as_a_gold_set() -> None:
    golds = load_gold_set("examples")
    names = [g.name for g in golds]
    assert "calibration-binning/buggy" in names
    assert "momentum-conditioning/reference" in names
    assert len(golds) == 8
    buggy = golds[names.index("calibration-binning/buggy")]
    assert buggy.layout == "examples"
    assert buggy.submission.name == "submission" and buggy.submission.is_dir()
    assert buggy.log is not None and buggy.log.name == "reproduce.log"
    assert buggy.data_dir is None
    assert buggy.expected_tree().score == pytest.approx(0.5510440539852306)
    only = load_gold_set("examples", papers=["momentum-conditioning"])
    assert {g.paper_id for g in only} == {"momentum-conditioning"}


def _rubric_of(tree: dict[str, Any]) -> dict[str, Any]:
    return GradedTaskNode.model_validate(tree).to_rubric().to_dict()


def paperbench_data(root: Path, gold: dict[str, Any]) -> Path:
    """A PaperBench data directory: papers/toy/ and judge_eval/toy/{0,1}/."""
    paper = root / "papers" / "toy"
    paper.mkdir(parents=True)
    (paper / "config.yaml").write_text("id: toy\ntitle: A toy paper\n")
    (paper / "paper.md").write_text("# Toy\n")
    (paper / "rubric.json").write_text(json.dumps(_rubric_of(gold)))
    for n in ("0", "1"):
        example = root / "judge_eval" / "toy" / n
        (example / "grading").mkdir(parents=True)
        (example / "grading" / "expected_result.json").write_text(json.dumps(gold))
    staged = root / "staged" / "submission"
    staged.mkdir(parents=True)
    (staged / "reproduce.sh").write_text("echo hi\n")
    (staged / "reproduce.log").write_text("hi\n")
    with tarfile.open(root / "judge_eval" / "toy" / "0" / "submission.tar", "w") as tar:
        tar.add(staged, arcname="submission")
    (root / "judge_eval" / "toy" / "1" / "submission").mkdir()
    (root / "judge_eval" / "toy" / "1" / "submission" / "main.py").write_text("pass\n")
    return root


def test_paperbench_judge_eval_layout_loads_with_its_data_directory(tmp_path: Path) -> None:
    data = paperbench_data(tmp_path / "data", gold_tree())
    for where in (data / "judge_eval", data):
        golds = load_gold_set(where)
        assert [(g.name, g.layout, g.submission.name, g.log) for g in golds] == [
            ("toy/0", "judge_eval", "submission.tar", None),
            ("toy/1", "judge_eval", "submission", None),
        ]
        assert all(g.data_dir == data and g.paper_id == "toy" for g in golds)
        assert golds[0].expected == data / "judge_eval/toy/0/grading/expected_result.json"
        assert golds[0].rubric() == load_graded(golds[0].expected).to_rubric()


def test_a_gold_set_with_problems_is_refused_in_one_line(tmp_path: Path) -> None:
    data = paperbench_data(tmp_path / "data", gold_tree())
    (data / "judge_eval" / "toy" / "0" / "submission.tar").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12\n"
    )
    with pytest.raises(LfsPointerError, match=r"submission.tar: .*git lfs pull"):
        load_gold_set(data)
    (data / "judge_eval" / "toy" / "0" / "submission.tar").unlink()
    with pytest.raises(InputError, match=r"toy/0: no submission.tar or submission/ .*download"):
        load_gold_set(data)
    (data / "judge_eval" / "toy" / "0" / "submission").mkdir()
    (data / "judge_eval" / "other" / "0").mkdir(parents=True)
    with pytest.raises(InputError, match=r"other/0: not a gold submission"):
        load_gold_set(data)
    (data / "judge_eval" / "other" / "0" / "grading").mkdir()
    (data / "judge_eval" / "other" / "0" / "grading" / "expected_result.json").write_text(
        json.dumps(gold_tree())
    )
    (data / "judge_eval" / "other" / "0" / "submission").mkdir()
    with pytest.raises(InputError, match="no paper 'other'"):
        load_gold_set(data)
    with pytest.raises(UsageError, match=r"--gold .*no such folder"):
        load_gold_set(tmp_path / "missing")
    with pytest.raises(UsageError, match="no gold submission"):
        load_gold_set(data, papers=["absent"])


def test_a_gold_tree_with_an_invalid_leaf_is_refused(tmp_path: Path) -> None:
    gold = gold_tree()
    gold["sub_tasks"][2]["valid_score"] = False
    data = paperbench_data(tmp_path / "data", gold)
    with pytest.raises(InputError, match=r"expected_result.json: \$\.sub_tasks\[2\]: a gold"):
        load_gold_set(data)


# --- end to end with a fake grade function -------------------------------------------------


def test_judge_eval_end_to_end_with_a_fake_grade_function(tmp_path: Path) -> None:
    gold = gold_tree()
    data = paperbench_data(tmp_path / "data", gold)
    golds = load_gold_set(data)
    judges = [load_judge_config("dummy"), load_judge_config("random")]
    calls: list[tuple[str, str]] = []

    async def grade(sub: GoldSubmission, judge: LoadedJudge) -> GradedTaskNode:
        calls.append((judge.identity.name, sub.name))
        await asyncio.sleep(0)
        if judge.identity.name == "dummy":
            tree = predict(gold, [(1.0, True)] * 6)
            data = tree.to_dict()
            data["judge_metadata"] = {"cost": {"input_tokens": 1000, "cost_usd": 0.01}}
            return GradedTaskNode.model_validate(data)
        return predict(gold, PREDICTED)

    out = tmp_path / "out"
    report = asyncio.run(judge_eval(golds, judges, grade, concurrency=3, out=out))
    assert sorted(calls) == [
        ("dummy", "toy/0"),
        ("dummy", "toy/1"),
        ("random", "toy/0"),
        ("random", "toy/1"),
    ]
    dummy, rand = report.configs
    assert dummy.judge.name == "dummy" and rand.judge.name == "random"
    # dummy: every leaf passes: right on the 3 gold passes of 6, twice
    assert (dummy.overall.leaves, dummy.overall.graded, dummy.overall.accuracy) == (12, 12, 0.5)
    # pass: P 1/2, R 1; fail: P 0 (never predicted), R 0
    assert dummy.overall.precision == pytest.approx(0.25)
    assert dummy.overall.f1 == pytest.approx(1 / 3)
    assert rand.overall.accuracy == pytest.approx(0.6)
    assert rand.overall.invalid == 2
    assert rand.overall.invalid_share == pytest.approx(1 / 6)
    assert rand.categories[RA].invalid == 2
    assert dummy.cost.input_tokens == 2000
    assert dummy.cost.cost_usd == pytest.approx(0.02)
    assert [(p.paper_id, p.submissions, p.input_tokens) for p in dummy.papers] == [("toy", 2, 2000)]
    assert rand.cost.input_tokens == 0
    assert [s.name for s in dummy.submissions] == ["toy/0", "toy/1"]
    assert dummy.submissions[0].score == 1.0
    gold_score = GradedTaskNode.model_validate(gold).score
    assert dummy.submissions[0].gold_score == pytest.approx(gold_score)
    # verdicts agree on the leaves both graded validly: 3 of 5, twice
    [pair] = report.agreement
    assert (pair.first, pair.second, pair.leaves) == ("dummy", "random", 10)
    assert pair.agreement == pytest.approx(0.6)
    written = load_graded(out / "dummy" / "toy" / "0" / "grade.json")
    assert written.score == 1.0
    assert (out / "random" / "toy" / "1" / "grade.json").is_file()
    # the report's pooled metrics are scikit-learn's on the same verdicts (two submissions)
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    gold_passes = [1, 0, 1, 1, 0, 0] * 2
    for result, verdicts in ((dummy, [(1.0, True)] * 6), (rand, PREDICTED)):
        kept = [
            (g, int(p >= 0.5)) for g, (p, v) in zip(gold_passes, verdicts * 2, strict=True) if v
        ]
        y_true, y_pred = [g for g, _ in kept], [p for _, p in kept]
        precision, recall, f1, _ = precision_recall_fscore_support(
            y_true, y_pred, average="macro", zero_division=0
        )
        assert result.overall.accuracy == pytest.approx(accuracy_score(y_true, y_pred))
        assert (result.overall.precision, result.overall.recall, result.overall.f1) == (
            pytest.approx(precision),
            pytest.approx(recall),
            pytest.approx(f1),
        )


def test_judge_eval_refuses_a_grade_of_another_tree(tmp_path: Path) -> None:
    golds = load_gold_set(paperbench_data(tmp_path / "data", gold_tree()))

    async def grade(sub: GoldSubmission, judge: LoadedJudge) -> GradedTaskNode:
        return GradedTaskNode.model_validate(gold_tree())  # fresh ids: another rubric

    with pytest.raises(ShapeMismatchError, match=r"expected_result.json: \$: the predicted"):
        asyncio.run(judge_eval(golds, [load_judge_config("dummy")], grade))


def test_judge_eval_refuses_a_config_given_twice() -> None:
    dummy = load_judge_config("dummy")

    async def grade(sub: GoldSubmission, judge: LoadedJudge) -> GradedTaskNode:
        raise AssertionError("never called")

    with pytest.raises(UsageError, match="--judge dummy: given twice"):
        asyncio.run(judge_eval([], [dummy, dummy], grade))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.3, 0.5, 0.7, 1.0]),
            st.sampled_from([0.0, 0.49, 0.5, 1.0]),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_binary_metrics_match_scikit_learns_functions(
    cases: list[tuple[float, float, bool]],
) -> None:
    """Accuracy and macro precision, recall and F1 over the validly graded leaves, checked
    against scikit-learn's own functions on the same verdicts (pass: score ≥ 0.5)."""
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support

    pairs = [
        LeafPair(path=(i,), category=CD, gold=g, predicted=p, valid=v)
        for i, (g, p, v) in enumerate(cases)
    ]
    got = binary_metrics(pairs)
    graded = [(g >= 0.5, p >= 0.5) for g, p, v in cases if v]
    assert got.invalid == len(cases) - len(graded)
    if not graded:
        assert got.accuracy is got.precision is got.recall is got.f1 is None
        return
    gold = [g for g, _ in graded]
    predicted = [p for _, p in graded]
    precision, recall, f1, _ = precision_recall_fscore_support(
        gold, predicted, average="macro", zero_division=0
    )
    assert got.accuracy == pytest.approx(accuracy_score(gold, predicted))
    assert got.precision == pytest.approx(precision)
    assert got.recall == pytest.approx(recall)
    assert got.f1 == pytest.approx(f1)
