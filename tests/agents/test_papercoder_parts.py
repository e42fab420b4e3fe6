"""The papercoder pipeline's readers and checks, its prompts and its catalog config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paperbench.agents._config import PapercoderConfig
from paperbench.agents._papercoder_parts import (
    PROMPT_NAMES,
    AnswerError,
    ArchitectureDesign,
    Artifacts,
    Edit,
    LogicDesign,
    RepairAnswer,
    apply_edit,
    catalog_dir,
    check_architecture,
    check_logic,
    check_path,
    files_context,
    load_prompts,
    parse_code_answer,
    parse_config_answer,
    parse_json_answer,
)
from paperbench.errors import ConfigError

DESIGN = ArchitectureDesign(
    implementation_approach="x",
    files=["a.py", "b.py"],
    class_diagram="classDiagram",
    sequence_diagram="sequenceDiagram",
)


def _logic(tasks: list[str], b_depends_on: list[str]) -> LogicDesign:
    return LogicDesign.model_validate(
        {
            "logic_analysis": [
                {"file": "a.py", "description": "a"},
                {"file": "b.py", "description": "b", "depends_on": b_depends_on},
            ],
            "task_list": tasks,
        }
    )


def test_json_answers_are_read_bare_fenced_or_amid_prose() -> None:
    bare = '{"explanation": "none", "edits": []}'
    assert parse_json_answer(bare, RepairAnswer).explanation == "none"
    text = 'Sure!\n```json\n{"implementation_approach": "x", "files": ["a.py"], '
    text += '"class_diagram": "c", "sequence_diagram": "s"}\n```\nDone.'
    assert parse_json_answer(text, ArchitectureDesign).files == ["a.py"]


def test_a_json_answer_missing_a_field_names_it() -> None:
    with pytest.raises(AnswerError, match=r"\$.class_diagram: Field required"):
        parse_json_answer('{"implementation_approach": "x", "files": ["a.py"]}', ArchitectureDesign)
    with pytest.raises(AnswerError, match="not valid JSON"):
        parse_json_answer('{"files": [}', ArchitectureDesign)


def test_code_answers_need_a_fenced_block_and_config_a_yaml_mapping() -> None:
    assert parse_code_answer("x\n```python\nprint(1)\n```") == "print(1)\n"
    with pytest.raises(AnswerError, match="no fenced code block"):
        parse_code_answer("print(1)")
    with pytest.raises(AnswerError, match="YAML mapping"):
        parse_config_answer("```yaml\n- 1\n- 2\n```")


def test_the_task_list_must_put_every_file_after_its_dependencies() -> None:
    check_logic(_logic(["a.py", "b.py"], ["a.py"]), DESIGN)
    with pytest.raises(AnswerError, match=r"b.py comes before a.py, which it depends on"):
        check_logic(_logic(["b.py", "a.py"], ["a.py"]), DESIGN)
    with pytest.raises(AnswerError, match=r"a.py of the architecture design is missing"):
        check_logic(_logic(["b.py"], []), DESIGN)
    with pytest.raises(AnswerError, match=r"c.py, not in the task list"):
        check_logic(_logic(["a.py", "b.py"], ["c.py"]), DESIGN)


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("src/model.py", True),
        (".gitignore", True),
        ("/etc/passwd", False),
        ("../x.py", False),
        ("a/../../x.py", False),
        (".git/config", False),
        ("a\\b.py", False),
        ("", False),
    ],
)
def test_files_must_stay_inside_the_repository(path: str, ok: bool) -> None:
    assert (check_path(path) is None) is ok


def test_the_design_may_not_list_the_reserved_files_or_too_many() -> None:
    with pytest.raises(AnswerError, match=r"reproduce\.sh is written in a later step"):
        check_architecture(DESIGN.model_copy(update={"files": ["reproduce.sh"]}), 5)
    with pytest.raises(AnswerError, match="more than the 1 allowed"):
        check_architecture(DESIGN, 1)


def test_an_edit_applies_only_to_text_found_exactly_once() -> None:
    assert apply_edit("a = 1\n", Edit(file="x.py", search="1", replace="2")) == "a = 2\n"
    assert apply_edit(None, Edit(file="x.py", search="", replace="new\n")) == "new\n"
    with pytest.raises(AnswerError, match="search text was not found"):
        apply_edit("a = 1\n", Edit(file="x.py", search="b", replace="c"))
    with pytest.raises(AnswerError, match="occurs 2 times"):
        apply_edit("1 1", Edit(file="x.py", search="1", replace="2"))
    with pytest.raises(AnswerError, match="no such file"):
        apply_edit(None, Edit(file="x.py", search="a", replace="b"))


def test_the_files_context_puts_dependencies_first_and_names_what_it_left_out() -> None:
    done = {"a.py": "A" * 400, "b.py": "B" * 400, "c.py": "C" * 400}
    text, left_out = files_context(done, ["a.py"], 150, "openai/gpt-4o")
    assert "A" * 400 in text and "B" * 400 not in text
    assert left_out == ["c.py", "b.py"]
    assert "`c.py`, `b.py`" in text
    assert files_context({}, [], 100, "openai/gpt-4o") == ("(none yet)", [])


def test_artifacts_are_written_whole_and_partial_writes_are_not_listed(tmp_path: Path) -> None:
    art = Artifacts(tmp_path / "papercoder")
    art.write("files/src/a.py", "x\n")
    (tmp_path / "papercoder" / "files" / ".b.py.123.partial").write_text("half")
    assert art.files("files") == ["src/a.py"]
    assert art.next_answer_name("coding src/a.py") == "answers/0001-coding_src_a.py.md"


def test_the_bundled_prompts_load_and_the_catalog_config_validates() -> None:
    prompts = load_prompts(PapercoderConfig())
    assert sorted(prompts) == sorted(PROMPT_NAMES)
    data = yaml.safe_load((catalog_dir() / "papercoder.yaml").read_text())
    config = PapercoderConfig.model_validate(data)
    assert config.type == "papercoder" and config.repair_rounds >= 0


def test_a_prompt_file_that_is_missing_or_unknown_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$.prompts.plan: cannot read prompt file"):
        load_prompts(PapercoderConfig(prompts={"plan": "nope.md"}), tmp_path)
    with pytest.raises(ConfigError, match=r"\$.prompts.plna: unknown papercoder prompt"):
        load_prompts(PapercoderConfig(prompts={"plna": "x.md"}))
    bad = tmp_path / "plan.md"
    bad.write_text("costs 5$ each")
    with pytest.raises(ConfigError, match="write \\$\\$ for a literal"):
        load_prompts(PapercoderConfig(prompts={"plan": str(bad)}))


def test_relative_prompt_paths_are_read_from_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "mine.md").write_text("Plan it: $paper")
    prompts = load_prompts(PapercoderConfig(prompts={"plan": "mine.md"}), tmp_path)
    assert prompts["plan"].substitute(paper="P") == "Plan it: P"
    assert "expert" in prompts["system"].template  # the others stay the bundled ones
