"""The data of ResearchCodeBench (RCB) task mode: papers, snippets (the problems), test
outcomes, answers and scores. Every other module of :mod:`paperbench.rcb` speaks these.

A problem set is RCB's own layout (``pset/papers.yaml`` and ``pset/<paper>/``); a problem is
one tagged snippet of an annotated file (nested ones included), masked with everything nested
in it; its weight is the snippet's code lines, counted as RCB counts them (non-blank lines
that do not start with ``#``, tag lines excluded, nested snippets' lines included).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TEST_ENTRY = "paper2code_test.py"
"""The test every paper folder holds; run with the paper folder as working directory."""
PAPERS_FILE = "papers.yaml"
"""The problem set's list of papers, in its ``pset/`` folder."""

ErrorClass = Literal[
    "syntax", "name", "import", "assertion", "runtime", "timeout", "no_code", "sandbox_error"
]
"""Why a test did not pass. ``no_code``: the answer held no code block (the test is not
run); ``sandbox_error``: the infrastructure failed (not a failed test: the problem is run
again on a resume and is not counted until it is)."""

Mode = Literal["one-shot", "agent"]
"""How an answer is made: one model call with the prompt, or an agent in a sandbox."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RcbPaper(_Model):
    """One paper of a problem set: its folder and the files ``papers.yaml`` names."""

    id: str
    title: str = ""
    folder: Path
    """``pset/<id>/``, absolute."""
    paper_file: Path
    """``paper2code_paper.tex`` (or ``.md`` when there is no ``.tex``), absolute."""
    annotated_files: list[str]
    """Files with snippet tags, relative to ``folder``."""
    context_files: list[str] = Field(default_factory=list)
    """Files shown to the model beside the masked file, relative to ``folder``."""
    first_commit_date: str | None = None
    """From ``papers.yaml`` (what RCB's contamination-free filter compares)."""


class Snippet(_Model):
    """One problem: a tagged region of an annotated file."""

    paper: str
    file: str
    """The annotated file, relative to the paper folder."""
    name: str
    start: int
    """0-based index of the opening tag's line."""
    end: int
    """0-based index of the closing tag's line (> ``start``)."""
    indent: str
    """The whitespace before the opening tag (the closing tag has the same)."""
    code_lines: int = Field(ge=0)
    """The problem's weight: code lines between the tags, nested snippets' included."""
    depth: int = Field(ge=0)
    """0 for a top-level snippet, 1 inside another, ..."""
    parent: str | None = None
    """The name of the snippet this one is nested in."""

    @property
    def id(self) -> str:
        """``<paper>/<name>``: unique in a problem set."""
        return f"{self.paper}/{self.name}"


class ProblemSet(_Model):
    """A problem set as loaded: its papers and every snippet, in file order."""

    root: Path
    """The ``pset/`` folder."""
    papers: list[RcbPaper]
    snippets: list[Snippet]

    def paper(self, paper_id: str) -> RcbPaper:
        """The paper with this id (KeyError when there is none)."""
        for paper in self.papers:
            if paper.id == paper_id:
                return paper
        raise KeyError(paper_id)


class TestOutcome(_Model):
    """What running a paper's test with one filled file gave."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    passed: bool
    error_class: ErrorClass | None = None
    """None when passed."""
    exit_code: int | None = None
    seconds: float = 0.0
    """Wall time of the test command itself."""
    overhead_s: float = 0.0
    """Time spent outside the test: the sandbox, copying files in (what bench/rcb.py sums)."""
    output_tail: str = ""
    """The last few KB of the test's stdout and stderr."""
    detail: str | None = None
    """One line: the error's last line, or why the sandbox failed."""


class SampleResult(_Model):
    """One answer to one problem, and its test."""

    problem: str
    """The snippet's id, ``<paper>/<name>``."""
    sample: int = Field(ge=0)
    mode: Mode = "one-shot"
    answer: str | None = None
    """The code put in the snippet's place (None: no code block)."""
    outcome: TestOutcome
    cost_usd: float | None = None
    """Model cost of the answer (None when a model had no price)."""
    input_tokens: int = 0
    output_tokens: int = 0


class Rate(_Model):
    """A pass rate, line-weighted and plain."""

    line_weighted: float | None = None
    """Sum of code lines of passed problems over the sum of code lines (None: no problem)."""
    unweighted: float | None = None
    """Passed problems over problems."""
    problems: int = 0
    lines: int = 0


class PaperScore(_Model):
    """One paper's rates."""

    paper: str
    rate: Rate
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    """Line-weighted pass@k for each k up to the samples taken (unbiased estimator)."""


class RcbSummary(_Model):
    """summary.json of an RCB run."""

    model: str
    mode: Mode
    with_paper: bool = True
    samples: int = 1
    overall: Rate
    pass_at_k: dict[int, float] = Field(default_factory=dict)
    papers: list[PaperScore]
    errors: dict[str, int] = Field(default_factory=dict)
    """Failed answers by :data:`ErrorClass`."""
    broken: list[str] = Field(default_factory=list)
    """Problems left out: their test passes with the snippet empty, or fails with the
    reference (found by ``rcb validate``)."""
    not_run: list[str] = Field(default_factory=list)
    """Problems with no result yet (an infrastructure failure, an interrupted run)."""
    not_runnable: dict[str, str] = Field(default_factory=dict)
    """Problems that cannot run in this environment, with the reason: their reference
    solution fails here too (a missing library, a timeout); not run, in no rate."""
    environment_advice: str = ""
    """What would make the ``not_runnable`` problems run (the image to build, the option to
    raise); "" when nothing is known to."""
    listed: int | None = None
    """Problems the run was asked for (the rates are over ``overall.problems`` of them);
    None in a summary from before it was recorded."""
    cost_usd: float | None = None
    cost_per_problem_usd: float | None = None


class ProblemRecord(_Model):
    """problem.json of a problem folder: the problem as the model saw it and its reference
    code, so a report shows the masked file and diffs answers without the problem set."""

    paper: str
    snippet: str
    """The snippet's name."""
    file: str
    """The annotated file, relative to the paper folder."""
    line: int = Field(ge=1)
    """1-based line of the opening tag in the annotated file."""
    code_lines: int = Field(ge=0)
    depth: int = Field(default=0, ge=0)
    parent: str | None = None
    masked: str
    """The annotated file as the model saw it (:func:`~paperbench.rcb.mask`)."""
    reference: str
    """The snippet's code between its tags, nested tag lines removed."""
    indent: str
    """The indentation answers are put at (the snippet body's)."""

    @property
    def id(self) -> str:
        """``<paper>/<snippet>``."""
        return f"{self.paper}/{self.snippet}"
