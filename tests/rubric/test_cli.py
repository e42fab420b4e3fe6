import io
import json
import re
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


def test_show_keeps_rubric_text_as_written_and_escapes_control_characters(
    tmp_path: Path,
) -> None:
    rubric = node(leaf(1), leaf(1))
    rubric["sub_tasks"][0]["requirements"] = "use [bold]x[/bold] and a[0] \\ path"
    rubric["sub_tasks"][1]["requirements"] = "red \x1b[31mtext\x07 here"
    r = _write(tmp_path / "r.json", rubric)
    result = runner.invoke(app, ["rubric", "show", str(r)])
    assert result.exit_code == 0, result.output
    assert "use [bold]x[/bold] and a[0] \\ path" in result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "red \\x1b[31mtext\\x07 here" in result.output


def test_show_reports_a_broken_rubric_as_a_rubric(tmp_path: Path) -> None:
    rubric = node(leaf(1), leaf(-2))
    r = _write(tmp_path / "r.json", rubric)
    result = runner.invoke(app, ["rubric", "show", str(r)])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {r}: $.sub_tasks[1].weight: must be ≥ 0, found -2"


def test_show_marks_internal_nodes_above_an_invalid_leaf(tmp_path: Path) -> None:
    g = graded_node(graded_leaf(1.0), graded_node(graded_leaf(1.0, valid=False), graded_leaf(1.0)))
    f = _write(tmp_path / "g.json", g)
    lines = runner.invoke(app, ["rubric", "show", str(f)]).output.splitlines()
    assert "(invalid below)" in lines[0] and "(invalid below)" in lines[2]
    assert "INVALID" in lines[3] and "invalid below" not in lines[1]
    assert lines[0].startswith("0.75 ")  # the invalid leaf counts as 0


def test_score_warns_when_an_invalid_leaf_stores_a_score(tmp_path: Path) -> None:
    g = graded_node(graded_leaf(1.0), graded_leaf(1.0, valid=False))
    g["score"] = 1.0
    f = _write(tmp_path / "g.json", g)
    result = runner.invoke(app, ["rubric", "score", str(f), "--json"])
    assert result.exit_code == 0
    row = json.loads(result.stdout)[0]
    assert row["root_score"] == 0.5 and row["invalid_leaves_scored"] == ["$.sub_tasks[1]"]
    assert f"{f}: $.sub_tasks[1]: an invalid leaf stores a score above 0" in result.output


def test_resources_provided_and_code_dev_change_the_score(tmp_path: Path) -> None:
    acquire = graded_leaf(0.0, finegrained_task_category="Dataset and Model Acquisition")
    execute = graded_leaf(0.0, category="Code Execution")
    g = _write(tmp_path / "g.json", graded_node(graded_leaf(1.0), acquire, execute))

    def score(*flags: str) -> float:
        result = runner.invoke(app, ["rubric", "score", str(g), "--json", *flags])
        assert result.exit_code == 0, result.output
        return float(json.loads(result.stdout)[0]["root_score"])

    assert score() == 1 / 3
    assert score("--resources-provided") == 0.5
    assert score("--code-dev") == 0.5  # the acquisition leaf is Code Development too
    assert score("--code-dev", "--resources-provided") == 1.0
    stats = runner.invoke(app, ["rubric", "stats", str(g), "--json", "--resources-provided"])
    assert json.loads(stats.stdout)["resources_provided"] is True


def test_validate_checks_that_check_files_exist_inside_the_rubric_folder(tmp_path: Path) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "ok.py").write_text("")
    (tmp_path.parent / "outside.py").write_text("")
    rubric = node(
        leaf(1, check={"command": "c", "files": {"/c/ok.py": "checks/ok.py"}}),
        leaf(1, check={"command": "c", "files": {"/c/gone.py": "checks/gone.py"}}),
        leaf(1, check={"command": "c", "files": {"/c/out.py": "../outside.py"}}),
    )
    r = _write(tmp_path / "r.json", rubric)
    result = runner.invoke(app, ["rubric", "validate", str(r)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith(str(r))]
    assert len(lines) == 2
    assert lines[0].startswith(f'{r}: $.sub_tasks[1].check.files["/c/gone.py"]: ')
    assert "'checks/gone.py' not found" in lines[0]
    assert lines[1].startswith(f'{r}: $.sub_tasks[2].check.files["/c/out.py"]: ')
    assert "outside the rubric's folder" in lines[1]


def test_papers_list_piped_keeps_ids_and_titles_whole(tmp_path: Path) -> None:
    data = tmp_path / "data"
    title = "A Rather Long Title About Calibration Of Overconfident Classifiers In Practice"
    folder = data / "papers" / "a-fairly-long-paper-identifier-2024"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        f"id: a-fairly-long-paper-identifier-2024\ntitle: {title}\n"
    )
    (folder / "paper.md").write_text("# p")
    (folder / "rubric.json").write_text(json.dumps(node(leaf(1))))
    result = runner.invoke(app, ["papers", "list", "--data-dir", str(data)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert title in result.output and "a-fairly-long-paper-identifier-2024" in result.output
    assert result.output.startswith("1 paper\n")
    forced = runner.invoke(
        app,
        ["papers", "list", "--data-dir", str(data)],
        env={"COLUMNS": "80", "FORCE_COLOR": "1"},
    )
    assert title in re.sub(r"\x1b\[[0-9;]*m", "", forced.output)


def test_show_piped_keeps_whole_requirement_texts(tmp_path: Path) -> None:
    """CliRunner's output is a pipe: a requirement longer than the 80 columns COLUMNS says
    comes out whole on its line, and nothing is cut."""
    words = " ".join(f"word{i}" for i in range(60))
    deep = leaf(3, requirements=f"Deep {words} end-of-deep.")
    r = _write(tmp_path / "r.json", node(node(deep), leaf(1, requirements=f"Top {words} END.")))
    for env in [{"COLUMNS": "80"}, {"COLUMNS": "80", "FORCE_COLOR": "1"}]:
        result = runner.invoke(app, ["rubric", "show", str(r)], env=env)
        assert result.exit_code == 0, result.output
        lines = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()
        assert any(f"Top {words} END." in line for line in lines), result.stdout
        assert any(f"Deep {words} end-of-deep." in line for line in lines), result.stdout
        assert "…" not in result.stdout


def test_a_tree_rendered_to_a_width_says_where_it_cut() -> None:
    from rich.console import Console

    from paperbench.rubric import TaskNode
    from paperbench.rubric._render import render_tree

    tree = TaskNode.model_validate(node(leaf(1, requirements="x" * 300)))
    out = Console(width=400, record=True, file=io.StringIO())
    out.print(render_tree(tree, width=50))
    text = out.export_text()
    assert "x" * 49 + "…" in text and "x" * 50 not in text


def test_counts_in_messages_agree_with_their_nouns(tmp_path: Path) -> None:
    r = _write(tmp_path / "r.json", node(node(leaf(1)), leaf(2)))
    shallow = runner.invoke(app, ["rubric", "show", str(r), "--depth", "2"])
    assert "… 1 more node (raise --depth)" in shallow.output
    bad = _write(tmp_path / "bad.json", {**leaf(1), "weight": -1})
    checked = runner.invoke(app, ["rubric", "validate", str(bad)])
    assert checked.exit_code == 1
    assert "1 file checked, 1 with problems, 1 problem" in checked.output
    both = runner.invoke(app, ["rubric", "validate", str(bad), str(r)])
    assert "2 files checked, 1 with problems, 1 problem" in both.output
