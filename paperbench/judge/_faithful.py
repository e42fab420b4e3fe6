"""PaperBench's SimpleJudge, for comparable numbers: three calls per leaf.

1. ranking (label ``judge_ranking``): the paper, the criterion and the file tree; the answer
   is a list of paths, the first ``max_files`` that exist are shown;
2. grading (``judge_grading``): the paper, those files (whole, the last one cut to fit the
   window), ``reproduce.sh`` and the log by category; a free-text verdict;
3. parsing (``parsing``): the verdict alone, to a structured score.

Each role may use its own model (``roles`` in the config).
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from paperbench.errors import ModelError
from paperbench.judge._config import FaithfulConfig
from paperbench.judge._context import SEPARATE_FILES, ContextFile, LeafContext
from paperbench.judge._job import Job, Leaf, add_cost, reason_of, sum_cost, vote
from paperbench.judge._log import LogExcerpt
from paperbench.judge._prompts import (
    file_tree,
    grading_messages,
    parsing_messages,
    ranking_messages,
)
from paperbench.judge._types import CallCost, LeafGrade, SampleGrade
from paperbench.llm import count_tokens

_WITH_LOG = frozenset({"Code Execution", "Result Analysis", "Subtree"})
_BUFFER_TOKENS = 12_000
"""PaperBench keeps 10k tokens free in the window and 2k more below its file budget."""


class ParsedVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    valid_score: bool
    score: float
    explanation: str


def _ranked_paths(job: Job, answer: str, limit: int) -> list[str]:
    """The answer's paths that name a readable file, in order; a bare file name counts when
    exactly one file has it (the tree shows names indented under their folders)."""
    readable = {f.path for f in job.view.files if f.text is not None} - SEPARATE_FILES
    by_name: dict[str, list[str]] = {}
    for known in readable:
        by_name.setdefault(known.rsplit("/", 1)[-1], []).append(known)
    out: list[str] = []
    for line in answer.splitlines():
        path = line.strip().strip("`*-• ").removeprefix("./")
        if path not in readable and len(by_name.get(path, [])) == 1:
            path = by_name[path][0]
        if path in readable and path not in out:
            out.append(path)
        if len(out) >= limit:
            break
    return out


def _context(job: Job, leaf: Leaf, paths: list[str], model: str) -> LeafContext:
    config = job.judge.config
    assert isinstance(config, FaithfulConfig)
    budgets = config.budgets
    index = job.index(model)
    key = f"paper-tokens:{model}"
    if key not in job.memo:
        job.memo[key] = count_tokens(job.paper + job.addendum + job.judge_addendum, model)
    window = budgets.context_window - budgets.answer_tokens
    room = window - job.memo[key] - _BUFFER_TOKENS
    script_text = script_note = None
    script_tokens = 0
    if job.options.code_dev:
        script_note = "not shown: Code-Dev grades code only"
    elif job.view.reproduce_sh is None:
        script_note = "the submission has no reproduce.sh (or it could not be read)"
    else:
        fit = index.fit("script", max(room // 4, 0))
        script_text, script_tokens, script_note = fit.text, fit.tokens, fit.note
    log = log_note = None
    log_tokens = 0
    if leaf.category in _WITH_LOG and not job.options.code_dev:
        if job.view.log is None:
            log_note = "no reproduce.log"
        else:
            fit = index.fit("log", max(min(room - script_tokens, window // 2), 0))
            log_note = fit.note
            if fit.text is not None:
                log = LogExcerpt(text=fit.text, tokens=fit.tokens, lines_cut=fit.lines_cut)
                log_tokens = fit.tokens
    room -= script_tokens + log_tokens
    files: list[ContextFile] = []
    by_path = {f.path: i for i, f in enumerate(index.files)}
    used = 0
    for path in paths:
        i = by_path.get(path)
        if i is None:
            continue
        text, tokens = index.whole(i)
        if used + tokens > room:
            break
        f = index.files[i]
        files.append(
            ContextFile(
                path=path, kind=f.kind, changed=f.changed, score=0.0, text=text, tokens=tokens
            )
        )
        used += tokens
    return LeafContext(
        category=leaf.category,
        budget_tokens=max(room + script_tokens + log_tokens, 0),
        tokens=used + script_tokens + log_tokens,
        model=model,
        files=files,
        reproduce_sh=script_text,
        script_note=script_note,
        log=log,
        log_note=log_note,
    )


async def _sample(job: Job, leaf: Leaf, sample: int) -> tuple[SampleGrade, CallCost, list[str]]:
    config = job.judge.config
    assert isinstance(config, FaithfulConfig)
    roles = config.roles
    assert roles.ranking is not None and roles.parsing is not None
    cost = CallCost()
    shown: list[str] = []
    addenda = "\n\n".join(t for t in (job.addendum, job.judge_addendum) if t)
    max_files = config.budgets.max_files or 10
    try:
        ranking = await job.model(roles.ranking, sample).generate(
            ranking_messages(
                job.judge,
                paper=job.paper,
                addenda=addenda,
                criterion=leaf.node.requirements,
                tree=file_tree(job.view),
                max_files=max_files,
            ),
            label="judge_ranking",
        )
        cost = add_cost(cost, ranking)
        grading_model = job.model(roles.grading, sample)
        context = _context(
            job, leaf, _ranked_paths(job, ranking.text, max_files), grading_model.name
        )
        shown = [f.path for f in context.files]
        verdict = await grading_model.generate(
            grading_messages(
                job.judge,
                paper=job.paper,
                addendum=job.addendum,
                judge_addendum=job.judge_addendum,
                context=context,
                criterion=leaf.node.requirements,
                prior=leaf.prior,
                code_dev=job.options.code_dev,
            ),
            label="judge_grading",
            max_tokens=roles.grading.max_output_tokens or config.budgets.answer_tokens,
        )
        cost = add_cost(cost, verdict)
        if not verdict.complete:
            why = f"the verdict did not end normally ({verdict.stop_reason}); not used"
            return (
                SampleGrade(score=0, valid=False, explanation=why, reason="incomplete"),
                cost,
                shown,
            )
        parsed = await job.model(roles.parsing, sample).generate(
            parsing_messages(job.judge, verdict=verdict.text, continuous=leaf.continuous),
            output=ParsedVerdict,
            label="parsing",
        )
        cost = add_cost(cost, parsed)
    except ModelError as exc:
        failed = SampleGrade(score=0, valid=False, explanation=str(exc), reason=reason_of(exc))
        return failed, cost, shown
    result: ParsedVerdict = parsed.parsed
    score = result.score
    if (
        not result.valid_score
        or not 0 <= score <= 1
        or (not leaf.continuous and score not in (0, 1))
    ):
        why = f"no valid score in the verdict (parsed: valid={result.valid_score}, score={score})"
        return SampleGrade(score=0, valid=False, explanation=why, reason="unparseable"), cost, shown
    explanation = f"{verdict.text.strip()}\n\n(parsed: {result.explanation})"
    return SampleGrade(score=float(score), explanation=explanation), cost, shown


async def grade_leaf(job: Job, leaf: Leaf) -> LeafGrade:
    """One leaf, every sample, three calls each."""
    started = time.perf_counter()
    if (
        leaf.category == "Result Analysis"
        and not job.options.code_dev
        and job.view.changes_known
        and not job.view.changed_files()
    ):
        return LeafGrade(
            path=leaf.path,
            leaf_id=leaf.node.id,
            category=leaf.category,
            score=0.0,
            valid=True,
            explanation="the reproduction created or modified no file: nothing to analyse",
            source="shortcut",
        )
    samples: list[SampleGrade] = []
    total = CallCost()
    shown: list[str] = []
    for sample in range(job.options.samples):
        grade, cost, files = await _sample(job, leaf, sample)
        samples.append(grade)
        shown = shown or files
        total = sum_cost(total, cost)
    return vote(
        leaf, samples, cost=total, files_shown=shown, wall_time_s=time.perf_counter() - started
    )
