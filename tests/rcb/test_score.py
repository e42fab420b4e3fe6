"""Scores of an RCB run, against numbers worked out by hand."""

from __future__ import annotations

from itertools import combinations

import pytest

from paperbench.rcb import _models as m
from paperbench.rcb._models import ErrorClass, SampleResult, Snippet
from paperbench.rcb._score import pass_at_k, score


def snip(paper: str, name: str, lines: int) -> Snippet:
    return Snippet(
        paper=paper, file="m.py", name=name, start=0, end=1, indent="", code_lines=lines, depth=0
    )


def res(
    problem: str,
    passed: bool,
    *,
    sample: int = 0,
    error: ErrorClass | None = None,
    cost: float | None = None,
) -> SampleResult:
    if not passed and error is None:
        error = "assertion"
    return SampleResult(
        problem=problem,
        sample=sample,
        outcome=m.TestOutcome(passed=passed, error_class=error),
        cost_usd=cost,
    )


# two papers: a has 10 + 2 + 3 lines, b has 5 + 1
SNIPPETS = [
    snip("a", "x", 10),
    snip("a", "y", 2),
    snip("a", "z", 3),
    snip("b", "u", 5),
    snip("b", "v", 1),
]


def summarize(results: list[SampleResult], samples: int = 1, broken: tuple[str, ...] = ()):
    return score(
        results,
        SNIPPETS,
        model="m",
        mode="one-shot",
        with_paper=True,
        samples=samples,
        broken=broken,
    )


def test_line_weighted_and_unweighted_per_paper_and_overall() -> None:
    summary = summarize(
        [res("a/x", True), res("a/y", False), res("a/z", True), res("b/u", False), res("b/v", True)]
    )
    # overall: lines passed 10 + 3 + 1 = 14 of 21; problems 3 of 5
    assert summary.overall.line_weighted == pytest.approx(14 / 21)
    assert summary.overall.unweighted == pytest.approx(3 / 5)
    assert (summary.overall.problems, summary.overall.lines) == (5, 21)
    a, b = summary.papers
    assert (a.paper, b.paper) == ("a", "b")
    assert a.rate.line_weighted == pytest.approx(13 / 15)
    assert a.rate.unweighted == pytest.approx(2 / 3)
    assert b.rate.line_weighted == pytest.approx(1 / 6)
    assert b.rate.unweighted == pytest.approx(1 / 2)
    # the overall rate is a micro-average, not the mean of the papers'
    assert summary.overall.line_weighted != pytest.approx((13 / 15 + 1 / 6) / 2)
    assert summary.errors == {"assertion": 2}
    assert summary.not_run == [] and summary.broken == []


def test_broken_and_not_run_problems_are_left_out_and_listed() -> None:
    summary = summarize(
        [res("a/x", False), res("a/z", True), res("b/u", False, error="syntax"), res("b/v", False)],
        broken=("b/u", "nobody/here"),
    )
    assert summary.broken == ["b/u"]
    assert summary.not_run == ["a/y"]  # no result: not a 0
    # run: a/x (10, fail), a/z (3, pass), b/v (1, fail)
    assert summary.overall.line_weighted == pytest.approx(3 / 14)
    assert summary.overall.unweighted == pytest.approx(1 / 3)
    assert summary.overall.problems == 3
    b = summary.papers[1]
    assert (b.rate.problems, b.rate.line_weighted) == (1, 0.0)
    # the broken problem's result is counted nowhere, its error neither
    assert summary.errors == {"assertion": 2}


def test_a_paper_with_nothing_run_has_no_rate() -> None:
    summary = summarize([res("a/x", True)])
    b = summary.papers[1]
    assert b.rate.line_weighted is None and b.rate.unweighted is None and b.rate.problems == 0
    assert summary.not_run == ["a/y", "a/z", "b/u", "b/v"]
    assert summary.overall.line_weighted == 1.0


def test_sandbox_error_counts_as_not_run_until_a_rerun_replaces_it() -> None:
    base = [res("a/x", True), res("a/y", True), res("a/z", True), res("b/u", True)]
    failed = summarize([*base, res("b/v", False, error="sandbox_error")])
    assert failed.not_run == ["b/v"]
    assert failed.overall.line_weighted == 1.0 and failed.overall.problems == 4
    assert failed.errors == {"sandbox_error": 1}
    # a later usable result replaces it; an older one is not undone by a later sandbox error
    rerun = summarize(
        [
            *base,
            res("b/v", False, error="sandbox_error"),
            res("b/v", False, error="timeout"),
            res("b/v", False, error="sandbox_error"),
        ]
    )
    assert rerun.not_run == []
    assert rerun.overall.line_weighted == pytest.approx(20 / 21)
    assert rerun.errors == {"timeout": 1}


def test_errors_by_class() -> None:
    summary = summarize(
        [
            res("a/x", False, error="syntax"),
            res("a/y", False, error="name"),
            res("a/z", False, error="syntax"),
            res("b/u", False, error="no_code"),
            res("b/v", False, error="timeout"),
        ]
    )
    assert summary.errors == {"name": 1, "no_code": 1, "syntax": 2, "timeout": 1}
    assert summary.overall.line_weighted == 0.0


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The share of k-subsets of the samples with at least one pass."""
    subsets = list(combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c", [(1, 0), (1, 1), (4, 0), (4, 1), (4, 2), (5, 3), (6, 6)])
def test_pass_at_k_estimator_against_subsets(n: int, c: int) -> None:
    outcomes = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(outcomes, k))
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def test_pass_at_k_is_line_weighted_and_headline_is_sample_0() -> None:
    outcomes = {
        "a/x": [False, True, False],  # sample 0 fails
        "a/y": [True, True, True],
        "a/z": [False, False, False],
        "b/u": [True, False, False],
        "b/v": [False, False, True],
    }
    results = [res(p, ok, sample=i) for p, oks in outcomes.items() for i, ok in enumerate(oks)]
    summary = summarize(results, samples=3)
    lines = {s.id: s.code_lines for s in SNIPPETS}
    # headline: sample 0 only: a/y (2) and b/u (5) pass
    assert summary.overall.line_weighted == pytest.approx(7 / 21)
    assert summary.overall.unweighted == pytest.approx(2 / 5)
    assert set(summary.pass_at_k) == {1, 2, 3}
    for k in (1, 2, 3):
        direct = sum(lines[p] * brute_pass_at_k(oks, k) for p, oks in outcomes.items()) / 21
        assert summary.pass_at_k[k] == pytest.approx(direct)
    # by hand: pass@1 = (10/3 + 2 + 0 + 5/3 + 1/3) / 21
    assert summary.pass_at_k[1] == pytest.approx((10 / 3 + 2 + 5 / 3 + 1 / 3) / 21)
    assert summary.pass_at_k[3] == pytest.approx(18 / 21)
    b = summary.papers[1]
    assert b.pass_at_k[2] == pytest.approx((5 * 2 / 3 + 1 * 2 / 3) / 6)
    # a problem missing one of its samples is not run
    partial = summarize(
        [r for r in results if not (r.problem == "b/v" and r.sample == 2)], samples=3
    )
    assert partial.not_run == ["b/v"]
    assert partial.pass_at_k[3] == pytest.approx(17 / 20)


def test_cost_total_and_per_problem() -> None:
    summary = summarize(
        [
            res("a/x", True, cost=0.25),
            res("a/y", False, cost=0.5),
            res("a/z", False, error="sandbox_error", cost=0.25),
            res("b/u", True),
        ]
    )
    assert summary.cost_usd == pytest.approx(1.0)
    assert summary.cost_per_problem_usd == pytest.approx(1.0 / 4)
    none = summarize([res("a/x", True)])
    assert none.cost_usd is None and none.cost_per_problem_usd is None


def test_results_for_unknown_problems_are_ignored_and_samples_checked() -> None:
    summary = summarize(
        [res("zz/q", False, error="syntax"), res("a/x", True), res("a/x", False, sample=1)]
    )
    assert summary.errors == {} and summary.overall.problems == 1
    with pytest.raises(ValueError):
        summarize([], samples=0)
