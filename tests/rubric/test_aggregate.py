import math

from hypothesis import given, settings
from hypothesis import strategies as st

from paperbench.rubric import (
    GradedTaskNode,
    aggregate,
    coverage,
    effective_weights,
    iter_leaves,
    summarize,
)
from tests.rubric.trees import graded_leaf, graded_node


def graded_trees(max_leaves: int = 30) -> st.SearchStrategy[dict]:
    weights = st.integers(min_value=0, max_value=5)
    leaves = st.builds(
        lambda s, w, v: graded_leaf(s, weight=w, valid=v),
        st.floats(min_value=0, max_value=1),
        weights,
        st.booleans(),
    )
    return st.recursive(
        leaves,
        lambda kids: st.builds(
            lambda cs, w: graded_node(*cs, weight=w),
            st.lists(kids, min_size=1, max_size=4),
            weights,
        ),
        max_leaves=max_leaves,
    )


def tree(data: dict) -> GradedTaskNode:
    return aggregate(GradedTaskNode.model_validate(data))


@given(graded_trees())
def test_score_is_in_unit_interval(data: dict) -> None:
    assert 0.0 <= tree(data).score <= 1.0


@given(graded_trees(), st.randoms())
def test_score_is_invariant_under_permuting_children(data: dict, rng) -> None:
    def shuffle(d: dict) -> dict:
        kids = [shuffle(k) for k in d["sub_tasks"]]
        rng.shuffle(kids)
        return {**d, "sub_tasks": kids}

    assert math.isclose(tree(data).score, tree(shuffle(data)).score, abs_tol=1e-12)


@given(graded_trees(), st.integers(min_value=2, max_value=7))
def test_score_is_invariant_under_scaling_a_nodes_children_weights(data: dict, k: int) -> None:
    scaled = {**data, "sub_tasks": [{**c, "weight": c["weight"] * k} for c in data["sub_tasks"]]}
    assert math.isclose(tree(data).score, tree(scaled).score, abs_tol=1e-12)


@settings(max_examples=50)
@given(graded_trees(), st.data())
def test_one_leaf_at_one_gives_its_effective_weight(data: dict, pick: st.DataObject) -> None:
    base = GradedTaskNode.model_validate(data)
    leaves = [p for p, _ in iter_leaves(base)]
    chosen = pick.draw(st.sampled_from(leaves))

    def set_scores(d: dict, path: tuple[int, ...]) -> dict:
        kids = [set_scores(c, (*path, i)) for i, c in enumerate(d["sub_tasks"])]
        if kids:
            return {**d, "sub_tasks": kids}
        return {**d, "score": 1.0 if path == chosen else 0.0, "valid_score": path == chosen}

    one_hot = tree(set_scores(data, ()))
    assert math.isclose(one_hot.score, effective_weights(base)[chosen], abs_tol=1e-12)


def test_zero_weight_children_score_zero() -> None:
    assert tree(graded_node(graded_leaf(1.0, weight=0), graded_leaf(1.0, weight=0))).score == 0.0


def test_validity_propagates_and_coverage_counts_weight() -> None:
    data = graded_node(
        graded_leaf(1.0, weight=3),
        graded_node(graded_leaf(0.0, weight=1, valid=False), graded_leaf(1.0, weight=1), weight=1),
    )
    t = tree(data)
    assert t.valid_score is False
    assert t.sub_tasks[0].valid_score is True
    assert t.sub_tasks[1].valid_score is False
    # invalid leaf's share: 1/4 * 1/2 = 0.125
    assert math.isclose(coverage(t), 0.875)
    s = summarize(GradedTaskNode.model_validate(data))
    assert (s.invalid_leaves, s.leaves, s.consistent) == (1, 3, True)
    assert math.isclose(s.root_score, 3 / 4 + 1 / 8)


def test_all_valid_means_full_coverage() -> None:
    assert coverage(tree(graded_node(graded_leaf(0.0), graded_leaf(1.0)))) == 1.0


def test_inconsistent_stored_scores_are_reported() -> None:
    data = graded_node(graded_leaf(1.0), graded_node(graded_leaf(0.0), graded_leaf(1.0)))
    data["sub_tasks"][1]["score"] = 0.9
    s = summarize(GradedTaskNode.model_validate(data))
    assert not s.consistent
    assert s.inconsistent_paths == ["$.sub_tasks[1]"]


@given(graded_trees())
def test_an_invalid_leaf_counts_as_zero_whatever_it_stores(data: dict) -> None:
    def raise_invalid(d: dict) -> dict:
        kids = [raise_invalid(k) for k in d["sub_tasks"]]
        if kids:
            return {**d, "sub_tasks": kids}
        return {**d, "score": d["score"] if d["valid_score"] else 1.0}

    def headline(d: dict) -> float:
        return summarize(GradedTaskNode.model_validate(d)).root_score

    assert headline(raise_invalid(data)) == headline(data) == headline(_zero_invalid(data))


def _zero_invalid(d: dict) -> dict:
    kids = [_zero_invalid(k) for k in d["sub_tasks"]]
    if kids:
        return {**d, "sub_tasks": kids}
    return {**d, "score": d["score"] if d["valid_score"] else 0.0}


def test_summary_names_invalid_leaves_that_store_a_score() -> None:
    data = graded_node(graded_leaf(1.0), graded_leaf(1.0, valid=False))
    data["score"] = 1.0  # as a tool that ignores validity would store it
    s = summarize(GradedTaskNode.model_validate(data))
    assert s.root_score == 0.5 and s.stored_root_score == 1.0
    assert s.invalid_leaves_scored == ["$.sub_tasks[1]"] and not s.consistent
