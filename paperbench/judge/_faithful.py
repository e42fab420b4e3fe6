"""PaperBench's SimpleJudge, for comparable numbers: three calls per leaf.

1. ranking (label ``judge_ranking``): the paper, the addenda, the criterion and the tree of
   the files the leaf's category may see (:mod:`._faithful_files`); the answer is a list of
   paths, and of its first ``max_files`` lines each that names a file of the submission is
   shown, as PaperBench reads it (:func:`named_files`);
2. grading (``judge_grading``): the paper, those files (each up to 200,000 characters, a
   binary one 200 kB, whole while they fit, the next one cut in token space to fill the
   room), ``reproduce.sh`` (every category; not in Code-Dev) and the log folded and cut as
   PaperBench does (:mod:`._faithful_log`; Code Execution, Result Analysis and subtrees); a
   free-text verdict. No ``max_tokens`` unless the config sets one; a verdict cut off by a
   limit is asked once more with twice the room before the leaf is invalid;
3. parsing (``parsing``): the verdict alone, to a structured score (an integer for a leaf,
   a number for a subtree, as PaperBench's schemas ask).

A Result Analysis leaf scores 0 without a call when the reproduction changed no doc or table.
The window is the called model's (:func:`model_window`), as PaperBench takes its completer's;
a config whose fixed parts cannot fit it is refused before any request (:func:`check_windows`).
The paper is cut (from the end) only when it and the cut log still exceed the window.
Each role may use its own model (``roles`` in the config).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from paperbench.errors import ConfigError, ModelError
from paperbench.judge._config import FaithfulConfig, LoadedJudge
from paperbench.judge._context import JOIN_TOKENS, ContextCategory, LeafContext
from paperbench.judge._faithful_files import (
    FILES_MARGIN,
    category_files,
    cut_to_tokens,
    no_results,
    ranking_tree,
    readable,
    shown_files,
)
from paperbench.judge._faithful_log import PAPER_MARGIN, faithful_log
from paperbench.judge._fence import fence
from paperbench.judge._job import Job, Leaf, ModelSettings, add_cost, reason_of, sum_cost, vote
from paperbench.judge._log import LogExcerpt
from paperbench.judge._prompts import grading_messages, parsing_messages, ranking_messages
from paperbench.judge._types import CallCost, LeafGrade, SampleGrade
from paperbench.judge._view import SubmissionView, ViewFile
from paperbench.llm import context_window, count_tokens
from paperbench.rubric import NodePath, TaskNode, iter_nodes, node_at, prior_criteria

_WITH_LOG = frozenset({"Code Execution", "Result Analysis", "Subtree"})


class ParsedVerdict(BaseModel):
    """A subtree's parsed verdict: a score from 0 to 1."""

    model_config = ConfigDict(extra="forbid")

    valid_score: bool
    score: float
    explanation: str


class ParsedBinaryVerdict(BaseModel):
    """A leaf's parsed verdict: the schema asks for an integer score, as PaperBench's does,
    so the parser must turn a "0.5" into 0 or 1 itself (or say the score is not valid)."""

    model_config = ConfigDict(extra="forbid")

    valid_score: bool
    score: int
    explanation: str


MAX_PRIOR_NODES: dict[str, int] = {"pinn": 5}
"""Papers whose preceding criteria PaperBench caps (its one huge rubric); no cap otherwise."""


def subtree_criterion(node: TaskNode) -> str:
    """A subtree graded as one unit, as PaperBench words it: every node in pre-order, one a
    line, ``| `` once per level below the subtree's root, its weight after it."""
    return "".join(
        f"{'| ' * len(path)}{sub.requirements} (weight: {sub.weight})\n"
        for path, sub in iter_nodes(node)
    )


def criterion_for(job: Job, leaf: Leaf) -> str:
    """The criterion's text in the prompts: a leaf's own; for a subtree cut at the depth
    limit, the subtree it stands for in PaperBench's words (:func:`subtree_criterion`)."""
    if leaf.category == "Subtree" and job.uncut_rubric is not None:
        return subtree_criterion(node_at(job.uncut_rubric, leaf.path))
    return leaf.node.requirements


def prior_for(rubric: TaskNode, path: NodePath, paper_id: str) -> list[str]:
    """The criteria shown before a leaf, as PaperBench lists them: the root, then at every
    level the earlier siblings and the ancestor; the last ``MAX_PRIOR_NODES`` of them for the
    papers that have a cap."""
    if not path:
        return []
    prior = [node.requirements for _, node in prior_criteria(rubric, path)]
    cap = MAX_PRIOR_NODES.get(paper_id)
    return prior[-cap:] if cap is not None else prior


def model_window(model: str, configured: int) -> int:
    """The window of the model called (``provider/model``): the limits table's, as PaperBench
    takes its completer's ``n_ctx``; for a model the table does not know (one served by a
    compatible endpoint), the config's ``budgets.context_window``."""
    return context_window(model) or configured


def _window(job: Job, model: str) -> int:
    config = job.judge.config
    assert isinstance(config, FaithfulConfig)
    return model_window(model, config.budgets.context_window)


def check_windows(judge: LoadedJudge, settings: ModelSettings) -> None:
    """Refuse, before any request, a config whose fixed parts (the room kept for the answer,
    the margin below the files and the prompts' own text) do not fit the window of the
    ranking or grading model that would be called.

    Raises:
        ConfigError: one line naming the model, its window and what does not fit.
    """
    config = judge.config
    if not isinstance(config, FaithfulConfig):
        return
    for role in (config.roles.ranking, config.roles.grading):
        assert role is not None
        name = settings.model or role.model
        window = model_window(name, config.budgets.context_window)
        prompts = sum(count_tokens(text, name) for text in judge.prompts.values())
        fixed = config.budgets.answer_tokens + FILES_MARGIN + prompts
        if fixed >= window:
            raise ConfigError(
                f"{name} has a {window:,}-token window, which cannot hold the answer room "
                f"({config.budgets.answer_tokens:,}), the files' margin ({FILES_MARGIN:,}) and "
                f"the prompts ({prompts:,}): lower budgets.answer_tokens or call a model with "
                "a larger window",
                file=judge.path,
                path="$.budgets.answer_tokens",
            )


def _resolve(written: str, folders: frozenset[str]) -> str | None:
    """The submission path a relative path names, as the file system resolves it (``..``
    steps out of a folder that exists); None when it leaves the submission."""
    parts: list[str] = []
    for part in written.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts or "/".join(parts) not in folders:
                return None
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


@dataclass(frozen=True)
class FileIndex:
    """The view's files by path and its folders, built once per grading."""

    by_path: dict[str, ViewFile]
    folders: frozenset[str]

    @classmethod
    def of(cls, view: SubmissionView) -> FileIndex:
        folders = {f.path.rsplit("/", 1)[0] for f in view.files if "/" in f.path}
        folders |= {d.rsplit("/", i)[0] for d in list(folders) for i in range(d.count("/") + 1)}
        folders |= set(view.skipped_dirs)
        return cls({f.path: f for f in view.files}, frozenset(folders))


def named_files(answer: str, index: FileIndex, limit: int) -> list[tuple[str, ViewFile]]:
    """The files the ranking answer names, as PaperBench reads them: each of its first
    ``limit`` lines, stripped of white space and of ``/`` at either end, is a path in the
    submission folder; a line naming no readable file there is skipped; a file named twice
    is read twice; a file outside the leaf's category, or binary, is read like any other.
    A line that starts with ``/`` is skipped (PaperBench cannot label it), and a path that
    leaves the submission, or a file the view does not hold, is never read. Each file comes
    with its label as PaperBench writes it (the line as a path, ``..`` kept)."""
    out: list[tuple[str, ViewFile]] = []
    for line in answer.split("\n")[:limit]:
        written = line.strip()
        if written.startswith("/"):
            continue
        rel = _resolve(written.strip("/"), index.folders)
        found = index.by_path.get(rel) if rel else None
        if found is None or readable(found) is None:
            continue
        label = "/".join(p for p in written.split("/") if p not in ("", "."))
        out.append((label, found))
    return out


def _memo(job: Job, key: str, make: Callable[[], object]) -> Any:
    if key not in job.cache:
        job.cache[key] = make()
    return job.cache[key]


def _paper_tokens(job: Job, model: str) -> int:
    value: int = _memo(job, f"paper-tokens:{model}", lambda: count_tokens(job.paper, model))
    return value


def _log(job: Job, model: str) -> tuple[str, int] | None:
    """The folded, cut log and its fenced tokens (None: no log)."""
    if job.view.log is None:
        return None

    def make() -> tuple[str, int]:
        assert job.view.log is not None
        text = faithful_log(
            job.view.log.head,
            paper_tokens=_paper_tokens(job, model),
            window=_window(job, model),
            model=model,
        )
        block = fence(text, "reproduce.log")
        return block, count_tokens(block, model) + JOIN_TOKENS

    value: tuple[str, int] = _memo(job, f"log:{model}", make)
    return value


def _paper(job: Job, model: str) -> tuple[str, int]:
    """The paper as the prompts hold it and its tokens: cut (from the end) only when the
    paper and the already cut log still exceed the window, as PaperBench does."""

    def make() -> tuple[str, int]:
        log = _log(job, model)
        log_tokens = log[1] if log is not None else 0
        tokens = _paper_tokens(job, model)
        window = _window(job, model)
        if tokens + log_tokens <= window:
            return job.paper, tokens
        text = cut_to_tokens(job.paper, window - log_tokens - PAPER_MARGIN, model)
        return text, count_tokens(text, model)

    value: tuple[str, int] = _memo(job, f"paper:{model}", make)
    return value


def _room(job: Job, category: ContextCategory, model: str) -> int:
    """PaperBench's room for the tree and the files: the window less the paper, the log
    (not for Code Development) and the room kept for the answer."""
    config = job.judge.config
    assert isinstance(config, FaithfulConfig)
    log = _log(job, model)
    log_tokens = log[1] if log is not None and category != "Code Development" else 0
    return _window(job, model) - _paper(job, model)[1] - log_tokens - config.budgets.answer_tokens


def _eligible(job: Job, category: ContextCategory) -> list[str]:
    paths: list[str] = _memo(
        job, f"files:{category}", lambda: [f.path for f in category_files(job.view, category)]
    )
    return paths


def _tree(job: Job, category: ContextCategory, model: str) -> str:
    room = _room(job, category, model)
    tree: str = _memo(
        job,
        f"tree:{category}:{model}",
        lambda: ranking_tree(job.view, _eligible(job, category), room, model),
    )
    return tree


def _context(job: Job, leaf: Leaf, named: list[tuple[str, ViewFile]], model: str) -> LeafContext:
    room = _room(job, leaf.category, model) - FILES_MARGIN
    files, used = shown_files(named, max(room, 0), model)
    script_text = script_note = None
    script_tokens = 0
    script = job.view.file("reproduce.sh")
    script_raw = readable(script) if script is not None else None
    if job.options.code_dev:
        script_note = "not shown: Code-Dev grades code only"
    elif script_raw is None:
        script_note = "the submission has no reproduce.sh (or it could not be read)"
    else:
        script_text = fence(script_raw, "reproduce.sh")
        script_tokens = count_tokens(script_text, model) + JOIN_TOKENS
    log = log_note = None
    log_tokens = 0
    if leaf.category in _WITH_LOG and not job.options.code_dev:
        found = _log(job, model)
        if found is None:
            log_note = "no reproduce.log"
        else:
            log = LogExcerpt(text=found[0], tokens=found[1])
            log_tokens = found[1]
    return LeafContext(
        category=leaf.category,
        budget_tokens=max(room, 0) + script_tokens + log_tokens,
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
    criterion = criterion_for(job, leaf)
    # the criteria before the leaf in their own texts, as in the rubric before a depth cut
    prior = prior_for(job.uncut_rubric or job.rubric, leaf.path, job.paper_id)
    try:
        ranking_model = job.model(roles.ranking, sample)
        grading_model = job.model(roles.grading, sample)
        paper = _paper(job, grading_model.name)[0]
        ranking = await ranking_model.generate(
            ranking_messages(
                job.judge,
                paper=paper,
                addenda=addenda,
                criterion=criterion,
                tree=_tree(job, leaf.category, ranking_model.name),
                max_files=max_files,
            ),
            label="judge_ranking",
        )
        cost = add_cost(cost, ranking)
        index: FileIndex = _memo(job, "file-index", lambda: FileIndex.of(job.view))
        named = named_files(ranking.text, index, max_files)
        context = _context(job, leaf, named, grading_model.name)
        shown = [f.path for f in context.files]
        messages = grading_messages(
            job.judge,
            paper=paper,
            addendum=job.addendum,
            judge_addendum=job.judge_addendum,
            context=context,
            criterion=criterion,
            prior=prior,
            code_dev=job.options.code_dev,
        )
        # no max_tokens unless the config sets one (PaperBench sets none)
        limit = roles.grading.max_output_tokens
        verdict = await grading_model.generate(messages, label="judge_grading", max_tokens=limit)
        cost = add_cost(cost, verdict)
        if not verdict.complete and verdict.stop_reason == "max_tokens":
            # cut off by a limit: asked once more with twice the room
            more = 2 * max(limit or 0, verdict.usage.output_tokens, config.budgets.answer_tokens)
            verdict = await grading_model.generate(messages, label="judge_grading", max_tokens=more)
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
            output=ParsedVerdict if leaf.continuous else ParsedBinaryVerdict,
            label="parsing",
        )
        cost = add_cost(cost, parsed)
    except ModelError as exc:
        failed = SampleGrade(score=0, valid=False, explanation=str(exc), reason=reason_of(exc))
        return failed, cost, shown
    result: ParsedVerdict | ParsedBinaryVerdict = parsed.parsed
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
    if leaf.category == "Result Analysis" and not job.options.code_dev and no_results(job.view):
        return LeafGrade(
            path=leaf.path,
            leaf_id=leaf.node.id,
            category=leaf.category,
            score=0.0,
            valid=True,
            explanation="the reproduction created or modified no documentation or table: "
            "nothing to analyse",
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
