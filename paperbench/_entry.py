"""The stages' Python entry points besides :func:`paperbench.evaluate`: each takes the typed
config its command is made from and runs it in one event loop.

    import paperbench

    result = paperbench.rollout(paperbench.RolloutSettings(paper="calibration-binning"))
    meta = paperbench.run_reproduction(paperbench.ReproduceSettings(submission="sub.tar.gz"))
    run = paperbench.rcb_run(paperbench.RcbSettings(model="openai/gpt-4o", rcb_dir="RCB"))
    graded = paperbench.grade(paperbench.GradeSettings(submission="sub", paper="rice"))
    report = paperbench.judge_eval(paperbench.JudgeEvalSettings(judges=["simple", "dummy"]))

(``paperbench.reproduce`` is the reproduction stage's package, hence ``run_reproduction``.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from paperbench.agents._rollout_files import RolloutResult
    from paperbench.agents._rollout_settings import RolloutSettings
    from paperbench.agents._transcript import TranscriptEvent
    from paperbench.judge._config import LoadedJudge
    from paperbench.judge._eval import JudgeEvalReport
    from paperbench.judge._settings import (
        GraderFactory,
        GradeSettings,
        Grading,
        JudgeEvalProgress,
        JudgeEvalSettings,
    )
    from paperbench.judge._types import LeafGrade
    from paperbench.rcb._settings import RcbRunResult, RcbSettings
    from paperbench.reproduce._models import ReproductionMetadata
    from paperbench.reproduce._settings import ReproduceSettings


def rollout(
    settings: RolloutSettings, *, on_event: Callable[[TranscriptEvent], None] | None = None
) -> RolloutResult:
    """Run an agent on a paper in a fresh sandbox into its run folder, as ``paperbench
    rollout`` does with the same settings (``on_event`` is told of each transcript event).

    Raises:
        UsageError: a bad value or folder, naming its flag.
        ConfigError: a bad agent config, or a resume whose configuration differs.
        SandboxUnavailableError: the sandbox backend asked for does not answer.
        RolloutPausedError: the run paused; it goes on with ``resume=`` its folder.
    """
    from paperbench.agents._rollout import rollout as agent_rollout
    from paperbench.agents._rollout_settings import prepare_rollout

    prepared = prepare_rollout(settings)
    return asyncio.run(
        agent_rollout(
            prepared.paper,
            prepared.agent,
            prepared.options,
            out_dir=prepared.out_dir,
            resume=prepared.resume,
            on_event=on_event,
        )
    )


def run_reproduction(settings: ReproduceSettings) -> ReproductionMetadata:
    """Run a submission's reproduce.sh in a fresh sandbox and write the output folder, as
    ``paperbench reproduce`` does with the same settings; returns metadata.json's content.

    Raises:
        UsageError: a bad value or output folder, naming its flag.
        SandboxUnavailableError: the sandbox backend asked for does not answer.
    """
    from paperbench.reproduce._settings import prepare_reproduction
    from paperbench.reproduce._stage import reproduce_submission

    prepared = prepare_reproduction(settings)
    return asyncio.run(reproduce_submission(prepared.submission, prepared.out_dir, prepared.config))


def rcb_run(settings: RcbSettings) -> RcbRunResult:
    """Answer and grade every problem of a ResearchCodeBench problem set into the run's folder
    (summary.json, the HTML report), as ``paperbench rcb run`` does with the same settings. A
    resume (``resume=``) takes the run's own options: a field set that differs is refused.

    Raises:
        UsageError: a bad value, naming its flag, before any file is written.
        InputError: a malformed problem set (file and line named).
        MissingKeyError: the model's key is not set.
        SandboxError: no problem can run in this environment, or the sandbox backend asked
            for does not answer.
    """
    from paperbench.rcb._html import write_rcb_report
    from paperbench.rcb._runner import run_rcb
    from paperbench.rcb._settings import RcbRunResult, prepare_rcb_run

    prepared = prepare_rcb_run(settings)
    summary = asyncio.run(
        run_rcb(
            prepared.root,
            prepared.out_dir,
            prepared.options,
            sandbox=prepared.sandbox,
            concurrency=prepared.tests,
            agents=prepared.agents,
            resume=prepared.resume,
        )
    )
    report = write_rcb_report(prepared.out_dir)
    return RcbRunResult(out_dir=prepared.out_dir, summary=summary, report=report)


def grade(
    settings: GradeSettings,
    *,
    on_leaf: Callable[[LoadedJudge, LeafGrade], None] | None = None,
    on_start: Callable[[LoadedJudge, int], None] | None = None,
) -> Grading:
    """Grade a submission with one or several judge configs into its output folder, as
    ``paperbench grade`` does with the same settings (``on_start(judge, leaves)`` is called
    before a config grades, ``on_leaf(judge, grade)`` as each leaf is graded).

    Raises:
        UsageError: a bad value or output folder, naming its flag.
        ConfigError: a bad judge config.
        PaperError: a paper that is not there or not usable.
        ModelRequestError: a server of the judge's models that does not answer.
    """
    from paperbench.judge._settings import prepare_grade, run_grade

    prepared = prepare_grade(settings)
    return asyncio.run(run_grade(prepared, on_leaf=on_leaf, on_start=on_start))


def judge_eval(
    settings: JudgeEvalSettings,
    *,
    progress: JudgeEvalProgress | None = None,
    grader: GraderFactory | None = None,
) -> JudgeEvalReport:
    """Measure judge configs against human-graded gold submissions, as ``paperbench
    judge-eval`` does with the same settings (``progress(done, total, judge, gold)`` is called
    as each grading finishes); with ``out``, report.json and the gradings are written there.
    ``grader(work, model_settings)`` makes the function that grades a gold submission with a
    judge config, in place of the judge engine's (its resumable folders under ``work``).

    Raises:
        UsageError: a bad value or output folder, naming its flag.
        ConfigError: a bad judge config.
        InputError: a gold set that cannot be read.
        ModelRequestError: a server of the judge's models that does not answer.
    """
    from paperbench.judge._settings import prepare_judge_eval, run_judge_eval

    prepared = prepare_judge_eval(settings)
    return asyncio.run(run_judge_eval(prepared, progress=progress, grader=grader))
