from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paperbench.judge._agreement import (
    bootstrap_interval,
    config_agreement,
    leaf_agreement,
    majority,
    tree_interval,
)
from paperbench.rubric import TaskNode, effective_weights, iter_leaves

from ..rubric.trees import leaf, node

scores = st.sampled_from([0.0, 1.0]) | st.floats(0, 1, allow_nan=False)


@given(st.floats(0, 1, allow_nan=False), st.integers(1, 9))
def test_the_majority_of_identical_scores_is_that_score(score: float, k: int) -> None:
    assert majority([score] * k) == score


def test_majority_votes_and_a_tie_goes_to_the_lower_score() -> None:
    assert majority([1.0, 0.0, 1.0]) == 1.0
    assert majority([0.0, 1.0, 0.0]) == 0.0
    assert majority([1.0, 0.0]) == 0.0
    assert majority([1.0, 0.0, 0.0, 1.0]) == 0.0
    assert majority([0.2, 0.9, 0.6, 0.4]) == 0.4  # the lower middle score
    with pytest.raises(ValueError, match="no scores"):
        majority([])


def test_leaf_agreement_is_the_share_agreeing_with_the_vote() -> None:
    assert leaf_agreement([1.0]) == 1.0
    assert leaf_agreement([1.0, 1.0, 0.0]) == pytest.approx(2 / 3)
    assert leaf_agreement([1.0, 0.0, 0.0, 0.0]) == 0.75
    assert leaf_agreement([1.0, 0.0]) == 0.5
    with pytest.raises(ValueError):
        leaf_agreement([])


@given(
    st.lists(
        st.tuples(scores, st.integers(1, 5), st.floats(0.01, 10, allow_nan=False)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2**32),
)
def test_agreeing_samples_give_an_interval_of_width_zero_at_the_score(
    leaves: list[tuple[float, int, float]], seed: int
) -> None:
    samples = [[s] * k for s, k, _ in leaves]
    weights = [w for _, _, w in leaves]
    point = sum(w * s for (s, _, w) in leaves)
    low, high = bootstrap_interval(samples, weights, n=50, seed=seed)
    assert low == high == pytest.approx(point)


@given(
    st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=1, max_size=5), min_size=1),
    st.integers(0, 100),
)
def test_the_interval_is_ordered_within_the_range_and_deterministic(
    samples: list[list[float]], seed: int
) -> None:
    weights = [1 / len(samples)] * len(samples)
    low, high = bootstrap_interval(samples, weights, n=100, seed=seed)
    assert 0 <= low <= high <= 1 + 1e-9
    assert bootstrap_interval(samples, weights, n=100, seed=seed) == (low, high)


def test_disagreeing_samples_widen_the_interval() -> None:
    # one leaf split 2-1 for a pass, one certain pass, equal weights
    samples = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    low, high = bootstrap_interval(samples, [0.5, 0.5], n=400, seed=1)
    # a redraw of leaf 0 votes 0 with probability 7/27, so both 0.5 and 1.0 occur
    assert (low, high) == (0.5, 1.0)
    narrow = bootstrap_interval(samples, [0.5, 0.5], level=0.2, n=400, seed=1)
    assert narrow == (1.0, 1.0)


def test_a_leaf_without_valid_samples_counts_as_zero() -> None:
    assert bootstrap_interval([[], [1.0]], [0.25, 0.75], n=10) == (0.75, 0.75)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="weights"):
        bootstrap_interval([[1.0]], [0.5, 0.5])
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval([[1.0]], [1.0], level=1.0)
    with pytest.raises(ValueError, match="n must"):
        bootstrap_interval([[1.0]], [1.0], n=0)


def test_tree_interval_weights_leaves_as_aggregate_does() -> None:
    rubric = TaskNode.model_validate(node(leaf(1), node(leaf(1), leaf(3), weight=3)))
    paths = [p for p, _ in iter_leaves(rubric)]
    shares = effective_weights(rubric)
    assert [shares[p] for p in paths] == [0.25, 0.1875, 0.5625]
    score, interval = tree_interval(
        rubric, {paths[0]: [1.0, 1.0], paths[2]: [1.0, 0.0, 1.0]}, n=200
    )
    assert score == pytest.approx(0.25 + 0.5625)  # leaf 1 has no sample: 0
    assert interval[0] <= score <= interval[1]
    assert interval[0] == pytest.approx(0.25)
    assert interval[1] == pytest.approx(0.8125)


def test_config_agreement_compares_verdicts_on_common_leaves() -> None:
    pairs = config_agreement(
        {
            "a": {(0,): 1.0, (1,): 0.0, (2,): 1.0},
            "b": {(0,): 0.9, (1,): 1.0},
            "c": {(3,): 1.0},
        }
    )
    assert [(p.first, p.second, p.leaves, p.agreement) for p in pairs] == [
        ("a", "b", 2, 0.5),
        ("a", "c", 0, None),
        ("b", "c", 0, None),
    ]
