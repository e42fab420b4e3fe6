"""RCB's published results (their ``overall_stats.json``), read into rows a report can put
beside a run's own.

The layout, as RCB's summariser writes it::

    {"results": {                                   # one key per paper id
        "<paper>": {
          "paper_metadata": {...},                  # strings, ignored here
          "results": {"<MODEL>": {"results": {"<snippet name>": [
              {"snippet_code_line_count": int, "completion_idx": int,
               "passed": bool, "exit_code": int}, ...]}}},
          "problem_scores": {"<MODEL>": {"mean": float, "std": float}}}},
     "overall_scores": {
        "<MODEL>": {"line_rates": {"mean", "std", "rates": [...]},
                    "task_rates": {"mean", "std", "rates": [...]},
                    "llm_cfg": {"model", "pretty_name", ...}}}}

RCB's numbers are percentages; a :class:`PublishedRow` holds fractions (0..1) like
:class:`~paperbench.rcb._models.Rate`, so the two sit in one table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._config_io import json_path
from paperbench.errors import InputError
from paperbench.rcb._models import Rate


class _Layout(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Completion(_Layout):
    """One completion of one snippet, tested."""

    snippet_code_line_count: int = Field(ge=0)
    completion_idx: int = Field(ge=0)
    passed: bool
    exit_code: int | None = None


class ModelPaperResults(_Layout):
    """One model's completions of one paper's snippets, by snippet name."""

    results: dict[str, list[Completion]] = Field(default_factory=dict)


class MeanStd(_Layout):
    mean: float
    std: float = 0.0


class Rates(MeanStd):
    rates: list[float] = Field(default_factory=list)
    """One rate per completion index."""


class PaperStats(_Layout):
    """One paper: its metadata and every model's completions and score."""

    paper_metadata: dict[str, Any] = Field(default_factory=dict)
    results: dict[str, ModelPaperResults] = Field(default_factory=dict)
    problem_scores: dict[str, MeanStd] = Field(default_factory=dict)
    """Per model: the paper's line-weighted percentage, mean and std over completions."""


class ModelScores(_Layout):
    line_rates: Rates
    task_rates: Rates
    llm_cfg: dict[str, Any] = Field(default_factory=dict)


class OverallStats(_Layout):
    """The whole of ``overall_stats.json``."""

    results: dict[str, PaperStats] = Field(default_factory=dict)
    overall_scores: dict[str, ModelScores]


class PublishedRow(BaseModel):
    """One model's published scores (fractions, 0..1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    """RCB's name of the model configuration (``GEMINI_2_0_FLASH``)."""
    model: str
    """The model it called (``llm_cfg.model``; ``key`` when absent)."""
    pretty_name: str
    """The name their plots show (``llm_cfg.pretty_name``; ``key`` when absent)."""
    overall: Rate
    """Line-weighted and unweighted rate: the means over completion indices."""
    papers: dict[str, Rate] = Field(default_factory=dict)
    """Per paper, when the file has per-paper results for this model."""


def _paper_rate(stats: PaperStats, key: str) -> Rate | None:
    done = stats.results.get(key)
    if done is not None and done.results:
        by_idx: dict[int, list[Completion]] = {}
        for completions in done.results.values():
            for c in completions:
                by_idx.setdefault(c.completion_idx, []).append(c)
        weighted: list[float] = []
        plain: list[float] = []
        for group in by_idx.values():
            lines = sum(c.snippet_code_line_count for c in group)
            if lines:
                weighted.append(sum(c.snippet_code_line_count for c in group if c.passed) / lines)
            plain.append(sum(1 for c in group if c.passed) / len(group))
        firsts = [cs[0].snippet_code_line_count for cs in done.results.values() if cs]
        return Rate(
            line_weighted=sum(weighted) / len(weighted) if weighted else None,
            unweighted=sum(plain) / len(plain) if plain else None,
            problems=len(done.results),
            lines=sum(firsts),
        )
    score = stats.problem_scores.get(key)
    if score is not None:
        return Rate(line_weighted=score.mean / 100)
    return None


def published_rows(stats: OverallStats) -> list[PublishedRow]:
    """A row per model of ``overall_scores``, in the file's order."""
    rows = []
    for key, scores in stats.overall_scores.items():
        papers = {
            paper: r
            for paper, paper_stats in stats.results.items()
            if (r := _paper_rate(paper_stats, key)) is not None
        }
        rows.append(
            PublishedRow(
                key=key,
                model=str(scores.llm_cfg.get("model") or key),
                pretty_name=str(scores.llm_cfg.get("pretty_name") or key),
                overall=Rate(
                    line_weighted=scores.line_rates.mean / 100,
                    unweighted=scores.task_rates.mean / 100,
                    problems=sum(r.problems for r in papers.values()),
                    lines=sum(r.lines for r in papers.values()),
                ),
                papers=papers,
            )
        )
    return rows


def load_published(path: Path) -> list[PublishedRow]:
    """The rows of RCB's ``overall_stats.json`` at ``path``.

    Raises:
        InputError: the file cannot be read, is not JSON, or does not fit the layout (one
            line naming the file and the JSON path).
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise InputError(f"cannot read: {reason or exc}", file=path) from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON: {exc.msg}", file=path, path=f"line {exc.lineno}"
        ) from exc
    try:
        stats = OverallStats.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        message = str(error["msg"])
        if error["type"] == "model_type" and not loc:
            message = "expected an object with overall_scores (RCB's overall_stats.json)"
        raise InputError(message, file=path, path=json_path(loc)) from exc
    return published_rows(stats)


__all__ = ["OverallStats", "PublishedRow", "load_published", "published_rows"]
