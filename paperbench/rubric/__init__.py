"""Rubric trees and graded trees: models, files, aggregation, transforms, statistics.

The public names are pinned by ``tests/rubric/test_schema.py``; everything else in the
``_*`` modules is internal.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.rubric._aggregate import (
        TreeSummary,
        aggregate,
        coverage,
        disqualify,
        effective_weights,
        score_from_children,
        summarize,
    )
    from paperbench.rubric._load import dumps_tree, load_graded, load_rubric, load_tree, write_tree
    from paperbench.rubric._model import (
        LEAF_CATEGORIES,
        MAX_WEIGHT,
        Check,
        FinegrainedCategory,
        GradedTaskNode,
        NodePath,
        TaskCategory,
        TaskNode,
        iter_leaves,
        iter_nodes,
        node_at,
        path_to_json_path,
        rebuild,
        tree_depth,
    )
    from paperbench.rubric._schema import TreeKind, build_schema
    from paperbench.rubric._stats import RubricStats, rubric_stats, total_stats
    from paperbench.rubric._transforms import (
        code_dev,
        cut_at_depth,
        outline,
        prior_criteria,
        resources_provided,
    )
    from paperbench.rubric._validate import (
        MAX_DEPTH,
        Issue,
        expand_paths,
        inspect_file,
        validate_data,
        validate_file,
    )

__all__ = [
    "LEAF_CATEGORIES",
    "MAX_DEPTH",
    "MAX_WEIGHT",
    "Check",
    "FinegrainedCategory",
    "GradedTaskNode",
    "Issue",
    "NodePath",
    "RubricStats",
    "TaskCategory",
    "TaskNode",
    "TreeKind",
    "TreeSummary",
    "aggregate",
    "build_schema",
    "code_dev",
    "coverage",
    "cut_at_depth",
    "disqualify",
    "dumps_tree",
    "effective_weights",
    "expand_paths",
    "inspect_file",
    "iter_leaves",
    "iter_nodes",
    "load_graded",
    "load_rubric",
    "load_tree",
    "node_at",
    "outline",
    "path_to_json_path",
    "prior_criteria",
    "rebuild",
    "resources_provided",
    "rubric_stats",
    "score_from_children",
    "summarize",
    "total_stats",
    "tree_depth",
    "validate_data",
    "validate_file",
    "write_tree",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
