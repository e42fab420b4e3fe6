"""The real agent CLIs (Claude Code, Codex CLI) run against the fake server with validation
on: every request they send is accepted, they read its streams, run the scripted tool call
and exit 0. The binaries are the pinned ones of the paperbench-agent-cli image, run in a
container on the host's network (the fake server listens on the host's loopback); through the
project's sandbox and model gateway they are tested in tests/agents/test_external.py.

``data/claude_stream_json.jsonl`` and ``data/codex_exec_json.jsonl`` are what the two CLIs
printed in such a run (``--output-format stream-json --verbose``; ``exec --json``).
``data/mini_swe_agent_trajectory.json`` is the trajectory mini-SWE-agent 2.4.6 wrote in the
paperbench-agent-cli image against the fake server (``mini --agent-class default -m
openai/gpt-4o -t TASK -c mini.yaml ... -o FILE``: a bash tool call writes a file, the next runs
``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, RecordedRequest

DATA = Path(__file__).parent / "data"
IMAGE = "paperbench-agent-cli"
TIMEOUT = 180


def _names(request: RecordedRequest) -> list[str]:
    return [str(t.get("name") or t.get("type")) for t in request.body.get("tools") or []]


def _answered(request: RecordedRequest) -> bool:
    sent = json.dumps(request.body.get("messages") or request.body.get("input") or [])
    return "tool_result" in sent or "call_output" in sent


def _writer(target: Path, tool: str = "") -> Any:
    """A handler: the first turn calls the client's own tool to write ``target`` (Codex:
    ``tool``), with signed or encrypted reasoning that must come back unchanged; then a last
    answer."""

    def handler(request: RecordedRequest) -> FakeReply:
        names = _names(request)
        if _answered(request):
            return FakeReply(text="done")
        if "Write" in names:
            call = FakeToolCall("Write", {"file_path": str(target), "content": "hello\n"})
        elif tool == "apply_patch" and tool in names:
            patch = f"*** Begin Patch\n*** Add File: {target.name}\n+hello\n*** End Patch\n"
            call = FakeToolCall("apply_patch", raw_arguments=patch, custom=True)
        elif "exec_command" in names:
            call = FakeToolCall("exec_command", {"cmd": f"echo hello > {target}"})
        else:
            return FakeReply(text="no tool to write with")
        return FakeReply(text="Writing it.", reasoning="The user wants a file.", tool_calls=(call,))

    return handler


@pytest.fixture(scope="module")
def cli_image() -> str:
    """The image with the pinned CLIs (built when missing)."""
    from paperbench.sandbox._images import ensure_images

    return ensure_images((IMAGE,))[IMAGE]


def _run(
    command: list[str], env: dict[str, str], cwd: Path, image: str
) -> subprocess.CompletedProcess[str]:
    """``command`` in ``image`` on the host's network, ``cwd``'s parent mounted at its path."""
    home = cwd.parent / "home"
    home.mkdir(exist_ok=True)
    flags = [f"--env={k}={v}" for k, v in {"HOME": str(home), **env}.items()]
    mount = f"--volume={cwd.parent}:{cwd.parent}"
    docker = ["docker", "run", "--rm", "--network=host", mount, f"--workdir={cwd}", *flags]
    return subprocess.run(
        [*docker, image, *command],
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _check(server: FakeLLMServer, result: subprocess.CompletedProcess[str], target: Path) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert target.read_text() == "hello\n"
    assert server.handler_errors == []
    assert len(server.requests) >= 2 and all(r.stream for r in server.requests)


@pytest.mark.slow
@pytest.mark.docker
def test_claude_code_against_the_fake_server(
    fake_llm: FakeLLMServer, tmp_path: Path, cli_image: str
) -> None:
    binary = "claude"
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    fake_llm.handler = _writer(target)
    env = {
        "ANTHROPIC_BASE_URL": fake_llm.anthropic_url,
        "ANTHROPIC_API_KEY": "test",
        "IS_SANDBOX": "1",  # lets --dangerously-skip-permissions run as root
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    command = [binary, "-p", "write hello.txt", "--output-format", "stream-json", "--verbose"]
    result = _run([*command, "--dangerously-skip-permissions"], env, work, cli_image)
    _check(fake_llm, result, target)
    assert {"Bash", "Write", "Edit", "Read"} <= set(_names(fake_llm.requests[0]))
    events = _events(result.stdout)
    sample = _events((DATA / "claude_stream_json.jsonl").read_text())
    for run in (events, sample):
        assert run[0]["type"] == "system" and run[0]["subtype"] == "init"
        assert run[-1]["type"] == "result" and run[-1]["is_error"] is False
        uses = [
            block
            for event in run
            if event["type"] == "assistant"
            for block in event["message"]["content"]
            if block["type"] == "tool_use"
        ]
        assert [u["name"] for u in uses] == ["Write"]


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["exec_command", "apply_patch"])
@pytest.mark.docker
def test_codex_against_the_fake_server(
    fake_llm: FakeLLMServer, tmp_path: Path, tool: str, cli_image: str
) -> None:
    binary = "codex"
    work = tmp_path / "work"
    work.mkdir()
    target = work / "hello.txt"
    fake_llm.handler = _writer(target, tool)
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "fake"\n\n[model_providers.fake]\n'
        f'name = "fake"\nbase_url = "{fake_llm.openai_url}"\n'
        'env_key = "FAKE_OPENAI_API_KEY"\nwire_api = "responses"\n'
    )
    env = {"CODEX_HOME": str(home), "FAKE_OPENAI_API_KEY": "test"}
    command = [binary, "exec", "--json", "--skip-git-repo-check"]
    result = _run(
        [*command, "--dangerously-bypass-approvals-and-sandbox", "write hello.txt"],
        env,
        work,
        cli_image,
    )
    _check(fake_llm, result, target)
    first = fake_llm.requests[0]
    assert first.protocol == "responses"
    assert {"exec_command", "apply_patch"} <= set(_names(first))
    assert first.body["store"] is False
    assert any(i.get("type") == "reasoning" for i in fake_llm.requests[1].body["input"])
    for run in (_events(result.stdout), _events((DATA / "codex_exec_json.jsonl").read_text())):
        kinds = [e["type"] for e in run]
        assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed"
        items = [e["item"]["type"] for e in run if e["type"] == "item.completed"]
        assert items[-1] == "agent_message"
    done = [e["item"]["type"] for e in _events(result.stdout) if e["type"] == "item.completed"]
    assert ("file_change" if tool == "apply_patch" else "command_execution") in done


@pytest.mark.docker
def test_the_catalogs_codex_model_is_one_the_pinned_codex_knows(cli_image: str) -> None:
    """The image's Codex is the pinned version, and the codex agent's model is in the model
    catalogue that Codex ships (``codex debug models --bundled``): a model not there runs on
    fallback metadata, with a warning. The model has a price, so its calls have a cost."""
    from paperbench.agents import load_agent
    from paperbench.llm import PriceTable
    from paperbench.sandbox._images import BUILD_ARGS

    docker = ["docker", "run", "--rm", "--network=none", cli_image]
    script = "codex --version && codex debug models --bundled"
    result = subprocess.run(
        [*docker, "bash", "-c", script], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    version, _, listing = result.stdout.partition("\n")
    assert version == f"codex-cli {BUILD_ARGS[IMAGE]['CODEX_VERSION']}"
    known = {m["slug"] for m in json.loads(listing)["models"] if m["supported_in_api"]}
    model = load_agent("codex").config.model
    assert model is not None and model.split("/", 1)[1] in known, (model, sorted(known))
    assert PriceTable.load().lookup(model) is not None


def test_the_mini_swe_agent_sample_trajectory() -> None:
    """What a reader of mini-SWE-agent's trajectories can count on (format 1.1)."""
    traj = json.loads((DATA / "mini_swe_agent_trajectory.json").read_text())
    assert set(traj) == {"info", "messages", "trajectory_format"}
    assert traj["trajectory_format"] == "mini-swe-agent-1.1"
    info = traj["info"]
    assert info["mini_version"] == "2.4.6"
    assert info["exit_status"] == "Submitted" and info["submission"] == ""
    assert info["model_stats"]["api_calls"] == 2 and info["model_stats"]["instance_cost"] > 0
    assert info["config"]["agent_type"] == "minisweagent.agents.default.DefaultAgent"
    messages = traj["messages"]
    roles = ["system", "user", "assistant", "tool", "assistant", "exit"]
    assert [m["role"] for m in messages] == roles
    first = messages[2]
    assert first["tool_calls"][0]["function"]["name"] == "bash"
    assert first["extra"]["actions"] == [
        {"command": "echo hello > hello.txt && cat hello.txt", "tool_call_id": "call_1_0"}
    ]
    assert first["extra"]["response"]["usage"]["prompt_tokens"] > 0
    assert messages[3]["tool_call_id"] == "call_1_0" and messages[3]["extra"]["returncode"] == 0
    assert messages[-1]["extra"] == {"exit_status": "Submitted", "submission": ""}
