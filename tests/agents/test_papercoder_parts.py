"""The papercoder pipeline's readers and checks, its prompts and its catalog config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paperbench.agents._config import PapercoderConfig, load_agent
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
    order_tasks,
    parse_code_answer,
    parse_config_answer,
    parse_json_answer,
)
from paperbench.errors import ConfigError
from paperbench.reproduce import ReproduceConfig

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


def test_the_task_list_must_hold_each_file_of_the_design_once() -> None:
    check_logic(_logic(["a.py", "b.py"], ["a.py"]), DESIGN)
    check_logic(_logic(["b.py", "a.py"], ["a.py", "c.py"]), DESIGN)  # order_tasks mends these
    with pytest.raises(AnswerError, match=r"a.py of the architecture design is missing"):
        check_logic(_logic(["b.py"], []), DESIGN)
    with pytest.raises(AnswerError, match=r"c.py is not a file of the architecture design"):
        check_logic(_logic(["a.py", "b.py", "c.py"], []), DESIGN)
    with pytest.raises(AnswerError, match=r"a file is listed twice"):
        check_logic(_logic(["a.py", "b.py", "a.py"], []), DESIGN)


def _design(tasks: list[str], deps: dict[str, list[str]]) -> LogicDesign:
    return LogicDesign.model_validate(
        {
            "logic_analysis": [
                {"file": f, "description": f, "depends_on": deps.get(f, [])} for f in tasks
            ],
            "task_list": tasks,
        }
    )


def test_a_task_list_in_dependency_order_is_kept_as_it_is() -> None:
    logic = _design(["a.py", "b.py", "c.py"], {"b.py": ["a.py", "config.yaml"], "c.py": ["a.py"]})
    ordered, notes = order_tasks(logic)
    assert notes == []
    assert ordered == logic  # config.yaml is written before coding: a known dependency


def test_unknown_dependencies_are_dropped_with_a_note_and_the_order_is_topological() -> None:
    logic = _design(
        ["main.py", "model.py", "utils.py", "data.py"],
        {
            "main.py": ["model.py", "src/model.py", "data.py"],
            "model.py": ["utils.py", "model.py", "torch"],
            "data.py": [],
        },
    )
    ordered, notes = order_tasks(logic)
    # the earliest ready file comes next: the task list's own order wherever it can be kept
    assert ordered.task_list == ["utils.py", "model.py", "data.py", "main.py"]
    assert ordered.logic_of("main.py").depends_on == ["model.py", "data.py"]
    assert ordered.logic_of("model.py").depends_on == ["utils.py"]
    dropped = [
        (n.data["file"], n.data["dependency"]) for n in notes if n.kind == "dependency_dropped"
    ]
    assert dropped == [("main.py", "src/model.py"), ("model.py", "model.py"), ("model.py", "torch")]
    assert "it is not a file of the design's task list" in notes[0].text
    assert "a file cannot depend on itself" in notes[1].text
    assert notes[-1].kind == "task_order"
    assert notes[-1].data["order"] == ordered.task_list
    for position, file in enumerate(ordered.task_list):
        assert set(ordered.logic_of(file).depends_on) <= set(ordered.task_list[:position])


def test_a_dependency_cycle_is_broken_at_the_file_first_in_the_task_list() -> None:
    # b -> c -> d -> b is a cycle; a depends on it; b comes first of the cycle
    deps = {"a.py": ["b.py"], "b.py": ["c.py"], "c.py": ["d.py"], "d.py": ["b.py"]}
    logic = _design(["a.py", "b.py", "c.py", "d.py"], deps)
    ordered, notes = order_tasks(logic)
    cycles = [n for n in notes if n.kind == "dependency_cycle"]
    assert len(cycles) == 1
    assert cycles[0].data == {
        "cycle": ["b.py", "c.py", "d.py"],
        "file": "b.py",
        "dependency": "c.py",
    }
    assert "b.py → c.py → d.py → b.py form a cycle" in cycles[0].text
    assert ordered.task_list == ["b.py", "a.py", "d.py", "c.py"]
    assert ordered.logic_of("b.py").depends_on == []
    # deterministic: the same answer gives the same order and notes
    assert order_tasks(logic) == (ordered, notes)


def test_every_cycle_is_broken_and_logic_of_unknown_files_is_left_out() -> None:
    logic = LogicDesign.model_validate(
        {
            "logic_analysis": [
                {"file": "x.py", "description": "x", "depends_on": ["y.py"]},
                {"file": "y.py", "description": "y", "depends_on": ["x.py"]},
                {"file": "p.py", "description": "p", "depends_on": ["q.py"]},
                {"file": "q.py", "description": "q", "depends_on": ["p.py"]},
                {"file": "ghost.py", "description": "g", "depends_on": []},
                {"file": "x.py", "description": "again", "depends_on": []},
            ],
            "task_list": ["q.py", "x.py", "y.py", "p.py"],
        }
    )
    ordered, notes = order_tasks(logic)
    assert [n.kind for n in notes] == [
        "logic_dropped",
        "logic_dropped",
        "dependency_cycle",
        "dependency_cycle",
        "task_order",
    ]
    assert "ghost.py is left out: it is not in the task list" in notes[0].text
    assert "x.py is left out: it is given twice" in notes[1].text
    assert [n.data["file"] for n in notes if n.kind == "dependency_cycle"] == ["q.py", "x.py"]
    assert ordered.task_list == ["q.py", "p.py", "x.py", "y.py"]
    assert ordered.logic_of("x.py").description == "x"


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


def test_the_catalog_config_has_papercoders_defaults_and_the_reproductions_limits() -> None:
    loaded = load_agent("papercoder")
    config = loaded.config
    assert isinstance(config, PapercoderConfig)
    # PaperCoder's scripts: o3-mini, reasoning effort high in every stage, no answer limit
    assert config.model == "openai/o3-mini"
    assert config.reasoning_effort == "high" and config.max_tokens is None
    # a repair round runs reproduce.sh as the reproduction stage would by default
    reproduction = ReproduceConfig()
    assert config.repair_timeout_s == reproduction.timeout_s
    defaults = PapercoderConfig()
    assert defaults.repair_timeout_s == reproduction.timeout_s
    assert defaults.repair_log_bytes == reproduction.log_limit_bytes


def test_a_bad_reasoning_effort_or_answer_limit_is_one_config_error(tmp_path: Path) -> None:
    path = tmp_path / "pc.yaml"
    path.write_text("type: papercoder\nmodel: openai/o3-mini\nreasoning_effort: highest\n")
    with pytest.raises(ConfigError, match=r"\$\.reasoning_effort"):
        load_agent(path)
    path.write_text("type: papercoder\nmodel: openai/o3-mini\nmax_tokens: 0\n")
    with pytest.raises(ConfigError, match=r"\$\.max_tokens"):
        load_agent(path)
