"""What one grading and one JudgeEval are asked to do, as ``paperbench grade`` /
``paperbench judge-eval`` and ``paperbench.grade()`` / ``paperbench.judge_eval()`` take them:
:class:`GradeSettings` and :class:`JudgeEvalSettings`, one typed model each (each field marked
with a :class:`~paperbench._flags.Flag` is an argument or option of the command, its default
the field's). :func:`prepare_grade` / :func:`prepare_judge_eval` check them before any file is
written; :func:`run_grade` / :func:`run_judge_eval` do the work in one event loop."""

from __future__ import annotations

import contextlib
import functools
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator

from paperbench._console import warning
from paperbench._flags import Flag, parse_concurrency
from paperbench._io import atomic_write_text
from paperbench.errors import UsageError
from paperbench.judge._config import DummyConfig, LoadedJudge, RandomConfig, load_judge_config
from paperbench.judge._ensemble import EnsembleReport, grade_ensemble
from paperbench.judge._eval import (
    GoldSubmission,
    GradeFn,
    JudgeEvalReport,
    judge_eval,
    load_gold_set,
)
from paperbench.judge._grader import GradeResult
from paperbench.judge._job import DEFAULT_LEAVES_AT_ONCE, GradeOptions, ModelSettings, missing_keys
from paperbench.judge._types import LeafGrade
from paperbench.judge._view import SubmissionView, build_view
from paperbench.llm import ModelConfig
from paperbench.llm._registry import ModelChecks
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS
from paperbench.papers import Paper, PaperSource

if TYPE_CHECKING:
    from paperbench.judge._papercoder import RepoScore

GRADE_STAGES = {"leaves": DEFAULT_LEAVES_AT_ONCE}
"""The stages ``grade``'s ``--concurrency`` takes, with their defaults."""
EVAL_STAGES = {"submissions": 2, "leaves": DEFAULT_LEAVES_AT_ONCE}
"""The stages ``judge-eval``'s ``--concurrency`` takes, with their defaults."""
_FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _grade_concurrency(values: list[str] | None) -> dict[str, int]:
    return parse_concurrency(values, GRADE_STAGES)


def _eval_concurrency(values: list[str] | None) -> dict[str, int]:
    return parse_concurrency(values, EVAL_STAGES)


def _stages(value: dict[str, int], stages: dict[str, int]) -> dict[str, int]:
    """``value`` over the defaults of ``stages``; an unknown stage or a count below 1 refused."""
    for stage, n in value.items():
        if stage not in stages:
            raise ValueError(f"unknown stage {stage!r}: the stages are {', '.join(stages)}")
        if n < 1:
            raise ValueError(f"{stage}={n}: N must be ≥ 1")
    return {**stages, **value}


Model = Annotated[str | None, Flag("--model", shared=True)]
BaseUrl = Annotated[str | None, Flag("--base-url", shared=True)]
MaxConnections = Annotated[int, Flag("--max-connections", shared=True)]
Batch = Annotated[bool, Flag("--batch", shared=True)]
DataDir = Annotated[Path | None, Flag("--data-dir", shared=True)]
_MODEL = "Use this provider/model instead of the config's (e.g. openai/gpt-4o)."
_BASE_URL = "An OpenAI- or Anthropic-compatible server (its API base URL) for the model's calls."
_CONNECTIONS = "Requests in flight per provider endpoint."
_BATCH = "Send the judge's calls through the providers' batch APIs at half price."
_DATA_DIR = "A PaperBench data directory, holding papers/ (default: the bundled papers)."


class GradeSettings(ModelChecks):
    """One submission graded against its paper's rubric with one or several judge configs.

    The defaults are the command line's: the judge ``simple``, the bundled papers, the
    folder grade-PAPER-JUDGE, 16 leaves at once.
    """

    submission: Annotated[Path, Flag("submission", argument=True)] = Field(
        description="The submission: a folder or a .tar/.tar.gz file."
    )
    paper: Annotated[str, Flag("--paper", shared=True)] = Field(description="The paper's id.")
    judges: Annotated[list[str], Flag("--judge", metavar="CONFIG", show_default=False)] = Field(
        default_factory=lambda: ["simple"],
        min_length=1,
        description="A judge config: a catalog name (simple, simple-faithful, dummy, random) or "
        "a YAML file (default: simple). Give it several times to grade with each config into "
        "OUT/<judge-name>/ and compare their verdicts (OUT/agreement.json).",
    )
    data_dir: DataDir = Field(default=None, description=_DATA_DIR)
    executed: Annotated[Path | None, Flag("--executed")] = Field(
        default=None,
        description="The output folder of `paperbench reproduce` for this submission.",
    )
    log: Annotated[Path | None, Flag("--log")] = Field(
        default=None,
        description="A reproduce.log to show (default: the one of --executed, if any).",
    )
    model: Model = Field(default=None, description=_MODEL)
    base_url: BaseUrl = Field(default=None, description=_BASE_URL)
    max_connections: MaxConnections = Field(
        default=DEFAULT_MAX_CONNECTIONS, ge=1, description=_CONNECTIONS
    )
    code_dev: Annotated[bool, Flag("--code-dev", shared=True)] = Field(
        default=False, description="Code-Dev: only Code Development leaves count."
    )
    resources_provided: Annotated[bool, Flag("--resources-provided", shared=True)] = Field(
        default=False, description="Weight 0 for the Dataset and Model Acquisition leaves."
    )
    max_depth: Annotated[int | None, Flag("--max-depth")] = Field(
        default=None, ge=1, description="Grade subtrees below this depth as one unit (root: 1)."
    )
    samples: Annotated[int | None, Flag("--samples")] = Field(
        default=None,
        ge=1,
        description="Verdicts per leaf, majority vote (default: the config's).",
    )
    style: Annotated[Literal["rubric", "papercoder"], Flag("--style")] = Field(
        default="rubric",
        description="rubric: grade the rubric tree; papercoder: 1-5 repository scores.",
    )
    reference: Annotated[Path | None, Flag("--reference")] = Field(
        default=None,
        description="With --style papercoder: a reference implementation to compare.",
    )
    sandbox: Annotated[Literal["auto", "docker", "local"], Flag("--sandbox", shared=True)] = Field(
        default="auto", description="The sandbox backend of the check leaves."
    )
    out: Annotated[Path | None, Flag("--out", shared=True)] = Field(
        default=None, description="The output folder (default: grade-PAPER-JUDGE)."
    )
    concurrency: Annotated[
        dict[str, int], Flag("--concurrency", shared=True, convert=_grade_concurrency)
    ] = Field(
        default_factory=lambda: dict(GRADE_STAGES),
        description="leaves: leaves (or batches) graded at once.",
    )
    batch: Batch = Field(default=False, description=_BATCH)

    @field_validator("concurrency")
    @classmethod
    def _check_stages(cls, value: dict[str, int]) -> dict[str, int]:
        return _stages(value, GRADE_STAGES)


class JudgeEvalSettings(ModelChecks):
    """Judge configs measured against human-graded gold submissions (JudgeEval).

    The defaults are the command line's: the judge ``simple`` on this repository's
    gold-graded examples, two gradings at once, no output folder.
    """

    judges: Annotated[list[str], Flag("--judge", metavar="CONFIG", show_default=False)] = Field(
        default_factory=lambda: ["simple"],
        min_length=1,
        description="A judge config: a catalog name (simple, simple-faithful, dummy, random) or "
        "a YAML file (default: simple). Repeat to compare configs.",
    )
    gold: Annotated[str, Flag("--gold", metavar="examples|DIR")] = Field(
        default="examples",
        description="'examples' (this repository's gold-graded examples) or a folder: "
        "PaperBench's data/judge_eval, a data directory holding judge_eval/, or a folder "
        "of <paper>/<name>/ examples.",
    )
    data_dir: DataDir = Field(default=None, description=_DATA_DIR)
    papers: Annotated[list[str] | None, Flag("--paper", metavar="ID")] = Field(
        default=None, description="Only this paper's gold submissions."
    )
    model: Model = Field(default=None, description=_MODEL)
    base_url: BaseUrl = Field(default=None, description=_BASE_URL)
    max_connections: MaxConnections = Field(
        default=DEFAULT_MAX_CONNECTIONS, ge=1, description=_CONNECTIONS
    )
    concurrency: Annotated[
        dict[str, int], Flag("--concurrency", shared=True, convert=_eval_concurrency)
    ] = Field(
        default_factory=lambda: dict(EVAL_STAGES),
        description="submissions: gradings at once; leaves: leaves each grading sends at once.",
    )
    batch: Batch = Field(default=False, description=_BATCH)
    out: Annotated[Path | None, Flag("--out", shared=True)] = Field(
        default=None,
        description="A new or empty folder for report.json and every predicted tree.",
    )

    @field_validator("concurrency")
    @classmethod
    def _check_stages(cls, value: dict[str, int]) -> dict[str, int]:
        return _stages(value, EVAL_STAGES)


def model_settings(settings: GradeSettings | JudgeEvalSettings) -> ModelSettings:
    """Where the judge's models are called, from either settings."""
    return ModelSettings(
        model=settings.model,
        base_url=settings.base_url,
        concurrency=settings.concurrency["leaves"],
        max_connections=settings.max_connections,
        batch=settings.batch,
    )


# --- checks --------------------------------------------------------------------------------


def _check_ensemble(judges: list[LoadedJudge], style: str) -> None:
    """Several configs: each needs its own plain folder name, and only rubric grading."""
    if style == "papercoder":
        raise UsageError("--judge: --style papercoder takes one judge config; give --judge once")
    seen: set[str] = set()
    for loaded in judges:
        name = loaded.identity.name
        if not _FOLDER_NAME.fullmatch(name):
            raise UsageError(
                f"--judge {loaded.path}: its name {name!r} is not a plain folder name (letters, "
                "digits, '.', '_', '-'); set `name:` in the config"
            )
        if name in seen:
            raise UsageError(
                f"--judge {name}: given twice; each config grades into OUT/<judge-name>/, so "
                "give each config once (or give a copy another `name:`)"
            )
        seen.add(name)


def _warn_missing_keys(judges: list[LoadedJudge], settings: ModelSettings) -> None:
    missing = sorted(
        {
            key
            for loaded in judges
            if not isinstance(loaded.config, DummyConfig | RandomConfig)
            for key in missing_keys(loaded, settings)
        }
    )
    for name in missing:
        warning(
            f"{name} is not set: the leaves that need a model will be invalid (not graded); "
            f"set {name} in the environment or a .env file, or pass --base-url for a local "
            "server (cached answers are still used)"
        )


async def _probe_servers(judges: list[LoadedJudge], settings: ModelSettings) -> None:
    """One request to each server the judges will call, before the fan-out of leaves: a
    server that does not answer fails the command at once (see :mod:`paperbench.llm._probe`).
    A batched judge's servers must also serve the batch API (refused in one line if not)."""
    from paperbench.llm._probe import probe_batch_routes, probe_servers

    flag = "--base-url" if settings.base_url else "--model" if settings.model else "--judge"
    servers = [
        (flag, ModelConfig(model=settings.model or model, base_url=settings.base_url))
        for loaded in judges
        for model in loaded.identity.models.values()
    ]
    await probe_servers(servers)
    batched = [
        (flag, ModelConfig(model=settings.model or model, base_url=settings.base_url))
        for loaded in judges
        if settings.batch or getattr(loaded.config, "batch", False)
        for model in loaded.identity.models.values()
    ]
    if batched:
        await probe_batch_routes(batched)


# --- grade ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedGrade:
    """A grading checked, its judges, paper and submission read, before any file is written."""

    settings: GradeSettings
    judges: list[LoadedJudge]
    paper: Paper
    view: SubmissionView
    reference: SubmissionView | None
    out_dir: Path
    models: ModelSettings


@dataclass(frozen=True)
class Grading:
    """What :func:`paperbench.grade` did: the folder it wrote, one result per judge config
    (rubric grading) with the configs' agreement when there are several, or the 1-5
    repository scores (``--style papercoder``)."""

    out_dir: Path
    results: list[GradeResult]
    agreement: EnsembleReport | None = None
    repo_score: RepoScore | None = None


def prepare_grade(settings: GradeSettings) -> PreparedGrade:
    """``settings`` checked and resolved (judge configs, paper, the submission's view).

    Raises:
        UsageError: a bad value, naming its flag.
        ConfigError: a bad judge config.
        PaperError: a paper that is not there or not usable.
    """
    s = settings
    if s.reference is not None and s.style != "papercoder":
        raise UsageError("--reference: only with --style papercoder")
    if s.out is not None and s.out.exists() and not s.out.is_dir():
        raise UsageError(f"--out {s.out}: exists and is not a folder; give another --out")
    if not s.submission.exists() and s.executed is None:
        raise UsageError(f"SUBMISSION {s.submission}: not found; give a folder or a .tar.gz file")
    judges = [load_judge_config(name) for name in s.judges]
    if len(judges) > 1:
        _check_ensemble(judges, s.style)
    paper = PaperSource.resolve(s.data_dir).load(s.paper)
    paper.require_usable(texts_only=True)  # the texts the judge reads: no LFS pointer
    view = build_view(s.submission, s.executed, log=s.log)
    label = "+".join(j.identity.name for j in judges)
    return PreparedGrade(
        settings=s,
        judges=judges,
        paper=paper,
        view=view,
        reference=build_view(s.reference) if s.reference is not None else None,
        out_dir=s.out or Path(f"grade-{paper.id}-{label}"),
        models=model_settings(s),
    )


async def run_grade(
    prepared: PreparedGrade,
    *,
    on_leaf: Callable[[LoadedJudge, LeafGrade], None] | None = None,
    on_start: Callable[[LoadedJudge, int], None] | None = None,
) -> Grading:
    """The grading of :func:`prepare_grade`: the servers probed, then each judge config."""
    p, s = prepared, prepared.settings
    await _probe_servers(p.judges, p.models)
    if s.style == "papercoder":
        from paperbench.judge._papercoder import grade_papercoder

        if getattr(p.judges[0].config, "roles", None) is None:
            raise UsageError("--style papercoder: needs a judge with a grading model (not dummy)")
        score = await grade_papercoder(
            p.view,
            p.paper,
            p.judges[0],
            out_dir=p.out_dir,
            settings=p.models,
            reference=p.reference,
            samples=s.samples,
        )
        return Grading(p.out_dir, [], repo_score=score)
    _warn_missing_keys(p.judges, p.models)
    from paperbench.sandbox import SandboxConfig

    options = GradeOptions(
        code_dev=s.code_dev, resources_provided=s.resources_provided, max_depth=s.max_depth
    )
    results, report = await grade_ensemble(
        p.view,
        p.paper,
        p.judges,
        out_dir=p.out_dir,
        options=options,
        samples=s.samples,
        settings=p.models,
        sandbox=SandboxConfig(backend=s.sandbox),
        on_leaf=on_leaf,
        on_start=on_start,
    )
    return Grading(p.out_dir, results, agreement=report)


# --- judge-eval ----------------------------------------------------------------------------

GraderFactory = Callable[[Path, ModelSettings | None], GradeFn]
"""Makes the grading function of a JudgeEval from its work folder and model settings (the
default, :func:`load_grade_fn`, is the judge engine's :func:`grade_gold`)."""
JudgeEvalProgress = Callable[[int, int, str, str], None]
"""Called as each grading finishes with (gradings finished, gradings in all, judge name, gold
submission's name)."""


@dataclass(frozen=True)
class PreparedJudgeEval:
    """A JudgeEval checked, its judge configs and gold set read, before any file is written."""

    settings: JudgeEvalSettings
    judges: list[LoadedJudge]
    golds: list[GoldSubmission]
    models: ModelSettings


def load_grade_fn(work: Path, settings: ModelSettings | None = None) -> GradeFn:
    """The grading engine's :func:`grade_gold`, its resumable folders under ``work``."""
    from paperbench.judge._gold import grade_gold

    return functools.partial(grade_gold, out_root=work, settings=settings)


def prepare_judge_eval(settings: JudgeEvalSettings) -> PreparedJudgeEval:
    """``settings`` checked and resolved (the output folder, judge configs, gold set).

    Raises:
        UsageError: a bad value or output folder, naming its flag.
        ConfigError: a bad judge config.
        InputError: a gold set that cannot be read.
    """
    out = settings.out
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder; give another --out")
    if out is not None and out.is_dir() and any(out.iterdir()):
        raise UsageError(f"--out {out}: the folder is not empty; give a new or empty folder")
    judges = [load_judge_config(name) for name in settings.judges]
    golds = load_gold_set(settings.gold, data_dir=settings.data_dir, papers=settings.papers)
    return PreparedJudgeEval(settings, judges, list(golds), model_settings(settings))


async def run_judge_eval(
    prepared: PreparedJudgeEval,
    *,
    progress: JudgeEvalProgress | None = None,
    grader: GraderFactory | None = None,
) -> JudgeEvalReport:
    """The JudgeEval of :func:`prepare_judge_eval`; with ``out``, report.json and the
    gradings written into it (else the gradings go to a temporary folder). ``grader`` makes
    the grading function (default: :func:`load_grade_fn`)."""
    p, out = prepared, prepared.settings.out
    _warn_missing_keys(p.judges, p.models)
    await _probe_servers(p.judges, p.models)
    total, finished = len(p.golds) * len(p.judges), 0

    def done(judge_name: str, gold_name: str) -> None:
        nonlocal finished
        finished += 1
        if progress is not None:
            progress(finished, total, judge_name, gold_name)

    with contextlib.ExitStack() as stack:
        # the engine's per-leaf records: kept beside the report with --out, else temporary
        work = (
            out / "gradings"
            if out is not None
            else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pb-judge-eval-")))
        )
        report = await judge_eval(
            p.golds,
            p.judges,
            (grader or load_grade_fn)(work, p.models),
            concurrency=p.settings.concurrency["submissions"],
            out=out,
            progress=done,
        )
    if out is not None:
        atomic_write_text(out / "report.json", report.model_dump_json(indent=2) + "\n")
    return report
