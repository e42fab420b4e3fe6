"""``paperbench judge-eval`` end to end, with a grade function standing in for the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from paperbench.cli import app
from paperbench.judge import GoldSubmission, GradeFn, LoadedJudge, _cli
from paperbench.rubric import GradedTaskNode, aggregate, iter_leaves
from paperbench.testing import FakeLLMServer, Fault

from .scripted import ScriptedJudge

runner = CliRunner()


def _run(args: list[str]) -> Result:
    return runner.invoke(app, args, env={"COLUMNS": "200"})


async def _all_pass(gold: GoldSubmission, judge: LoadedJudge) -> GradedTaskNode:
    """What the dummy judge does: every leaf of the gold tree's rubric scores 1."""
    data = gold.expected_tree().to_dict()
    stack = [data]
    while stack:
        node = stack.pop()
        stack.extend(node["sub_tasks"])
        if not node["sub_tasks"]:
            node.update(score=1.0, valid_score=True, explanation="dummy")
            node["judge_metadata"] = {"cost": {"input_tokens": 10, "cost_usd": 0.001}}
    return aggregate(GradedTaskNode.model_validate(data))


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(work: Path, settings: object = None) -> GradeFn:
        return _all_pass

    monkeypatch.setattr(_cli, "load_grade_fn", load)


def _gold_counts() -> tuple[int, int]:
    """(leaves, gold passes) over the bundled calibration-binning examples."""
    from paperbench.judge import load_gold_set

    leaves = passes = 0
    for gold in load_gold_set("examples", papers=["calibration-binning"]):
        for _, leaf in iter_leaves(gold.expected_tree()):
            leaves += 1
            passes += leaf.score >= 0.5
    return leaves, passes


@pytest.mark.usefixtures("fake_engine")
def test_json_report_over_the_bundled_examples(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _run(
        [
            "judge-eval",
            "--judge",
            "dummy",
            "--paper",
            "calibration-binning",
            "--json",
            "--out",
            str(out),
        ]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [g["name"] for g in report["golds"]] == [
        "calibration-binning/buggy",
        "calibration-binning/nearly-empty",
        "calibration-binning/partial",
        "calibration-binning/reference",
    ]
    [config] = report["configs"]
    leaves, passes = _gold_counts()
    overall = config["overall"]
    assert (overall["leaves"], overall["graded"], overall["invalid"]) == (leaves, leaves, 0)
    assert overall["accuracy"] == pytest.approx(passes / leaves)  # every verdict is "pass"
    assert config["judge"]["name"] == "dummy"
    assert config["cost"]["input_tokens"] == 10 * leaves
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "dummy" / "calibration-binning" / "buggy" / "grade.json").is_file()


@pytest.mark.usefixtures("fake_engine")
def test_the_table_has_a_row_per_config_and_agreement_lines() -> None:
    result = _run(
        ["judge-eval", "--judge", "dummy", "--judge", "random", "--paper", "momentum-conditioning"]
    )
    assert result.exit_code == 0, result.output
    for column in ["judge", "invalid", "acc", "F1", "F1 dev", "in tok/sub", "$/sub", "wall s"]:
        assert column in result.stdout
    assert "│ dummy" in result.stdout and "│ random" in result.stdout
    assert "verdict agreement dummy / random: 1.000" in result.stdout
    assert "graded momentum-conditioning/reference with dummy" in result.stderr


@pytest.mark.usefixtures("fake_engine")
def test_a_non_empty_out_folder_is_refused_before_grading(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("keep")
    result = _run(["judge-eval", "--judge", "dummy", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--out" in result.output and "not empty" in result.output


def test_a_predicted_tree_of_another_rubric_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def first_child_only(gold: GoldSubmission, judge: LoadedJudge) -> GradedTaskNode:
        tree = await _all_pass(gold, judge)
        return aggregate(tree.model_copy(update={"sub_tasks": tree.sub_tasks[:1]}))

    monkeypatch.setattr(_cli, "load_grade_fn", lambda work, settings=None: first_child_only)
    result = _run(["judge-eval", "--judge", "dummy", "--paper", "calibration-binning"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "expected_result.json: $: the predicted tree differs from the gold tree" in line


def test_the_real_engine_grades_the_examples_with_the_dummy_judge(tmp_path: Path) -> None:
    out = tmp_path / "eval"
    result = _run(
        ["judge-eval", "--judge", "dummy", "--paper", "calibration-binning", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    [config] = report["configs"]
    leaves, passes = _gold_counts()
    overall = config["overall"]
    assert (overall["leaves"], overall["graded"], overall["invalid"]) == (leaves, leaves, 0)
    # every leaf passes under the dummy judge: accuracy is the share of gold passes
    assert overall["accuracy"] == pytest.approx(passes / leaves)
    assert (out / "gradings").is_dir()  # the engine's per-leaf records


def test_a_model_judge_reports_the_requests_the_server_answered_while_faults_happen(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    # the first attempts meet every fault a connection can have: two connections reset
    # before the request is read (the server never receives them), one dropped after it is
    # read (received, never answered), a 429 and a 500 (answered); all are retried
    fake_llm.script(
        Fault.reset(), Fault.reset(), Fault.drop(), Fault.rate_limit(0), Fault.server_error()
    )
    fake_llm.handler = ScriptedJudge(lambda text: 1.0)
    out = tmp_path / "eval"
    args = ["judge-eval", "--paper", "calibration-binning", "--out", str(out)]
    args += ["--base-url", fake_llm.openai_url, "--model", "openai/gpt-4o"]
    result = _run(args)
    assert result.exit_code == 0, result.output
    assert fake_llm.pending == 0  # every fault was met
    [config] = json.loads((out / "report.json").read_text())["configs"]
    assert config["judge"]["name"] == "simple"  # the default judge
    # the requests the server answered, from the ledger of calls: a call that grades a
    # batch of leaves counts once, however many leaves share it; an attempt that got no
    # answer is counted apart, whether or not the server received it
    received, dropped, reset = len(fake_llm.requests), 1, 2
    cost = config["cost"]
    assert cost["requests"] == received - dropped
    assert cost["unanswered"] == dropped + reset
    assert cost["attempts"] == received + reset
    # the SDK never retries on its own: each attempt the server saw is one of the ledger's
    assert {r.headers.get("x-stainless-retry-count") for r in fake_llm.requests} == {"0"}
    assert config["overall"]["leaves"] > received
    # the dropped attempt may have been billed: the dollars are unknown, never low
    assert cost["input_tokens"] > 0 and cost["cost_usd"] is None
    assert sum(s["cost"]["requests"] for s in config["submissions"]) == cost["requests"]
    assert sum(s["cost"]["unanswered"] for s in config["submissions"]) == 3
    assert f"{received - dropped} (+3 unanswered)" in result.stdout
    assert "simple: 3 attempts got no HTTP answer" in " ".join(result.stderr.split())


def test_a_judging_that_fails_says_why_and_exits_1(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.handler = lambda request: Fault.http(400, "this gateway refuses everything")
    args = ["judge-eval", "--paper", "calibration-binning", "--concurrency", "submissions=1"]
    args += ["--base-url", fake_llm.openai_url, "--model", "openai/gpt-4o"]
    result = _run(args)
    assert result.exit_code == 1, result.output
    assert "invalid (" in result.stderr and "failed" in result.stderr
    assert "this gateway refuses everything" in result.stderr
    assert "no leaf could be graded" in result.stderr


def test_concurrency_takes_the_stages_of_judge_eval() -> None:
    result = _run(["judge-eval", "--judge", "dummy", "--concurrency", "rollouts=2"])
    assert result.exit_code == 2
    assert "--concurrency rollouts=2" in result.stderr and "submissions" in result.stderr
