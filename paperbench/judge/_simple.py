"""The default mode: files by a model's shortlist and the BM25 index, verdict and score in
one structured call.

Several sibling leaves of one category share a call (``batch_leaves``), each with its own
verdict. The context is chosen for the batch from, in order: for Result Analysis, the files
the run wrote; the files the shortlist call (:mod:`paperbench.judge._shortlist`) named for the
batch's leaves (every leaf's first, then every leaf's second, ...); the files those import;
then BM25 over the batch's requirement texts. A batch whose context would leave out any
leaf's must-have files (its first ``must_have_shortlisted`` shortlisted ones, and its own
top BM25 file unless one of those scores at least half as high) is split until none does
(down to a leaf alone with the whole budget).
With ``room_to_need``, a call's submission room is what its must-have files (and the files
they import) take, not the whole ``submission_tokens``: a small batch is not filled with
BM25 extras. A
leaf whose shortlist call failed is graded on the BM25 choice and carries a note saying so;
every file shown records why it was chosen (``LeafGrade.files_why``).

The answer's room grows with the batch (``answer_tokens_per_criterion``); an answer cut off
at it splits the batch, and a leaf alone is asked once more with twice the room before it is
invalid. The criteria's order is
shuffled between samples and each verdict records its position. The messages are the system
prompt and the paper (the same for every call of a paper, marked as the end of the cacheable
prefix), then the batch's material and criteria. A verdict missing from the answer is asked
again for that leaf alone, once; then the leaf is invalid.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections import Counter
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import IncompleteAnswerError, ModelError
from paperbench.judge._addressed import context_findings
from paperbench.judge._config import SimpleConfig
from paperbench.judge._context import (
    _WITH_LOG,
    LeafContext,
    Why,
    select_context,
    selectable,
)
from paperbench.judge._job import Job, Leaf, add_cost, reason_of, sum_cost, vote
from paperbench.judge._prompts import CATEGORY_QUESTIONS, render
from paperbench.judge._shortlist import Shortlist, shortlist, submission_map
from paperbench.judge._types import CallCost, LeafGrade, SampleGrade
from paperbench.llm import Message, SystemMessage, UserMessage, count_tokens


class Verdict(BaseModel):
    """One criterion's verdict: the reasoning first, then the score."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="The criterion's key, as given in brackets.")
    explanation: str = Field(description="Expected, then found, with file names and lines.")
    score: float = Field(description="0 or 1 (a number from 0 to 1 for a subtree).")


class Verdicts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdicts: list[Verdict]


def _left_out_summary(context: LeafContext) -> str:
    counts = Counter(item.reason for item in context.left_out)
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))


def shared_messages(job: Job) -> list[Message]:
    """The prefix every grading call of this paper shares (rendered once per grading)."""
    if job.shared is None:
        job.shared = _render_shared(job)
    return list(job.shared)


def _render_shared(job: Job) -> list[Message]:
    return [
        SystemMessage(content=render(job.judge.prompts["system"])),
        UserMessage(
            content=render(
                job.judge.prompts["paper"],
                paper=job.paper,
                addendum=job.addendum,
                judge_addendum=job.judge_addendum,
            ),
            cache=True,
        ),
    ]


def _batch_text(job: Job, leaves: list[Leaf], context: LeafContext) -> str:
    category = leaves[0].category
    if category != "Result Analysis":
        files_heading = "The attempt's files most relevant to these criteria:"
    elif job.view.changes_known:
        files_heading = "Documentation and the files the reproduce.sh run created or changed:"
    else:
        files_heading = (
            "Documentation and results files of the attempt (which of them the reproduce.sh "
            "run created or changed is not known: some may have been there before it ran):"
        )
    return render(
        job.judge.prompts["batch"],
        context=context,
        files_heading=files_heading,
        left_out_summary=_left_out_summary(context),
        prior=leaves[0].prior,
        criterion="\n\n".join(leaf.node.requirements for leaf in leaves),
        criteria=[
            {"key": str(i + 1), "text": leaf.node.requirements} for i, leaf in enumerate(leaves)
        ],
        category=category,
        category_question=CATEGORY_QUESTIONS[category],
        continuous=category == "Subtree",
        code_dev=job.options.code_dev,
    )


def batch_context(
    job: Job,
    leaves: list[Leaf],
    model: str,
    preferred: Mapping[str, Why] | None = None,
    extra: int = 0,
    room: int | None = None,
) -> LeafContext:
    """The batch's context; ``room`` (when given) lowers the cap on its submission content,
    ``extra`` raises it (never past what the window leaves)."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    budgets = config.budgets
    fixed = _fixed_tokens(job, model) + sum(
        count_tokens(leaf.node.requirements, model) for leaf in leaves
    )
    fixed += sum(count_tokens(line, model) for line in leaves[0].prior)
    fixed += budgets.answer_room(len(leaves)) - budgets.answer_tokens  # the batch's extra room
    budget = budgets.submission_budget(fixed + 600, extra)
    if room is not None:
        budget = min(budget, room + extra)
    return select_context(
        job.view,
        leaves[0].category,
        budget,
        "\n".join(leaf.node.requirements for leaf in leaves),
        model=model,
        index=job.index(model),
        max_files=None if budgets.max_files is None else budgets.max_files * len(leaves),
        code_dev=job.options.code_dev,
        script_share=budgets.script_share,
        log_share=budgets.log_share,
        preferred=preferred,
    )


def _fixed_tokens(job: Job, model: str) -> int:
    key = f"shared-tokens:{model}"
    if key not in job.memo:
        job.memo[key] = sum(count_tokens(m.content, model) for m in shared_messages(job))
    return job.memo[key]


def _shortcut(leaf: Leaf, context: LeafContext) -> LeafGrade:
    return LeafGrade(
        path=leaf.path,
        leaf_id=leaf.node.id,
        category=leaf.category,
        score=0.0,
        valid=True,
        explanation="; ".join(context.notes) or "no changed files: nothing to analyse",
        source="shortcut",
    )


class _CutOff(Exception):
    """The answer was cut off at its room: the batch is split, or a lone leaf asked again."""


async def _ask(
    job: Job, leaves: list[Leaf], context: LeafContext, sample: int, *, more_room: bool = False
) -> tuple[dict[int, SampleGrade], dict[int, CallCost]]:
    """One call for ``leaves``; the samples by position, and each leaf's share of the cost.
    A leaf without a usable verdict is absent from the first mapping.

    Raises:
        _CutOff: the answer was cut off at its room (``max_tokens``), and the caller can
            still give it more (a batch to split, or a lone leaf not yet asked with more).
    """
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    model = job.model(config.roles.grading, sample)
    messages = [*shared_messages(job), UserMessage(content=_batch_text(job, leaves, context))]
    room = config.budgets.answer_room(len(leaves)) * (2 if more_room else 1)
    max_tokens = config.roles.grading.max_output_tokens or room
    costs: dict[int, CallCost] = {i: CallCost() for i in range(len(leaves))}
    try:
        out = await model.generate(
            messages, output=Verdicts, label="judge_grading", max_tokens=max_tokens
        )
    except ModelError as exc:
        cut = isinstance(exc, IncompleteAnswerError) and exc.stop_reason == "max_tokens"
        if cut and (len(leaves) > 1 or not more_room):
            raise _CutOff from exc
        failed = SampleGrade(score=0.0, valid=False, explanation=str(exc), reason=reason_of(exc))
        return {i: failed for i in range(len(leaves))}, costs
    for i in range(len(leaves)):
        costs[i] = add_cost(costs[i], out, share=len(leaves), first=i == 0)
    parsed: Verdicts = out.parsed
    found: dict[int, SampleGrade] = {}
    for verdict in parsed.verdicts:
        if not verdict.key.strip().isdigit():
            continue
        i = int(verdict.key.strip()) - 1
        if i < 0 or i >= len(leaves) or i in found:
            continue
        score = verdict.score
        if not 0 <= score <= 1 or (not leaves[i].continuous and score not in (0, 1)):
            found[i] = SampleGrade(
                score=0.0,
                valid=False,
                explanation=f"score {score} is outside the allowed values",
                reason="unparseable",
            )
            continue
        found[i] = SampleGrade(score=float(score), explanation=verdict.explanation)
    return found, costs


async def _ask_alone(
    job: Job, leaf: Leaf, context: LeafContext, sample: int
) -> tuple[dict[int, SampleGrade], dict[int, CallCost]]:
    """One leaf's call; cut off, it is asked once more with twice the room."""
    try:
        return await _ask(job, [leaf], context, sample)
    except _CutOff:
        return await _ask(job, [leaf], context, sample, more_room=True)


def _own_evidence(job: Job, leaf: Leaf, model: str) -> str | None:
    """The file a leaf's own context ranks first (None: it has no file to show)."""
    key = f"own-evidence:{model}:{leaf.path}"
    if key not in job.evidence:
        alone = batch_context(job, [leaf], model)
        job.evidence[key] = alone.files[0].path if alone.files else None
    return job.evidence[key]


def missing_evidence(
    job: Job,
    leaves: list[Leaf],
    context: LeafContext,
    model: str,
    lists: Mapping[int, Shortlist | None] | None = None,
) -> list[Leaf]:
    """The leaves whose must-have files are not all in the batch's context (:func:`_shown`):
    its first shortlisted files (that it can be shown), and the file its own lexical context
    ranks first."""
    shown = _shown(job, context, model)
    return [
        leaf
        for n, leaf in enumerate(leaves)
        if any(p not in shown for p in _must_haves(job, leaf, (lists or {}).get(n), model))
    ]


def _shown(job: Job, context: LeafContext, model: str) -> set[str]:
    """The files a context shows as a must-have file must be shown: whole, or in part when
    not even a call's whole submission room (``submission_tokens``) could hold it whole (an
    excerpt of a smaller file may miss the evidence, so it does not count)."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    cap = config.budgets.submission_tokens
    index = job.index(model)
    where = index.position
    return {
        f.path
        for f in context.files
        if not f.cut or cap is None or f.path not in where or index.whole(where[f.path])[1] > cap
    }


def _must_haves(job: Job, leaf: Leaf, found: Shortlist | None, model: str) -> list[str]:
    """A leaf's must-have files: its first shortlisted ones that its category can be shown,
    and its top lexical file unless the words already agree with one of those."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    named: list[str] = []
    if found is not None and found.paths:
        can = selectable(job.index(model), leaf.category)
        named = [p for p in found.paths if p in can][: config.must_have_shortlisted]
    own = _own_evidence(job, leaf, model)
    if own is None or own in named or _words_agree(job, leaf, named, own, model):
        return named
    return [own, *named]


def _words_agree(job: Job, leaf: Leaf, named: list[str], own: str, model: str) -> bool:
    """Whether a shortlisted file is one the criterion's words point to as well (its lexical
    score at least half the top file's): then the top lexical file adds nothing the ranking
    missed and is not a must-have. A shortlist of files that share few of the criterion's
    words (a ranking that may be wrong) keeps it."""
    if not named:
        return False
    index = job.index(model)
    where = index.position
    scores = index.file_scores(leaf.node.requirements)
    top = scores[where[own]] if own in where else 0.0
    return top > 0 and any(scores[where[p]] >= 0.5 * top for p in named if p in where)


def _needed_room(
    job: Job, leaves: list[Leaf], lists: list[Shortlist | None], model: str
) -> int | None:
    """The submission room that holds the batch's must-have files whole (with the files they
    import, and, for Result Analysis, the files the run wrote, shown first) after the script's
    and the log's shares;
    None when that is not less than ``submission_tokens`` (or the rule is off)."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    budgets, cap = config.budgets, config.budgets.submission_tokens
    if not config.room_to_need or cap is None:
        return None
    index, category, code_dev = job.index(model), leaves[0].category, job.options.code_dev
    where = index.position
    must = {
        p
        for leaf, found in zip(leaves, lists, strict=True)
        for p in _must_haves(job, leaf, found, model)
    }
    imports = submission_map(job, model).imports
    need = {p for p in must | {t for m in must for t in imports.get(m, [])} if p in where}
    if category == "Result Analysis" and not code_dev:
        can = selectable(index, category)
        need |= {f.path for f in index.files if f.changed is not None and f.path in can}
    files = sum(index.whole(where[p])[1] for p in need)
    shares, whole = 0.0, 0
    if not code_dev and job.view.reproduce_sh is not None:
        shares, whole = budgets.script_share, index.whole_tokens("script")
    if category in _WITH_LOG and not code_dev and job.view.log is not None:
        shares, whole = shares + budgets.log_share, whole + index.whole_tokens("log")
    # either bound leaves the files ``files`` after the script and the log take their parts
    room = min(files + whole, math.ceil(files / max(1.0 - shares, 0.05)))
    return None if room >= cap else room


def _missing_tokens(
    job: Job, leaves: list[Leaf], lists: list[Shortlist | None], context: LeafContext, model: str
) -> int:
    """What the must-have files the context left out take, whole: the room a batch is given
    once more (up to ``submission_tokens`` again) before it is split."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    cap = config.budgets.submission_tokens
    if cap is None:
        return 0  # the budget is already all the window leaves
    shown = _shown(job, context, model)
    index = job.index(model)
    where = index.position
    missing = {
        p
        for leaf, found in zip(leaves, lists, strict=True)
        for p in _must_haves(job, leaf, found, model)
        if p not in shown and p in where
    }
    return min(sum(index.whole(where[p])[1] for p in missing), cap)


def _preferred(
    job: Job, leaves: list[Leaf], lists: list[Shortlist | None], model: str
) -> dict[str, Why]:
    """The order the batch's files are offered in before the lexical ranking: every leaf's
    must-have files first (its first ``must_have_shortlisted`` shortlisted files, by rank
    across the leaves: every leaf's first, then every leaf's second; then each leaf's top
    BM25 file), then the rest of the shortlists by rank, then the files the shortlisted ones
    import (one hop)."""
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    out: dict[str, Why] = {}
    named = [s.paths for s in lists if s is not None]
    longest = max((len(p) for p in named), default=0)
    must = min(config.must_have_shortlisted, longest)

    def by_rank(first: int, last: int) -> None:
        for rank in range(first, last):
            for paths in named:
                if rank < len(paths):
                    out.setdefault(paths[rank], "shortlist")

    by_rank(0, must)
    for leaf in leaves:
        if (own := _own_evidence(job, leaf, model)) is not None:
            out.setdefault(own, "lexical")
    by_rank(must, longest)
    imports = submission_map(job, model).imports
    for path in [p for p, why in out.items() if why == "shortlist"]:
        for target in imports.get(path, []):
            out.setdefault(target, "import hop")
    return out


def _order(leaves: list[Leaf], sample: int) -> list[int]:
    """The criteria's order in a sample's prompt: as in the rubric for the first sample,
    shuffled (seeded by the batch and the sample, so a rerun asks the same) for the others."""
    order = list(range(len(leaves)))
    if sample > 0 and len(leaves) > 1:
        seed = "|".join(str(leaf.path) for leaf in leaves) + f"|{sample}"
        random.Random(hashlib.sha256(seed.encode()).digest()).shuffle(order)
    return order


async def grade_batch(job: Job, leaves: list[Leaf]) -> list[LeafGrade]:
    """Grade sibling leaves of one category (all samples); one LeafGrade per leaf, in order.

    Every leaf is graded on a context that holds its must-have files (its top lexical file and
    its first shortlisted ones): when the batch's context, built for all the batch's criteria
    within one budget, leaves one out, the budget is raised once by what the missing files
    take (at most ``submission_tokens`` more); if one is still left out, the batch is split in
    two and each half is graded on its own, down to a leaf alone with the whole budget.
    """
    started = time.perf_counter()
    config = job.judge.config
    assert isinstance(config, SimpleConfig)
    name = job.settings.model or config.roles.grading.model
    context = batch_context(job, leaves, name)
    if context.shortcut is not None:
        return [_shortcut(leaf, context) for leaf in leaves]
    lists = [await shortlist(job, leaf, name) for leaf in leaves]
    preferred = _preferred(job, leaves, lists, name) if any(s and s.paths for s in lists) else None
    room = None if preferred is None else _needed_room(job, leaves, lists, name)
    if preferred is not None:
        context = batch_context(job, leaves, name, preferred, room=room)
    by_leaf = dict(enumerate(lists))
    if (len(leaves) > 1 or room is not None) and missing_evidence(
        job, leaves, context, name, by_leaf
    ):
        # one call with room for the must-have files costs less than two calls
        extra = _missing_tokens(job, leaves, lists, context, name)
        if extra:
            context = batch_context(job, leaves, name, preferred, extra, room)
    if len(leaves) > 1 and missing_evidence(job, leaves, context, name, by_leaf):
        half = len(leaves) // 2
        return [*await grade_batch(job, leaves[:half]), *await grade_batch(job, leaves[half:])]
    samples: list[list[SampleGrade]] = [[] for _ in leaves]
    costs = [CallCost() if s is None else s.cost for s in lists]
    for sample in range(job.options.samples):
        order = _order(leaves, sample)
        asked = [leaves[i] for i in order]
        try:
            got, shares = await _ask(job, asked, context, sample)
        except _CutOff:
            if len(leaves) > 1:  # the verdicts do not fit one answer: fewer per call
                half = len(leaves) // 2
                first = await grade_batch(job, leaves[:half])
                return [*first, *await grade_batch(job, leaves[half:])]
            got, shares = await _ask(job, asked, context, sample, more_room=True)
        found = {order[k]: grade for k, grade in got.items()}
        for k, share in shares.items():
            costs[order[k]] = sum_cost(costs[order[k]], share)
        for i, leaf in enumerate(leaves):
            if i not in found and len(leaves) > 1:
                alone = batch_context(job, [leaf], name, _preferred(job, [leaf], [lists[i]], name))
                again, more = await _ask_alone(job, leaf, alone, sample)
                costs[i] = sum_cost(costs[i], more[0])
                if 0 in again:
                    found[i] = again[0]
            grade = found.get(i) or SampleGrade(
                score=0.0,
                valid=False,
                explanation="the answer had no verdict for this criterion",
                reason="unparseable",
            )
            samples[i].append(grade.model_copy(update={"position": order.index(i) + 1}))
    elapsed = (time.perf_counter() - started) / len(leaves)
    files = [f.path for f in context.files if not f.cut]
    parts = {f.path: f.lines for f in context.files if f.cut}
    addressed = context_findings(
        job.view,
        files={f.path: f.text if f.cut else None for f in context.files},
        script=context.reproduce_sh,
        log=context.log.text if context.log is not None else None,
    )
    return [
        vote(
            leaf,
            samples[i],
            cost=costs[i],
            files_shown=files,
            file_lines_shown=parts,
            files_why={f.path: f.why for f in context.files},
            selection_notes=[s.note] if s is not None and s.note else [],
            log_lines_shown=context.log.shown if context.log is not None else [],
            addressed_to_judge=addressed,
            wall_time_s=elapsed,
        )
        for (i, leaf), s in zip(enumerate(leaves), lists, strict=True)
    ]
