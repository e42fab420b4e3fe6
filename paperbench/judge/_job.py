"""What every way of grading a leaf shares: the leaf to grade, the run's inputs and models,
how a model error becomes an invalid grade, and the vote over several samples."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import (
    BudgetExhaustedError,
    IncompleteAnswerError,
    MissingKeyError,
    ModelError,
    StructuredOutputError,
)
from paperbench.judge._agreement import majority
from paperbench.judge._config import DEFAULT_LEAVES_AT_ONCE as DEFAULT_LEAVES_AT_ONCE
from paperbench.judge._config import FaithfulConfig, LoadedJudge, RoleModel
from paperbench.judge._context import ContextCategory, SubmissionIndex
from paperbench.judge._types import CallCost, InvalidReason, LeafGrade, SampleGrade
from paperbench.judge._view import SubmissionView
from paperbench.llm import (
    CostLedger,
    Message,
    Model,
    ModelConfig,
    ModelOutput,
    takes_reasoning_effort,
)
from paperbench.llm._types import DEFAULT_MAX_CONNECTIONS
from paperbench.rubric import NodePath, TaskNode, prior_criteria

PRIOR_SIBLINGS = 20
"""Earlier criteria (not ancestors) shown before a leaf at most: a huge rubric would
otherwise put thousands of lines in every prompt (PaperBench caps them too)."""

CheckRunner = Callable[..., Awaitable[LeafGrade]]
"""``run_check(leaf, path, *, rubric_dir, executed, sandbox, image)`` → a LeafGrade."""


class GradeOptions(BaseModel):
    """How the rubric is transformed and sampled; part of what a resumed run must match."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code_dev: bool = False
    resources_provided: bool = False
    max_depth: int | None = Field(default=None, ge=1)
    samples: int = Field(default=1, ge=1)


class ModelSettings(BaseModel):
    """Where the judge's models are called (not part of the judge's identity)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    """Use this ``provider/model`` for every role instead of the config's."""
    base_url: str | None = None
    """An OpenAI- or Anthropic-compatible server for every call of the judge."""
    concurrency: int = Field(default=DEFAULT_LEAVES_AT_ONCE, ge=1)
    """Leaves (or batches) graded at once; the model layer's connection limit does the rest."""
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1)
    """Requests in flight per provider endpoint."""
    batch: bool = False
    """Send the calls through the providers' batch APIs (also the config's ``batch``)."""


def missing_keys(judge: LoadedJudge, settings: ModelSettings) -> list[str]:
    """The API key variables the judge's models need and that are not set (none for a
    judge without models)."""
    from paperbench.llm._registry import resolve

    missing: set[str] = set()
    for model in judge.identity.models.values():
        config = ModelConfig(model=settings.model or model, base_url=settings.base_url)
        try:
            _, target = resolve(config, require_key=False)
        except Exception:  # an unknown provider is reported when a call is made
            continue
        if target.missing_key is not None:
            missing.add(target.missing_key)
    return sorted(missing)


@dataclass(frozen=True)
class Leaf:
    path: NodePath
    node: TaskNode
    category: ContextCategory
    prior: list[str]

    @property
    def continuous(self) -> bool:
        return self.category == "Subtree"


@dataclass
class Job:
    """One submission, one paper, one judge: everything a mode needs, built once."""

    view: SubmissionView
    rubric: TaskNode
    judge: LoadedJudge
    options: GradeOptions
    settings: ModelSettings
    ledger: CostLedger
    paper: str
    addendum: str
    judge_addendum: str
    paper_id: str = ""
    rubric_dir: Path | None = None
    check_runner: CheckRunner | None = None
    sandbox: Any = None
    uncut_rubric: TaskNode | None = None
    """The rubric before the depth cut (``GradeOptions.max_depth``), when there was one: the
    faithful mode shows a subtree and the criteria before a leaf in their own texts."""
    memo: dict[str, int] = field(default_factory=dict)
    evidence: dict[str, str | None] = field(default_factory=dict)
    """Each leaf's own most relevant file, by model and leaf (``simple``'s guarantee)."""
    cache: dict[str, Any] = field(default_factory=dict)
    """What a mode computes once per job (the faithful mode: trees, file lists, the log)."""
    shared: list[Message] | None = None
    """The rendered prefix every grading call of this paper shares."""
    _indexes: dict[str, SubmissionIndex] = field(default_factory=dict)
    _models: dict[tuple[str, int], Model] = field(default_factory=dict)

    def index(self, model: str) -> SubmissionIndex:
        if model not in self._indexes:
            self._indexes[model] = SubmissionIndex(self.view, model)
        return self._indexes[model]

    @property
    def batching(self) -> bool:
        """The calls go through the providers' batch APIs (``--batch`` or ``batch: true``)."""
        return self.settings.batch or bool(getattr(self.judge.config, "batch", False))

    def model(self, role: RoleModel, sample: int = 0) -> Model:
        """The model of a role for one sample: sample ``i > 0`` salts the response cache
        (``cache_version``) so that it is a new verdict, not the first one again."""
        name = self.settings.model or role.model
        # A role's effort is for its own model: a model put in its place that does not reason
        # (--model openai/gpt-4o for an o3 role) is not sent one, which OpenAI would refuse.
        effort = role.reasoning_effort if takes_reasoning_effort(name) else None
        # PaperBench calls every model through Chat Completions (o3-mini on OpenAI's own
        # endpoint too, where paperbench.llm would otherwise use the Responses API)
        chat = isinstance(self.judge.config, FaithfulConfig) and name.startswith("openai/")
        key = (f"{name}|{effort}|{role.max_output_tokens}", sample)
        if key not in self._models:
            config = ModelConfig(
                model=name,
                base_url=self.settings.base_url,
                max_connections=self.settings.max_connections,
                reasoning_effort=effort,
                max_tokens=role.max_output_tokens,
                cache=True,
                cache_version=f"judge-sample-{sample}" if sample else None,
                options={"api": "chat"} if chat else {},
                batch=self.batching,
            )
            self._models[key] = Model(config, ledger=self.ledger, stage="grading")
        return self._models[key]

    async def aclose(self) -> None:
        for model in self._models.values():
            await model.aclose()


def prior_lines(rubric: TaskNode, path: NodePath) -> list[str]:
    """The criteria shown before a leaf: every ancestor, and the nearest earlier ones."""
    prior = prior_criteria(rubric, path)
    ancestors = {path[:i] for i in range(len(path))}
    earlier = [p for p, _ in prior if p not in ancestors][-PRIOR_SIBLINGS:]
    keep = ancestors | set(earlier)
    return [node.requirements for p, node in prior if p in keep]


def reason_of(exc: ModelError) -> InvalidReason:
    if isinstance(exc, BudgetExhaustedError):
        return "budget_exhausted"
    if isinstance(exc, IncompleteAnswerError):
        return "incomplete"
    if isinstance(exc, StructuredOutputError):
        return "unparseable"
    if isinstance(exc, MissingKeyError):
        return "not_graded"
    return "failed"


def add_cost(cost: CallCost, out: ModelOutput, share: int = 1, first: bool = True) -> CallCost:
    """``cost`` plus this leaf's share of one call answered for ``share`` leaves."""
    usage = out.usage
    return CallCost(
        requests=cost.requests + (1 if first and not out.cached else 0),
        input_tokens=cost.input_tokens + usage.input_tokens // share,
        cached_input_tokens=cost.cached_input_tokens + usage.cached_input_tokens // share,
        output_tokens=cost.output_tokens + usage.output_tokens // share,
        cost_usd=None
        if cost.cost_usd is None or out.cost_usd is None
        else cost.cost_usd + out.cost_usd / share,
        cache_hits=cost.cache_hits + (1 if out.cached else 0),
        attempts=cost.attempts + (out.attempts if first else 0),
    )


def sum_cost(a: CallCost, b: CallCost) -> CallCost:
    return CallCost(
        requests=a.requests + b.requests,
        unanswered=a.unanswered + b.unanswered,
        input_tokens=a.input_tokens + b.input_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cost_usd=None if a.cost_usd is None or b.cost_usd is None else a.cost_usd + b.cost_usd,
        cache_hits=a.cache_hits + b.cache_hits,
        attempts=a.attempts + b.attempts,
    )


def vote(leaf: Leaf, samples: list[SampleGrade], **fields: Any) -> LeafGrade:
    """One LeafGrade from one or several samples: the majority of the valid ones (the lower
    median for a subtree's continuous scores), with their range as the interval; the leaf
    is invalid only when none is valid (then with the first sample's reason)."""
    valid = [s for s in samples if s.valid]
    base: dict[str, Any] = {
        "path": leaf.path,
        "leaf_id": leaf.node.id,
        "category": leaf.category,
        "source": "llm",
        **fields,
    }
    if len(samples) > 1:
        base["samples"] = samples
    if not valid:
        first = samples[0]
        return LeafGrade(
            score=0.0,
            valid=False,
            explanation=first.explanation,
            reason=first.reason or "failed",
            error=first.explanation or None,
            **base,
        )
    scores = [s.score for s in valid]
    score = majority(scores)
    chosen = next(s for s in valid if s.score == score)
    explanation = chosen.explanation
    if len(samples) > 1:
        left_out = len(samples) - len(valid)
        how = "median" if leaf.continuous else "majority"
        explanation = (
            f"{how} of {len(valid)} valid verdicts ({left_out} errored, left out): "
            f"{scores}\n{explanation}"
        )
        base["interval"] = (min(scores), max(scores))
    return LeafGrade(score=score, valid=True, explanation=explanation, **base)


def model_free_grade(judge: LoadedJudge, leaf: Leaf) -> LeafGrade:
    """The dummy (1) and random (seeded per leaf path, so any order gives the same) judges."""
    config = judge.config
    if config.mode == "dummy":
        score, source = 1.0, "dummy"
    else:
        seed = getattr(config, "seed", 0)
        rng = random.Random(f"{seed}:{'.'.join(map(str, leaf.path))}")
        score = float(rng.random() < 0.5)
        if leaf.continuous:
            score = rng.random()
        source = "random"
    return LeafGrade(
        path=leaf.path,
        leaf_id=leaf.node.id,
        category=leaf.category,
        score=score,
        valid=True,
        explanation=f"{config.mode} judge: no model",
        source=source,  # type: ignore[arg-type]
    )
