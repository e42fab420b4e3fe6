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

from __future__ import annotations

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version
from typing import TYPE_CHECKING
from typing import Any as _Any

try:
    __version__ = _version("paperbench")
except _NotInstalled:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

if TYPE_CHECKING:
    from paperbench._entry import grade, judge_eval, rcb_run, rollout, run_reproduction
    from paperbench._evaluate import Evaluation, evaluate, evaluate_async, resume, resume_async
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

_LAZY = {
    "evaluate": "paperbench._evaluate",
    "resume": "paperbench._evaluate",
    "evaluate_async": "paperbench._evaluate",
    "resume_async": "paperbench._evaluate",
    "Evaluation": "paperbench._evaluate",
    "EvalConfig": "paperbench.runs._config",
    "rollout": "paperbench._entry",
    "RolloutSettings": "paperbench.agents._rollout_settings",
    "run_reproduction": "paperbench._entry",
    "ReproduceSettings": "paperbench.reproduce._settings",
    "rcb_run": "paperbench._entry",
    "RcbSettings": "paperbench.rcb._settings",
    "grade": "paperbench._entry",
    "GradeSettings": "paperbench.judge._settings",
    "judge_eval": "paperbench._entry",
    "JudgeEvalSettings": "paperbench.judge._settings",
}


def __getattr__(name: str) -> _Any:
    """The entry points, imported on first use (``import paperbench`` stays light)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paperbench' has no attribute {name!r}")
