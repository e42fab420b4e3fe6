"""JudgeEval: how well a judge config agrees with careful human grades (gold sets).

A gold set is a list of :class:`GoldSubmission`: a submission, the ``reproduce.log`` its
grader saw, and its human-graded tree. Two layouts load (:func:`load_gold_set`):

    examples/<paper>/<name>/               this repository's bundled examples
        submission/                        the submitted repository
        reproduce.log                      the log the grader saw (optional)
        expected_result.json               the gold graded tree
    judge_eval/<paper>/<n>/                PaperBench's data/judge_eval
        submission.tar  or  submission/    the submission, in its state after reproduce.sh
                                           (reproduce.log, if any, inside it)
        grading/expected_result.json       the gold graded tree

As in PaperBench, the judge grades the gold tree's own rubric (the gold tree without its
grades), which may differ from the paper's current rubric; the paper (text, addenda) comes
from this repository's papers or a PaperBench data directory.

:func:`judge_eval` grades every gold submission with every judge config through an injected
``grade`` function (the grading engine's, or a fake in tests), matches predicted and gold
leaves by path, and computes on the leaves pooled across submissions, and per category:
accuracy and macro precision, recall and F1 over the two classes (pass: score ≥ 0.5).
Invalid predicted leaves (the judge failed on them) are excluded from those metrics and
counted apart, as a count and a share, never dropped in silence. Tokens and dollars come
from the cost the engine records in the graded tree's ``judge_metadata`` (see
:func:`tree_cost`); wall time is measured here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench.errors import InputError, LfsPointerError, UsageError
from paperbench.judge._agreement import PASS_THRESHOLD, PairAgreement, config_agreement, passes
from paperbench.judge._config import JudgeIdentity, LoadedJudge
from paperbench.judge._types import CallCost
from paperbench.papers import LFS_POINTER_MESSAGE, PaperSource, find_repo_root, is_lfs_pointer
from paperbench.rubric import (
    GradedTaskNode,
    NodePath,
    TaskNode,
    iter_leaves,
    iter_nodes,
    load_graded,
    path_to_json_path,
    summarize,
    write_tree,
)

GoldLayout = Literal["examples", "judge_eval"]
REPORT_VERSION = 1
COST_KEY = "cost"
"""Key in a graded node's ``judge_metadata`` holding a :class:`CallCost`."""


class ShapeMismatchError(InputError):
    """A predicted tree whose nodes do not match the gold tree's, path by path."""


class GoldSubmission(BaseModel):
    """One gold-graded submission."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper_id: str
    name: str
    """``<paper>/<example>``, e.g. ``calibration-binning/buggy`` or ``pinn/0``."""
    layout: GoldLayout
    submission: Path
    """A folder or a ``.tar`` archive."""
    log: Path | None = None
    """The ``reproduce.log`` the grader saw, when it sits outside the submission (the
    bundled examples); PaperBench's keep it inside the submission."""
    expected: Path
    """The gold graded tree (``expected_result.json``)."""
    data_dir: Path | None = None
    """The PaperBench data directory the paper comes from; None: this repository's papers."""

    def expected_tree(self) -> GradedTaskNode:
        return load_graded(self.expected)

    def rubric(self) -> TaskNode:
        """The rubric the judge grades: the gold tree without its grades."""
        return self.expected_tree().to_rubric()


GradeFn = Callable[[GoldSubmission, LoadedJudge], Awaitable[GradedTaskNode]]
"""Grades one gold submission's rubric with one judge config."""


# --- gold sets -----------------------------------------------------------------------------


def _example_dirs(root: Path) -> list[Path]:
    """``root/<paper>/<name>/`` folders, sorted, hidden ones left out."""
    out: list[Path] = []
    for paper in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        out.extend(sorted(d for d in paper.iterdir() if d.is_dir() and not d.name.startswith(".")))
    return out


def _gold_at(folder: Path, data_dir: Path | None) -> GoldSubmission:
    paper_id, name = folder.parent.name, f"{folder.parent.name}/{folder.name}"
    if (folder / "expected_result.json").is_file():
        submission = folder / "submission"
        if not submission.is_dir():
            raise InputError("no submission/ folder beside expected_result.json", file=folder)
        log = folder / "reproduce.log"
        return GoldSubmission(
            paper_id=paper_id,
            name=name,
            layout="examples",
            submission=submission,
            log=log if log.is_file() else None,
            expected=folder / "expected_result.json",
            data_dir=data_dir,
        )
    expected = folder / "grading" / "expected_result.json"
    if not expected.is_file():
        raise InputError(
            "not a gold submission: expected expected_result.json (bundled examples) or "
            "grading/expected_result.json (PaperBench's judge_eval); remove the folder or "
            "add its gold tree",
            file=folder,
        )
    if (folder / "submission").is_dir():
        submission = folder / "submission"
    elif (folder / "submission.tar").is_file():
        submission = folder / "submission.tar"
        if is_lfs_pointer(submission):
            raise LfsPointerError(LFS_POINTER_MESSAGE, file=submission)
    else:
        raise InputError(
            "no submission.tar or submission/ (PaperBench cannot redistribute some; create "
            "it with its judge_eval/download_data.py, or remove the folder)",
            file=folder,
        )
    return GoldSubmission(
        paper_id=paper_id,
        name=name,
        layout="judge_eval",
        submission=submission,
        expected=expected,
        data_dir=data_dir,
    )


def _check_gold_tree(gold: GoldSubmission) -> None:
    if is_lfs_pointer(gold.expected):
        raise LfsPointerError(LFS_POINTER_MESSAGE, file=gold.expected)
    tree = gold.expected_tree()
    for path, leaf in iter_leaves(tree):
        if not leaf.valid_score:
            raise InputError(
                "a gold leaf must be validly graded (valid_score true)",
                file=gold.expected,
                path=path_to_json_path(path),
            )


def load_gold_set(
    where: str | Path,
    *,
    data_dir: Path | None = None,
    papers: Sequence[str] | None = None,
) -> list[GoldSubmission]:
    """The gold submissions under ``where``: ``"examples"`` (this repository's bundled
    examples) or a folder in either layout (see the module's docstring). A PaperBench data
    directory holding ``judge_eval/`` works too, and is then where papers come from unless
    ``data_dir`` says otherwise; so does its ``judge_eval/`` folder itself. ``papers``
    keeps only those paper ids.

    Every gold tree is loaded and every paper looked up here, so a bad gold set fails
    before any grading.

    Raises:
        UsageError: ``"examples"`` outside a paperbench checkout, no such folder, or no
            gold submission in it.
        InputError: a gold folder without its files, a bad gold tree, a missing paper.
    """
    if str(where) == "examples":
        repo = find_repo_root()
        if repo is None or not (repo / "examples").is_dir():
            raise UsageError(
                "--gold examples: the bundled examples are in a paperbench checkout; run "
                "from one or give --gold DIR"
            )
        root = repo / "examples"
    else:
        root = Path(where)
        if not root.is_dir():
            raise UsageError(f"--gold {where}: no such folder; give 'examples' or a folder")
        if (root / "judge_eval").is_dir():
            data_dir = data_dir or (root if (root / "papers").is_dir() else None)
            root = root / "judge_eval"
        elif data_dir is None and (root.parent / "papers").is_dir():
            data_dir = root.parent
    source = PaperSource.resolve(data_dir)
    folders = _example_dirs(root)
    if papers:
        # only the papers asked for are read, named by folder or by config.yaml id
        wanted = set(papers) | {source.folder_of(p) or p for p in papers}
        folders = [f for f in folders if f.parent.name in wanted]
    golds = [_gold_at(folder, source.data_dir) for folder in folders]
    if not golds:
        raise UsageError(f"--gold {where}: no gold submission found in {root}")
    for gold in golds:
        # the judge reads the paper's texts; it grades the gold tree's own rubric
        source.load(gold.paper_id).require_usable(texts_only=True)
        _check_gold_tree(gold)
    return golds


# --- comparing trees -----------------------------------------------------------------------


class LeafPair(BaseModel):
    """A predicted leaf beside its gold leaf."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: NodePath
    category: str
    gold: float
    predicted: float
    valid: bool
    """False when the judge failed on the leaf (excluded from the metrics, counted)."""


def compare_trees(
    gold: GradedTaskNode, predicted: GradedTaskNode, *, file: Path | str | None = None
) -> list[LeafPair]:
    """Predicted and gold leaves matched by path.

    Raises:
        ShapeMismatchError: the trees differ in shape or in a node's id at some path (the
            predicted tree did not grade this gold tree's rubric).
    """
    pairs: list[LeafPair] = []
    for (path, g), (_, p) in zip(iter_nodes(gold), iter_nodes(predicted), strict=False):
        where = path_to_json_path(path)
        if len(g.sub_tasks) != len(p.sub_tasks) or g.id != p.id:
            found = f"id {p.id!r} with {len(p.sub_tasks)} sub-tasks"
            expected = f"id {g.id!r} with {len(g.sub_tasks)}"
            raise ShapeMismatchError(
                f"the predicted tree differs from the gold tree here: {found}, gold has "
                f"{expected}; grade the gold tree's own rubric (no --code-dev or --max-depth)",
                file=file,
                path=where,
            )
        if not g.sub_tasks:
            category = g.task_category.value if g.task_category else "?"
            pairs.append(
                LeafPair(
                    path=path,
                    category=category,
                    gold=g.score,
                    predicted=p.score if p.valid_score else 0.0,
                    valid=p.valid_score,
                )
            )
    return pairs


# --- metrics -------------------------------------------------------------------------------


class BinaryMetrics(BaseModel):
    """Verdict metrics on a set of leaves (pass: score ≥ 0.5)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    leaves: int
    """Every leaf compared, valid or not."""
    graded: int
    """Leaves the judge graded validly: the metrics below are over these."""
    invalid: int
    """Leaves the judge failed on: excluded from the metrics, counted here."""
    invalid_share: float
    gold_passes: int
    """Among the graded leaves, those the gold tree passes."""
    gold_fails: int
    accuracy: float | None
    """None when no leaf was validly graded."""
    precision: float | None
    """Macro average over the classes present in the gold or the predicted verdicts (as
    scikit-learn's ``average="macro"``, a class never predicted has precision 0)."""
    recall: float | None
    f1: float | None


def binary_metrics(pairs: Sequence[LeafPair]) -> BinaryMetrics:
    """Accuracy and macro precision, recall and F1 over the validly graded leaves."""
    graded = [(passes(p.gold), passes(p.predicted)) for p in pairs if p.valid]
    invalid = len(pairs) - len(graded)
    gold_passes = sum(g for g, _ in graded)
    accuracy = precision = recall = f1 = None
    if graded:
        accuracy = sum(g == p for g, p in graded) / len(graded)
        classes = sorted({g for g, _ in graded} | {p for _, p in graded})
        precisions, recalls, f1s = [], [], []
        for c in classes:
            tp = sum(g == c and p == c for g, p in graded)
            predicted = sum(p == c for _, p in graded)
            actual = sum(g == c for g, _ in graded)
            prec = tp / predicted if predicted else 0.0
            rec = tp / actual if actual else 0.0
            precisions.append(prec)
            recalls.append(rec)
            f1s.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
        precision = sum(precisions) / len(classes)
        recall = sum(recalls) / len(classes)
        f1 = sum(f1s) / len(classes)
    return BinaryMetrics(
        leaves=len(pairs),
        graded=len(graded),
        invalid=invalid,
        invalid_share=invalid / len(pairs) if pairs else 0.0,
        gold_passes=gold_passes,
        gold_fails=len(graded) - gold_passes,
        accuracy=accuracy,
        precision=precision,
        recall=recall,
        f1=f1,
    )


def by_category(pairs: Sequence[LeafPair]) -> dict[str, BinaryMetrics]:
    """:func:`binary_metrics` per leaf category, categories sorted."""
    groups: dict[str, list[LeafPair]] = {}
    for pair in pairs:
        groups.setdefault(pair.category, []).append(pair)
    return {name: binary_metrics(groups[name]) for name in sorted(groups)}


def tree_cost(tree: GradedTaskNode) -> CallCost:
    """What grading ``tree`` cost: the root's ``judge_metadata["cost"]`` when the engine
    stored the whole grading's cost there, else the sum of its leaves' (each leaf's share).
    A leaf without a recorded cost adds nothing (a dummy judge makes no call); an unpriced
    model makes ``cost_usd`` None.

    Raises:
        InputError: a recorded cost that is not a :class:`CallCost`.
    """

    def read(node: GradedTaskNode, path: NodePath) -> CallCost | None:
        raw = (node.judge_metadata or {}).get(COST_KEY)
        if raw is None:
            return None
        try:
            return CallCost.model_validate(raw)
        except ValidationError as exc:
            where = path_to_json_path(path) + f".judge_metadata.{COST_KEY}"
            raise InputError(f"not a cost record: {exc.errors()[0]['msg']}", path=where) from None

    top = read(tree, ())
    if top is not None:
        return top
    total = CallCost()
    usd: float | None = 0.0
    for path, leaf in iter_leaves(tree):
        cost = read(leaf, path)
        if cost is None:
            continue
        usd = None if usd is None or cost.cost_usd is None else usd + cost.cost_usd
        total = CallCost(
            requests=total.requests + cost.requests,
            unanswered=total.unanswered + cost.unanswered,
            input_tokens=total.input_tokens + cost.input_tokens,
            cached_input_tokens=total.cached_input_tokens + cost.cached_input_tokens,
            output_tokens=total.output_tokens + cost.output_tokens,
            cache_hits=total.cache_hits + cost.cache_hits,
            attempts=total.attempts + cost.attempts,
        )
    return total.model_copy(update={"cost_usd": usd})


# --- the report ----------------------------------------------------------------------------


class SubmissionResult(BaseModel):
    """One judge config on one gold submission."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    paper_id: str
    score: float
    """The judge's root score (invalid leaves counted as 0)."""
    gold_score: float
    metrics: BinaryMetrics
    cost: CallCost
    wall_time_s: float
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    """Invalid leaves by reason (``failed``, ``not_graded``, ``unparseable``...)."""
    invalid_messages: dict[str, str] = Field(default_factory=dict)
    """The first error message of each reason."""


class PaperCost(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    paper_id: str
    submissions: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None


class ConfigResult(BaseModel):
    """One judge config over the whole gold set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge: JudgeIdentity
    overall: BinaryMetrics
    """On the leaves pooled across every gold submission."""
    categories: dict[str, BinaryMetrics]
    submissions: list[SubmissionResult]
    papers: list[PaperCost]
    """Tokens and dollars per paper (summed over its gold submissions)."""
    cost: CallCost
    wall_time_s: float
    """Summed over the submissions' gradings (they may run concurrently)."""
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    """Invalid leaves by reason, over every gold submission."""
    invalid_messages: dict[str, str] = Field(default_factory=dict)
    """The first error message of each reason."""

    @property
    def nothing_graded(self) -> bool:
        """No leaf of any gold submission got a valid verdict: the judging failed as a whole."""
        return self.overall.leaves > 0 and self.overall.invalid == self.overall.leaves


class JudgeEvalReport(BaseModel):
    """What ``paperbench judge-eval`` reports (``--json``; ``report.json`` with ``--out``)."""

    model_config = ConfigDict(extra="forbid")

    version: int = REPORT_VERSION
    pass_threshold: float = PASS_THRESHOLD
    golds: list[GoldSubmission]
    configs: list[ConfigResult]
    agreement: list[PairAgreement] = Field(default_factory=list)
    """Pairwise verdict agreement between the configs on the leaves both graded validly."""
    wall_time_s: float


def _sum_costs(costs: Sequence[CallCost]) -> CallCost:
    usd: float | None = 0.0
    for cost in costs:
        usd = None if usd is None or cost.cost_usd is None else usd + cost.cost_usd
    return CallCost(
        requests=sum(c.requests for c in costs),
        unanswered=sum(c.unanswered for c in costs),
        input_tokens=sum(c.input_tokens for c in costs),
        cached_input_tokens=sum(c.cached_input_tokens for c in costs),
        output_tokens=sum(c.output_tokens for c in costs),
        cost_usd=usd,
        cache_hits=sum(c.cache_hits for c in costs),
        attempts=sum(c.attempts for c in costs),
    )


def _paper_costs(results: Sequence[SubmissionResult]) -> list[PaperCost]:
    out: list[PaperCost] = []
    for paper_id in sorted({r.paper_id for r in results}):
        mine = [r for r in results if r.paper_id == paper_id]
        total = _sum_costs([r.cost for r in mine])
        out.append(
            PaperCost(
                paper_id=paper_id,
                submissions=len(mine),
                input_tokens=total.input_tokens,
                output_tokens=total.output_tokens,
                cost_usd=total.cost_usd,
            )
        )
    return out


Progress = Callable[[str, str], None]
"""Called with (judge name, gold name) as each grading finishes."""


def _invalid_reasons(tree: GradedTaskNode) -> dict[str, dict[str, Any]]:
    """The invalid leaves of a predicted tree by reason, and each reason's first message
    (from the engine's ``judge_metadata``)."""
    reasons: dict[str, int] = {}
    messages: dict[str, str] = {}
    for _, leaf in iter_leaves(tree):
        if leaf.valid_score:
            continue
        metadata = leaf.judge_metadata or {}
        reason = str(metadata.get("reason") or "failed")
        reasons[reason] = reasons.get(reason, 0) + 1
        message = str(metadata.get("error") or leaf.explanation or "").strip()
        if message and reason not in messages:
            messages[reason] = message.splitlines()[0]
    return {"invalid_reasons": reasons, "invalid_messages": messages}


def _sum_reasons(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for count in counts:
        for reason, n in count.items():
            out[reason] = out.get(reason, 0) + n
    return dict(sorted(out.items()))


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error in a task group's failure (the others were cancelled with it), so
    the caller sees one error, e.g. one line at the command line."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


async def judge_eval(
    golds: Sequence[GoldSubmission],
    judges: Sequence[LoadedJudge],
    grade: GradeFn,
    *,
    concurrency: int = 2,
    out: Path | None = None,
    progress: Progress | None = None,
) -> JudgeEvalReport:
    """Grade every gold submission with every judge config and compare with the gold trees.

    At most ``concurrency`` gradings run at once. With ``out``, each predicted tree is
    written to ``out/<judge>/<paper>/<name>/grade.json`` as it completes.

    Raises:
        ShapeMismatchError: a predicted tree that does not match its gold tree.
        UsageError: two judge configs with the same name, or ``concurrency`` below 1.
        Whatever ``grade`` raises for a whole submission, the first such error (a leaf's
        failure is an invalid leaf, not an exception); the other gradings are cancelled.
    """
    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency}: give at least 1")
    names = [j.identity.name for j in judges]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise UsageError(f"--judge {duplicate}: given twice; give each config once")
    started = time.perf_counter()
    gold_trees = {g.name: g.expected_tree() for g in golds}
    semaphore = asyncio.Semaphore(concurrency)
    results: dict[tuple[int, int], tuple[SubmissionResult, list[LeafPair]]] = {}

    async def one(ji: int, gi: int) -> None:
        judge, gold = judges[ji], golds[gi]
        async with semaphore:
            t0 = time.perf_counter()
            predicted = await grade(gold, judge)
            wall = time.perf_counter() - t0
        pairs = compare_trees(gold_trees[gold.name], predicted, file=gold.expected)
        if out is not None:
            where = out / _safe(judge.identity.name) / _safe(gold.paper_id)
            write_tree(predicted, where / _safe(gold.name.split("/", 1)[-1]) / "grade.json")
        gold_tree = gold_trees[gold.name]
        results[(ji, gi)] = (
            SubmissionResult(
                name=gold.name,
                paper_id=gold.paper_id,
                score=summarize(predicted).root_score,
                gold_score=gold_tree.score,
                metrics=binary_metrics(pairs),
                cost=tree_cost(predicted),
                wall_time_s=wall,
                **_invalid_reasons(predicted),
            ),
            pairs,
        )
        if progress is not None:
            progress(judge.identity.name, gold.name)

    try:
        async with asyncio.TaskGroup() as group:
            for ji in range(len(judges)):
                for gi in range(len(golds)):
                    group.create_task(one(ji, gi))
    except BaseExceptionGroup as failed:
        raise _first(failed) from None

    configs: list[ConfigResult] = []
    verdicts: dict[str, dict[tuple[str, NodePath], float]] = {}
    for ji, judge in enumerate(judges):
        mine = [results[(ji, gi)] for gi in range(len(golds))]
        pooled = [pair for _, pairs in mine for pair in pairs]
        subs = [r for r, _ in mine]
        configs.append(
            ConfigResult(
                judge=judge.identity,
                overall=binary_metrics(pooled),
                categories=by_category(pooled),
                submissions=subs,
                papers=_paper_costs(subs),
                cost=_sum_costs([r.cost for r in subs]),
                wall_time_s=sum(r.wall_time_s for r in subs),
                invalid_reasons=_sum_reasons([r.invalid_reasons for r in subs]),
                invalid_messages={
                    k: v for r in reversed(subs) for k, v in r.invalid_messages.items()
                },
            )
        )
        verdicts[judge.identity.name] = {
            (gold.name, pair.path): pair.predicted
            for gold, (_, pairs) in zip(golds, mine, strict=True)
            for pair in pairs
            if pair.valid
        }
    return JudgeEvalReport(
        golds=list(golds),
        configs=configs,
        agreement=config_agreement(verdicts),
        wall_time_s=time.perf_counter() - started,
    )
