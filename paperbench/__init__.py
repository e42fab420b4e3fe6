"""paperbench: evaluate how well AI agents replicate machine-learning research.

From Python::

    import paperbench

    result = paperbench.evaluate(paperbench.EvalConfig(papers="calibration-binning"))
    result = paperbench.resume("runs/20261124-193500")
    rolled = paperbench.rollout(paperbench.RolloutSettings(paper="calibration-binning"))
    meta = paperbench.run_reproduction(paperbench.ReproduceSettings(submission=rolled.out_dir))
    rcb = paperbench.rcb_run(paperbench.RcbSettings(model="openai/gpt-4o", rcb_dir="RCB"))
    graded = paperbench.grade(
        paperbench.GradeSettings(submission=rolled.out_dir, paper="calibration-binning")
    )
    report = paperbench.judge_eval(paperbench.JudgeEvalSettings(judges=["simple", "dummy"]))

The stages have their own packages: :mod:`paperbench.agents` (rollout, monitor),
:mod:`paperbench.reproduce`, :mod:`paperbench.judge`, :mod:`paperbench.report`,
:mod:`paperbench.runs` (groups, executors), over :mod:`paperbench.sandbox`,
:mod:`paperbench.llm`, :mod:`paperbench.rubric` and :mod:`paperbench.papers`.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench._entry import grade, judge_eval, rcb_run, rollout, run_reproduction
    from paperbench._evaluate import Evaluation, evaluate, evaluate_async, resume, resume_async
    from paperbench._version import __version__
    from paperbench.agents._rollout_settings import RolloutSettings
    from paperbench.judge._settings import GradeSettings, JudgeEvalSettings
    from paperbench.rcb._settings import RcbSettings
    from paperbench.reproduce._settings import ReproduceSettings
    from paperbench.runs._config import EvalConfig

__all__ = [
    "EvalConfig",
    "Evaluation",
    "GradeSettings",
    "JudgeEvalSettings",
    "RcbSettings",
    "ReproduceSettings",
    "RolloutSettings",
    "__version__",
    "evaluate",
    "evaluate_async",
    "grade",
    "judge_eval",
    "rcb_run",
    "resume",
    "resume_async",
    "rollout",
    "run_reproduction",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
