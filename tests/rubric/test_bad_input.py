"""Every bad input gets one clear line naming the file and JSON path, exit 1, nothing changed."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.errors import LfsPointerError, PaperError
from paperbench.papers import PaperSource, load_repo_paper
from tests.rubric.trees import graded_leaf, graded_node, leaf, node

runner = CliRunner()


def _rubric(mutate) -> str:  # type: ignore[no-untyped-def]
    data = node(leaf(1), node(leaf(2), leaf(3)))
    mutate(data)
    return json.dumps(data, indent=2)


def _set(path: list, value):  # type: ignore[no-untyped-def]
    def mutate(data: dict) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


CASES = {
    "invalid json": ('{"id": "x", "weight": 1,, }', "$", "invalid JSON at line 1"),
    "missing field": (
        _rubric(_set(["sub_tasks", 1, "sub_tasks", 0, "requirements"], KeyError)),
        "$.sub_tasks[1].sub_tasks[0].requirements",
        "required field is missing",
    ),
    "wrong type": (
        _rubric(_set(["sub_tasks", 0, "weight"], "heavy")),
        "$.sub_tasks[0].weight",
        "expected number, found a string",
    ),
    "negative weight": (
        _rubric(_set(["sub_tasks", 1, "weight"], -1)),
        "$.sub_tasks[1].weight",
        "must be ≥ 0, found -1",
    ),
    "leaf without category": (
        _rubric(_set(["sub_tasks", 0, "task_category"], None)),
        "$.sub_tasks[0].task_category",
        "a leaf (no sub_tasks) needs a task_category",
    ),
    "category on internal node": (
        _rubric(_set(["sub_tasks", 1, "task_category"], "Code Development")),
        "$.sub_tasks[1].task_category",
        "an internal node (one with sub_tasks) must have task_category null",
    ),
    "unknown category": (
        _rubric(_set(["sub_tasks", 0, "task_category"], "Code Writing")),
        "$.sub_tasks[0].task_category",
        'unknown value "Code Writing"',
    ),
    "score outside unit interval": (
        json.dumps(graded_node(graded_leaf(1.0), graded_leaf(0.0)) | {"score": 1.5}),
        "$.score",
        "must be ≤ 1, found 1.5",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_validate_names_file_and_json_path(tmp_path: Path, case: str) -> None:
    text, where, message = CASES[case]
    f = tmp_path / "rubric.json"
    f.write_text(text)
    result = runner.invoke(app, ["rubric", "validate", str(f)])
    assert result.exit_code == 1, result.output
    assert f"{f}: {where}: {message}" in result.output
    assert "Traceback" not in result.output
    assert f.read_text() == text


@pytest.mark.parametrize("case", list(CASES))
def test_loading_commands_give_one_line_and_exit_1(tmp_path: Path, case: str) -> None:
    text, _, _ = CASES[case]
    f = tmp_path / "grade.json"
    f.write_text(text)
    command = ["rubric", "score", str(f)] if "score" in case else ["rubric", "stats", str(f)]
    result = runner.invoke(app, command)
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(f) in errors[0]
    assert "Traceback" not in result.output


def test_non_utf8_file(tmp_path: Path) -> None:
    f = tmp_path / "rubric.json"
    f.write_bytes(b'{"id": "\xff\xfe"}')
    result = runner.invoke(app, ["rubric", "validate", str(f)])
    assert result.exit_code == 1
    assert f"{f}: not valid UTF-8 (byte 0xff at offset 8)" in result.output
    # the same words from a command that loads the file
    assert f"{f}: not valid UTF-8" in runner.invoke(app, ["rubric", "stats", str(f)]).output


def test_every_problem_in_every_file_is_listed(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(
        _rubric(
            lambda d: (
                _set(["sub_tasks", 0, "weight"], -1)(d),
                _set(["sub_tasks", 0, "task_category"], "X")(d),
            )
        )
    )
    b.write_text("[")
    result = runner.invoke(app, ["rubric", "validate", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.count(str(a)) == 2 and result.output.count(str(b)) == 1
    assert "2 files checked, 2 with problems, 3 problems" in result.output


def test_one_file_with_one_problem_is_said_in_the_singular(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[")
    result = runner.invoke(app, ["rubric", "validate", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 file checked, 1 with problems, 1 problem" in result.output


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "papers" / "p1").mkdir(parents=True)
    (tmp_path / "rubrics").mkdir()
    (tmp_path / "rubrics" / "p1.json").write_text(json.dumps(node(leaf(1))))
    (tmp_path / "papers" / "p1" / "config.yaml").write_text("id: p1\ntitle: Paper one\n")
    return tmp_path


def test_paper_directory_without_paper_md(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    with pytest.raises(PaperError) as info:
        load_repo_paper(root, "p1")
    assert str(info.value) == f"{root / 'papers' / 'p1'}: paper directory has no paper.md"


def test_lfs_pointer_is_refused_when_the_text_is_needed(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "papers" / "p1" / "paper.md").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 12345\n"
    )
    paper = load_repo_paper(root, "p1")
    with pytest.raises(LfsPointerError, match="git lfs pull"):
        paper.paper_text()
    # statistics need only the rubric: they still work, with a warning
    result = runner.invoke(app, ["rubric", "stats", "--json"], env={"PAPERBENCH_HOME": str(root)})
    assert result.exit_code == 0, result.output
    assert "Git LFS pointer" in result.output


def test_data_dir_layout_and_splits(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for pid in ["a", "b"]:
        folder = data / "papers" / pid
        folder.mkdir(parents=True)
        (folder / "config.yaml").write_text(f"id: {pid}\ntitle: Paper {pid}\n")
        (folder / "paper.md").write_text("# paper")
        (folder / "rubric.json").write_text(json.dumps(node(leaf(1))))
        (folder / "blacklist.txt").write_text("none\n")
    (tmp_path / "experiments" / "splits").mkdir(parents=True)
    (tmp_path / "experiments" / "splits" / "lite.txt").write_text("b\n")
    source = PaperSource.resolve(data)
    assert source.paper_ids() == ["a", "b"]
    assert source.split("lite") == ["b"]
    assert source.split("all") == ["a", "b"]
    paper = source.load("b")
    assert (paper.title, paper.blacklist(), paper.layout) == ("Paper b", [], "data-dir")
    result = runner.invoke(
        app, ["papers", "list", "--data-dir", str(data), "--split", "lite", "--json"]
    )
    assert result.exit_code == 0
    assert [p["id"] for p in json.loads(result.output)] == ["b"]
    result = runner.invoke(app, ["papers", "list", "--data-dir", str(data), "--split", "nope"])
    assert result.exit_code == 2 and "no split 'nope'" in result.output


def test_not_a_data_dir(tmp_path: Path) -> None:
    result = runner.invoke(app, ["papers", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "not a PaperBench data directory" in result.output
