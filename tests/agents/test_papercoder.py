"""The papercoder agent end to end: a scripted model behind the fake OpenAI server (real SDK),
a real local-bubblewrap sandbox holding the paper and a git repository."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from paperbench.agents import (
    PAPER_DIR,
    SUBMISSION_DIR,
    AgentLimits,
    AgentOutcome,
    LimitTracker,
    MessageEvent,
    ModelCallEvent,
    NoteEvent,
    RunContext,
    ToolEvent,
    TranscriptWriter,
    read_transcript,
)
from paperbench.agents._config import PapercoderConfig
from paperbench.agents._papercoder import PapercoderAgent
from paperbench.llm import Model, ModelConfig
from paperbench.sandbox import LocalBackend, SandboxBackend, SandboxSpec
from paperbench.testing import FakeLLMServer, FakeReply
from paperbench.testing.fake_llm import RecordedRequest
from tests.sandbox.docker_fixtures import TEST_LABELS, docker_client, docker_images  # noqa: F401

PROVIDERS = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-haiku-4-5"}
"""The wire protocols the pipeline is run through: Chat Completions and Messages."""

UTILS = "def add(a, b):\n    return a + b\n"
MODEL = "from utils import add\n\n\ndef predict(x):\n    return add(x, 1)\n"
MAIN_BROKEN = "from model import predict\n\nprint(predict(1), undefined_name)\n"
MAIN_FIXED = "from model import predict\n\nprint(predict(1), 'ok')\n"
REPRODUCE = "#!/usr/bin/env bash\nset -euo pipefail\npython3 main.py > result.txt\n"

ARCHITECTURE = {
    "implementation_approach": "plain python",
    # the design lists the files in another order than the task list: coding follows the
    # task list, dependencies first
    "files": ["main.py", "model.py", "utils.py"],
    "class_diagram": "classDiagram\n  class Model",
    "sequence_diagram": "sequenceDiagram\n  main->>model: predict",
}
LOGIC = {
    "required_packages": [],
    "logic_analysis": [
        {"file": "utils.py", "description": "helpers", "depends_on": []},
        {"file": "model.py", "description": "the model", "depends_on": ["utils.py"]},
        {"file": "main.py", "description": "entry point", "depends_on": ["model.py"]},
    ],
    "task_list": ["utils.py", "model.py", "main.py"],
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _messages(request: RecordedRequest) -> list[dict[str, Any]]:
    """The request's messages: Chat Completions and Messages ``messages``, Responses
    ``input`` (its items with a role)."""
    items = request.body.get("messages") or request.body.get("input") or []
    return [m for m in items if isinstance(m, dict) and "role" in m]


def _last_user(request: RecordedRequest) -> str:
    users = [m for m in _messages(request) if m.get("role") == "user"]
    return _text(users[-1]["content"])


def _code(text: str, lang: str = "python") -> str:
    return f"Here it is.\n\n```{lang}\n{text}```\n"


@dataclass
class ScriptedModel:
    """Answers each pipeline prompt by what it asks for; tests override single answers."""

    main: str = MAIN_FIXED
    logic: dict[str, Any] = field(default_factory=lambda: LOGIC)
    """The logic design answered in step 3."""
    reproduce: str = REPRODUCE
    architecture: list[str] = field(default_factory=list)
    """Answers to the architecture step, in order (then the valid design)."""
    repairs: list[dict[str, Any]] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    """What each request asked for, in order."""
    prompts: list[str] = field(default_factory=list)
    """The last user message of each request."""
    conversations: list[str] = field(default_factory=list)
    """Every message of each request, joined."""

    def __call__(self, request: RecordedRequest) -> FakeReply:
        last = _last_user(request)
        kind, reply = self._answer(request, last)
        self.kinds.append(kind)
        self.prompts.append(last)
        self.conversations.append("\n".join(_text(m["content"]) for m in _messages(request)))
        return FakeReply(text=reply)

    def _answer(self, request: RecordedRequest, last: str) -> tuple[str, str]:
        if last.startswith("Your answer could not be used"):
            first = _text(_messages(request)[-3]["content"])
            if "Step 2 of 4" in first:
                return self._architecture("architecture-reask")
            raise AssertionError(f"unexpected re-ask: {last}")
        if "Step 1 of 4" in last:
            return "plan", "The plan: add one, print it."
        if "Step 2 of 4" in last:
            return self._architecture("architecture")
        if "Step 3 of 4" in last:
            return "logic", json.dumps(self.logic)
        if "Step 4 of 4" in last:
            return "config", _code("seed: 0\nlr: 0.1\n", "yaml")
        if match := re.search(r"# Detailed analysis of `([^`]+)`", last):
            return f"analysis {match.group(1)}", f"Analysis of {match.group(1)}."
        if "# Write `reproduce.sh`" in last:
            return "reproduce.sh", _code(self.reproduce, "bash")
        if match := re.search(r"# Write `([^`]+)`", last):
            name = match.group(1)
            code = {"utils.py": UTILS, "model.py": MODEL, "main.py": self.main}[name]
            return f"coding {name}", _code(code)
        if "failed" in last and self.repairs:
            return "repair", json.dumps(self.repairs.pop(0))
        raise AssertionError(f"unexpected prompt: {last[:200]}")

    def _architecture(self, kind: str) -> tuple[str, str]:
        if self.architecture:
            return kind, self.architecture.pop(0)
        return kind, "```json\n" + json.dumps(ARCHITECTURE) + "\n```"


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed on this machine (apt-get install bubblewrap)")
    return LocalBackend(tmp_path / "sandboxes", isolation="bwrap")


@dataclass
class DockerCase:
    backend: SandboxBackend
    image: str


@pytest.fixture
def docker_backend(request: pytest.FixtureRequest) -> DockerCase:
    """The Docker backend with the agent image; every container it makes is swept after."""
    from paperbench.sandbox._docker import DockerBackend
    from tests.sandbox.docker_fixtures import sweep

    client = request.getfixturevalue("docker_client")
    images = request.getfixturevalue("docker_images")
    request.addfinalizer(lambda: sweep(client))
    return DockerCase(DockerBackend(client=client), images["paperbench-agent"])


@dataclass
class Run:
    outcome: AgentOutcome
    run_dir: Path
    files: dict[str, str]
    git_log: list[str]


def run_agent(
    backend: SandboxBackend,
    server: FakeLLMServer,
    run_dir: Path,
    config: PapercoderConfig,
    *,
    resumed: bool = False,
    limits: AgentLimits | None = None,
    context_tokens: int = 60_000,
    paper: str | None = "# Adding one\n\nWe add one.\n",
    addendum: str | None = None,
    provider: str = "openai",
    model_name: str | None = None,
    options: dict[str, Any] | None = None,
    image: str = "host",
) -> Run:
    """Start a sandbox with the paper and an empty git repository, run the agent, read back
    the submission; everything bounded in time."""

    async def main() -> Run:
        labels = dict(TEST_LABELS) if image != "host" else {}
        spec = SandboxSpec(image=image, workdir=SUBMISSION_DIR, labels=labels)
        sb = await backend.start(spec)
        model = Model(
            ModelConfig(
                model=model_name or PROVIDERS[provider],
                options=options or {},
                base_url=server.anthropic_url if provider == "anthropic" else server.openai_url,
                api_key=SecretStr("sk-test"),
                timeout_s=10,
                max_retry_wait_s=1,
            )
        )
        writer = TranscriptWriter(run_dir / "transcript.jsonl")
        try:
            if paper is not None:
                await sb.write_file(f"{PAPER_DIR}/paper.md", paper.encode())
            if addendum is not None:
                await sb.write_file(f"{PAPER_DIR}/addendum.md", addendum.encode())
            init = await sb.exec(f"git init -q {SUBMISSION_DIR}", timeout=30)
            assert init.exit_code == 0, init.stderr
            ctx = RunContext(
                sandbox=sb,
                model=model,
                instructions="Reproduce the paper.",
                transcript=writer,
                limits=LimitTracker(limits or AgentLimits(), model.ledger),
                paper_id="adding-one",
                resumed=resumed,
                run_dir=run_dir,
            )
            agent = PapercoderAgent(config, model, context_tokens=context_tokens)
            outcome = await agent.run(ctx)
            listing = await sb.exec(
                "git ls-files; find . -maxdepth 1 -type f -printf '%P\\n'",
                timeout=30,
                workdir=SUBMISSION_DIR,
            )
            files = {}
            for name in sorted(set(listing.stdout.split())):
                data = await sb.read_file(f"{SUBMISSION_DIR}/{name}")
                files[name] = data.decode()
            log = await sb.exec("git log --format=%s", timeout=30, workdir=SUBMISSION_DIR)
            return Run(outcome, run_dir, files, log.stdout.splitlines()[::-1])
        finally:
            writer.close()
            await model.aclose()
            await sb.stop()

    async def bounded() -> Run:
        return await asyncio.wait_for(main(), timeout=120)

    return asyncio.run(bounded())


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_files_are_coded_in_dependency_order_with_the_files_so_far(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path, provider: str
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(), provider=provider)

    assert run.outcome.status == "submitted", run.outcome
    assert script.kinds == [
        "plan",
        "architecture",
        "logic",
        "config",
        "analysis utils.py",
        "analysis model.py",
        "analysis main.py",
        "coding utils.py",
        "coding model.py",
        "coding main.py",
        "reproduce.sh",
    ]
    coding = {k: p for k, p in zip(script.kinds, script.prompts, strict=True) if "coding" in k}
    assert "(none yet)" in coding["coding utils.py"]
    assert UTILS in coding["coding model.py"] and MODEL not in coding["coding model.py"]
    assert UTILS in coding["coding main.py"] and MODEL in coding["coding main.py"]
    # each coding prompt carries its own analysis, after the planning conversation (the
    # paper, the plan, the designs, config.yaml)
    assert "Analysis of main.py." in coding["coding main.py"]
    conversation = script.conversations[script.kinds.index("coding main.py")]
    for part in ("We add one.", "The plan: add one", '"task_list"', "lr: 0.1"):
        assert part in conversation
    if provider == "anthropic":
        # the planning conversation is the prompt-cached prefix: two breakpoints in it
        body = fake_llm.requests[script.kinds.index("coding main.py")].body
        assert json.dumps(body["messages"]).count('"cache_control"') == 2

    assert run.files["utils.py"] == UTILS
    assert run.files["main.py"] == MAIN_FIXED
    assert run.files["reproduce.sh"] == REPRODUCE
    assert run.files["config.yaml"] == "seed: 0\nlr: 0.1\n"
    assert run.git_log == [
        "papercoder: planning (config.yaml)",
        "papercoder: coding",
        "papercoder: reproduce.sh",
    ]

    art = run.run_dir / "papercoder"
    for name in (
        "plan.md",
        "architecture.json",
        "class_diagram.mmd",
        "sequence_diagram.mmd",
        "logic.json",
        "config.yaml",
        "analyses/model.py.md",
        "files/main.py",
        "files/reproduce.sh",
    ):
        assert (art / name).is_file(), name
    assert len(list((art / "answers").glob("*.md"))) == len(script.kinds)

    events = read_transcript(run.run_dir / "transcript.jsonl")
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    answers = [e for e in events if isinstance(e, MessageEvent) and e.message.role == "assistant"]
    assert len(calls) == len(answers) == len(script.kinds)
    assert calls[0].label == "papercoder_plan"
    noted = {e.text for e in events if isinstance(e, NoteEvent) and e.kind == "artifact"}
    assert "papercoder/plan.md" in noted and "papercoder/logic.json" in noted


def test_files_left_out_for_the_context_budget_are_named_and_noted(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(), context_tokens=30)

    assert run.outcome.status == "submitted", run.outcome
    coding = {k: p for k, p in zip(script.kinds, script.prompts, strict=True) if "coding" in k}
    # main.py depends on model.py: that one comes first, utils.py is left out and named
    assert MODEL in coding["coding main.py"]
    assert UTILS not in coding["coding main.py"]
    assert "Left out to keep this prompt short" in coding["coding main.py"]
    events = read_transcript(run.run_dir / "transcript.jsonl")
    trimmed = [e for e in events if isinstance(e, NoteEvent) and e.kind == "context_trimmed"]
    assert any(e.data["left_out"] == ["utils.py"] for e in trimmed)


def test_a_malformed_design_is_asked_again_and_the_run_goes_on(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel(architecture=["I would use three files."])
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(plan_retries=1))

    assert run.outcome.status == "submitted", run.outcome
    assert script.kinds[1:3] == ["architecture", "architecture-reask"]
    assert "no JSON object found" in script.prompts[2]
    assert run.files["main.py"] == MAIN_FIXED
    events = read_transcript(run.run_dir / "transcript.jsonl")
    assert any(isinstance(e, NoteEvent) and e.kind == "unusable_answer" for e in events)


def test_a_design_still_malformed_after_the_bound_ends_the_run_with_the_reason(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    too_many = json.dumps({**ARCHITECTURE, "files": [f"f{i}.py" for i in range(5)]})
    script = ScriptedModel(architecture=["not json", too_many])
    fake_llm.handler = script
    config = PapercoderConfig(plan_retries=1, max_files=4)
    run = run_agent(backend, fake_llm, tmp_path / "run", config)

    assert run.outcome.status == "error"
    assert run.outcome.error is not None
    assert "architecture: no usable answer after 2 attempts" in run.outcome.error
    assert "more than the 4 allowed" in run.outcome.error
    assert script.kinds == ["plan", "architecture", "architecture-reask"]
    assert "main.py" not in run.files


def test_the_repair_loop_applies_an_edit_and_the_second_run_passes(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fix = {
        "explanation": "undefined name",
        "edits": [{"file": "main.py", "search": "undefined_name", "replace": "'ok'"}],
    }
    script = ScriptedModel(main=MAIN_BROKEN, repairs=[fix])
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(repair_rounds=1))

    assert run.outcome.status == "submitted", run.outcome
    assert "reproduce.sh passed after 1 repair round" in run.outcome.summary
    assert script.kinds[-1] == "repair"
    assert "NameError" in script.prompts[-1]
    assert MAIN_BROKEN in script.prompts[-1]
    assert run.files["main.py"] == MAIN_FIXED
    assert run.files["result.txt"] == "2 ok\n"
    assert run.git_log[-1] == "papercoder: repair round 1"
    assert (run.run_dir / "papercoder" / "files" / "main.py").read_text() == MAIN_FIXED
    events = read_transcript(run.run_dir / "transcript.jsonl")
    runs = [e for e in events if isinstance(e, ToolEvent) and e.name == "reproduce"]
    assert [e.exit_code for e in runs] == [1, 0]


def test_an_edit_whose_search_text_is_missing_is_reported_back(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    wrong = {
        "edits": [
            {"file": "main.py", "search": "no such text", "replace": "x"},
            {"file": "../outside.py", "search": "", "replace": "x"},
            {"file": "ghost.py", "search": "a", "replace": "b"},
        ]
    }
    fix = {"edits": [{"file": "main.py", "search": "undefined_name", "replace": "'ok'"}]}
    script = ScriptedModel(main=MAIN_BROKEN, repairs=[wrong, fix])
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(repair_rounds=2))

    assert run.outcome.status == "submitted", run.outcome
    assert script.kinds[-2:] == ["repair", "repair"]
    assert "NOT applied" not in script.prompts[-2]
    assert "edit 1: main.py: the search text was not found in the file" in script.prompts[-1]
    assert run.files["main.py"] == MAIN_FIXED
    record = json.loads((run.run_dir / "papercoder" / "repair" / "round-01.json").read_text())
    assert record["applied"] == []
    assert record["unapplied"][1:] == [
        "edit 2: '../outside.py' must be a plain relative path inside the repository",
        "edit 3: ghost.py: no such file (use an empty search to create it)",
    ]
    events = read_transcript(run.run_dir / "transcript.jsonl")
    assert any(isinstance(e, NoteEvent) and e.kind == "edits_not_applied" for e in events)


def test_a_resumed_run_repeats_no_call_whose_result_is_saved(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run_dir = tmp_path / "run"
    run_agent(backend, fake_llm, run_dir, PapercoderConfig())
    first = len(script.kinds)
    # as if the run had died while coding main.py
    (run_dir / "papercoder" / "files" / "main.py").unlink()
    (run_dir / "papercoder" / "files" / "reproduce.sh").unlink()

    again = run_agent(backend, fake_llm, run_dir, PapercoderConfig(), resumed=True)

    assert again.outcome.status == "submitted", again.outcome
    assert script.kinds[first:] == ["coding main.py", "reproduce.sh"]
    # the new sandbox holds every file, the saved ones included
    assert again.files["utils.py"] == UTILS and again.files["config.yaml"] == "seed: 0\nlr: 0.1\n"
    assert again.files["main.py"] == MAIN_FIXED
    assert again.git_log[0] == "papercoder: files of the earlier attempt"


def test_a_step_limit_stops_the_pipeline_with_status_limit(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(
        backend, fake_llm, tmp_path / "run", PapercoderConfig(), limits=AgentLimits(steps=3)
    )
    assert run.outcome.status == "limit" and run.outcome.limit == "steps"
    assert script.kinds == ["plan", "architecture", "logic"]


def test_the_addendum_is_part_of_the_planning_prompt(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(), addendum="Use seed 7.")
    assert run.outcome.status == "submitted", run.outcome
    assert "Use seed 7." in script.prompts[0] and "We add one." in script.prompts[0]


def test_without_a_paper_the_run_ends_with_an_error_and_no_call(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run = run_agent(backend, fake_llm, tmp_path / "run", PapercoderConfig(), paper=None)
    assert run.outcome.status == "error"
    assert run.outcome.error is not None and "/home/paper/paper.md" in run.outcome.error
    assert script.kinds == []


def test_a_saved_design_that_no_longer_fits_the_config_is_an_error_naming_the_file(
    backend: LocalBackend, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    script = ScriptedModel()
    fake_llm.handler = script
    run_dir = tmp_path / "run"
    run_agent(backend, fake_llm, run_dir, PapercoderConfig())
    calls = len(script.kinds)

    again = run_agent(backend, fake_llm, run_dir, PapercoderConfig(max_files=2), resumed=True)

    assert again.outcome.status == "error"
    assert again.outcome.error is not None
    assert "architecture.answer.md: the saved answer does not fit" in again.outcome.error
    assert len(script.kinds) == calls


@pytest.mark.docker
def test_the_repair_loop_in_a_docker_sandbox(
    docker_backend: DockerCase, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fix = {"edits": [{"file": "main.py", "search": "undefined_name", "replace": "'ok'"}]}
    script = ScriptedModel(main=MAIN_BROKEN, repairs=[fix])
    fake_llm.handler = script
    run = run_agent(
        docker_backend.backend,
        fake_llm,
        tmp_path / "run",
        PapercoderConfig(repair_rounds=1),
        image=docker_backend.image,
    )
    assert run.outcome.status == "submitted", run.outcome
    assert "NameError" in script.prompts[-1]
    assert run.files["result.txt"] == "2 ok\n"
    assert run.git_log[-1] == "papercoder: repair round 1"
