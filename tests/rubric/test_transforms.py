import math

from paperbench.rubric import (
    GradedTaskNode,
    TaskCategory,
    TaskNode,
    code_dev,
    cut_at_depth,
    disqualify,
    effective_weights,
    iter_leaves,
    prior_criteria,
    resources_provided,
    rubric_stats,
    summarize,
    tree_depth,
)
from tests.rubric.trees import graded_leaf, graded_node, leaf, node


def test_code_dev_keeps_only_code_development_and_drops_empty_nodes() -> None:
    t = TaskNode.model_validate(
        node(
            leaf(1, "Code Development"),
            node(leaf(1, "Code Execution"), leaf(1, "Result Analysis")),
            node(leaf(2, "Code Development"), leaf(1, "Code Execution")),
        )
    )
    cd = code_dev(t)
    assert cd is not None
    assert len(cd.sub_tasks) == 2
    assert all(n.task_category == TaskCategory.CODE_DEVELOPMENT for _, n in iter_leaves(cd))


def test_code_dev_renormalises_a_graded_tree() -> None:
    g = GradedTaskNode.model_validate(
        graded_node(
            graded_leaf(1.0, category="Code Development"),
            graded_leaf(0.0, category="Code Execution"),
        )
    )
    cd = code_dev(g)
    assert cd is not None and cd.score == 1.0


def test_code_dev_without_code_development_grades_the_root_as_one_leaf() -> None:
    # PaperBench: task_tree.code_only() or task_tree.set_task_category("Code
    # Development").set_sub_tasks([])
    rubric = TaskNode.model_validate(node(leaf(1, "Code Execution"), leaf(1, "Result Analysis")))
    cd = code_dev(rubric)
    assert cd.sub_tasks == [] and cd.task_category == TaskCategory.CODE_DEVELOPMENT
    assert (cd.id, cd.requirements, cd.weight) == (rubric.id, rubric.requirements, rubric.weight)
    graded = code_dev(
        GradedTaskNode.model_validate(graded_node(graded_leaf(1.0, category="Result Analysis")))
    )
    assert (graded.score, graded.valid_score) == (0.0, False)
    assert "no Code Development leaf" in graded.explanation
    assert summarize(graded).root_score == 0.0 and summarize(graded).coverage == 0.0


def test_resources_provided_zeroes_dataset_and_model_acquisition_leaves() -> None:
    acquire = graded_leaf(0.0, weight=3, finegrained_task_category="Dataset and Model Acquisition")
    other = graded_leaf(1.0, weight=1, finegrained_task_category="Method Implementation")
    inner = graded_node(acquire, other, weight=2)
    g = GradedTaskNode.model_validate(graded_node(inner, graded_leaf(0.0, weight=2)))
    assert summarize(g).root_score == 0.5 * 0.25
    rp = resources_provided(g)
    assert rp.sub_tasks[0].sub_tasks[0].weight == 0 and rp.sub_tasks[0].sub_tasks[1].weight == 1
    assert rp.score == 0.5 and summarize(rp).consistent
    rubric = resources_provided(g.to_rubric())
    assert [leaf.weight for _, leaf in iter_leaves(rubric)] == [0, 1, 2]


def test_disqualify_scores_zero_and_records_why() -> None:
    g = GradedTaskNode.model_validate(graded_node(graded_leaf(1.0), graded_node(graded_leaf(1.0))))
    out = disqualify(g, "fetched a blacklisted repository")
    s = summarize(out)
    assert (s.root_score, s.disqualified, s.consistent) == (
        0.0,
        "fetched a blacklisted repository",
        True,
    )
    assert all(
        leaf.score == 0.0 and "blacklisted" in leaf.explanation for _, leaf in iter_leaves(out)
    )
    from_rubric = summarize(disqualify(g.to_rubric(), "no submission"))
    assert (from_rubric.root_score, from_rubric.disqualified, from_rubric.coverage) == (
        0.0,
        "no submission",
        1.0,
    )
    assert summarize(g).disqualified is None


def test_cut_at_depth_turns_deep_subtrees_into_subtree_units() -> None:
    t = TaskNode.model_validate(node(leaf(), node(leaf(), node(leaf(), leaf()), weight=3)))
    assert tree_depth(t) == 4
    cut = cut_at_depth(t, 2)
    assert tree_depth(cut) == 2
    unit = cut.sub_tasks[1]
    assert unit.task_category == TaskCategory.SUBTREE and unit.weight == 3
    assert unit.requirements.count("requirement") == 3
    assert cut_at_depth(t, 10) == t


def test_effective_weights_multiply_along_the_path() -> None:
    t = TaskNode.model_validate(node(leaf(1), node(leaf(1), leaf(3), weight=3)))
    w = effective_weights(t)
    assert math.isclose(w[(0,)], 0.25)
    assert math.isclose(w[(1, 1)], 0.75 * 0.75)
    assert math.isclose(sum(w[p] for p, _ in iter_leaves(t)), 1.0)


def test_prior_criteria_are_ancestors_and_earlier_siblings() -> None:
    t = TaskNode.model_validate(node(leaf(), node(leaf(), leaf(), node(leaf(), leaf())), leaf()))
    prior = [p for p, _ in prior_criteria(t, (1, 2, 1))]
    assert prior == [(), (0,), (1,), (1, 0), (1, 1), (1, 2), (1, 2, 0)]


def test_stats_count_leaves_and_weight_shares() -> None:
    t = TaskNode.model_validate(
        node(
            leaf(1, "Code Development"), node(leaf(1, "Code Execution"), leaf(1, "Result Analysis"))
        )
    )
    s = rubric_stats(t)
    assert (s.nodes, s.leaves, s.max_depth) == (5, 3, 3)
    assert s.leaves_by_category == {
        "Code Development": 1,
        "Code Execution": 1,
        "Result Analysis": 1,
    }
    assert math.isclose(s.weight_share_by_category["Code Development"], 0.5)
    assert math.isclose(sum(s.weight_share_by_category.values()), 1.0)
