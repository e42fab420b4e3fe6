import json
from pathlib import Path

from typer.testing import CliRunner

from paperbench import __version__
from paperbench.cli import app
from tests.rubric.trees import graded_leaf, graded_node, leaf, node

runner = CliRunner()


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data, indent=2))
    return path


def test_version_and_help() -> None:
    assert runner.invoke(app, ["--version"]).output.strip() == f"paperbench {__version__}"
    for command in [
        [],
        ["rubric"],
        ["rubric", "validate"],
        ["rubric", "stats"],
        ["papers", "list"],
    ]:
        result = runner.invoke(app, [*command, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output


def test_stats_json_has_the_documented_keys(tmp_path: Path) -> None:
    a = _write(
        tmp_path / "a.json", node(leaf(1, "Code Development"), node(leaf(1, "Code Execution")))
    )
    b = _write(tmp_path / "b.json", node(leaf(3, "Result Analysis"), leaf(1, "Code Development")))
    result = runner.invoke(app, ["rubric", "stats", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    keys = {
        "nodes", "leaves", "max_depth", "leaves_by_category",
        "leaves_by_finegrained_category", "weight_share_by_category",
    }  # fmt: skip
    assert [p["id"] for p in out["papers"]] == ["a", "b"]
    assert all(keys <= set(p) for p in out["papers"]) and keys == set(out["total"])
    assert out["total"]["leaves"] == 4 and out["total"]["max_depth"] == 3
    assert out["papers"][1]["weight_share_by_category"]["Result Analysis"] == 0.75
    assert out["total"]["weight_share_by_category"]["Code Development"] == (0.5 + 0.25) / 2


def test_stats_table(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", node(leaf(1, "Code Development")))
    result = runner.invoke(app, ["rubric", "stats", str(a)], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    assert "Rubric statistics" in result.output and "total" in result.output
    assert "Method Implementation" in result.output


def test_score_recomputes_and_reports_consistency(tmp_path: Path) -> None:
    good = graded_node(graded_leaf(1.0, weight=3), graded_leaf(0.0, valid=False))
    bad = json.loads(json.dumps(good)) | {"score": 0.5}
    files = [_write(tmp_path / "good.json", good), _write(tmp_path / "bad.json", bad)]
    result = runner.invoke(app, ["rubric", "score", *map(str, files), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert set(rows[0]) == {
        "file", "root_score", "stored_root_score", "coverage",
        "invalid_leaves", "invalid_leaves_scored", "leaves", "consistent", "disqualified",
    }  # fmt: skip
    assert rows[0]["root_score"] == 0.75 and rows[0]["coverage"] == 0.75
    assert rows[0]["invalid_leaves"] == 1 and rows[0]["consistent"] is True
    assert rows[1]["consistent"] is False and rows[1]["stored_root_score"] == 0.5
    table = runner.invoke(app, ["rubric", "score", *map(str, files)], env={"COLUMNS": "200"})
    assert "0.7500" in table.output and "no" in table.output


def test_show_renders_weights_categories_and_grades(tmp_path: Path) -> None:
    rubric = node(
        leaf(2, "Code Development"), node(leaf(1, "Code Execution"), leaf(1, "Result Analysis"))
    )
    r = _write(tmp_path / "r.json", rubric)
    result = runner.invoke(app, ["rubric", "show", str(r)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "w=2" in result.output and "[Code Execution]" in result.output
    shallow = runner.invoke(app, ["rubric", "show", str(r), "--depth", "2"], env={"COLUMNS": "200"})
    assert "2 more nodes" in shallow.output and "[Code Execution]" not in shallow.output

    def grade(d: dict, score: float) -> dict:
        kids = [grade(k, score) for k in d["sub_tasks"]]
        return {**d, "score": score, "valid_score": d["task_category"] != "Result Analysis",
                "explanation": "", "judge_metadata": None, "sub_tasks": kids}  # fmt: skip

    g = _write(tmp_path / "g.json", grade(rubric, 1.0))
    result = runner.invoke(
        app, ["rubric", "show", str(r), "--grades", str(g)], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "1.00" in result.output and "INVALID" in result.output
    other = _write(tmp_path / "o.json", grade(node(leaf(1)), 1.0))
    result = runner.invoke(app, ["rubric", "show", str(r), "--grades", str(other)])
    assert result.exit_code == 1 and "does not grade" in result.output


def test_duplicate_and_non_uuid_ids_work_end_to_end(tmp_path: Path) -> None:
    rubric = node(leaf(1), node(leaf(1), leaf(1)))
    for n in [rubric, *rubric["sub_tasks"], *rubric["sub_tasks"][1]["sub_tasks"]]:
        n["id"] = "same-id"
    r = _write(tmp_path / "dup.json", rubric)
    assert runner.invoke(app, ["rubric", "validate", str(r)]).exit_code == 0
    result = runner.invoke(app, ["rubric", "stats", str(r), "--json"])
    assert json.loads(result.output)["total"]["leaves"] == 3


def test_score_table_labels_drop_what_every_file_shares(tmp_path: Path) -> None:
    files = []
    for name in ["a", "b"]:
        (tmp_path / "ex" / name).mkdir(parents=True)
        files.append(_write(tmp_path / "ex" / name / "expected_result.json", graded_leaf(1.0)))
    result = runner.invoke(app, ["rubric", "score", *map(str, files)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert f"under {tmp_path / 'ex'}/ (expected_result.json)" in result.output
    assert "│ a " in result.output and "│ b " in result.output
