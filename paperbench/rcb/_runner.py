"""``rcb run`` and ``rcb validate``: answers from a model, put in the snippet's place, graded by
the paper's test in a fresh sandbox; resumable per problem and sample.

The run folder::

    OUT/
      run.json                        RcbRunOptions: what was asked (a resume must match)
      costs.jsonl                     every model call, one record a line
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
from paperbench.errors import BudgetExhaustedError, ModelError, SandboxError, UsageError
from paperbench.llm import BudgetCaps, CostJournal, CostLedger, Model, ModelConfig
from paperbench.rcb._agent import AGENT_CONFIG, AgentAnswer, agent_limits, run_agent
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
from paperbench.rcb._prompt import prompt
from paperbench.rcb._record import write_problem_record
from paperbench.rcb._score import score
from paperbench.rcb._test import run_test
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

    def comparable(self) -> dict[str, object]:
        """What a resume must match (everything that changes an answer or its grade)."""
        return self.model_dump(mode="json", exclude={"budget_dollars"})


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


async def _empty_test(
    problem_set: ProblemSet,
    snippet: Snippet,
    out: Path,
    sandbox: SandboxConfig,
    opts: RcbRunOptions,
) -> TestOutcome:
    path = _folder(out, snippet) / "empty.json"
    if path.is_file():
        stored = TestOutcome.model_validate(read_json(path))
        if stored.error_class != "sandbox_error":
            return stored
    paper = problem_set.paper(snippet.paper)
    text = (paper.folder / snippet.file).read_text(encoding="utf-8")
    outcome = await run_test(
        paper.folder,
        {snippet.file: fill(text, snippet, EMPTY_FILL)},
        sandbox=sandbox,
        image=opts.image,
        timeout_s=opts.timeout_s,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, outcome.model_dump_json(indent=2) + "\n")
    return outcome


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


@dataclass
class _Run:
    """What every sample of a run shares."""

    problem_set: ProblemSet
    out: Path
    opts: RcbRunOptions
    sandbox: SandboxConfig
    tests: asyncio.Semaphore
    """Sandboxes testing at once (and one-shot model calls at once)."""
    agents: asyncio.Semaphore
    """Agent sandboxes at once (agent mode)."""
    model: Model
    model_config: ModelConfig
    journal: CostLedger
    agent: LoadedAgent | None = None
    limits: AgentLimits | None = None
    backend: SandboxBackend | None = None


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


async def _sample(run: _Run, snippet: Snippet, k: int) -> SampleResult | None:
    """Sample ``k`` of a problem: stored, or answered and tested now. None when it could not
    be finished (a model or sandbox failure: said in the log, run again on a resume)."""
    path = _folder(run.out, snippet) / f"sample-{k}.json"
    if path.is_file():
        return SampleResult.model_validate(read_json(path))
    opts = run.opts
    if opts.mode == "agent":
        async with run.agents:
            try:
                agent = await _agent_answer(run, snippet, k)
            except SandboxError as exc:
                warning(f"{snippet.id} sample {k}: the agent's sandbox failed ({exc}); not run")
                return None
        code, why = agent.code, agent.why_none
        cost, tokens_in, tokens_out = agent.cost_usd, agent.input_tokens, agent.output_tokens
    else:
        async with run.tests:
            answer = await _answer(run.problem_set, snippet, k, run.out, run.model, opts)
        code, why = extract_code(answer.text), "the answer holds no code block"
        cost, tokens_in, tokens_out = answer.cost_usd, answer.input_tokens, answer.output_tokens
    if code is None:
        outcome = TestOutcome(passed=False, error_class="no_code", detail=why)
    else:
        paper = run.problem_set.paper(snippet.paper)
        text = (paper.folder / snippet.file).read_text(encoding="utf-8")
        async with run.tests:
            outcome = await run_test(
                paper.folder,
                {snippet.file: fill(text, snippet, code)},
                sandbox=run.sandbox,
                image=opts.image,
                timeout_s=opts.timeout_s,
            )
        if outcome.error_class == "sandbox_error":
            return None
    result = SampleResult(
        problem=snippet.id,
        sample=k,
        mode=opts.mode,
        answer=code,
        outcome=outcome,
        cost_usd=cost,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
    )
    atomic_write_text(path, result.model_dump_json(indent=2) + "\n")
    return result


def _check_out(out: Path, opts: RcbRunOptions, resume: bool) -> None:
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
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_file, opts.model_dump_json(indent=2) + "\n")


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
        SandboxError: agent mode, and the sandbox backend cannot be had.
    """
    problem_set = load_problem_set(rcb_dir)
    snippets = selected(problem_set, opts.papers)
    loaded = load_agent(AGENT_CONFIG) if opts.mode == "agent" else None
    backend = await sandbox.build() if opts.mode == "agent" else None
    _check_out(out, opts, resume)
    journal = CostJournal.open(out / "costs.jsonl", caps=BudgetCaps(run_usd=opts.budget_dollars))
    config = ModelConfig(
        model=opts.model, base_url=opts.base_url, api_key=SecretStr(api_key) if api_key else None
    )
    run = _Run(
        problem_set=problem_set,
        out=out,
        opts=opts,
        sandbox=sandbox,
        tests=asyncio.Semaphore(concurrency),
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
    broken: list[str] = []
    failures: list[ModelError] = []

    async def one(snippet: Snippet) -> None:
        write_problem_record(problem_set, snippet, _folder(out, snippet))
        async with run.tests:
            empty = await _empty_test(problem_set, snippet, out, sandbox, opts)
        if empty.passed:
            broken.append(snippet.id)
            return
        for k in range(opts.samples):
            try:
                result = await _sample(run, snippet, k)
            except ModelError as exc:
                failures.append(exc)
                result = None
            if result is not None:
                results.append(result)

    try:
        await asyncio.gather(*(one(s) for s in snippets))
    finally:
        await run.model.aclose()
        journal.close()
    if failures and not results:
        raise failures[0]  # nothing was answered: the model's own reason, one line
    if failures:
        budget = any(isinstance(f, BudgetExhaustedError) for f in failures)
        warning(
            f"{plural(len(failures), 'answer')} could not be had from the model (first: "
            f"{failures[0]}); those problems are listed as not run: --resume runs them again"
            + (" (with a higher --budget-dollars)" if budget else "")
        )
    summary = score(
        results,
        snippets,
        model=opts.model,
        mode=opts.mode,
        with_paper=opts.with_paper,
        samples=opts.samples,
        broken=broken,
    )
    atomic_write_text(out / "summary.json", summary.model_dump_json(indent=2) + "\n")
    return summary


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
    gate = asyncio.Semaphore(concurrency)

    async def test(paper_id: str, files: dict[str, str]) -> TestOutcome:
        async with gate:
            return await run_test(
                problem_set.paper(paper_id).folder,
                files,
                sandbox=sandbox,
                image=image,
                timeout_s=timeout_s,
            )

    papers_run = sorted({s.paper for s in snippets})
    references = dict(
        zip(papers_run, await asyncio.gather(*(test(p, {}) for p in papers_run)), strict=True)
    )

    async def empty(snippet: Snippet) -> TestOutcome:
        folder = problem_set.paper(snippet.paper).folder
        text = (folder / snippet.file).read_text(encoding="utf-8")
        return await test(snippet.paper, {snippet.file: fill(text, snippet, EMPTY_FILL)})

    empties = await asyncio.gather(*(empty(s) for s in snippets))
    return [
        ValidationRow(problem=s.id, code_lines=s.code_lines, reference=references[s.paper], empty=e)
        for s, e in zip(snippets, empties, strict=True)
    ]
