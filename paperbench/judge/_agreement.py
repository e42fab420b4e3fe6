"""Votes, agreement and noise intervals for judges that grade a leaf more than once.

A leaf graded ``k`` times (``samples: k`` in a judge config) keeps the vote of its samples
(:func:`majority`); how much the samples agree (:func:`leaf_agreement`) and how much the
tree's score would move if the judge were asked again (:func:`bootstrap_interval`) are
reported beside the score. Several judge configs on the same leaves are compared pairwise
(:func:`config_agreement`).

A verdict passes when its score is at least :data:`PASS_THRESHOLD` (PaperBench's leaves
score 0 or 1; a subtree graded as one unit scores in [0, 1]).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from paperbench.rubric import NodePath, TaskNode, effective_weights, iter_leaves

K = TypeVar("K", bound=Hashable)

PASS_THRESHOLD = 0.5
"""A score at or above this is a pass, below it a fail."""


def passes(score: float) -> bool:
    return score >= PASS_THRESHOLD


def majority(scores: Sequence[float]) -> float:
    """The vote of several verdicts on one leaf: the lower median of the scores.

    For 0/1 verdicts this is the majority verdict, and a tie (as many 0s as 1s) goes to the
    **lower** score, 0: a judge that cannot make up its mind does not award the point. For
    scores in [0, 1] (a subtree graded as one unit) it is the lower of the two middle
    scores. The majority of identical scores is that score.

    Raises:
        ValueError: no scores (a leaf whose every sample errored has no vote; it is invalid).
    """
    if not scores:
        raise ValueError("majority of no scores: a leaf without a valid sample has no vote")
    return statistics.median_low(scores)


def leaf_agreement(samples: Sequence[float]) -> float:
    """The share of a leaf's samples whose verdict (pass or fail) is the majority's.

    1.0 when every sample agrees (and for a single sample); 0.5 for a 2-2 split.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("agreement of no samples")
    verdict = passes(majority(samples))
    return sum(passes(s) == verdict for s in samples) / len(samples)


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile (0 ≤ q ≤ 1) of sorted values, linear between neighbours (as numpy's
    default)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    if ordered[low] == ordered[high]:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _weighted(votes: Sequence[float], weights: Sequence[float]) -> float:
    return sum(w * v for w, v in zip(weights, votes, strict=True))


def bootstrap_interval(
    samples: Sequence[Sequence[float]],
    weights: Sequence[float],
    *,
    level: float = 0.95,
    n: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """An interval for a tree's score from judge disagreement, by bootstrap over samples.

    ``samples[i]`` are leaf ``i``'s valid verdicts and ``weights[i]`` its effective weight
    (its share of the root, :func:`paperbench.rubric.effective_weights`), so the tree's
    score is ``Σ weights[i] · majority(samples[i])``, as :func:`paperbench.rubric.aggregate`
    computes it. Each of the ``n`` rounds draws every leaf's samples again with replacement
    (as many as it has), takes their vote and sums; the interval is the ``(1 − level)/2``
    and ``(1 + level)/2`` percentiles of the rounds. A leaf without a valid sample counts as
    0, as an invalid leaf does in the headline. Deterministic for a ``seed`` (stdlib
    ``random``). When every leaf's samples agree, every round equals the score: width 0.

    Raises:
        ValueError: ``samples`` and ``weights`` of different lengths, ``level`` outside
            (0, 1), or ``n`` below 1.
    """
    if len(samples) != len(weights):
        raise ValueError(f"{len(samples)} leaves of samples but {len(weights)} weights")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), found {level}")
    if n < 1:
        raise ValueError(f"n must be at least 1, found {n}")
    rng = random.Random(seed)
    rounds: list[float] = []
    for _ in range(n):
        votes = [majority(rng.choices(s, k=len(s))) if s else 0.0 for s in samples]
        rounds.append(_weighted(votes, weights))
    rounds.sort()
    low = _percentile(rounds, (1 - level) / 2)
    high = _percentile(rounds, (1 + level) / 2)
    return (min(low, high), max(low, high))


def tree_interval(
    rubric: TaskNode,
    samples: Mapping[NodePath, Sequence[float]],
    *,
    level: float = 0.95,
    n: int = 1000,
    seed: int = 0,
) -> tuple[float, tuple[float, float]]:
    """The voted score of ``rubric`` and its :func:`bootstrap_interval`, from each leaf's
    valid samples by path (a leaf missing from ``samples`` has none and counts as 0)."""
    shares = effective_weights(rubric)
    paths = [path for path, _ in iter_leaves(rubric)]
    per_leaf = [list(samples.get(path, ())) for path in paths]
    weights = [shares[path] for path in paths]
    score = _weighted([majority(s) if s else 0.0 for s in per_leaf], weights)
    interval = bootstrap_interval(per_leaf, weights, level=level, n=n, seed=seed)
    return score, interval


class PairAgreement(BaseModel):
    """How often two judge configs give the same verdict on the leaves both graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    first: str
    second: str
    leaves: int
    """Leaves both graded validly."""
    agreement: float | None
    """Share of those leaves with the same verdict; None when there are none."""


def config_agreement(
    verdicts: Mapping[str, Mapping[K, float]],
) -> list[PairAgreement]:
    """Pairwise verdict agreement between judge configs (config name → leaf key → score;
    a leaf key is a path, or a submission and a path when leaves are pooled),
    over the leaves both configs graded validly; pairs in the order the configs are given."""
    out: list[PairAgreement] = []
    for (a, va), (b, vb) in itertools.combinations(verdicts.items(), 2):
        common = [path for path in va if path in vb]
        same = sum(passes(va[path]) == passes(vb[path]) for path in common)
        out.append(
            PairAgreement(
                first=a,
                second=b,
                leaves=len(common),
                agreement=same / len(common) if common else None,
            )
        )
    return out
