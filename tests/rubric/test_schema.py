import json
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from paperbench.rubric import (
    GradedTaskNode,
    TaskNode,
    TreeKind,
    code_dev,
    cut_at_depth,
    iter_leaves,
    tree_depth,
)
from paperbench.rubric import _validate as validate_module
from paperbench.rubric._schema import dumps_schema
from tests.rubric.test_aggregate import graded_trees
from tests.rubric.test_bad_input import CASES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", ["rubric", "graded"])
def test_published_schema_is_generated_from_the_models(kind: TreeKind) -> None:
    published = (ROOT / "rubrics" / "schema" / f"{kind}.schema.json").read_text()
    assert published == dumps_schema(kind), "run: python -m paperbench.rubric._schema"
    jsonschema.Draft202012Validator.check_schema(json.loads(published))


def _json_values() -> st.SearchStrategy[object]:
    return st.one_of(
        st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from([0.5, 1.0, 1.5, 10**16]),
        st.sampled_from(["", "x", "Code Development", "Subtree", "Method Implementation"]),
        st.just({}), st.just({"command": "true"}), st.just([]),
    )  # fmt: skip


_FIELDS = [
    "id", "requirements", "weight", "task_category", "finegrained_task_category", "check",
    "score", "valid_score", "explanation", "judge_metadata", "sub_tasks", "other",
]  # fmt: skip


@settings(max_examples=300)
@given(graded_trees(max_leaves=6), st.data())
def test_the_schema_and_the_model_accept_the_same_files(data: dict, draw: st.DataObject) -> None:
    """Mutate one field of one node (or drop it); both must agree on every result."""
    nodes = [data]
    for n in nodes:
        nodes.extend(n["sub_tasks"])
    target = draw.draw(st.sampled_from(nodes))
    field = draw.draw(st.sampled_from(_FIELDS))
    if draw.draw(st.booleans()):
        target.pop(field, None)
    else:
        target[field] = draw.draw(_json_values())
    for kind, model in (("graded", GradedTaskNode), ("rubric", TaskNode)):
        candidate = data if kind == "graded" else _strip(data)
        schema_ok = not list(validate_module._validator(kind).iter_errors(candidate))
        try:
            model.model_validate(candidate)
            model_ok = True
        except ValidationError:
            model_ok = False
        assert schema_ok == model_ok, (kind, field, target.get(field, "<absent>"))


def _strip(data: dict) -> dict:
    grade = {"score", "valid_score", "explanation", "judge_metadata"}
    out = {k: v for k, v in data.items() if k not in grade}
    if isinstance(out.get("sub_tasks"), list):
        out["sub_tasks"] = [_strip(c) if isinstance(c, dict) else c for c in out["sub_tasks"]]
    return out


@pytest.fixture
def pure_python_validator(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Force the fallback used where jsonschema-rs has no wheel."""
    monkeypatch.setitem(sys.modules, "jsonschema_rs", None)
    validate_module._validator.cache_clear()
    yield
    validate_module._validator.cache_clear()


@pytest.mark.parametrize("case", [c for c in CASES if c != "invalid json"])
def test_both_validators_give_the_same_lines(case: str, pure_python_validator: None) -> None:
    text, where, message = CASES[case]
    issues = validate_module.validate_data(json.loads(text), file="f.json")
    assert f"f.json: {where}: {message}" in "\n".join(i.line() for i in issues)


@given(graded_trees(), st.integers(min_value=1, max_value=6))
def test_cut_keeps_weights_and_never_deepens(data: dict, depth: int) -> None:
    rubric = GradedTaskNode.model_validate(data).to_rubric()
    cut = cut_at_depth(rubric, depth)
    assert tree_depth(cut) <= min(depth, tree_depth(rubric))
    assert cut.weight == rubric.weight


@given(graded_trees())
def test_code_dev_score_is_the_mean_over_code_development_leaves(data: dict) -> None:
    tree = GradedTaskNode.model_validate(data)
    cd = code_dev(tree)
    leaves = [leaf for _, leaf in iter_leaves(tree)]
    assert 0.0 <= cd.score <= 1.0
    assert all(leaf.task_category == "Code Development" for _, leaf in iter_leaves(cd))
    if all(leaf.task_category != "Code Development" for leaf in leaves):
        # as PaperBench: the root alone, as one Code Development leaf (here never graded)
        assert not cd.sub_tasks and cd.id == tree.id and not cd.valid_score
