"""Reports over a run group: metrics (``summary.json``), terminal tables and a static HTML
report that works opened from disk."""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.report._files import GroupFiles, Problem, RunFiles, read_group_files, read_run
    from paperbench.report._metrics import (
        AgentMetrics,
        CostSummary,
        Estimate,
        JudgeInfo,
        JudgeMismatch,
        NotScored,
        PaperScore,
        RunMetrics,
        SeedScore,
        Summary,
        agent_metrics,
        mean_se,
        run_metrics,
        summarize_group,
    )
    from paperbench.report._write import html_dir, summary_path, write_report

__all__ = [
    "AgentMetrics",
    "CostSummary",
    "Estimate",
    "GroupFiles",
    "JudgeInfo",
    "JudgeMismatch",
    "NotScored",
    "PaperScore",
    "Problem",
    "RunFiles",
    "RunMetrics",
    "SeedScore",
    "Summary",
    "agent_metrics",
    "html_dir",
    "mean_se",
    "read_group_files",
    "read_run",
    "run_metrics",
    "summarize_group",
    "summary_path",
    "write_report",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
