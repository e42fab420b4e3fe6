"""ResearchCodeBench task mode: fill-in snippets from a paper, graded by the paper's unit
test, line-weighted. Point it at a clone of ResearchCodeBench (its ``pset/`` folder)."""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.rcb._html import write_rcb_report
    from paperbench.rcb._load import load_problem_set
    from paperbench.rcb._mask import extract_code, fill, mask, reference_code
    from paperbench.rcb._models import (
        PAPERS_FILE,
        TEST_ENTRY,
        ErrorClass,
        Mode,
        PaperScore,
        ProblemRecord,
        ProblemSet,
        Rate,
        RcbPaper,
        RcbSummary,
        SampleResult,
        Snippet,
        TestOutcome,
    )
    from paperbench.rcb._published import PublishedRow, load_published
    from paperbench.rcb._runner import RcbRunOptions, ValidationRow, run_rcb, validate
    from paperbench.rcb._score import pass_at_k, score
    from paperbench.rcb._settings import RcbRunResult, RcbSettings
    from paperbench.rcb._test import RcbJob, run_test, run_tests

__all__ = [
    "PAPERS_FILE",
    "TEST_ENTRY",
    "ErrorClass",
    "Mode",
    "PaperScore",
    "ProblemRecord",
    "ProblemSet",
    "PublishedRow",
    "Rate",
    "RcbJob",
    "RcbPaper",
    "RcbRunOptions",
    "RcbRunResult",
    "RcbSettings",
    "RcbSummary",
    "SampleResult",
    "Snippet",
    "TestOutcome",
    "ValidationRow",
    "extract_code",
    "fill",
    "load_problem_set",
    "load_published",
    "mask",
    "pass_at_k",
    "reference_code",
    "run_rcb",
    "run_test",
    "run_tests",
    "score",
    "validate",
    "write_rcb_report",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
