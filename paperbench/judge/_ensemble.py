"""Several judge configs on one submission: each config's headline beside the others', and
how often their verdicts agree leaf by leaf (``OUT/agreement.json``).

Each config grades into ``OUT/<judge-name>/grading/`` (:func:`grade_submission`'s layout);
the agreement is computed from the configs' valid leaf grades (``leaves.jsonl``), pairwise
with :func:`config_agreement` and over all configs at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich.table import Table

from paperbench._io import atomic_write_text
from paperbench.judge._agreement import PairAgreement, config_agreement, passes
from paperbench.judge._config import LoadedJudge
from paperbench.judge._grader import LEAVES_FILE, GradeResult, LeafStore, grade_submission
from paperbench.judge._job import GradeOptions, ModelSettings
from paperbench.judge._types import LeafGrade
from paperbench.judge._view import SubmissionView
from paperbench.papers import Paper
from paperbench.rubric import NodePath

AGREEMENT_FILE = "agreement.json"
ENSEMBLE_SCHEMA_VERSION = 1


class ConfigSummary(BaseModel):
    """One config's headline in an ensemble."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    mode: str
    folder: str
    """The config's output folder, relative to OUT."""
    score: float | None
    """``None``: unscored (coverage below the config's threshold)."""
    partial_score: float
    coverage: float
    interval: tuple[float, float] | None
    """The score's 95 % interval from the config's own sample disagreement, if it has one."""
    cost_usd: float | None
    """``None``: an unpriced model was called."""
    leaves: int
    invalid_leaves: int


class AllAgreement(BaseModel):
    """How often every config gives the same verdict, on the leaves all graded validly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    leaves: int
    agreement: float | None
    """Share of those leaves; ``None`` when there are none."""


class EnsembleReport(BaseModel):
    """What ``OUT/agreement.json`` holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = ENSEMBLE_SCHEMA_VERSION
    paper_id: str
    configs: list[ConfigSummary]
    pairs: list[PairAgreement]
    all_agree: AllAgreement


def valid_verdicts(grading_dir: Path) -> dict[NodePath, float]:
    """Leaf path → score of every valid grade in ``grading_dir/leaves.jsonl``."""
    store = LeafStore(grading_dir / LEAVES_FILE)
    return {path: grade.score for path, grade in store.read().items() if grade.valid}


def all_agreement(verdicts: Mapping[str, Mapping[NodePath, float]]) -> AllAgreement:
    """The share of the leaves every config graded validly on which all verdicts agree."""
    tables = list(verdicts.values())
    if not tables:
        return AllAgreement(leaves=0, agreement=None)
    common = [path for path in tables[0] if all(path in t for t in tables[1:])]
    same = sum(len({passes(t[path]) for t in tables}) == 1 for path in common)
    return AllAgreement(leaves=len(common), agreement=same / len(common) if common else None)


def ensemble_report(paper_id: str, results: Sequence[tuple[GradeResult, Path]]) -> EnsembleReport:
    """The report of several gradings of one submission; ``results`` pairs each config's
    result with its output folder's name under OUT (holding ``grading/``)."""
    configs: list[ConfigSummary] = []
    verdicts: dict[str, dict[NodePath, float]] = {}
    for result, folder in results:
        name = str(result.judge["name"])
        configs.append(
            ConfigSummary(
                name=name,
                mode=str(result.judge["mode"]),
                folder=folder.name,
                score=result.score,
                partial_score=result.partial_score,
                coverage=result.coverage,
                interval=result.interval,
                cost_usd=result.cost_usd,
                leaves=result.leaves,
                invalid_leaves=result.invalid_leaves,
            )
        )
        verdicts[name] = valid_verdicts(folder / "grading")
    return EnsembleReport(
        paper_id=paper_id,
        configs=configs,
        pairs=config_agreement(verdicts),
        all_agree=all_agreement(verdicts),
    )


def format_interval(interval: tuple[float, float] | None) -> str:
    """``[low, high]`` with three decimals, or an empty string."""
    return "" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def _share(value: float | None) -> str:
    return "n/a (no common leaves)" if value is None else f"{value:.1%}"


def ensemble_tables(report: EnsembleReport) -> list[Table]:
    """The configs' headlines, then their pairwise verdict agreement."""
    configs = Table(title=f"{report.paper_id}: {len(report.configs)} judge configs")
    for column in ("judge", "score", "95% interval", "coverage", "cost", "folder"):
        configs.add_column(column, justify="left" if column in ("judge", "folder") else "right")
    for c in report.configs:
        score = "unscored" if c.score is None else f"{c.score:.3f}"
        cost = "unknown (unpriced)" if c.cost_usd is None else f"${c.cost_usd:.4f}"
        configs.add_row(
            f"{c.name} ({c.mode})",
            score,
            format_interval(c.interval) or "-",
            f"{c.coverage:.1%}",
            cost,
            c.folder,
        )
    pairs = Table(title="verdict agreement on the leaves both graded validly")
    for column in ("configs", "leaves", "agreement"):
        pairs.add_column(column, justify="left" if column == "configs" else "right")
    for pair in report.pairs:
        pairs.add_row(f"{pair.first} / {pair.second}", str(pair.leaves), _share(pair.agreement))
    every = report.all_agree
    pairs.add_row("all configs", str(every.leaves), _share(every.agreement))
    return [configs, pairs]


def ensemble_folders(judges: Sequence[LoadedJudge], out_dir: Path) -> list[Path]:
    """Where each config grades: ``out_dir`` itself for one config, else
    ``out_dir/<judge-name>/``."""
    if len(judges) == 1:
        return [out_dir]
    return [out_dir / judge.identity.name for judge in judges]


async def grade_ensemble(
    view: SubmissionView,
    paper: Paper,
    judges: Sequence[LoadedJudge],
    *,
    out_dir: Path,
    options: GradeOptions,
    samples: int | None = None,
    settings: ModelSettings | None = None,
    sandbox: Any = None,
    on_leaf: Callable[[LoadedJudge, LeafGrade], None] | None = None,
    on_start: Callable[[LoadedJudge, int], None] | None = None,
) -> tuple[list[GradeResult], EnsembleReport | None]:
    """Grade ``view`` with each judge config, one config after the other (each keeps the
    settings' concurrency to itself), into :func:`ensemble_folders`; with several configs,
    also write ``out_dir/agreement.json`` and return its report.

    ``samples`` overrides each config's verdicts per leaf; ``on_start(judge, leaves)`` is
    called before a config grades, ``on_leaf(judge, grade)`` as each leaf is graded.

    Raises:
        InputError: a folder holds a grading of another paper, judge or options.
    """
    folders = ensemble_folders(judges, out_dir)
    results: list[GradeResult] = []
    for judge, folder in zip(judges, folders, strict=True):
        these = options.model_copy(update={"samples": samples or judge.config.samples})

        def leaf_done(grade: LeafGrade, judge: LoadedJudge = judge) -> None:
            if on_leaf is not None:
                on_leaf(judge, grade)

        def started(leaves: int, judge: LoadedJudge = judge) -> None:
            if on_start is not None:
                on_start(judge, leaves)

        results.append(
            await grade_submission(
                view,
                paper,
                judge,
                out_dir=folder,
                options=these,
                settings=settings,
                sandbox=sandbox,
                on_leaf=leaf_done,
                on_start=started,
            )
        )
    if len(results) == 1:
        return results, None
    report = ensemble_report(paper.id, list(zip(results, folders, strict=True)))
    atomic_write_text(out_dir / AGREEMENT_FILE, report.model_dump_json(indent=2) + "\n")
    return results, report
