"""The papercoder agent's model settings, its mending of the logic design and its repair runs,
end to end: the real PapercoderAgent, a scripted model behind the fake servers (real SDKs) and
a real local-bubblewrap sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import AgentLimits, NoteEvent, ToolEvent, read_transcript
from paperbench.agents._config import PapercoderConfig
from paperbench.sandbox import LocalBackend
from paperbench.testing import FakeLLMServer, FakeReply
from paperbench.testing.fake_llm import RecordedRequest
from tests.agents.test_papercoder import (
    LOGIC,
    MAIN_FIXED,
    MODEL,
    UTILS,
    ScriptedModel,
    backend,  # noqa: F401
    run_agent,
)

CODING_ORDER = ["coding utils.py", "coding model.py", "coding main.py"]


def _notes(run_dir: Path, kind: str) -> list[NoteEvent]:
    events = read_transcript(run_dir / "transcript.jsonl")
    return [e for e in events if isinstance(e, NoteEvent) and e.kind == kind]


def _reproduce_runs(run_dir: Path) -> list[ToolEvent]:
    events = read_transcript(run_dir / "transcript.jsonl")
    return [e for e in events if isinstance(e, ToolEvent) and e.name == "reproduce"]


def _logic(deps: dict[str, list[str]], tasks: list[str]) -> dict[str, Any]:
    items: list[dict[str, Any]] = json.loads(json.dumps(LOGIC["logic_analysis"]))
    analysis = [{**item, "depends_on": deps[item["file"]]} for item in items]
    return {**LOGIC, "logic_analysis": analysis, "task_list": tasks}


# -- reasoning effort and answer limit ----------------------------------------------------

WireCase = tuple[str, dict[str, Any], str, dict[str, Any], tuple[str, ...]]
"""Model, its options, the protocol, fields every request carries, fields none carries."""
WIRE: dict[str, WireCase] = {
    # OpenAI's endpoint (declared official), a reasoning model: Chat Completions takes
    # max_completion_tokens, never max_tokens
    "o3-mini chat": (
        "openai/o3-mini",
        {"official": True, "api": "chat"},
        "chat",
        {"max_completion_tokens": 3000, "reasoning_effort": "high"},
        ("max_tokens",),
    ),
    # the same model through the Responses API (what auto picks there)
    "o3-mini responses": (
        "openai/o3-mini",
        {"official": True},
        "responses",
        {"max_output_tokens": 3000, "reasoning": {"effort": "high", "summary": "auto"}},
        ("max_tokens", "max_completion_tokens"),
    ),
    # an OpenAI-compatible server (vLLM serving a reasoning model): max_tokens
    "compatible server": (
        "openai/qwen3-32b",
        {},
        "chat",
        {"max_tokens": 3000, "reasoning_effort": "high"},
        ("max_completion_tokens",),
    ),
}


@pytest.mark.parametrize("case", sorted(WIRE))
def test_reasoning_effort_and_the_answer_limit_reach_every_request(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    case: str,
) -> None:
    model_name, options, protocol, fields, absent = WIRE[case]
    script = ScriptedModel()
    fake_llm.handler = script
    config = PapercoderConfig(reasoning_effort="high", max_tokens=3000)
    run = run_agent(
        backend, fake_llm, tmp_path / "run", config, model_name=model_name, options=options
    )

    assert run.outcome.status == "submitted", run.outcome
    assert len(fake_llm.requests) == len(script.kinds) == 11
    for request in fake_llm.requests:
        assert request.protocol == protocol
        for key, value in fields.items():
            assert request.body.get(key) == value, (key, request.body.get(key))
        for key in absent:
            assert key not in request.body


def test_without_settings_no_effort_or_limit_is_sent(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig())
    assert run.outcome.status == "submitted", run.outcome
    for request in fake_llm.requests:
        assert not {"reasoning_effort", "max_tokens", "max_completion_tokens"} & set(request.body)


def test_an_answer_cut_off_at_the_limit_is_asked_again_naming_the_limit(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    script = ScriptedModel()
    plans: list[str] = []

    def handler(request: RecordedRequest) -> FakeReply:
        if "Step 2 of 4" in json.dumps(request.body):
            return script(request)
        # the plan: cut off at the limit once, then whole
        plans.append(json.dumps(request.body))
        if len(plans) == 1:
            return FakeReply(text="The plan: add", stop="max_tokens")
        return FakeReply(text="The plan: add one, print it.")

    fake_llm.handler = handler
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(max_tokens=500))
    assert run.outcome.status == "submitted", run.outcome
    reask = [n for n in _notes(run.run_dir, "unusable_answer") if n.data["label"] == "plan"]
    assert len(reask) == 1
    assert "cut off at the answer limit of 500 tokens (max_tokens" in reask[0].text
    assert len(plans) == 2 and "cut off at the answer limit" in plans[1]


# -- the logic design: unknown dependencies, order, cycles -------------------------------


def test_an_unknown_dependency_is_dropped_with_a_note_and_files_are_coded_in_order(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    # main.py names a file the design does not have, and the task list puts main.py first
    logic = _logic(
        {"utils.py": [], "model.py": ["utils.py"], "main.py": ["model.py", "helpers.py"]},
        ["main.py", "model.py", "utils.py"],
    )
    script = ScriptedModel(logic=logic)
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig())

    assert run.outcome.status == "submitted", run.outcome
    assert script.kinds.count("logic") == 1  # not asked again: mended
    assert [k for k in script.kinds if k.startswith("coding")] == CODING_ORDER
    coding = {k: p for k, p in zip(script.kinds, script.prompts, strict=True) if "coding" in k}
    assert UTILS in coding["coding model.py"] and MODEL in coding["coding main.py"]
    assert run.files["main.py"] == MAIN_FIXED

    dropped = _notes(run.run_dir, "dependency_dropped")
    assert [(n.data["file"], n.data["dependency"]) for n in dropped] == [("main.py", "helpers.py")]
    assert "not a file of the design's task list" in dropped[0].text
    order = _notes(run.run_dir, "task_order")
    assert len(order) == 1 and order[0].data["order"] == ["utils.py", "model.py", "main.py"]
    saved = json.loads((run.run_dir / "papercoder" / "logic.ordered.json").read_text())
    assert saved["task_list"] == ["utils.py", "model.py", "main.py"]
    # the model's own answer is kept as it was
    answered = json.loads((run.run_dir / "papercoder" / "logic.json").read_text())
    assert answered["task_list"] == ["main.py", "model.py", "utils.py"]


def test_a_dependency_cycle_is_broken_with_a_note(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    # utils.py -> main.py -> model.py -> utils.py
    logic = _logic(
        {"utils.py": ["main.py"], "model.py": ["utils.py"], "main.py": ["model.py"]},
        ["utils.py", "model.py", "main.py"],
    )
    script = ScriptedModel(logic=logic)
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig())

    assert run.outcome.status == "submitted", run.outcome
    assert [k for k in script.kinds if k.startswith("coding")] == CODING_ORDER
    cycles = _notes(run.run_dir, "dependency_cycle")
    assert len(cycles) == 1
    assert cycles[0].data == {
        "cycle": ["utils.py", "main.py", "model.py"],
        "file": "utils.py",
        "dependency": "main.py",
    }
    assert "utils.py → main.py → model.py → utils.py form a cycle" in cycles[0].text
    assert _notes(run.run_dir, "task_order") == []  # the given order holds once it is broken
    # the analysis of utils.py is asked without the dropped dependency
    analysis = script.prompts[script.kinds.index("analysis utils.py")]
    assert "main.py" not in analysis


def test_a_resumed_run_mends_the_saved_logic_the_same_way_without_asking_again(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    logic = _logic(
        {"utils.py": [], "model.py": ["utils.py"], "main.py": ["model.py", "ghost.py"]},
        ["main.py", "model.py", "utils.py"],
    )
    script = ScriptedModel(logic=logic)
    fake_llm.handler = script
    run_dir = tmp_path / "run"
    run_agent(backend, fake_llm, run_dir, PapercoderConfig())
    first = len(script.kinds)
    (run_dir / "papercoder" / "files" / "main.py").unlink()

    again = run_agent(backend, fake_llm, run_dir, PapercoderConfig(), resumed=True)

    assert again.outcome.status == "submitted", again.outcome
    assert script.kinds[first:] == ["coding main.py"]
    assert len(_notes(run_dir, "dependency_dropped")) == 2  # once per attempt


# -- repair runs --------------------------------------------------------------------------

SLOW = "#!/usr/bin/env bash\nset -euo pipefail\nsleep 60\npython3 main.py > result.txt\n"


def test_a_repair_run_gets_the_configured_timeout(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    fix = {"edits": [{"file": "reproduce.sh", "search": "sleep 60\n", "replace": ""}]}
    script = ScriptedModel(reproduce=SLOW, repairs=[fix])
    fake_llm.handler = script
    config = PapercoderConfig(repair_rounds=1, repair_timeout_s=2)
    run = run_agent(backend, fake_llm, tmp_path / "run", config)

    assert run.outcome.status == "submitted", run.outcome
    runs = _reproduce_runs(run.run_dir)
    assert [e.arguments["timeout_s"] for e in runs] == [2, 2]
    assert runs[0].arguments["command"] == "bash reproduce.sh 2>&1"
    assert runs[0].arguments["output_limit"] == config.repair_log_bytes
    assert [e.timed_out for e in runs] == [True, False]
    assert runs[1].exit_code == 0
    assert "timed out after 2s" in script.prompts[script.kinds.index("repair")]
    assert run.files["result.txt"] == "2 ok\n"
    assert _notes(run.run_dir, "repair_timeout_cut") == []


def test_by_default_a_repair_run_gets_the_reproductions_timeout_cut_to_the_time_left(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    from paperbench.reproduce import ReproduceConfig

    script = ScriptedModel()
    fake_llm.handler = script
    limits = AgentLimits(wall_time_s=600)
    run = run_agent(
        backend, fake_llm, tmp_path / "run", PapercoderConfig(repair_rounds=1), limits=limits
    )

    assert run.outcome.status == "submitted", run.outcome
    (only,) = _reproduce_runs(run.run_dir)
    assert 1 <= only.arguments["timeout_s"] <= 600
    (cut,) = _notes(run.run_dir, "repair_timeout_cut")
    assert cut.data["repair_timeout_s"] == ReproduceConfig().timeout_s
    assert cut.data["timeout_s"] == only.arguments["timeout_s"]
    assert "the agent's time left" in cut.text


def test_a_repair_run_sends_back_stdout_and_stderr_interleaved(
    backend: LocalBackend,  # noqa: F811
    fake_llm: FakeLLMServer,
    tmp_path: Path,
) -> None:
    noisy = (
        "#!/usr/bin/env bash\necho out-1\necho err-1 >&2\necho out-2\n"
        "python3 main.py > result.txt\n"
    )
    fix = {"edits": [{"file": "main.py", "search": "undefined_name", "replace": "'ok'"}]}
    from tests.agents.test_papercoder import MAIN_BROKEN

    script = ScriptedModel(main=MAIN_BROKEN, reproduce=noisy, repairs=[fix])
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(repair_rounds=1))

    assert run.outcome.status == "submitted", run.outcome
    prompt = script.prompts[script.kinds.index("repair")]
    assert prompt.index("out-1") < prompt.index("err-1") < prompt.index("out-2")
    assert prompt.index("out-2") < prompt.index("NameError")
