"""The grading engine: every leaf of a rubric graded, stored as it completes, resumable.

``grade_submission(view, paper, judge, out_dir=...)`` transforms the rubric as the options
ask (Code-Dev, resources provided, a depth limit), grades the leaves concurrently (a
TaskGroup and a semaphore; the model layer's connection limit does the rest) and writes, in
``out_dir/grading/``:

- ``run.json``: the paper, the judge's identity and the options, written first; a rerun into
  the same folder must match them, else it is refused;
- ``leaves.jsonl``: one :class:`~paperbench.judge.LeafGrade` per line, appended and flushed
  as each leaf completes; a rerun keeps the valid ones and grades the rest (the response
  cache makes a repeated call free; an invalid leaf is graded again);
- ``grade.json``: PaperBench's wrapper shape with the graded tree, the score (``None`` when
  the validly graded share of the rubric is below the judge's ``coverage_threshold``: the
  paper is *unscored*, and its partial score is kept apart as ``partial_score``), coverage,
  invalid leaves and scores by category; a leaf's and, with every leaf's path and id, the
  root's ``judge_metadata["addressed_to_judge"]`` list the text addressed to the judge found
  in what the graders were shown (:mod:`._addressed`; each ``LeafGrade`` holds its own);
- ``costs.jsonl``: every model call, one record a line, appended and flushed as it ends (a
  killed grading loses at most the record in flight; a rerun adds to it);
- ``costs.json``: the same records with totals by label (judge_ranking, judge_grading,
  parsing) and model, rewritten at the end of each grading;
- ``batches.jsonl`` (batched gradings): each provider batch, written as soon as the provider
  returned its id, with its requests' ``custom_id`` s, then its states (see
  :mod:`paperbench.llm._batch`); a rerun polls these batches instead of submitting again;
- ``complete.json``: written last; its absence means the grading did not finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._console import plural
from paperbench._io import atomic_write_json
from paperbench.errors import InputError
from paperbench.judge._addressed import context_findings
from paperbench.judge._agreement import tree_interval
from paperbench.judge._checks import run_check
from paperbench.judge._config import DummyConfig, FaithfulConfig, LoadedJudge, RandomConfig
from paperbench.judge._job import (
    CheckRunner,
    GradeOptions,
    Job,
    Leaf,
    ModelSettings,
    model_free_grade,
    prior_lines,
)
from paperbench.judge._types import ADDRESSED_KEY, AddressedFinding, LeafGrade
from paperbench.judge._view import SubmissionView
from paperbench.llm import BudgetCaps, CostJournal, CostLedger
from paperbench.llm._batch import JOURNAL as BATCH_JOURNAL
from paperbench.llm._batch import BatchRunner, batching
from paperbench.papers import Paper
from paperbench.rubric import (
    GradedTaskNode,
    NodePath,
    TaskNode,
    TreeSummary,
    aggregate,
    code_dev,
    cut_at_depth,
    effective_weights,
    iter_leaves,
    rebuild,
    resources_provided,
    summarize,
)

GRADE_SCHEMA_VERSION = 1
LEAVES_FILE = "leaves.jsonl"
RUN_FILE = "run.json"
GRADE_FILE = "grade.json"
COSTS_FILE = "costs.json"
COSTS_JOURNAL = "costs.jsonl"
COMPLETE_FILE = "complete.json"


class RunRecord(BaseModel):
    """What a resumed grading must match (``grading/run.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper_id: str
    judge: dict[str, Any]
    options: GradeOptions
    rubric_sha256: str
    """Of the rubric as graded (after the options' transforms): stored leaves address it by
    path, so a changed rubric cannot reuse them."""


class GradeResult(BaseModel):
    """What ``grade.json`` holds besides the tree (PaperBench's wrapper keys first)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = GRADE_SCHEMA_VERSION
    paper_id: str
    judge: dict[str, Any]
    options: GradeOptions
    score: float | None
    """``None``: unscored (coverage below the threshold); see ``partial_score``."""
    partial_score: float
    """The tree's score with invalid leaves counted as 0, whether or not the paper is scored."""
    unscored: bool
    unscored_reason: str | None = None
    coverage: float
    coverage_threshold: float
    leaves: int
    invalid_leaves: int
    invalid_reasons: dict[str, int] = Field(default_factory=dict)
    invalid_messages: dict[str, str] = Field(default_factory=dict)
    """The first error message of each invalid reason (what to fix)."""
    nothing_graded: bool = False
    """Every leaf that needed a model is invalid (and there was at least one): the judging
    failed as a whole (a missing key, a refused request, an unreachable server...)."""
    sources: dict[str, int] = Field(default_factory=dict)
    scores_by_category: dict[str, float]
    cost_usd: float | None
    requests: int
    """Requests a provider answered, with any HTTP status (retried attempts included; cache
    hits, calls refused before sending and attempts that got no answer are not)."""
    unanswered_attempts: int = 0
    """Attempts sent that got no HTTP answer (a refused, reset or dropped connection, a
    timeout): the server may never have received them."""
    refused_calls: int = 0
    """Calls refused before anything was sent (no key, the budget reached...)."""
    batched_requests: int = 0
    """Of ``requests``, those sent in provider batches (at the batch price)."""
    input_tokens: int
    graded_leaves_this_run: int
    reused_leaves: int
    wall_time_s: float
    view_cuts: list[str] = Field(default_factory=list)
    """What a cap kept out of the judge's view of the submission (``SubmissionView.cuts``):
    files no grader could be shown. Each affected leaf carries the same lines."""
    selection_notes: dict[str, int] = Field(default_factory=dict)
    """Each way evidence was chosen less well than the judge asks (a failed shortlist call:
    the lexical index alone), with the number of leaves it concerned; each leaf says so too."""
    interval: tuple[float, float] | None = None
    """With several verdicts per leaf: the score's 95 % interval from judge disagreement
    (a bootstrap over each leaf's samples, :func:`tree_interval`)."""
    graded_task_tree: dict[str, Any]

    def tree(self) -> GradedTaskNode:
        return GradedTaskNode.model_validate(self.graded_task_tree)

    def evidence_warnings(self) -> list[str]:
        """One line per way the judge was shown less than it asks (a cut of the view, a
        choice of evidence made without the shortlist), for a console to warn with."""
        cuts = [f"the judge's view was cut: {line}" for line in self.view_cuts]
        notes = self.selection_notes.items()
        return cuts + [f"{plural(n, 'leaf', 'leaves')}: {note}" for note, n in notes]

    def addressed_to_judge(self) -> list[AddressedFinding]:
        """The text addressed to the judge that the grading found (the root's
        ``judge_metadata``).

        Raises:
            ValidationError: an entry there is not a finding.
        """
        metadata = self.graded_task_tree.get("judge_metadata")
        entries = metadata.get(ADDRESSED_KEY) if isinstance(metadata, dict) else None
        return [AddressedFinding.model_validate(e) for e in entries or []]


def transform_rubric(rubric: TaskNode, options: GradeOptions) -> TaskNode:
    """The rubric as the options ask: resources provided, Code-Dev, then the depth limit."""
    if options.resources_provided:
        rubric = resources_provided(rubric)
    if options.code_dev:
        rubric = code_dev(rubric)
    if options.max_depth is not None:
        rubric = cut_at_depth(rubric, options.max_depth)
    return rubric


class LeafStore:
    """``leaves.jsonl``: read once, then appended one flushed line per leaf."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: TextIO | None = None

    def read(self) -> dict[NodePath, LeafGrade]:
        """The last record of each leaf; a torn last line (a killed process) is skipped."""
        found: dict[NodePath, LeafGrade] = {}
        if not self.path.is_file():
            return found
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                grade = LeafGrade.model_validate_json(line)
            except ValidationError:
                continue
            found[tuple(grade.path)] = grade
        return found

    def append(self, grade: LeafGrade) -> None:
        if self._handle is None:
            self._ensure_newline()
            self._handle = self.path.open("a", encoding="utf-8")
        self._handle.write(grade.model_dump_json() + "\n")
        self._handle.flush()

    def _ensure_newline(self) -> None:
        """A torn last line must not swallow the next record."""
        if self.path.is_file() and self.path.stat().st_size:
            with self.path.open("rb") as handle:
                handle.seek(-1, 2)
                if handle.read(1) != b"\n":
                    with self.path.open("a", encoding="utf-8") as out:
                        out.write("\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _check_run(folder: Path, record: RunRecord) -> None:
    path = folder / RUN_FILE
    if not path.is_file():
        atomic_write_json(path, record.model_dump(mode="json"))
        return
    try:
        stored = RunRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        raise InputError("unreadable; delete the folder or give another --out", file=path) from exc
    for key in ("paper_id", "judge", "options", "rubric_sha256"):
        if getattr(stored, key) != getattr(record, key):
            raise InputError(
                f"this folder holds a grading with another {key.replace('_', ' ')}; "
                "give another --out (or delete it) to grade with these settings",
                file=path,
                path=f"$.{key}",
            )


def _leaves(rubric: TaskNode) -> Iterator[Leaf]:
    for path, node in iter_leaves(rubric):
        assert node.task_category is not None
        yield Leaf(
            path=path,
            node=node,
            category=node.task_category.value,
            prior=prior_lines(rubric, path) if path else [],
        )


def _units(job: Job, leaves: list[Leaf]) -> list[list[Leaf]]:
    """Batches of sibling leaves of one category (simple mode), else one leaf each."""
    config = job.judge.config
    size = getattr(config, "batch_leaves", 1)
    if size <= 1:
        return [[leaf] for leaf in leaves]
    groups: dict[tuple[NodePath, str], list[Leaf]] = {}
    for leaf in leaves:
        groups.setdefault((leaf.path[:-1], leaf.category), []).append(leaf)
    out: list[list[Leaf]] = []
    for group in groups.values():
        out.extend(group[i : i + size] for i in range(0, len(group), size))
    return out


async def _grade_unit(job: Job, unit: list[Leaf]) -> list[LeafGrade]:
    config = job.judge.config
    if isinstance(config, DummyConfig | RandomConfig):
        return [model_free_grade(job.judge, leaf) for leaf in unit]
    checks = [leaf for leaf in unit if leaf.node.check is not None and config.checks == "run"]
    rest = [leaf for leaf in unit if leaf not in checks]
    out = [await _run_check(job, leaf) for leaf in checks]
    if rest:
        if isinstance(config, FaithfulConfig):
            from paperbench.judge._faithful import grade_leaf

            out.extend([_with_addressed(job, leaf, await grade_leaf(job, leaf)) for leaf in rest])
        else:
            from paperbench.judge._simple import grade_batch

            out.extend(await grade_batch(job, rest))
    return out


_WITH_LOG = frozenset({"Code Execution", "Result Analysis", "Subtree"})


def _with_addressed(job: Job, leaf: Leaf, grade: LeafGrade) -> LeafGrade:
    """The simple-faithful mode's grade with the text addressed to the judge in what it
    showed: the files it names, and ``reproduce.sh`` and the log whole when the leaf's
    category shows them (that mode may cut them to the window)."""
    if grade.source != "llm" or not (grade.valid or grade.files_shown):
        return grade  # nothing was shown (e.g. the ranking call failed)
    shown_log = leaf.category in _WITH_LOG and not job.options.code_dev
    found = context_findings(
        job.view,
        files=dict.fromkeys(grade.files_shown),
        script=not job.options.code_dev,
        log=shown_log,
    )
    return grade.model_copy(update={"addressed_to_judge": found}) if found else grade


async def _run_check(job: Job, leaf: Leaf) -> LeafGrade:
    executed = job.view.executed
    if executed is None and job.options.code_dev:
        # Code-Dev reproduces nothing: a check runs against the submission as submitted
        executed = job.view.submission
    if executed is None or job.rubric_dir is None:
        return LeafGrade(
            path=leaf.path,
            leaf_id=leaf.node.id,
            category=leaf.category,
            score=0.0,
            valid=False,
            source="check",
            reason="not_graded",
            error="a check leaf needs an executed submission: give --executed "
            "(the output folder of `paperbench reproduce`), or grade with --code-dev to run "
            "the checks against the submission itself",
        )
    runner = job.check_runner or run_check
    return await runner(
        leaf.node,
        leaf.path,
        rubric_dir=job.rubric_dir,
        executed=Path(executed),
        sandbox=job.sandbox,
    )


def _category_scores(tree: GradedTaskNode) -> dict[str, float]:
    """Per leaf category: the weighted mean of its leaves (invalid ones count 0), each leaf
    weighted by its share of the root."""
    shares = effective_weights(tree)
    totals: dict[str, tuple[float, float]] = {}
    for path, leaf in iter_leaves(tree):
        assert leaf.task_category is not None
        key = leaf.task_category.value
        score = leaf.score if leaf.valid_score else 0.0
        weight, sum_ = totals.get(key, (0.0, 0.0))
        totals[key] = (weight + shares[path], sum_ + shares[path] * score)
    return {k: (s / w if w else 0.0) for k, (w, s) in sorted(totals.items())}


def build_tree(rubric: TaskNode, grades: dict[NodePath, LeafGrade]) -> GradedTaskNode:
    """The graded tree: each leaf's grade (a missing one is invalid, not graded)."""

    def step(path: NodePath, node: TaskNode, kids: list[GradedTaskNode]) -> GradedTaskNode:
        fields = node.model_dump(exclude={"sub_tasks"}, exclude_unset=True)
        if node.sub_tasks:
            return GradedTaskNode(
                **fields, sub_tasks=kids, score=0.0, valid_score=True, explanation=""
            )
        grade = grades.get(path)
        if grade is None:
            return GradedTaskNode(**fields, score=0.0, valid_score=False, explanation="not graded")
        metadata: dict[str, Any] = {"source": grade.source}
        if grade.reason is not None:
            metadata["reason"] = grade.reason
        if grade.error:
            metadata["error"] = grade.error
        if grade.samples:
            metadata["samples"] = [s.score if s.valid else None for s in grade.samples]
        if grade.addressed_to_judge:
            metadata[ADDRESSED_KEY] = [a.model_dump() for a in grade.addressed_to_judge]
        if grade.notes:
            metadata["notes"] = list(grade.notes)
        return GradedTaskNode(
            **fields,
            score=grade.score if grade.valid else 0.0,
            valid_score=grade.valid,
            explanation=grade.explanation or grade.error or "",
            judge_metadata=metadata,
        )

    tree = rebuild(rubric, step)
    assert tree is not None
    tree = aggregate(tree)
    found = addressed_findings(grades)
    if not found:
        return tree
    metadata = {**(tree.judge_metadata or {}), ADDRESSED_KEY: [f.model_dump() for f in found]}
    return tree.model_copy(update={"judge_metadata": metadata})


def addressed_findings(grades: dict[NodePath, LeafGrade]) -> list[AddressedFinding]:
    """Every leaf's text addressed to the judge, with the leaf, in rubric order."""
    return [
        AddressedFinding(leaf_path=list(path), leaf_id=grade.leaf_id, **found.model_dump())
        for path, grade in sorted(grades.items())
        for found in grade.addressed_to_judge
    ]


def _rubrics(base: TaskNode, options: GradeOptions) -> tuple[TaskNode, TaskNode | None]:
    """The rubric graded (``base`` as the options ask) and, with a depth limit, the same
    rubric uncut."""
    rubric = transform_rubric(base, options)
    uncut = None
    if options.max_depth is not None:
        uncut = transform_rubric(base, options.model_copy(update={"max_depth": None}))
    return rubric, uncut


def _open_folder(
    out_dir: Path, paper: Paper, judge: LoadedJudge, options: GradeOptions, rubric: TaskNode
) -> Path:
    """``out_dir/grading``, its ``run.json`` written or matched against this grading, and
    its completion marker removed.

    Raises:
        InputError: the folder holds a grading of another paper, judge, options or rubric.
    """
    folder = out_dir / "grading"
    folder.mkdir(parents=True, exist_ok=True)
    identity = judge.identity.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(rubric.to_dict(), sort_keys=True).encode()).hexdigest()
    record = RunRecord(paper_id=paper.id, judge=identity, options=options, rubric_sha256=digest)
    _check_run(folder, record)
    (folder / COMPLETE_FILE).unlink(missing_ok=True)
    return folder


def _resume(
    folder: Path, rubric: TaskNode
) -> tuple[LeafStore, dict[NodePath, LeafGrade], list[Leaf]]:
    """The leaf store, the valid grades it already holds, and the leaves still to grade."""
    store = LeafStore(folder / LEAVES_FILE)
    stored = store.read()
    leaves = list(_leaves(rubric))
    kept = {p: g for p, g in stored.items() if g.valid}
    todo = [leaf for leaf in leaves if leaf.path not in kept]
    return store, kept, todo


async def _grade_units(
    job: Job,
    units: list[list[Leaf]],
    grades: dict[NodePath, LeafGrade],
    store: LeafStore,
    on_leaf: Callable[[LeafGrade], None] | None,
) -> None:
    """Grade ``units`` concurrently; each grade goes into ``grades`` and ``store`` and to
    ``on_leaf`` as its unit completes."""
    view = job.view
    # batched: every unit at once, so that all the leaves at one step share one batch
    semaphore = asyncio.Semaphore(max(len(units), 1) if job.batching else job.settings.concurrency)

    async def run(unit: list[Leaf]) -> None:
        async with semaphore:
            results = await _grade_unit(job, unit)
        for grade in results:
            if view.cuts and grade.source != "check":
                # a check runs on the executed submission itself, not on the view
                grade = grade.model_copy(update={"notes": list(view.cuts)})
            grades[tuple(grade.path)] = grade
            store.append(grade)
            if on_leaf is not None:
                on_leaf(grade)

    async with asyncio.TaskGroup() as group:
        for unit in units:
            group.create_task(run(unit))


def _write_result(
    folder: Path, result: GradeResult, view: SubmissionView, grades: dict[NodePath, LeafGrade]
) -> GradeResult:
    """``result`` with the view's cuts and the selection notes, written to ``grade.json``,
    then the completion marker."""
    notes = Counter(note for grade in grades.values() for note in grade.selection_notes)
    result = result.model_copy(
        update={"view_cuts": list(view.cuts), "selection_notes": dict(notes)}
    )
    atomic_write_json(folder / GRADE_FILE, result.model_dump(mode="json"))
    atomic_write_json(
        folder / COMPLETE_FILE,
        {"finished_at": datetime.now(UTC).isoformat(), "leaves": len(grades)},
    )
    return result


async def grade_submission(
    view: SubmissionView,
    paper: Paper,
    judge: LoadedJudge,
    *,
    out_dir: Path,
    options: GradeOptions | None = None,
    settings: ModelSettings | None = None,
    check_runner: CheckRunner | None = None,
    sandbox: Any = None,
    rubric: TaskNode | None = None,
    on_leaf: Callable[[LeafGrade], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> GradeResult:
    """Grade every leaf missing from ``out_dir/grading/leaves.jsonl`` and write the results.

    ``on_start(n)`` is called with the number of leaves to grade now, before the first;
    ``on_leaf(grade)`` as each is graded (for progress; batches report through
    :func:`paperbench.llm._batch.batch_progress`). With batching (``settings.batch`` or the
    config's ``batch``), each batch is in ``out_dir/grading/batches.jsonl`` from its
    submission on (a resumed grading polls it instead of submitting its requests again).
    Check leaves run in ``sandbox`` (a :class:`~paperbench.sandbox.SandboxConfig`): against
    ``view.executed``, or in Code-Dev (``options.code_dev``), where nothing is reproduced,
    against ``view.submission``.

    Raises:
        InputError: ``out_dir`` holds a grading of another paper, judge or options.
        ConfigError: a faithful config whose fixed parts do not fit the called model's window.
    """
    started = time.perf_counter()
    options = options or GradeOptions(samples=judge.config.samples)
    settings = settings or ModelSettings()
    if isinstance(judge.config, FaithfulConfig):
        from paperbench.judge._faithful import check_windows

        check_windows(judge, settings)
    rubric, uncut = _rubrics(rubric if rubric is not None else paper.rubric(), options)
    folder = _open_folder(out_dir, paper, judge, options, rubric)
    caps = BudgetCaps(run_usd=getattr(getattr(judge.config, "budgets", None), "max_usd", None))
    ledger = CostJournal.open(folder / COSTS_JOURNAL, caps=caps)
    store, kept, todo = _resume(folder, rubric)
    job = Job(
        view=view,
        rubric=rubric,
        judge=judge,
        options=options,
        settings=settings,
        ledger=ledger,
        paper=paper.paper_text() if todo and judge.config.mode not in ("dummy", "random") else "",
        addendum=paper.addendum_text(),
        judge_addendum=paper.judge_addendum_text(),
        paper_id=paper.id,
        rubric_dir=paper.checks_root,
        check_runner=check_runner,
        sandbox=sandbox,
        uncut_rubric=uncut,
    )
    grades = dict(kept)
    batches = BatchRunner(folder / BATCH_JOURNAL) if job.batching else None
    if on_start is not None:
        on_start(len(todo))
    units = _units(job, todo)
    try:
        with batching(batches) if batches is not None else contextlib.nullcontext():
            await _grade_units(job, units, grades, store, on_leaf)
    finally:
        if batches is not None:
            await batches.aclose()
        store.close()
        ledger.close()
        ledger.write(folder / COSTS_FILE)
        await job.aclose()
    tree = build_tree(rubric, grades)
    result = _result(paper, judge, options, tree, grades, ledger, len(todo), len(kept), started)
    return _write_result(folder, result, view, grades)


def _unscored_reason(
    summary: TreeSummary,
    threshold: float,
    grades: dict[NodePath, LeafGrade],
    ledger: CostLedger,
) -> str:
    """Why a grading is unscored, its cause first when it is a missing key: the models whose
    calls were refused for want of one (the ledger's unsent calls with a not-graded leaf's
    error) and the leaves they left."""
    coverage = (
        f"coverage {summary.coverage:.1%} is below the judge's threshold {threshold:.0%}: "
        f"{plural(summary.invalid_leaves, 'leaf', 'leaves')} without a valid grade"
    )
    no_key = [
        g for g in grades.values() if g.source == "llm" and g.reason == "not_graded" and g.error
    ]
    errors = {g.error for g in no_key}
    models = sorted({r.model for r in ledger.records if not r.sent and r.error in errors})
    if not no_key or not models:
        return coverage
    cause = f"no key for {', '.join(models)}: {plural(len(no_key), 'leaf', 'leaves')} not graded"
    if len(no_key) < summary.invalid_leaves:
        return f"{cause}; {coverage}"
    return f"{cause}; coverage {summary.coverage:.1%}, below the judge's threshold {threshold:.0%}"


def _result(
    paper: Paper,
    judge: LoadedJudge,
    options: GradeOptions,
    tree: GradedTaskNode,
    grades: dict[NodePath, LeafGrade],
    ledger: CostLedger,
    graded: int,
    reused: int,
    started: float,
) -> GradeResult:
    summary = summarize(tree)
    threshold = judge.config.coverage_threshold
    unscored = summary.coverage < threshold
    reasons: dict[str, int] = {}
    messages: dict[str, str] = {}
    sources: dict[str, int] = {}
    model_leaves = model_valid = 0
    for _, grade in sorted(grades.items()):
        sources[grade.source] = sources.get(grade.source, 0) + 1
        if grade.source == "llm":
            model_leaves += 1
            model_valid += grade.valid
        if not grade.valid:
            key = grade.reason or "failed"
            reasons[key] = reasons.get(key, 0) + 1
            if key not in messages and (grade.error or grade.explanation):
                messages[key] = (grade.error or grade.explanation).strip().splitlines()[0]
    missing = summary.leaves - len(grades)
    if missing:
        reasons["not_graded"] = reasons.get("not_graded", 0) + missing
    total = ledger.report().total
    return GradeResult(
        paper_id=paper.id,
        judge=judge.identity.model_dump(mode="json"),
        options=options,
        score=None if unscored else summary.root_score,
        partial_score=summary.root_score,
        unscored=unscored,
        unscored_reason=_unscored_reason(summary, threshold, grades, ledger) if unscored else None,
        coverage=summary.coverage,
        coverage_threshold=threshold,
        leaves=summary.leaves,
        invalid_leaves=summary.invalid_leaves,
        invalid_reasons=dict(sorted(reasons.items())),
        invalid_messages=dict(sorted(messages.items())),
        nothing_graded=model_leaves > 0 and model_valid == 0,
        sources=dict(sorted(sources.items())),
        scores_by_category=_category_scores(tree),
        cost_usd=total.cost_usd if not total.unpriced_calls else None,
        requests=total.requests,
        unanswered_attempts=total.unanswered,
        refused_calls=total.refused,
        batched_requests=total.batched,
        input_tokens=total.usage.input_tokens,
        graded_leaves_this_run=graded,
        reused_leaves=reused,
        wall_time_s=time.perf_counter() - started,
        interval=_interval(tree, grades),
        graded_task_tree=tree.to_dict(),
    )


def _interval(
    tree: GradedTaskNode, grades: dict[NodePath, LeafGrade]
) -> tuple[float, float] | None:
    """The score's interval from the leaves' samples; ``None`` when no leaf has several."""
    if not any(len(g.samples) > 1 for g in grades.values()):
        return None
    samples: dict[NodePath, list[float]] = {}
    for path, grade in grades.items():
        if grade.samples:
            samples[path] = [s.score for s in grade.samples if s.valid]
        elif grade.valid:
            samples[path] = [grade.score]
    _, interval = tree_interval(tree.to_rubric(), samples)
    return interval


def read_result(out_dir: Path) -> GradeResult:
    """The :class:`GradeResult` of a finished grading in ``out_dir`` (its
    ``grading/grade.json``).

    Raises:
        InputError: no such file, or not a grade file.
    """
    path = out_dir / "grading" / GRADE_FILE
    try:
        return GradeResult.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise InputError(f"not a grade file: {exc}", file=path) from exc
