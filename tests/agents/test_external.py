"""External agents end to end: the real Claude Code and Codex CLI binaries (pinned in the
paperbench-agent-cli image) run in a real Docker sandbox under ``network=filtered``, reach the
run's model gateway on the host as a host service, and the gateway forwards to the project's
fake server (streaming, refusing what the real APIs refuse) with the host's key.

Checked: the submission each writes with its own tools, the transcript (their tool calls and
outputs, a model call per request with its usage), the cost ledger, that the provider saw the
real key and never the run's token, that the agent never saw the key, the budget cap stopping
a run, the step limit stopping one from outside, a run killed with SIGKILL mid-way and
resumed to the end, and, through the real CLI, a key the provider rejects failing the run
(nothing graded) until the resume puts it on the leaderboard."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import AgentLimits, load_agent, read_transcript
from paperbench.agents._monitor import monitor_run, paper_rules
from paperbench.agents._rollout import rollout
from paperbench.agents._rollout_plan import RolloutOptions
from paperbench.agents._transcript import EndEvent, ModelCallEvent, NoteEvent, ToolEvent
from paperbench.llm import ModelConfig, read_cost_journal
from paperbench.papers import PaperSource
from paperbench.sandbox import NetworkPolicy, SandboxConfig
from paperbench.sandbox._gc import find_orphans, reap
from paperbench.sandbox._images import ensure_images
from paperbench.testing import FakeLLMServer, FakeReply, FakeToolCall, Fault, RecordedRequest
from tests.sandbox.docker_fixtures import docker_client  # noqa: F401

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
IMAGE = "paperbench-agent-cli"
ANTHROPIC_KEY = "sk-ant-host-key-never-in-the-sandbox"
OPENAI_KEY = "sk-host-key-never-in-the-sandbox"
SCRIPT = "echo replicated > result.txt\n"


@pytest.fixture(scope="module")
def agent_image(docker_client: Any) -> str:  # noqa: F811
    return ensure_images((IMAGE,), client=docker_client)[IMAGE]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    with FakeLLMServer() as fake:
        yield fake


def _tools(request: RecordedRequest) -> list[str]:
    tools = request.body.get("tools") or []
    return [str((t.get("function") or {}).get("name") or t.get("name") or t["type"]) for t in tools]


def _answered(request: RecordedRequest) -> bool:
    sent = json.dumps(request.body.get("messages") or request.body.get("input") or [])
    return "tool_result" in sent or "call_output" in sent or '"role": "tool"' in sent


def _builder(first: FakeToolCall | None = None) -> Callable[[RecordedRequest], FakeReply]:
    """The scripted model: write reproduce.sh with the client's own tool, then finish."""

    def handler(request: RecordedRequest) -> FakeReply:
        names = _tools(request)
        if _answered(request) and names == ["bash"]:  # mini-SWE-agent ends with a command
            end = FakeToolCall("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
            return FakeReply(text="done", tool_calls=(end,))
        if _answered(request):
            return FakeReply(text="done: reproduce.sh is written")
        if first is not None:
            call = first
        elif "Write" in names:  # Claude Code
            path = "/home/submission/reproduce.sh"
            call = FakeToolCall("Write", {"file_path": path, "content": SCRIPT})
        elif "exec_command" in names:  # Codex
            command = f"printf '{SCRIPT.strip()}\\n' > /home/submission/reproduce.sh"
            call = FakeToolCall("exec_command", {"cmd": command})
        elif names == ["bash"]:  # mini-SWE-agent
            command = f"printf '{SCRIPT.strip()}\\n' > /home/submission/reproduce.sh"
            call = FakeToolCall("bash", {"command": command})
        else:
            return FakeReply(text=f"no tool to write with among {names}")
        return FakeReply(text="Writing reproduce.sh.", tool_calls=(call,))

    return handler


def _rollout(
    out: Path, agent: str, server: FakeLLMServer, *, resume: bool = False, **limits: Any
) -> Any:
    loaded = load_agent(agent)  # its catalog's model
    url = server.anthropic_url if agent == "claude-code" else server.openai_url
    model = ModelConfig(model=str(loaded.config.model), base_url=url)
    return asyncio.run(
        rollout(
            PaperSource(repo_root=REPO).load("calibration-binning"),
            loaded,
            options=RolloutOptions(
                model_config=model,
                sandbox=SandboxConfig(backend="docker"),
                network=NetworkPolicy.FILTERED,
                snapshot_every_s=None,
                limits=AgentLimits(wall_time_s=limits.pop("wall_time_s", 600), **limits),
            ),
            out_dir=out,
            resume=resume,
        )
    )


def _submitted(out: Path) -> dict[str, str]:
    with tarfile.open(out / "submission.tar.gz") as tar:
        return {
            m.name.removeprefix("./"): tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile() and not m.name.removeprefix("./").startswith(".git/")
        }


@pytest.mark.parametrize(
    ("agent", "tool", "key_header"),
    [
        ("claude-code", "Write", "x-api-key"),
        ("codex", "shell", "authorization"),
        ("mini-swe-agent", "bash", "authorization"),
    ],
)
def test_a_cli_agent_builds_a_submission_behind_the_gateway(
    agent: str, tool: str, key_header: str, agent_image: str, server: FakeLLMServer, tmp_path: Path
) -> None:
    server.handler = _builder()
    out = tmp_path / "run"
    result = _rollout(out, agent, server)
    assert result.status.status == "submitted", result.status.error
    assert _submitted(out)["reproduce.sh"].strip() == SCRIPT.strip()

    # the provider saw the host's key on every request, streamed; never the run's token
    assert len(server.requests) == 2
    assert all(r.stream == (agent != "mini-swe-agent") for r in server.requests)  # litellm: JSON
    key = ANTHROPIC_KEY if agent == "claude-code" else OPENAI_KEY
    for request in server.requests:
        assert key in request.headers[key_header]
    token = (out / "gateway" / "gateway.jsonl").read_text()
    assert key not in token  # nor is the key in the gateway's own record
    # the agent never had the key: not in its output, its transcript or its sandbox's env
    for name in ("agent_stdout.jsonl", "agent_stderr.log", "transcript.jsonl"):
        assert key not in (out / name).read_text(), name

    events = read_transcript(out / "transcript.jsonl")
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    assert len(calls) == 2 and all(c.label == "gateway" and c.usage.input_tokens for c in calls)
    tools = [e for e in events if isinstance(e, ToolEvent)]
    assert [t.name for t in tools] == [tool]
    # no error of its own (Codex: none for its model, which it knows: no fallback metadata)
    assert [e.text for e in events if isinstance(e, NoteEvent) and e.kind == "agent_error"] == []
    ledger = [r for r in read_cost_journal(out / "costs.jsonl") if r.label == "gateway"]
    assert len(ledger) == 2 and all(r.outcome == "ok" for r in ledger)
    assert (ledger[0].cost_usd or 0) > 0
    assert result.status.costs.sent == 2
    # the sandbox reached the gateway, by name, through its egress proxy, and the provider's
    # own hosts not at all
    log = [json.loads(x) for x in (out / "network.jsonl").read_text().splitlines()]
    gateway = [e for e in log if e["host"] == "model-gateway.paperbench"]
    assert len(gateway) >= 2 and all(e["rule"] == "host_service" for e in gateway)
    vendors = [e for e in log if e["host"].endswith(("openai.com", "chatgpt.com", "anthropic.com"))]
    assert all(e["verdict"] == "blocked" for e in vendors), vendors
    # refused by the harness's own rule, which the monitor lists apart: never a blacklist hit
    # (Codex asks chatgpt.com for its plugins at start)
    assert vendors or agent != "codex", log
    assert all(e["reason"] == "harness blacklist" for e in vendors), vendors
    paper = PaperSource(repo_root=REPO).load("calibration-binning")
    report = monitor_run(out, paper_rules(paper)[0], policy="disqualify")
    assert (report.verdict, report.harness_refusals_total) == ("clean", len(vendors)), report


def test_the_budget_cap_stops_the_agent_at_the_gateway(
    agent_image: str, server: FakeLLMServer, tmp_path: Path
) -> None:
    server.handler = _builder()
    out = tmp_path / "run"
    # the first call (a 37k-token prompt written to Anthropic's cache) costs about $0.14
    result = _rollout(out, "claude-code", server, dollars=0.05)
    assert (result.status.status, result.status.limit) == ("limit", "dollars")
    assert len(server.requests) == 1  # the second call never left the gateway
    records = read_cost_journal(out / "costs.jsonl")
    assert [r.outcome for r in records if r.label == "gateway"][-1] == "budget_exhausted"
    end = [e for e in read_transcript(out / "transcript.jsonl") if isinstance(e, EndEvent)][-1]
    assert end.limit == "dollars"


def test_the_step_limit_stops_the_agent_from_outside(
    agent_image: str, server: FakeLLMServer, tmp_path: Path
) -> None:
    # the agent keeps running commands, one model call each
    server.handler = lambda request: FakeReply(
        tool_calls=(FakeToolCall("Bash", {"command": "sleep 1; echo again"}),)
    )
    out = tmp_path / "run"
    started = time.monotonic()
    result = _rollout(out, "claude-code", server, steps=3)
    assert (result.status.status, result.status.limit) == ("limit", "steps")
    assert 3 <= len(server.requests) <= 5  # stopped within a poll of its third call
    assert time.monotonic() - started < 120


@pytest.mark.parametrize(
    ("agent", "hang"),
    [
        ("claude-code", FakeToolCall("Bash", {"command": "sleep 600", "timeout": 600000})),
        ("codex", FakeToolCall("exec_command", {"cmd": "sleep 600", "yield_time_ms": 600000})),
    ],
)
def test_a_killed_run_resumes_in_the_agents_own_session_to_the_end(
    agent: str,
    hang: FakeToolCall,
    agent_image: str,
    server: FakeLLMServer,
    tmp_path: Path,
    docker_client: Any,  # noqa: F811
) -> None:
    out = tmp_path / "run"
    # the first session hangs in a long command; the process running it gets SIGKILL
    server.handler = _builder(hang)
    code = f"""
import asyncio, sys
sys.path.insert(0, {str(REPO)!r})
from tests.agents.test_external import _rollout
from paperbench.testing import FakeLLMServer
class Server:  # the fake server's URLs, from the parent test
    anthropic_url = {server.anthropic_url!r}
    openai_url = {server.openai_url!r}
_rollout(__import__("pathlib").Path({str(out)!r}), {agent!r}, Server())
"""
    env = {**os.environ, "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "OPENAI_API_KEY": OPENAI_KEY}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        # the command runs in the sandbox once the session was saved after the first call
        saved = out / "agent_session"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if server.requests and saved.is_dir() and any(saved.glob("*.tar.gz")):
                break
            time.sleep(0.2)
        assert proc.poll() is None and server.requests and any(saved.glob("*.tar.gz"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (out / "status.json").exists()  # the run stays resumable
    reap(docker_client, find_orphans(docker_client))  # the killed run's sandbox and network
    asked_before = len(server.requests)

    # the resumed session's conversation may hold the first one's interrupted call and its
    # result: answered means "reproduce.sh was written", not "a tool result is there"
    write = _builder()

    def handler(request: RecordedRequest) -> FakeReply:
        body = json.dumps(request.body.get("messages") or request.body.get("input") or [])
        if "replicated" in body:
            return FakeReply(text="done: reproduce.sh is written")
        fresh = {**request.body, "messages": [], "input": []}  # as if nothing was done yet
        return write(dataclasses.replace(request, body=fresh))

    server.handler = handler
    result = _rollout(out, agent, server, resume=True)
    assert result.status.status == "submitted", result.status.error
    assert _submitted(out)["reproduce.sh"].strip() == SCRIPT.strip()
    # the new session is Claude Code's own, continued (its ~/.claude put back): it holds the
    # first session's conversation, then the note of the restart
    body = server.requests[asked_before].body
    turns = body.get("messages") or body.get("input") or []
    texts = [json.dumps(m.get("content")) for m in turns if m.get("role") == "user"]
    first = next(i for i, t in enumerate(texts) if "research paper to replicate" in t)
    note = next(i for i, t in enumerate(texts) if "this is a new session" in t)
    assert first < note  # the task came in the first session; the note is the new turn
    assert "research paper to replicate" not in texts[note] and "Time left" in texts[note]
    events = read_transcript(out / "transcript.jsonl")
    assert len([e for e in events if e.type == "start"]) == 2
    assert [e for e in events if getattr(e, "kind", None) == "agent_session_restored"]


def test_a_rejected_key_fails_a_cli_agents_run_and_the_resume_puts_it_on_the_leaderboard(
    agent_image: str, server: FakeLLMServer, tmp_path: Path
) -> None:
    """`paperbench run --agent codex` through the real CLI whose provider first answers every
    call with a 401: Codex retries, then gives up. The gateway's record of the upstream's
    answers (not what Codex said) fails the run with the model layer's reason, Codex's own
    words beside it, nothing graded; its errors are in the transcript. With the key fixed, the
    resume runs rollout, monitor, reproduction and grading (the dummy judge); its row and costs
    are the gateway's."""
    from typer.testing import CliRunner

    from paperbench.cli import app
    from paperbench.gateway import GatewayCall
    from paperbench.runs import RunOutcome

    server.handler = lambda request: Fault.http(401, "Incorrect API key provided")
    runs = tmp_path / "runs"
    args = ["run", "--agent", "codex", "--agent-base-url", server.openai_url]
    args += ["--papers", "calibration-binning", "--judge", "dummy", "--sandbox", "docker"]
    # the default monitor policy (disqualify): Codex's own refused traffic is not a hit
    result = CliRunner().invoke(app, [*args, "--runs-dir", str(runs), "--group", "g"])
    assert result.exit_code == 3, result.output  # some runs failed
    run = runs / "g" / "calibration-binning" / "codex" / "seed-0"
    outcome = RunOutcome.model_validate_json((run / "outcome.json").read_text())
    assert (outcome.status, outcome.failed_stage) == ("failed", "rollout"), outcome
    reason = outcome.reason or ""
    assert (
        "openai/gpt-5.5: the API key was rejected (HTTP 401: Incorrect API key provided); "
        "check OPENAI_API_KEY (codex: unexpected status 401 Unauthorized: Incorrect API key"
    ) in reason
    assert "Reading additional input" not in reason and "WARNING" not in reason  # its stderr
    assert "the API key was rejected" in " ".join(result.output.split())
    assert not (run / "status.json").exists() and not (run / "grading").exists()
    calls = [
        GatewayCall.model_validate_json(line)
        for line in (run / "gateway" / "gateway.jsonl").read_text().splitlines()
    ]
    assert len(calls) == len(server.requests) > 1  # Codex's own retries, each one recorded
    assert {(c.status, c.outcome) for c in calls} == {(401, "failed")}
    events = read_transcript(run / "transcript.jsonl")
    errors = [e for e in events if isinstance(e, NoteEvent) and e.kind == "agent_error"]
    assert errors[-1].data["event"] == "turn.failed" and "401 Unauthorized" in errors[-1].text

    server.handler = _builder()  # the key fixed: the provider answers
    result = CliRunner().invoke(app, ["run", "--resume", str(runs / "g")])
    assert result.exit_code == 0, result.output
    outcome = RunOutcome.model_validate_json((run / "outcome.json").read_text())
    assert outcome.status == "scored", outcome
    assert _submitted(run)["reproduce.sh"].strip() == SCRIPT.strip()
    # a step is a model call: the first session's, then the resumed one's
    status = json.loads((run / "status.json").read_text())
    assert status["steps"] == len(server.requests) == len(calls) + 2
    summary = json.loads((runs / "g" / "summary.json").read_text())
    [row] = summary["agents"]
    assert row["agent"] == "codex" and row["by_status"]["scored"] == 1
    rollout = row["costs"]["by_stage"]["rollout"]
    assert rollout["sent"] == len(server.requests) == len(calls) + 2  # the 401s, then 2 answers
    assert rollout["cost_usd"] > 0
    assert "codex" in (runs / "g" / "report" / "index.html").read_text()
