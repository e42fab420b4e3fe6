"""PaperCoder-style repository scores: one 1–5 correctness rating of a whole repository.

PaperCoder (Seo et al., 2025, ``codes/eval.py`` of going-doer/Paper2Code) rates a repository
against its paper, with or without a reference ("gold") repository, in one prompt holding the
instructions, the paper and every code file. The model answers JSON: a list of critiques (file,
function, severity high/medium/low, text; in the reference-based mode also the reference's
file and function) and an integer score from 1 to 5. It takes ``generated_n`` samples of that
one prompt (8 by default, temperature 1), drops every sample whose JSON cannot be read or
whose score is outside 1–5, and reports the mean of the valid scores and their count
(``valid_n``). A prompt over 128k tokens is not rated.

:func:`papercoder_scores` does the same with these differences:

- our own prompts (``judge/prompts/papercoder_ref_free.md`` and ``papercoder_ref_based.md``);
  repository content is fenced as data (:func:`~paperbench.judge.fence`) and the prompts say
  so; the paper's addenda are shown after the paper;
- the repository is the view's code and documentation files (PaperCoder reads ``.py``,
  ``.yaml``, ``.yml``, ``.md``, ``.sh``, ``.bash``); binary, oversized and data files, and
  files the reproduction created, are left out and listed in the result;
- structured output through :meth:`paperbench.llm.Model.generate` (the schema bounds the score
  to 1–5; a malformed answer is re-asked before the sample counts as invalid);
- each sample is its own request whose last message names the sample (``assessment i of k``),
  so the response cache stores k answers instead of returning one answer k times, and the
  long shared part before it can be served by a provider's prefix cache;
- a sample that fails (error, cut off, refused, unparseable, budget) is invalid with its
  reason, never a score; with no valid sample the repository is *unscored* with a reason
  (PaperCoder divides by zero);
- a prompt that with room for the answer does not fit the window is unscored without a
  request ("too large for the window"), never cut to fit;
- text in the repository's files that addresses the judge ("ignore previous instructions",
  "note to the evaluator", ...) is listed in the record (``addressed_to_judge``, by file and
  line, :mod:`._addressed`); it changes no score.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Group, RenderableType
from rich.table import Table

from paperbench._console import plural
from paperbench._io import atomic_write_text
from paperbench.errors import (
    BudgetExhaustedError,
    IncompleteAnswerError,
    MissingKeyError,
    ModelError,
    ProviderNotInstalledError,
    StructuredOutputError,
    UnknownProviderError,
)
from paperbench.judge._addressed import context_findings
from paperbench.judge._config import LoadedJudge, catalog_dir
from paperbench.judge._fence import fence
from paperbench.judge._job import ModelSettings
from paperbench.judge._prompts import render
from paperbench.judge._types import AddressedText, InvalidReason
from paperbench.judge._view import SubmissionView, ViewFile
from paperbench.llm import (
    CostLedger,
    CostTotal,
    Message,
    Model,
    ModelConfig,
    UserMessage,
    count_message_tokens,
)
from paperbench.papers import Paper

RepoScoreMode = Literal["reference-free", "reference-based"]
Severity = Literal["high", "medium", "low"]

PAPERCODER_LABEL = "judge_papercoder"
"""The cost label of every PaperCoder call."""
DEFAULT_WINDOW = 128_000
"""PaperCoder's limit: a prompt over 128k tokens is not rated."""
DEFAULT_ANSWER_TOKENS = 16_000
"""Room kept in the window for the answer, reasoning included (sent as ``max_tokens``)."""
PROMPT_FILES: dict[RepoScoreMode, str] = {
    "reference-free": "papercoder_ref_free.md",
    "reference-based": "papercoder_ref_based.md",
}
TOO_LARGE = "too large for the window"

_SETUP_ERRORS = (MissingKeyError, UnknownProviderError, ProviderNotInstalledError)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _FreeCritique(_Frozen):
    file: str
    function: str
    severity: Severity
    text: str


class _BasedCritique(_FreeCritique):
    reference_file: str
    reference_function: str


class _FreeAnswer(_Frozen):
    """The answer's form in the reference-free mode (critiques first, then the score)."""

    critiques: list[_FreeCritique]
    score: int = Field(ge=1, le=5)


class _BasedAnswer(_Frozen):
    critiques: list[_BasedCritique]
    score: int = Field(ge=1, le=5)


class Critique(_Frozen):
    """One problem a sample found in the repository."""

    file: str
    function: str
    """Empty when the problem is not in one function."""
    severity: Severity
    text: str
    reference_file: str | None = None
    """Reference-based mode: the reference's corresponding file (empty: no counterpart)."""
    reference_function: str | None = None


class RepoSample(_Frozen):
    """One sample: a score and its critiques, or why there is none."""

    index: int
    score: int | None = None
    """1–5; ``None`` for an invalid sample."""
    reason: InvalidReason | None = None
    """Why the sample is invalid: ``failed``, ``incomplete``, ``unparseable`` or
    ``budget_exhausted``."""
    error: str | None = None
    """The error's one line, for an invalid sample."""
    critiques: list[Critique] = Field(default_factory=list)
    cached: bool = False
    """The answer came from the response cache (it cost nothing)."""

    @property
    def valid(self) -> bool:
        return self.score is not None


class LeftOutFile(_Frozen):
    path: str
    reason: str
    """``binary``, ``oversized``, ``symlink``, ``unreadable``, ``data``, ``other`` (not code
    or documentation), or ``created`` (an output of the reproduction)."""


class RepoScore(_Frozen):
    """A repository's PaperCoder-style correctness score: the mean of the valid samples."""

    mode: RepoScoreMode
    model: str
    prompt_sha256: str
    """A hash of the prompt template: scores compare only when it and the model match."""
    temperature: float | None = None
    """The model's sampling temperature (``None``: the provider's default, 1 for OpenAI and
    Anthropic, as PaperCoder samples; at 0 the samples barely differ)."""
    reasoning_effort: str | None = None
    requested_samples: int
    samples: list[RepoSample] = Field(default_factory=list)
    """Every sample taken (none when the repository was not sent)."""
    mean: float | None = None
    """The mean of the valid samples' scores; ``None`` when unscored."""
    valid_samples: int = 0
    unscored_reason: str | None = None
    """Why there is no score (too large for the window, no valid sample, nothing to rate)."""
    window: int
    answer_tokens: int
    prompt_tokens: int = 0
    """The prompt's size as counted before sending (one sample's)."""
    input_tokens: int = 0
    """Input tokens the provider billed, over all samples and re-asks."""
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    """Dollars of the calls with a known price (see ``unpriced_calls``)."""
    unpriced_calls: int = 0
    """Calls whose cost is unknown (a model without a price): ``cost_usd`` is then low."""
    files_shown: list[str] = Field(default_factory=list)
    files_left_out: list[LeftOutFile] = Field(default_factory=list)
    reference_files_shown: list[str] = Field(default_factory=list)
    reference_files_left_out: list[LeftOutFile] = Field(default_factory=list)
    files_not_listed: int = 0
    """Files beyond the view's listing limit (never read, so never shown; also in the
    prompt's count of files not shown)."""
    addressed_to_judge: list[AddressedText] = Field(default_factory=list)
    """Text addressed to the judge in the repository's files shown (the reference is not
    searched: it is not the submission's)."""

    @property
    def scored(self) -> bool:
        return self.mean is not None


def repository_files(view: SubmissionView) -> tuple[list[ViewFile], list[LeftOutFile]]:
    """The files a repository score shows (code and documentation with their text), and the
    rest with the reason each is left out."""
    shown: list[ViewFile] = []
    left_out: list[LeftOutFile] = []
    for f in view.files:
        if f.changed == "created":
            left_out.append(LeftOutFile(path=f.path, reason="created"))
        elif f.text is None:
            left_out.append(LeftOutFile(path=f.path, reason=f.unread or "unreadable"))
        elif f.kind not in ("code", "doc"):
            left_out.append(LeftOutFile(path=f.path, reason=f.kind))
        else:
            shown.append(f)
    return shown, left_out


def _left_out_summary(left_out: list[LeftOutFile], not_listed: int = 0) -> str:
    counts = Counter(item.reason for item in left_out)
    parts = [f"{n} {reason}" for reason, n in sorted(counts.items())]
    if not_listed:
        parts.append(f"{not_listed} beyond the listing limit")
    return ", ".join(parts)


def _prompt_template(mode: RepoScoreMode) -> str:
    return (catalog_dir() / "prompts" / PROMPT_FILES[mode]).read_text(encoding="utf-8")


def _addenda(paper: Paper) -> str:
    parts = [paper.addendum_text().strip(), paper.judge_addendum_text().strip()]
    return "\n\n".join(part for part in parts if part)


def papercoder_prompt(
    view: SubmissionView,
    paper: Paper,
    *,
    reference: SubmissionView | None = None,
    template: str | None = None,
) -> str:
    """The part every sample shares: instructions, the paper and its addenda, and the
    repository's files (and the reference's), each fenced as data. ``template`` defaults to
    the catalog's prompt for the mode."""
    mode: RepoScoreMode = "reference-free" if reference is None else "reference-based"
    files, left_out = repository_files(view)
    values: dict[str, object] = {
        "paper": paper.paper_text().strip(),
        "addenda": _addenda(paper),
        "files": [fence(f.text or "", f"file: {f.path}") for f in files],
        "left_out": _left_out_summary(left_out, view.files_not_listed),
    }
    if reference is not None:
        ref_files, ref_left_out = repository_files(reference)
        values["reference_files"] = [fence(f.text or "", f"file: {f.path}") for f in ref_files]
        values["reference_left_out"] = _left_out_summary(ref_left_out, reference.files_not_listed)
    return render(template if template is not None else _prompt_template(mode), **values)


def sample_messages(prompt: str, *, sample: int, samples: int) -> list[Message]:
    """The messages of sample ``sample`` (0-based) of ``samples``: the shared prompt, marked
    as the end of a cacheable prefix, then a line naming the sample, which makes each sample
    its own request (and its own response-cache entry)."""
    return [
        UserMessage(content=prompt, cache=True),
        UserMessage(
            content=(
                f"This is independent assessment {sample + 1} of {samples}. Rate the "
                "repository as instructed above."
            )
        ),
    ]


def _invalid(index: int, exc: ModelError) -> RepoSample:
    reason: InvalidReason
    if isinstance(exc, IncompleteAnswerError):
        reason = "incomplete"
    elif isinstance(exc, StructuredOutputError):
        reason = "unparseable"
    elif isinstance(exc, BudgetExhaustedError):
        reason = "budget_exhausted"
    else:
        reason = "failed"
    return RepoSample(
        index=index, reason=reason, error=str(exc).splitlines()[0] if str(exc) else ""
    )


async def _sample(
    model: Model,
    messages: list[Message],
    output: type[_FreeAnswer] | type[_BasedAnswer],
    *,
    index: int,
    answer_tokens: int,
) -> RepoSample:
    try:
        answer = await model.generate(
            messages, output=output, max_tokens=answer_tokens, label=PAPERCODER_LABEL
        )
    except _SETUP_ERRORS:
        raise  # a missing key or provider is the user's to fix, not an invalid sample
    except ModelError as exc:
        return _invalid(index, exc)
    parsed = answer.parsed
    assert isinstance(parsed, (_FreeAnswer, _BasedAnswer))
    critiques = [Critique.model_validate(c.model_dump()) for c in parsed.critiques]
    return RepoSample(index=index, score=parsed.score, critiques=critiques, cached=answer.cached)


async def _run_samples(
    model: Model,
    messages: list[list[Message]],
    output: type[_FreeAnswer] | type[_BasedAnswer],
    answer_tokens: int,
) -> list[RepoSample]:
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(_sample(model, m, output, index=i, answer_tokens=answer_tokens))
                for i, m in enumerate(messages)
            ]
    except ExceptionGroup as errors:
        raise errors.exceptions[0] from None
    return [task.result() for task in tasks]


async def papercoder_scores(
    view: SubmissionView,
    paper: Paper,
    *,
    model: Model,
    reference: SubmissionView | None = None,
    samples: int = 3,
    window: int = DEFAULT_WINDOW,
    answer_tokens: int = DEFAULT_ANSWER_TOKENS,
) -> RepoScore:
    """Rate the repository in ``view`` against ``paper`` (and ``reference``, when given) from
    1 to 5, ``samples`` times; see the module docs.

    ``window`` is the model's context window in tokens; a prompt that does not fit with
    ``answer_tokens`` of room is reported unscored without a request. Costs are read from
    ``model.ledger`` (the records of this call's label added while it ran, so run one
    repository score at a time per ledger).

    Raises:
        ValueError: ``samples``, ``window`` or ``answer_tokens`` below 1.
        MissingKeyError, UnknownProviderError, ProviderNotInstalledError: set-up problems.
    """
    if samples < 1 or window < 1 or answer_tokens < 1:
        raise ValueError("samples, window and answer_tokens must be at least 1")
    mode: RepoScoreMode = "reference-free" if reference is None else "reference-based"
    template = _prompt_template(mode)
    files, left_out = repository_files(view)
    ref_files, ref_left_out = repository_files(reference) if reference is not None else ([], [])
    base = RepoScore(
        mode=mode,
        model=model.name,
        prompt_sha256=hashlib.sha256(template.encode()).hexdigest(),
        temperature=model.config.temperature,
        reasoning_effort=model.config.reasoning_effort,
        requested_samples=samples,
        window=window,
        answer_tokens=answer_tokens,
        files_shown=[f.path for f in files],
        files_left_out=left_out,
        reference_files_shown=[f.path for f in ref_files],
        reference_files_left_out=ref_left_out,
        files_not_listed=view.files_not_listed,
        addressed_to_judge=context_findings(view, files=dict.fromkeys(f.path for f in files)),
    )
    if not files:
        return base.model_copy(
            update={"unscored_reason": "the repository has no code or documentation files"}
        )
    if reference is not None and not ref_files:
        return base.model_copy(
            update={"unscored_reason": "the reference has no code or documentation files"}
        )
    prompt = papercoder_prompt(view, paper, reference=reference, template=template)
    messages = [sample_messages(prompt, sample=i, samples=samples) for i in range(samples)]
    prompt_tokens = max(count_message_tokens(m, model.name) for m in messages)
    base = base.model_copy(update={"prompt_tokens": prompt_tokens})
    if prompt_tokens + answer_tokens > window:
        return base.model_copy(
            update={
                "unscored_reason": (
                    f"{TOO_LARGE}: the prompt is {prompt_tokens} tokens and the answer needs "
                    f"{answer_tokens}, over the {window}-token window; nothing was sent"
                )
            }
        )
    first_record = len(model.ledger.records)
    taken = await _run_samples(
        model, messages, _FreeAnswer if reference is None else _BasedAnswer, answer_tokens
    )
    total = CostTotal()
    for record in model.ledger.records[first_record:]:
        if record.label == PAPERCODER_LABEL:
            total.add(record)
    scores = [s.score for s in taken if s.score is not None]
    unscored = None
    if not scores:
        reasons = Counter(s.reason for s in taken)
        unscored = (
            "no valid sample ("
            + ", ".join(
                f"{n} {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: str(kv[0]))
            )
            + ")"
        )
    return base.model_copy(
        update={
            "samples": taken,
            "mean": sum(scores) / len(scores) if scores else None,
            "valid_samples": len(scores),
            "unscored_reason": unscored,
            "input_tokens": total.usage.input_tokens,
            "cached_input_tokens": total.usage.cached_input_tokens,
            "output_tokens": total.usage.output_tokens,
            "cost_usd": total.cost_usd,
            "unpriced_calls": total.unpriced_calls,
        }
    )


SHOWN_ADDRESSED = 5
"""Places of text addressed to the judge printed with a score (all are in the record)."""


def render_repo_score(score: RepoScore) -> RenderableType:
    """The score for a terminal: a summary table and the critiques of the valid samples."""
    summary = Table(title=f"Repository score (PaperCoder style, {score.mode})", show_header=False)
    summary.add_column("what", style="bold")
    summary.add_column("value")
    headline = (
        f"{score.mean:.2f} / 5" if score.mean is not None else f"unscored: {score.unscored_reason}"
    )
    summary.add_row("correctness", headline)
    summary.add_row("valid samples", f"{score.valid_samples} of {score.requested_samples}")
    scores = ", ".join(
        str(s.score) if s.score is not None else f"invalid ({s.reason})" for s in score.samples
    )
    if scores:
        summary.add_row("samples", scores)
    summary.add_row("model", score.model)
    shown = f"{len(score.files_shown)} shown, {len(score.files_left_out)} left out"
    summary.add_row("files", shown)
    if score.mode == "reference-based":
        ref = (
            f"{len(score.reference_files_shown)} shown, "
            f"{len(score.reference_files_left_out)} left out"
        )
        summary.add_row("reference files", ref)
    summary.add_row(
        "tokens", f"{score.prompt_tokens} per prompt, {score.input_tokens} billed input"
    )
    cost = f"${score.cost_usd:.4f}"
    if score.unpriced_calls:
        cost += f" (+{plural(score.unpriced_calls, 'call')} without a price)"
    summary.add_row("cost", cost)
    if score.addressed_to_judge:
        places = "; ".join(
            f'{a.file}:{a.line} "{a.text}"' for a in score.addressed_to_judge[:SHOWN_ADDRESSED]
        )
        more = len(score.addressed_to_judge) - SHOWN_ADDRESSED
        summary.add_row("addressed to the judge", places + (f"; +{more} more" if more > 0 else ""))
    critiques = Table(title="Critiques")
    for column in ("sample", "severity", "file", "function", "critique"):
        critiques.add_column(column, overflow="fold")
    for sample in score.samples:
        for c in sample.critiques:
            critiques.add_row(str(sample.index + 1), c.severity, c.file, c.function, c.text)
    return Group(summary, critiques) if critiques.row_count else summary


async def grade_papercoder(
    view: SubmissionView,
    paper: Paper,
    judge: LoadedJudge,
    *,
    out_dir: Path,
    settings: ModelSettings | None = None,
    reference: SubmissionView | None = None,
    samples: int | None = None,
) -> RepoScore:
    """Rate a repository with the grading model of ``judge`` (or ``settings.model``) and
    write ``out_dir/grading/papercoder.json`` and ``costs.json``.

    Raises:
        ValueError: the judge has no grading model (dummy, random).
    """
    roles = getattr(judge.config, "roles", None)
    if roles is None:
        raise ValueError(f"judge {judge.identity.name!r} has no grading model")
    settings = settings or ModelSettings()
    config = ModelConfig(
        model=settings.model or roles.grading.model,
        base_url=settings.base_url,
        max_connections=settings.max_connections,
        cache=True,
    )
    ledger = CostLedger()
    async with Model(config, ledger=ledger, stage="grading") as model:
        score = await papercoder_scores(
            view,
            paper,
            model=model,
            reference=reference,
            samples=samples or judge.config.samples,
        )
    folder = out_dir / "grading"
    atomic_write_text(folder / "papercoder.json", score.model_dump_json(indent=2) + "\n")
    ledger.write(folder / "costs.json")
    return score
