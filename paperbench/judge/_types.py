"""The records the judge's parts exchange: one graded leaf, and one sample of it.

A :class:`LeafGrade` is what every way of grading a leaf produces (an LLM verdict, a check
run in a sandbox, a shortcut, a failure), appended as one JSON line to
``grading/leaves.jsonl`` as soon as it is known, so an interrupted grading resumes with the
leaves that are missing. It addresses its leaf by path (``NodePath``: child indices from the
root), never by id, because rubric ids are not always unique.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench.rubric import NodePath

GradeSource = Literal["llm", "check", "shortcut", "dummy", "random", "human"]
"""What produced a grade: a model's verdict, a check leaf's command, a rule that needs no
call (e.g. Result Analysis when the reproduction changed no file), a smoke-test judge, a
person (gold sets)."""

InvalidReason = Literal[
    "failed",
    "incomplete",
    "unparseable",
    "budget_exhausted",
    "check_error",
    "not_graded",
]
"""Why a leaf has no valid grade: the model call failed after its retries; the answer was
cut off, refused or empty; the answer never matched the verdict's form; a cost cap stopped
the call; a check could not judge the submission (it could not start: its sandbox failed or
a check file is missing; or its command exited 126, 127 or 137, or timed out); nothing could grade
it (e.g. an LLM leaf and no model key, when asked to go on without one)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SampleGrade(_Record):
    """One verdict for a leaf (ensembles take several and vote)."""

    score: float = Field(ge=0, le=1)
    valid: bool = True
    explanation: str = ""
    reason: InvalidReason | None = None
    """Set when ``valid`` is false."""
    judge: str | None = None
    """The judge config's name, when several configs grade the same leaf."""
    position: int | None = None
    """Where the criterion stood among the batch's criteria in this sample's prompt (1 is
    first): the order is shuffled between samples, so position bias shows in the interval."""


class AddressedText(_Record):
    """Text in what a grader was shown that addresses the grader ("ignore previous
    instructions", "note to the evaluator", ...): an attempt to game the judge, recorded
    whether or not it worked (:mod:`paperbench.judge._addressed`)."""

    file: str
    """The submission path, or ``reproduce.sh`` or ``reproduce.log``."""
    line: int | None = None
    """1-based, in that file as the submission (or the reproduction) holds it."""
    pattern: str
    """Which kind of text it is (a name of ``PATTERNS``)."""
    text: str
    """The matched words, lower-cased, markdown dropped, capped."""


class AddressedFinding(AddressedText):
    """One :class:`AddressedText` with the leaf whose grader was shown it, as the root's
    ``judge_metadata["addressed_to_judge"]`` in ``grade.json`` lists them."""

    leaf_path: list[int]
    leaf_id: str


ADDRESSED_KEY = "addressed_to_judge"
"""The ``judge_metadata`` key of the findings in ``grade.json``: a leaf's
:class:`AddressedText` records, and on the root every leaf's as :class:`AddressedFinding`."""


class CallCost(_Record):
    """What grading one leaf took from the model layer (its share of a shared call), or a
    whole grading (from its ledger). ``requests`` are those a server answered, with any
    HTTP status; ``unanswered`` the attempts sent that got no HTTP answer (counted only for
    a whole grading); ``attempts`` every attempt."""

    requests: int = 0
    unanswered: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    """``None`` when a model had no price."""
    cache_hits: int = 0
    attempts: int = 0


class LeafGrade(_Record):
    """One graded leaf, as stored in ``grading/leaves.jsonl``."""

    path: NodePath
    leaf_id: str
    category: str
    """The leaf's task category (``Subtree`` for a unit graded at a depth limit)."""
    score: float = Field(ge=0, le=1)
    """0 whenever ``valid`` is false (the headline counts an invalid leaf as 0)."""
    valid: bool
    explanation: str = ""
    source: GradeSource
    reason: InvalidReason | None = None
    """Why the grade is invalid; ``None`` for a valid grade."""
    error: str | None = None
    """The error's one line, for an invalid grade."""
    files_shown: list[str] = Field(default_factory=list)
    """Submission paths the grader was shown whole (the default mode lists a file shown in
    part in ``file_lines_shown`` instead)."""
    file_lines_shown: dict[str, list[tuple[int, int]]] = Field(default_factory=dict)
    """The files the default mode's grader was shown only in part (some chunks, or the head
    of a file too big to read whole): each path's 1-based, inclusive line ranges shown."""
    files_why: dict[str, str] = Field(default_factory=dict)
    """The default mode: why each file shown (whole or in part) was chosen: ``run wrote``
    (Result Analysis), ``shortlist`` (the model's shortlist named it), ``import hop`` (a
    shortlisted file imports it) or ``lexical`` (the BM25 index ranked it)."""
    log_lines_shown: list[tuple[int, int]] = Field(default_factory=list)
    """The line ranges of reproduce.log (as the judge's view holds it) that the default
    mode's grader was shown; empty when it was shown no log (the faithful mode, which shows
    the head of the folded log, records none)."""
    addressed_to_judge: list[AddressedText] = Field(default_factory=list)
    """Text addressed to the judge in what this leaf's grader was shown."""
    notes: list[str] = Field(default_factory=list)
    """What kept files from this leaf's grader whatever it chose: the cuts of the judge's view
    of the submission (``SubmissionView.cuts``), one line each."""
    selection_notes: list[str] = Field(default_factory=list)
    """What the default mode's file choice for this leaf could not do as designed: a
    shortlist call that failed (the files then chosen by the lexical index alone)."""
    samples: list[SampleGrade] = Field(default_factory=list)
    """Every verdict when more than one was taken (majority vote → ``score``)."""
    interval: tuple[float, float] | None = None
    """The score's interval from judge disagreement, when there were several samples."""
    cost: CallCost = Field(default_factory=CallCost)
    wall_time_s: float = 0.0
