"""Scores of an RCB run: line-weighted and unweighted pass rates, pass@k, errors, cost.

Pure functions over :class:`~paperbench.rcb._models.SampleResult` and
:class:`~paperbench.rcb._models.Snippet`; no I/O.

The headline is RCB's "Scaled Pass@1": the line-weighted pass rate of one answer per problem
(their published runs take one greedy completion). With ``samples`` answers per problem the
headline is sample 0's, and :func:`pass_at_k` gives the unbiased pass@k for every k up to
``samples``, line-weighted over problems. (RCB itself has no pass@k: it scores each completion
index on its own and reports their mean and std.)

Rates are fractions (0..1), not percentages, and are over the problems **run**: a problem in
``broken`` is left out and listed, a problem without a usable result for every sample is
listed in ``not_run`` and left out of every rate (never counted as failed). A result whose
outcome is ``sandbox_error`` is not a result: the infrastructure failed, not the answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from math import comb

from paperbench.rcb._models import Mode, PaperScore, Rate, RcbSummary, SampleResult, Snippet


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from ``n`` samples of which ``c`` passed:
    ``1 - C(n-c, k) / C(n, k)``.

    Raises:
        ValueError: ``k`` is not in ``1..n`` or ``c`` not in ``0..n``.
    """
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"c={c} must be between 0 and n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _usable(result: SampleResult) -> bool:
    return result.outcome.error_class != "sandbox_error"


def _kept(results: Iterable[SampleResult]) -> dict[tuple[str, int], SampleResult]:
    """One result per (problem, sample): the last usable one, else the last one."""
    kept: dict[tuple[str, int], SampleResult] = {}
    for result in results:
        key = (result.problem, result.sample)
        old = kept.get(key)
        if old is None or _usable(result) or not _usable(old):
            kept[key] = result
    return kept


def rate(passed: Iterable[tuple[int, bool]]) -> Rate:
    """The rate of ``(code_lines, passed)`` pairs, one per problem."""
    pairs = list(passed)
    lines = sum(n for n, _ in pairs)
    return Rate(
        line_weighted=sum(n for n, ok in pairs if ok) / lines if lines else None,
        unweighted=sum(1 for _, ok in pairs if ok) / len(pairs) if pairs else None,
        problems=len(pairs),
        lines=lines,
    )


def _weighted_pass_at_k(runs: list[tuple[int, list[bool]]], samples: int) -> dict[int, float]:
    lines = sum(n for n, _ in runs)
    if not lines:
        return {}
    return {
        k: sum(n * pass_at_k(len(ok), sum(ok), k) for n, ok in runs) / lines
        for k in range(1, samples + 1)
    }


def score(
    results: list[SampleResult],
    snippets: list[Snippet],
    *,
    model: str,
    mode: Mode,
    with_paper: bool,
    samples: int,
    broken: Collection[str] = (),
    not_runnable: Mapping[str, str] | None = None,
    environment_advice: str = "",
) -> RcbSummary:
    """The summary of a run: rates per paper and overall, pass@k, errors and cost.

    The rates are over the problems run. ``snippets`` are the problems asked (their order
    orders papers and lists); ``broken`` are problem ids left out (listed in ``broken``); a
    problem counts as run when each sample ``0..samples-1`` has a result that is not a
    ``sandbox_error`` (as RCB leaves out a problem any of whose completions has no test
    result); the others are listed in ``not_run`` and are in no rate. Results for problems
    not in ``snippets``, or of a sample ``>= samples``, are ignored.

    - ``overall`` and each paper's ``rate``: sample 0 passed or not, weighted by code lines
      (and unweighted);
    - ``pass_at_k``: for k in ``1..samples``, the unbiased estimator per problem weighted by
      its code lines over the problems run;
    - ``errors``: the error class of every failed answer kept (one per problem and sample;
      a rerun's usable result replaces a ``sandbox_error``), broken problems left out,
      ``sandbox_error`` included so infrastructure failures show;
    - ``cost_usd``: the sum over the answers kept (None when none had a price);
      ``cost_per_problem_usd``: that over the problems with any result.

    Raises:
        ValueError: ``samples`` is less than 1.
    """
    if samples < 1:
        raise ValueError(f"samples={samples} must be at least 1")
    known = {s.id for s in snippets}
    kept = _kept(r for r in results if r.problem in known and r.sample < samples)
    unrunnable = dict(not_runnable or {})
    said_broken = set(broken)
    left_out = said_broken | set(unrunnable)

    papers: dict[str, list[Snippet]] = {}
    for snippet in snippets:
        papers.setdefault(snippet.paper, []).append(snippet)

    not_run: list[str] = []
    runs: dict[str, list[tuple[int, list[bool]]]] = {p: [] for p in papers}
    for snippet in snippets:
        if snippet.id in left_out:
            continue
        slots = [kept.get((snippet.id, i)) for i in range(samples)]
        if any(r is None or not _usable(r) for r in slots):
            not_run.append(snippet.id)
            continue
        runs[snippet.paper].append(
            (snippet.code_lines, [r.outcome.passed for r in slots if r is not None])
        )

    paper_scores = [
        PaperScore(
            paper=paper,
            rate=rate((n, ok[0]) for n, ok in runs[paper]),
            pass_at_k=_weighted_pass_at_k(runs[paper], samples),
        )
        for paper in papers
    ]
    every = [run for paper in papers for run in runs[paper]]

    counted = [r for r in kept.values() if r.problem not in left_out]
    errors = Counter(r.outcome.error_class or "runtime" for r in counted if not r.outcome.passed)
    costs = [r.cost_usd for r in counted if r.cost_usd is not None]
    cost = sum(costs) if costs else None
    with_result = len({r.problem for r in counted})
    return RcbSummary(
        model=model,
        mode=mode,
        with_paper=with_paper,
        samples=samples,
        overall=rate((n, ok[0]) for n, ok in every),
        pass_at_k=_weighted_pass_at_k(every, samples),
        papers=paper_scores,
        errors=dict(sorted(errors.items())),
        broken=[s.id for s in snippets if s.id in said_broken],
        not_run=not_run,
        not_runnable={s.id: unrunnable[s.id] for s in snippets if s.id in unrunnable},
        environment_advice=environment_advice if unrunnable else "",
        listed=len(snippets),
        cost_usd=cost,
        cost_per_problem_usd=cost / with_result if cost is not None and with_result else None,
    )


__all__ = ["pass_at_k", "rate", "score"]
