"""Metrics over the synthetic group of tests/report/group.py, against numbers worked out by
hand (the table in that module's docstring)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from paperbench.report import Summary, mean_se, read_group_files, summarize_group
from tests.report.group import JUDGE, build_group, corrupt

approx = pytest.approx


@pytest.fixture
def summary(tmp_path: Path) -> Summary:
    return summarize_group(read_group_files(build_group(tmp_path)))


def _agent(summary: Summary, name: str):  # type: ignore[no-untyped-def]
    return next(a for a in summary.agents if a.agent == name)


def test_mean_and_standard_error_use_ddof_1() -> None:
    estimate = mean_se([0.4, 0.2, 0.5])
    assert estimate.mean == approx(11 / 30)
    assert estimate.se == approx(math.sqrt(7) / 30)  # var = (1+25+16)/900/2; se = √(var/3)
    assert mean_se([0.7]).se is None and mean_se([0.7]).mean == approx(0.7)
    assert mean_se([]).mean is None and mean_se([]).n == 0


def test_each_run_gets_its_status_from_outcome_json_or_missing(summary: Summary) -> None:
    status = {r.label: r.status for r in summary.runs}
    assert status["p-alpha/agent-a/seed-0"] == "scored"
    assert status["p-beta/agent-a/seed-1"] == "disqualified"
    assert status["p-beta/agent-a/seed-2"] == "failed"
    assert status["p-beta/agent-b/seed-0"] == "unscored"
    assert status["p-alpha/agent-b/seed-1"] == "missing"
    assert len(summary.runs) == 12
    disqualified = next(r for r in summary.runs if r.label == "p-beta/agent-a/seed-1")
    assert disqualified.score == 0.0


def test_paper_means_count_disqualified_as_zero_and_leave_out_the_rest(summary: Summary) -> None:
    a = {p.paper: p for p in _agent(summary, "agent-a").papers}
    assert a["p-alpha"].mean == approx(0.5) and a["p-alpha"].counted == 3
    assert a["p-beta"].mean == approx(0.1)  # (0.2 + 0) / 2: the failed run is not in it
    assert a["p-beta"].scores == [0.2, 0.0, None]
    b = {p.paper: p for p in _agent(summary, "agent-b").papers}
    assert b["p-alpha"].mean == approx(0.8) and b["p-alpha"].counted == 2
    assert b["p-beta"].mean == approx(0.7)  # the unscored seed 0 is not in it


def test_agent_score_is_mean_over_seeds_of_paper_means_with_incomplete_seeds_kept(
    summary: Summary,
) -> None:
    a = _agent(summary, "agent-a")
    assert [s.mean for s in a.seeds] == approx([0.4, 0.2, 0.5])
    assert a.incomplete_seeds == [2]
    assert a.seeds[2].missing_papers == ["p-beta"]
    assert a.score.mean == approx(11 / 30)
    assert a.score.se == approx(math.sqrt(7) / 30)
    assert a.score.n == 3
    b = _agent(summary, "agent-b")
    assert [s.mean for s in b.seeds] == approx([0.9, 0.8, 0.65])
    assert b.incomplete_seeds == [0, 1]
    assert b.score.mean == approx(47 / 60)
    assert b.score.se == approx(math.sqrt(19) / 60)  # devs 7, 1, -8 (/60)


def test_failures_as_zero_lower_bound(summary: Summary) -> None:
    a = _agent(summary, "agent-a")
    assert a.failures_as_zero.mean == approx(17 / 60)  # seeds 0.4, 0.2, 0.25
    assert a.failures_as_zero.se == approx(math.sqrt(13) / 60)
    b = _agent(summary, "agent-b")
    assert b.failures_as_zero.mean == approx(0.5)  # seeds 0.45, 0.4, 0.65
    assert b.failures_as_zero.se == approx(math.sqrt(0.035 / 2 / 3))


def test_counts_by_status(summary: Summary) -> None:
    a, b = _agent(summary, "agent-a"), _agent(summary, "agent-b")
    assert a.by_status == {"scored": 4, "disqualified": 1, "unscored": 0, "failed": 1, "missing": 0}
    assert (a.counted, a.runs) == (5, 6)
    assert b.by_status == {"scored": 4, "disqualified": 0, "unscored": 1, "failed": 0, "missing": 1}
    assert (b.counted, b.runs) == (4, 6)


def test_runs_not_scored_are_listed_with_their_reason(summary: Summary) -> None:
    rows = [(n.run, n.status, n.reason) for n in summary.not_scored]
    assert rows == [
        ("p-alpha/agent-b/seed-1", "missing", "unfinished: rollout running"),
        (
            "p-beta/agent-a/seed-2",
            "failed",
            "reproduction: sandbox error: the engine stopped answering",
        ),
        ("p-beta/agent-b/seed-0", "unscored", "coverage 0.50 below the judge's threshold 0.90"),
    ]


def test_categories_code_dev_coverage_invalid_leaves_and_interval(summary: Summary) -> None:
    a = _agent(summary, "agent-a")
    assert a.scores_by_category == approx({"Code Development": 0.5, "Result Analysis": 0.4})
    assert a.code_dev_score == approx(0.6)
    assert a.coverage == approx(0.9625)
    assert a.invalid_leaves == 3
    assert a.interval == approx((0.4, 0.6)) and a.interval_runs == 2
    b = _agent(summary, "agent-b")
    assert b.scores_by_category == approx({"Code Development": 0.75})
    assert b.code_dev_score is None
    assert b.coverage == approx(0.9)  # the unscored run's 0.5 is in it
    assert b.invalid_leaves == 10
    assert b.interval is None


def test_costs_by_stage_model_and_label_count_unpriced_calls(summary: Summary) -> None:
    a = _agent(summary, "agent-a").costs
    assert a.total.cost_usd == approx(0.17)
    assert a.total.unpriced_calls == 1 and a.total.calls == 4
    assert a.by_stage["rollout"].cost_usd == approx(0.15)
    assert a.by_stage["grading"].cost_usd == approx(0.02)
    assert a.by_stage["grading"].unpriced_calls == 1
    assert a.by_model["openai/gpt-4o"].cost_usd == approx(0.15)
    assert a.by_model["local/x"].unpriced_calls == 1
    assert a.by_label["agent_step"].calls == 2
    assert _agent(summary, "agent-b").costs.total.cost_usd == approx(0.30)
    assert summary.costs.total.cost_usd == approx(0.47)
    assert summary.costs.total.unpriced_calls == 1


def test_hours_by_stage(summary: Summary) -> None:
    a, b = _agent(summary, "agent-a"), _agent(summary, "agent-b")
    assert a.hours_by_stage == approx(
        {"rollout": 3.0, "monitor": 0.0, "reproduction": 1.5, "grading": 0.3}
    )
    assert b.hours_by_stage["rollout"] == approx(9600 / 3600)
    assert summary.hours_by_stage["reproduction"] == approx(2.75)


def test_the_summary_names_the_judge_paper_set_and_mode(summary: Summary) -> None:
    assert summary.judge.name == "simple"
    assert summary.judge.sha256 == JUDGE["sha256"]
    assert summary.judge.models["parsing"] == "openai/gpt-4o-mini"
    assert (summary.paper_set, summary.mode, summary.resources_provided) == ("ids", "full", False)


def test_a_run_graded_by_another_judge_is_named(summary: Summary) -> None:
    assert [(m.run, m.fields) for m in summary.judge_mismatches] == [
        ("p-beta/agent-b/seed-2", ["sha256"])
    ]


def test_a_corrupt_file_is_a_problem_naming_its_path_and_the_rest_is_kept(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    outcome = corrupt(group / "p-alpha" / "agent-a" / "seed-0" / "outcome.json")
    monitor = corrupt(group / "p-beta" / "agent-a" / "seed-1" / "monitor.json", "[1]")
    summary = summarize_group(read_group_files(group))
    problems = {p.file: p.message for p in summary.problems}
    assert problems[str(outcome)].startswith("invalid JSON at line 1")
    assert str(monitor) in problems
    run = next(r for r in summary.runs if r.label == "p-alpha/agent-a/seed-0")
    assert run.status == "missing"
    assert run.reason == "outcome.json is unreadable (see the problems)"
    assert run.scores_by_category  # grade.json was still read
    a = _agent(summary, "agent-a")
    assert a.papers[0].mean == approx(0.45)  # seeds 1 and 2 only


def test_a_torn_last_cost_line_is_dropped_and_a_bad_middle_line_named(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    costs = group / "p-alpha" / "agent-a" / "seed-0" / "costs.jsonl"
    lines = costs.read_text().splitlines()
    costs.write_text(lines[0] + "\n" + lines[1][:20])
    summary = summarize_group(read_group_files(group))
    assert summary.problems == []
    assert _agent(summary, "agent-a").costs.by_stage["rollout"].cost_usd == approx(0.10)
    costs.write_text("nonsense\n" + lines[1] + "\n")
    summary = summarize_group(read_group_files(group))
    assert [(p.file, p.message.split(":")[0]) for p in summary.problems] == [(str(costs), "line 1")]
    assert _agent(summary, "agent-a").costs.by_stage["rollout"].cost_usd == approx(0.05)


def test_a_group_with_no_run_folders_reports_every_run_missing(tmp_path: Path) -> None:
    group = build_group(tmp_path)
    for paper in ("p-alpha", "p-beta"):
        for child in sorted((group / paper).rglob("*"), reverse=True):
            child.unlink() if child.is_file() else child.rmdir()
    summary = summarize_group(read_group_files(group))
    assert {r.status for r in summary.runs} == {"missing"}
    assert {r.reason for r in summary.runs} == {"not started (no run.json)"}
    a = _agent(summary, "agent-a")
    assert a.score.mean is None and a.score.n == 0
    assert a.failures_as_zero.mean == 0.0 and a.incomplete_seeds == [0, 1, 2]
