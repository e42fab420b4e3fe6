"""Cases where `simple-faithful` parted from PaperBench's SimpleJudge (issue 28), each built
and checked on what the fake server received."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from paperbench.judge import build_view
from paperbench.papers import Paper, PaperSource
from paperbench.testing import FakeLLMServer

from .scripted import ScriptedJudge, all_text, last_user_text
from .test_grader import SCORES, _judge, by_word, grade
from .upstream import UPSTREAM_ENV, upstream_definitions, upstream_git

T0 = 1_700_000_000
"""reproduce.log.creation_time in these tests."""

FILES = {
    "main.py": "def train_alpha():\n    return 'MAIN_CODE'\n",
    "README.md": "# Replication\nREADME_TEXT\n",
    "results.csv": "method,ece\nALPHA,SAME_BYTES_RESULT\n",
    "reproduce.sh": "#!/bin/bash\npython main.py > results.csv\n",
}


@pytest.fixture
def paper() -> Paper:
    return PaperSource.resolve(None).load("calibration-binning")


def _executed(out: Path, files: dict[str, str], *, written: set[str]) -> Path:
    """An executed submission as `paperbench reproduce` writes it: ``written`` were written
    by the run (mtime after the log's creation time) with the bytes they had before, so the
    metadata's content comparison lists no change."""
    staged = out / "_staged" / "submission"
    for rel, content in files.items():
        path = staged / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        when = T0 + 100 if rel in written else T0 - 100
        os.utime(path, (when, when))
    (staged / "reproduce.log").write_text("done\n")
    (staged / "reproduce.log.creation_time").write_text(f"{T0}\n")
    with tarfile.open(out / "executed.tar.gz", "w:gz") as tar:
        tar.add(staged, arcname="submission")
    (out / "reproduce.log").write_text("done\n")
    metadata = {
        "status": "success",
        "exit_code": 0,
        "changed_files": {"created": [], "modified": [], "deleted": []},
    }
    (out / "metadata.json").write_text(json.dumps(metadata))
    return out


@pytest.mark.parametrize("mode", ["simple-faithful", "simple"])
def test_an_output_written_again_with_the_same_bytes_is_shown(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path, mode: str
) -> None:
    executed = _executed(tmp_path / "x", FILES, written={"results.csv"})
    view = build_view(tmp_path / "unused", executed)
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["results.csv", "README.md"])
    result = grade(fake_llm, view, paper, _judge(tmp_path, mode), tmp_path / "o")
    asked = [all_text(r) for r in fake_llm.requests if "DELTA" in last_user_text(r)]
    assert asked, "the Result Analysis leaf was scored without a call"
    assert any("SAME_BYTES_RESULT" in text for text in asked)
    assert result.sources.get("shortcut", 0) == 0


def _one_leaf() -> Any:
    from paperbench.rubric import TaskNode

    leaf = {
        "id": "a1",
        "requirements": "ALPHA binning estimator is implemented",
        "weight": 1,
        "sub_tasks": [],
        "task_category": "Code Development",
    }
    return TaskNode.model_validate(
        {"id": "root", "requirements": "Replicate", "weight": 1, "sub_tasks": [leaf]}
    )


def test_the_fake_server_refuses_a_request_over_the_models_window(
    fake_llm: FakeLLMServer,
) -> None:
    import openai

    client = openai.OpenAI(api_key="k", base_url=fake_llm.openai_url, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o-2024-08-06",
            messages=[{"role": "user", "content": "word " * 130_000}],
        )
    assert refused.value.code == "context_length_exceeded"


def test_the_window_is_the_called_models(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.testing._prompt import request_tokens

    # six 25k-token files: a 200k window (the config's) would send them all
    files = {
        f"part{k}.py": "".join(f"value_{k}_{i:05d} = {i} * {k}\n" for i in range(3_000))
        for k in range(6)
    }
    files["main.py"] = FILES["main.py"]
    root = tmp_path / "s"
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["main.py", *sorted(files)])
    judge = _judge(tmp_path, "simple-faithful")
    assert judge.config.budgets.context_window == 200_000
    result = grade(
        fake_llm,
        build_view(root),
        paper,
        judge,
        tmp_path / "o",
        rubric=_one_leaf(),
        model="openai/gpt-4o-2024-08-06",
    )
    sent = [request_tokens("chat", r.body) for r in fake_llm.requests]
    assert len(sent) == 3 and max(sent) <= 128_000
    assert max(sent) > 100_000  # the room was used, not left empty
    assert result.invalid_leaves == 0


def test_a_config_whose_fixed_parts_exceed_the_window_is_refused_before_any_request(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.errors import ConfigError

    fake_llm.handler = ScriptedJudge(by_word(SCORES))
    judge = _judge(tmp_path, "simple-faithful")
    root = tmp_path / "s"
    root.mkdir()
    (root / "main.py").write_text(FILES["main.py"])
    with pytest.raises(ConfigError) as refused:
        grade(fake_llm, build_view(root), paper, judge, tmp_path / "o", model="openai/gpt-4")
    line = str(refused.value)
    assert "\n" not in line and "openai/gpt-4 has a 8,192-token window" in line
    assert "$.budgets.answer_tokens" in line
    assert fake_llm.requests == []


def test_a_half_point_verdict_on_a_leaf_parses_to_an_integer(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    from paperbench.testing import FakeReply, RecordedRequest, requested_schema

    scripted = ScriptedJudge(lambda _: 0.5)
    schemas: list[dict[str, Any]] = []

    def handler(request: RecordedRequest) -> Any:
        schema = requested_schema(request)
        if schema is None:
            return scripted(request)
        schemas.append(schema)
        # a parser held to the schema (strict structured output): an integer where it asks one
        score: float = 0.5
        if schema["properties"]["score"]["type"] == "integer":
            score = 0
        return FakeReply(json={"valid_score": True, "score": score, "explanation": "half"})

    fake_llm.handler = handler
    root = tmp_path / "s"
    root.mkdir()
    (root / "main.py").write_text(FILES["main.py"])
    result = grade(
        fake_llm, build_view(root), paper, _judge(tmp_path, "simple-faithful"), tmp_path / "o",
        rubric=_one_leaf(),
    )  # fmt: skip
    assert result.invalid_leaves == 0 and result.score == 0
    assert [s["properties"]["score"]["type"] for s in schemas] == ["integer"]
    # a subtree graded as one unit keeps a number from 0 to 1
    result = grade(
        fake_llm, build_view(root), paper, _judge(tmp_path, "simple-faithful"), tmp_path / "p",
        rubric=_one_leaf(), max_depth=1,
    )  # fmt: skip
    assert schemas[1]["properties"]["score"]["type"] == "number"
    assert result.invalid_leaves == 0 and result.score == 0.5


def test_a_file_is_read_to_200_000_characters_not_bytes(
    fake_llm: FakeLLMServer, paper: Paper, tmp_path: Path
) -> None:
    zh = "".join("数据分析结果表明模型校准误差"[i % 14] for i in range(150_000 - 15))
    zh += "\nEND_ZH_MARKER\n"  # 150,000 characters, about 450 kB
    longer = "校准" * 120_000  # 240,000 characters
    root = tmp_path / "s"
    root.mkdir()
    (root / "notes_zh.md").write_text(zh, encoding="utf-8")
    (root / "longer_zh.md").write_text(longer, encoding="utf-8")
    assert (root / "notes_zh.md").stat().st_size > 440_000
    view = build_view(root)
    longer_view = view.file("longer_zh.md")
    assert longer_view is not None and longer_view.head is not None
    assert len(longer_view.head) == 200_000 and longer_view.head == longer[:200_000]
    fake_llm.handler = ScriptedJudge(by_word(SCORES), ranked=["notes_zh.md"])
    grade(
        fake_llm, view, paper, _judge(tmp_path, "simple-faithful"), tmp_path / "o",
        rubric=_one_leaf(),
    )  # fmt: skip
    (grading,) = [r for r in fake_llm.requests if "> ALPHA" in last_user_text(r)]
    shown = all_text(grading)
    assert zh.strip() in shown and "\ufffd" not in shown


@pytest.mark.parametrize(
    ("mode", "protocol"), [("simple-faithful", "chat"), ("simple", "responses")]
)
def test_the_faithful_judge_calls_openai_through_chat_completions(
    llm_env: Path, tmp_path: Path, mode: str, protocol: str
) -> None:
    from paperbench.judge._job import GradeOptions, Job, ModelSettings
    from paperbench.llm import CostLedger

    from .test_grader import small_rubric

    judge = _judge(tmp_path, mode)
    root = tmp_path / "s"
    root.mkdir()
    job = Job(
        view=build_view(root),
        rubric=small_rubric(),
        judge=judge,
        options=GradeOptions(),
        settings=ModelSettings(base_url="https://api.openai.com/v1"),
        ledger=CostLedger(),
        paper="",
        addendum="",
        judge_addendum="",
    )
    # no request is sent: the protocol is chosen when the client is resolved
    grading = job.model(judge.config.roles.grading)
    assert grading.name.startswith("openai/o3-mini") and grading.api.protocol == protocol


@pytest.mark.skipif(
    upstream_git() is None, reason=f"set {UPSTREAM_ENV} to a git directory of openai/preparedness"
)
def test_windows_reads_and_parse_schema_match_paperbenchs_own_code(tmp_path: Path) -> None:
    from pydantic import BaseModel

    from paperbench.judge._faithful import ParsedBinaryVerdict, ParsedVerdict
    from paperbench.judge._faithful_files import readable
    from paperbench.llm import context_window

    common = "project/common/preparedness_turn_completer/preparedness_turn_completer/utils.py"
    windows = upstream_definitions(common, ["CONTEXT_WINDOW_LENGTHS"])["CONTEXT_WINDOW_LENGTHS"]
    assert {m: context_window(f"openai/{m}") for m in windows} == windows
    judge = "project/paperbench/paperbench/judge/"
    read = upstream_definitions(
        judge + "utils.py", ["safe_read_file", "SIZE_LIMIT_BYTES"], Path=Path
    )
    root = tmp_path / "s"
    root.mkdir()
    texts = {
        "zh.md": "校准误差" * 37_500,
        "zh_long.md": "校准" * 120_000,
        "a.py": "x = 1\n" * 50_000,
    }
    for name, text in texts.items():
        (root / name).write_text(text, encoding="utf-8")
    view = build_view(root)
    for name in texts:
        f = view.file(name)
        assert f is not None
        expected = read["safe_read_file"](root / name, read["SIZE_LIMIT_BYTES"])
        assert readable(f) == expected, name
    simple = upstream_definitions(
        judge + "simple.py",
        ["ParsedJudgeResponseInt", "ParsedJudgeResponseFloat"],
        BaseModel=BaseModel,
    )
    for theirs, ours in [
        (simple["ParsedJudgeResponseInt"], ParsedBinaryVerdict),
        (simple["ParsedJudgeResponseFloat"], ParsedVerdict),
    ]:
        assert theirs.model_json_schema()["properties"] == ours.model_json_schema()["properties"]
