"""``rcb run`` and ``rcb validate``: answers from a model, put in the snippet's place, graded by
the paper's test in a fresh sandbox; resumable per problem and sample.

The run folder::

    OUT/
      run.json                        RcbRunOptions: what was asked (a resume must match)
      costs.jsonl                     every model call, one record a line
      problems/<paper>/reference.json the paper's reference solution tested in the run's
                                      environment: a problem it fails for is not run
      problems/<paper>/<snippet>/
        problem.json                  ProblemRecord: the masked file, the reference code
        empty.json                    the test with the snippet left empty (``pass``): a
                                      problem whose test passes so is broken, not counted
        answer-<k>.json               sample k's answer (kept: a resume does not pay again);
                                      in agent mode what the agent left (AgentAnswer)
        agent-<k>/transcript.jsonl    agent mode: the agent's transcript (an interrupted
                                      attempt's is kept as transcript.<n>.jsonl)
        sample-<k>.json               SampleResult: the answer's test (written last)
      summary.json                    RcbSummary
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from paperbench._console import plural, warning
from paperbench._io import atomic_write_text, read_json
from paperbench.agents import AgentLimits, LoadedAgent, load_agent
from paperbench.errors import (
    BudgetExhaustedError,
    MissingKeyError,
    ModelError,
    SandboxError,
    UsageError,
)
from paperbench.llm import BudgetCaps, CostJournal, CostLedger, Model, ModelConfig
from paperbench.rcb._agent import AGENT_CONFIG, AgentAnswer, agent_limits, run_agent
from paperbench.rcb._environment import (
    advice,
    environment_of,
    nothing_runs,
    reference_job,
    store_reference,
    stored_references,
    why_not_runnable,
)
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._mask import extract_code, fill, mask
from paperbench.rcb._models import (
    Mode,
    ProblemSet,
    RcbSummary,
    SampleResult,
    Snippet,
    TestOutcome,
)
from paperbench.rcb._progress import Progress, verdict
from paperbench.rcb._prompt import prompt
from paperbench.rcb._record import write_problem_record
from paperbench.rcb._score import score
from paperbench.rcb._test import RcbJob, run_tests
from paperbench.sandbox import SandboxBackend, SandboxConfig

EMPTY_FILL = "pass"
"""What an empty snippet is filled with: its test must then fail (RCB's own sanity check)."""


class RcbRunOptions(BaseModel):
    """What ``rcb run`` is asked (run.json)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    base_url: str | None = None
    papers: list[str] | None = None
    samples: int = Field(default=1, ge=1)
    with_paper: bool = True
    mode: Mode = "one-shot"
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    image: str | None = None
    budget_dollars: float | None = Field(default=None, ge=0)
    max_steps: int | None = Field(default=None, ge=1)
    """Agent mode: steps of each agent run (None: the agent config's)."""
    max_time_s: float | None = Field(default=None, gt=0)
    """Agent mode: wall time of each agent run (None: the agent config's)."""
    rcb_dir: str | None = None
    """The problem set as given (``--rcb-dir``): a resume without one reads it there."""

    def comparable(self) -> dict[str, object]:
        """What a resume must match (everything that changes an answer or its grade)."""
        return self.model_dump(mode="json", exclude={"budget_dollars", "rcb_dir"})


class _Answer(BaseModel):
    text: str
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0


def _folder(out: Path, snippet: Snippet) -> Path:
    return out / "problems" / snippet.paper / snippet.name


def selected(problem_set: ProblemSet, papers: Sequence[str] | None) -> list[Snippet]:
    """The problems of ``papers`` (all when None).

    Raises:
        UsageError: an unknown paper, naming the flag.
    """
    known = {p.id for p in problem_set.papers}
    unknown = [p for p in papers or [] if p not in known]
    if unknown:
        raise UsageError(
            f"--papers: unknown paper {', '.join(unknown)}; `paperbench rcb list` shows them"
        )
    return [s for s in problem_set.snippets if papers is None or s.paper in papers]


@dataclass
class _Run:
    """What every sample of a run shares."""

    problem_set: ProblemSet
    out: Path
    opts: RcbRunOptions
    sandbox: SandboxConfig
    concurrency: int
    """Sandboxes testing at once."""
    calls: asyncio.Semaphore
    """One-shot model calls at once (as many as tests)."""
    agents: asyncio.Semaphore
    """Agent sandboxes at once (agent mode)."""
    model: Model
    model_config: ModelConfig
    journal: CostLedger
    agent: LoadedAgent | None = None
    limits: AgentLimits | None = None
    backend: SandboxBackend | None = None


async def _empty_tests(run: _Run, snippets: Sequence[Snippet]) -> dict[str, TestOutcome]:
    """Every problem's test with its snippet left empty (``pass``): stored, or run now in one
    batch of fresh sandboxes; by problem id. A sandbox error is stored too and run again the
    next time."""
    outcomes: dict[str, TestOutcome] = {}
    todo: list[tuple[Snippet, RcbJob]] = []
    for snippet in snippets:
        path = _folder(run.out, snippet) / "empty.json"
        if path.is_file():
            stored = TestOutcome.model_validate(read_json(path))
            if stored.error_class != "sandbox_error":
                outcomes[snippet.id] = stored
                continue
        todo.append((snippet, _job(run.problem_set, snippet, EMPTY_FILL)))
    tested = await _tests(run, [j for _, j in todo], "empty fills", [s.id for s, _ in todo])
    for (snippet, _), outcome in zip(todo, tested, strict=True):
        path = _folder(run.out, snippet) / "empty.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, outcome.model_dump_json(indent=2) + "\n")
        outcomes[snippet.id] = outcome
    return outcomes


def _job(problem_set: ProblemSet, snippet: Snippet, code: str) -> RcbJob:
    """The test of ``snippet`` with ``code`` in its place."""
    paper = problem_set.paper(snippet.paper)
    text = (paper.folder / snippet.file).read_text(encoding="utf-8")
    return RcbJob(paper.folder, {snippet.file: fill(text, snippet, code)})


async def _tests(
    run: _Run, jobs: Sequence[RcbJob], what: str, labels: Sequence[str]
) -> list[TestOutcome]:
    """``jobs`` in one batch: ``--concurrency tests=N`` at once, the next ones' sandboxes
    prepared meanwhile; each one's end said as progress (``what``, its label)."""
    return await _batch(
        jobs, what, labels, sandbox=run.sandbox, opts=run.opts, concurrency=run.concurrency
    )


async def _batch(
    jobs: Sequence[RcbJob],
    what: str,
    labels: Sequence[str],
    *,
    sandbox: SandboxConfig,
    opts: RcbRunOptions,
    concurrency: int,
) -> list[TestOutcome]:
    with Progress(what, len(jobs)) as progress:
        return await run_tests(
            jobs,
            concurrency=concurrency,
            sandbox=sandbox,
            image=opts.image,
            timeout_s=opts.timeout_s,
            on_done=lambda i, outcome: progress.step(labels[i], verdict(outcome)),
        )


def _label(snippet: Snippet, k: int, samples: int) -> str:
    return snippet.id if samples == 1 else f"{snippet.id} sample {k}"


async def _answer(
    problem_set: ProblemSet, snippet: Snippet, k: int, out: Path, model: Model, opts: RcbRunOptions
) -> _Answer:
    path = _folder(out, snippet) / f"answer-{k}.json"
    if path.is_file():
        return _Answer.model_validate(read_json(path))
    paper = problem_set.paper(snippet.paper)
    text = (paper.folder / snippet.file).read_text(encoding="utf-8")
    message = prompt(paper, snippet, mask(text, snippet), with_paper=opts.with_paper)
    reply = await model.generate(
        message,
        label="rcb_answer",
        temperature=opts.temperature,
        max_tokens=opts.max_tokens,
    )
    answer = _Answer(
        text=reply.text,
        cost_usd=reply.cost_usd,
        input_tokens=reply.usage.input_tokens,
        output_tokens=reply.usage.output_tokens,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, answer.model_dump_json(indent=2) + "\n")
    return answer


async def _agent_answer(run: _Run, snippet: Snippet, k: int) -> AgentAnswer:
    """Sample ``k`` of a problem by the agent: stored, or run now.

    Raises:
        SandboxError: the agent's sandbox failed (the sample is not run).
        ModelError: the model could not be had (no call answered), or the run's budget
            stopped the agent (the sample is run again on a resume with more budget).
    """
    path = _folder(run.out, snippet) / f"answer-{k}.json"
    if path.is_file():
        return AgentAnswer.model_validate(read_json(path))
    assert run.agent is not None and run.limits is not None and run.backend is not None
    answer = await run_agent(
        run.problem_set,
        snippet,
        seed=k,
        folder=_folder(run.out, snippet) / f"agent-{k}",
        backend=run.backend,
        model_config=run.model_config,
        ledger=run.journal,
        limits=run.limits,
        image=run.opts.image,
        with_paper=run.opts.with_paper,
        loaded=run.agent,
    )
    if answer.status == "error" and answer.steps <= 1 and answer.error:
        raise ModelError(answer.error)  # the first call failed: nothing the model did
    if answer.limit == "dollars":
        run.journal.check_budget(run.opts.model, "rcb-agent")  # the run's cap: not run
    atomic_write_text(path, answer.model_dump_json(indent=2) + "\n")
    return answer


class _Pending(BaseModel):
    """An answered sample waiting for its test."""

    snippet: Snippet
    sample: int
    code: str | None
    why: str | None
    cost_usd: float | None
    input_tokens: int
    output_tokens: int


async def _answered(run: _Run, snippet: Snippet, k: int) -> _Pending | None:
    """Sample ``k`` of a problem answered (stored, or asked now), waiting for its test. None
    when it could not be had (a sandbox failure of an agent: said, run again on a resume).

    Raises:
        ModelError: the model could not be had (see :func:`_agent_answer`).
    """
    if run.opts.mode == "agent":
        async with run.agents:
            try:
                agent = await _agent_answer(run, snippet, k)
            except SandboxError as exc:
                warning(f"{snippet.id} sample {k}: the agent's sandbox failed ({exc}); not run")
                return None
        return _Pending(
            snippet=snippet,
            sample=k,
            code=agent.code,
            why=agent.why_none,
            cost_usd=agent.cost_usd,
            input_tokens=agent.input_tokens,
            output_tokens=agent.output_tokens,
        )
    async with run.calls:
        answer = await _answer(run.problem_set, snippet, k, run.out, run.model, run.opts)
    return _Pending(
        snippet=snippet,
        sample=k,
        code=extract_code(answer.text),
        why="the answer holds no code block",
        cost_usd=answer.cost_usd,
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
    )


def _result(run: _Run, pending: _Pending, outcome: TestOutcome) -> SampleResult:
    """The graded sample, written (sample-<k>.json, last)."""
    result = SampleResult(
        problem=pending.snippet.id,
        sample=pending.sample,
        mode=run.opts.mode,
        answer=pending.code,
        outcome=outcome,
        cost_usd=pending.cost_usd,
        input_tokens=pending.input_tokens,
        output_tokens=pending.output_tokens,
    )
    path = _folder(run.out, pending.snippet) / f"sample-{pending.sample}.json"
    atomic_write_text(path, result.model_dump_json(indent=2) + "\n")
    return result


def _check_out(out: Path, opts: RcbRunOptions, resume: bool) -> None:
    """Refuse a folder the run cannot use (nothing is written)."""
    run_file = out / "run.json"
    if resume:
        if not run_file.is_file():
            raise UsageError(f"--resume: {out} holds no RCB run (no run.json); drop --resume")
        before = RcbRunOptions.model_validate(read_json(run_file))
        if before.comparable() != opts.comparable():
            raise UsageError(
                f"--resume: {out} was run with other options; give the same ones or another --out"
            )
        return
    if out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out}: the folder is not empty; pass --resume to continue it")


def _start_out(out: Path, opts: RcbRunOptions) -> None:
    """A new run's folder and its run.json (a resume's are there)."""
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / "run.json"
    if not run_file.is_file():
        atomic_write_text(run_file, opts.model_dump_json(indent=2) + "\n")


async def _references(
    problem_set: ProblemSet,
    papers: Sequence[str],
    out: Path,
    opts: RcbRunOptions,
    sandbox: SandboxConfig,
    concurrency: int,
) -> dict[str, TestOutcome]:
    """Each paper's reference solution tested in this environment: kept in the run folder
    (a resume reads it), else tested now in one batch, as ``rcb validate`` tests it."""
    environment = environment_of(sandbox, opts.image)
    found = stored_references(out, papers, environment)
    todo = [p for p in papers if p not in found]
    outcomes = await _batch(
        [reference_job(problem_set, p) for p in todo],
        "reference solutions",
        todo,
        sandbox=sandbox,
        opts=opts,
        concurrency=concurrency,
    )
    return {**found, **dict(zip(todo, outcomes, strict=True))}


def _runnable(
    snippets: Sequence[Snippet],
    references: dict[str, TestOutcome],
    opts: RcbRunOptions,
    sandbox: SandboxConfig,
) -> tuple[dict[str, str], str]:
    """The problems that cannot run here (id → why) and what would make them run.

    Raises:
        SandboxError: no problem can run here (one line: why, the image to build, the option
            to raise).
    """
    why = {p: why_not_runnable(o, timeout_s=opts.timeout_s) for p, o in references.items()}
    unrunnable = {s.id: r for s in snippets if (r := why[s.paper]) is not None}
    failing = [references[p] for p, r in why.items() if r is not None]
    hint = advice(failing, sandbox=sandbox, image=opts.image, timeout_s=opts.timeout_s)
    if snippets and len(unrunnable) == len(snippets):
        raise SandboxError(nothing_runs({p: r for p, r in why.items() if r is not None}, hint))
    if unrunnable:
        warning(
            f"{plural(len(unrunnable), 'problem')} of {len(snippets)} cannot run in this "
            "environment (their reference solution fails here too): not run, in no rate"
            + (f"; to run them, {hint}" if hint else "")
        )
    return unrunnable, hint


async def _answers(
    run: _Run,
    usable: Sequence[Snippet],
    results: list[SampleResult],
    failures: list[ModelError],
) -> list[_Pending | None]:
    """Every sample of ``usable`` answered (stored or asked now), its progress said; a sample
    tested before goes to ``results``, a model failure to ``failures``."""
    samples = run.opts.samples

    async def answer(snippet: Snippet, k: int) -> _Pending | None:
        path = _folder(run.out, snippet) / f"sample-{k}.json"
        label = _label(snippet, k, samples)
        if path.is_file():
            results.append(SampleResult.model_validate(read_json(path)))
            progress.step(label, "tested before")
            return None
        try:
            pending = await _answered(run, snippet, k)
        except ModelError as exc:
            failures.append(exc)
            progress.step(label, "not answered (the model failed)")
            return None
        said = "not run" if pending is None else "answered"
        progress.step(label, said if pending is None or pending.code else "answered, no code")
        return pending

    with Progress("answers", len(usable) * samples) as progress:
        return await asyncio.gather(*(answer(s, k) for s in usable for k in range(samples)))


async def _environment(
    problem_set: ProblemSet,
    snippets: Sequence[Snippet],
    out: Path,
    opts: RcbRunOptions,
    sandbox: SandboxConfig,
    concurrency: int,
) -> tuple[dict[str, TestOutcome], dict[str, str], str]:
    """Each paper's reference solution tested here (kept in the run folder, which is made
    now: nothing is written when no problem can run), the problems that cannot run (id →
    why) and what would make them run.

    Raises:
        SandboxError: no problem can run here (see :func:`_runnable`).
    """
    papers = sorted({s.paper for s in snippets})
    references = await _references(problem_set, papers, out, opts, sandbox, concurrency)
    unrunnable, hint = _runnable(snippets, references, opts, sandbox)
    _start_out(out, opts)
    environment = environment_of(sandbox, opts.image)
    for paper, outcome in references.items():
        store_reference(out, paper, environment, outcome)
    return references, unrunnable, hint


async def _check_model(config: ModelConfig) -> None:
    """A model whose key is not set, or a server that does not answer, fails the run before
    anything is tested, written or called.

    Raises:
        MissingKeyError: naming the variable to set and the flag that chose the model.
        ModelError: the server does not answer (one plain request, as ``models check``).
    """
    from paperbench.llm._probe import probe_servers
    from paperbench.llm._registry import resolve

    _, target = resolve(config, require_key=False)
    if target.missing_key is not None:
        raise MissingKeyError(
            f"--model: {config.model} needs {target.missing_key}, which is not set; set it in "
            "the environment or a .env file, or give --base-url for a server that needs no key"
        )
    flag = "--base-url" if config.base_url else "--model"
    await probe_servers([(flag, config)])


async def _usable(
    run: _Run, snippets: Sequence[Snippet], references: dict[str, TestOutcome]
) -> tuple[list[str], list[Snippet]]:
    """The empty fills of the problems that can run here, tested: the problems whose test
    passes so (broken, by id) and those whose test fails so, as it should (usable)."""
    testable = [s for s in snippets if references[s.paper].passed]
    empties = await _empty_tests(run, testable)
    broken = [s.id for s in testable if empties[s.id].passed]
    usable = [s for s in testable if empties[s.id].error_class not in ("sandbox_error", None)]
    return broken, usable


async def _graded(run: _Run, pending: Sequence[_Pending]) -> list[SampleResult]:
    """The answers with code tested in one batch (one whose sandbox failed is left for a
    resume), then those without failed as ``no_code``; each written as it is graded."""
    coded = [p for p in pending if p.code is not None]
    outcomes = await _tests(
        run,
        [_job(run.problem_set, p.snippet, p.code or "") for p in coded],
        "tests of the answers",
        [_label(p.snippet, p.sample, run.opts.samples) for p in coded],
    )
    results: list[SampleResult] = []
    for p, outcome in zip(coded, outcomes, strict=True):
        if outcome.error_class != "sandbox_error":  # else not run: a resume tests it again
            results.append(_result(run, p, outcome))
    for p in pending:
        if p.code is None:
            results.append(
                _result(run, p, TestOutcome(passed=False, error_class="no_code", detail=p.why))
            )
    return results


def _model_failures(failures: Sequence[ModelError], results: Sequence[SampleResult]) -> None:
    """The samples the model could not answer: the first one's error raised when no sample
    has a result, else a warning saying how to run them again."""
    if failures and not results:
        raise failures[0]  # nothing was answered: the model's own reason, one line
    if failures:
        budget = any(isinstance(f, BudgetExhaustedError) for f in failures)
        warning(
            f"{plural(len(failures), 'answer')} could not be had from the model (first: "
            f"{failures[0]}); those problems are listed as not run: --resume runs them again"
            + (" (with a higher --budget-dollars)" if budget else "")
        )


def _summary(
    out: Path,
    opts: RcbRunOptions,
    results: list[SampleResult],
    snippets: list[Snippet],
    broken: list[str],
    unrunnable: dict[str, str],
    hint: str,
) -> RcbSummary:
    """The run's scores, written to ``summary.json``."""
    summary = score(
        results,
        snippets,
        model=opts.model,
        mode=opts.mode,
        with_paper=opts.with_paper,
        samples=opts.samples,
        broken=broken,
        not_runnable=unrunnable,
        environment_advice=hint,
    )
    atomic_write_text(out / "summary.json", summary.model_dump_json(indent=2) + "\n")
    return summary


async def run_rcb(
    rcb_dir: Path,
    out: Path,
    opts: RcbRunOptions,
    *,
    sandbox: SandboxConfig,
    concurrency: int = 4,
    agents: int = 2,
    resume: bool = False,
    api_key: str | None = None,
) -> RcbSummary:
    """Answer and grade every selected problem ``opts.samples`` times; write summary.json.
    ``concurrency`` tests (and one-shot calls) run at once, ``agents`` agents (agent mode).

    Raises:
        UsageError: a bad option, naming it.
        InputError: a malformed problem set (file and line named).
        SandboxError: agent mode, and the sandbox backend cannot be had; or no problem can
            run in this environment (their reference solutions fail here too: one line with
            the image to build and the option to raise).
    """
    problem_set = load_problem_set(rcb_dir)
    snippets = selected(problem_set, opts.papers)
    loaded = load_agent(AGENT_CONFIG) if opts.mode == "agent" else None
    backend = await sandbox.build() if opts.mode == "agent" else None
    _check_out(out, opts, resume)
    config = ModelConfig(
        model=opts.model, base_url=opts.base_url, api_key=SecretStr(api_key) if api_key else None
    )
    await _check_model(config)
    references, unrunnable, hint = await _environment(
        problem_set, snippets, out, opts, sandbox, concurrency
    )
    journal = CostJournal.open(out / "costs.jsonl", caps=BudgetCaps(run_usd=opts.budget_dollars))
    run = _Run(
        problem_set=problem_set,
        out=out,
        opts=opts,
        sandbox=sandbox,
        concurrency=concurrency,
        calls=asyncio.Semaphore(concurrency),
        agents=asyncio.Semaphore(agents),
        model=Model(config, ledger=journal, stage="rcb"),
        model_config=config,
        journal=journal,
        agent=loaded,
        limits=agent_limits(loaded, steps=opts.max_steps, wall_time_s=opts.max_time_s)
        if loaded is not None
        else None,
        backend=backend,
    )
    results: list[SampleResult] = []
    failures: list[ModelError] = []
    for snippet in snippets:
        write_problem_record(problem_set, snippet, _folder(out, snippet))
    # 1. the empty fills of the problems that can run here, in one batch: a problem whose
    # test passes so is broken
    broken, usable = await _usable(run, snippets, references)

    # 2. the answers (model calls or agents), each kept as it comes
    try:
        answered = await _answers(run, usable, results, failures)
    finally:
        await run.model.aclose()
        journal.close()
    # 3. the answers with code, tested in one batch; those without fail as no_code
    results += await _graded(run, [p for p in answered if p is not None])
    _model_failures(failures, results)
    return _summary(out, opts, results, snippets, broken, unrunnable, hint)


class ValidationRow(BaseModel):
    """One problem of ``rcb validate``: its reference must pass and its empty fill fail."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    problem: str
    code_lines: int
    reference: TestOutcome
    empty: TestOutcome

    @property
    def ok(self) -> bool:
        """The reference passes and the empty fill fails (an infrastructure failure is
        neither: it is not ok and says so)."""
        return (
            self.reference.passed
            and not self.empty.passed
            and (self.empty.error_class != "sandbox_error")
        )


async def validate(
    rcb_dir: Path,
    *,
    sandbox: SandboxConfig,
    papers: Sequence[str] | None = None,
    image: str | None = None,
    timeout_s: float = 60.0,
    concurrency: int = 4,
) -> list[ValidationRow]:
    """RCB's own sanity check, in the sandbox: each paper's test passes with its reference
    code (run once per paper: the annotated files as they are), and fails with each snippet
    left empty."""
    problem_set = load_problem_set(rcb_dir)
    snippets = selected(problem_set, papers)
    papers_run = sorted({s.paper for s in snippets})
    jobs = [reference_job(problem_set, p) for p in papers_run]
    jobs += [_job(problem_set, s, EMPTY_FILL) for s in snippets]
    labels = [f"{p} reference" for p in papers_run] + [f"{s.id} empty" for s in snippets]
    with Progress("tests", len(jobs)) as progress:
        outcomes = await run_tests(
            jobs,
            concurrency=concurrency,
            sandbox=sandbox,
            image=image,
            timeout_s=timeout_s,
            on_done=lambda i, outcome: progress.step(labels[i], verdict(outcome)),
        )
    references = dict(zip(papers_run, outcomes[: len(papers_run)], strict=True))
    empties = outcomes[len(papers_run) :]
    return [
        ValidationRow(problem=s.id, code_lines=s.code_lines, reference=references[s.paper], empty=e)
        for s, e in zip(snippets, empties, strict=True)
    ]
