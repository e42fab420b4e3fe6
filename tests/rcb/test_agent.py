"""``paperbench rcb run --mode agent`` end to end: the real CLI, the project's real tool loop
against the fake server through the real OpenAI SDK, a real sandbox per agent and per test.

The scripted model looks around (what it was shown is checked: the masked file with its
markers, no test, no reference, no tag), writes code between the markers with the python
tool, and submits; one agent writes the right code and also wrecks the rest of the file (only
the snippet's place is kept), one removes a marker (``no_code``), one writes wrong code
(``assertion``), one never submits (stopped by ``--max-steps``). A resume pays for nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.agents import read_transcript
from paperbench.agents._transcript import ToolEvent
from paperbench.cli import app
from paperbench.rcb._agent import agent_masked, begin_marker, end_marker, hidden, take_answer
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._models import RcbSummary, SampleResult
from paperbench.testing.fake_llm import FakeLLMServer, FakeReply, FakeToolCall, RecordedRequest
from tests.rcb.broken import PSET, copy_pset, reference_bodies

pytestmark = pytest.mark.slow

runner = CliRunner()
PAPER = "softmax-temperature"
ASKED = re.compile(r'is missing: "([^"]+)"')
WRECK = "tempered softmax"
"""Right code, and every other function of the file deleted."""
NO_MARKER = "entropy"
WRONG = "scale logits"
IDLE = "stable exponent"
"""Only looks around and never submits: --max-steps ends it."""


def _write_between(path: str, begin: str, end: str, body: str, wreck: bool = False) -> str:
    """Python for the agent's python tool: put ``body`` between the marker lines."""
    return (
        "lines = open({p!r}).read().split('\\n')\n"
        "b = next(i for i, x in enumerate(lines) if x.strip() == {b!r})\n"
        "e = next(i for i, x in enumerate(lines) if x.strip() == {e!r})\n"
        "lines[b + 1 : e] = {body!r}.split('\\n')\n"
        "{wreck}"
        "open({p!r}, 'w').write('\\n'.join(lines))\n"
        "print('written', e - b - 1, 'lines replaced')\n"
    ).format(
        p=path,
        b=begin,
        e=end,
        body=body,
        wreck=f"e = next(i for i, x in enumerate(lines) if x.strip() == {end!r})\n"
        "lines = lines[: e + 1] + ['# the rest is gone']\n"
        if wreck
        else "",
    )


def _system(request: RecordedRequest) -> str:
    return str(request.body["messages"][0]["content"])


def _agent(bodies: dict[str, str]) -> Callable[[RecordedRequest], FakeReply]:
    def answer(request: RecordedRequest) -> FakeReply:
        match = ASKED.search(_system(request))
        assert match is not None, _system(request)[-800:]
        name = match.group(1)
        step = sum(m["role"] == "assistant" for m in request.body["messages"])
        path = f"/home/rcb/{PAPER}/softmax.py"
        begin = f'# >>> BEGIN missing code "{name}" (keep this line)'
        end = f'# <<< END missing code "{name}" (keep this line)'
        if step == 0:
            return FakeReply(
                text="Looking around.",
                tool_calls=(FakeToolCall("bash", {"command": f"ls -a /home/rcb/{PAPER}"}),),
            )
        if step == 1:
            return FakeReply(tool_calls=(FakeToolCall("bash", {"command": f"cat {path}"}),))
        if name == IDLE:
            return FakeReply(tool_calls=(FakeToolCall("bash", {"command": "pwd"}),))
        if step == 2:
            if name == NO_MARKER:
                code = f"src = open({path!r}).read().replace({end!r}, '')\n"
                code += f"open({path!r}, 'w').write(src)\n"
            else:
                body = "    z = np.asarray(logits) * 0.0" if name == WRONG else bodies[name]
                code = _write_between(path, begin, end, body, wreck=name == WRECK)
            return FakeReply(tool_calls=(FakeToolCall("python", {"code": code}),))
        return FakeReply(tool_calls=(FakeToolCall("submit", {"summary": "done"}),))

    return answer


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with FakeLLMServer() as fake:
        fake.handler = _agent(reference_bodies())
        yield fake


def _args(root: Path, server: FakeLLMServer, *more: str) -> list[str]:
    return [
        *("rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o", "--mode", "agent"),
        *("--base-url", server.openai_url, "--sandbox", "local", "--papers", PAPER, *more),
    ]


def _tool_outputs(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.body["messages"] if m["role"] == "tool"]


def test_agents_fill_the_gap_with_tools_and_only_the_snippets_place_is_graded(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        _args(root, server, "--out", str(out), "--max-steps", "5"),
        env={"OPENAI_API_KEY": "sk-test"},
    )
    assert result.exit_code == 0, result.output
    summary = RcbSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.mode == "agent" and summary.overall.problems == 4
    samples = {
        p.parent.name: SampleResult.model_validate_json(p.read_text())
        for p in (out / "problems" / PAPER).glob("*/sample-0.json")
    }
    assert samples[WRECK].outcome.passed, samples[WRECK].outcome
    assert samples[NO_MARKER].outcome.error_class == "no_code"
    assert "END marker" in (samples[NO_MARKER].outcome.detail or "")
    assert samples[WRONG].outcome.error_class == "assertion"
    assert samples[IDLE].outcome.error_class == "no_code"  # the TODO was never replaced
    idle = json.loads((out / "problems" / PAPER / IDLE / "answer-0.json").read_text())
    assert idle["status"] == "limit" and idle["limit"] == "steps" and idle["steps"] == 5

    # what the agents were shown: the masked file with its markers; no test, no reference
    # file, no tag, no reference code of the problem itself
    first = {ASKED.search(_system(r)).group(1): r for r in server.requests}  # type: ignore[union-attr]
    for name, request in first.items():
        assert f'# >>> BEGIN missing code "{name}" (keep this line)' in _system(request)
    listing_seen = [out for r in server.requests for out in _tool_outputs(r) if "softmax.py" in out]
    assert listing_seen
    for seen in listing_seen:
        assert "paper2code_test.py" not in seen and "softmax_ref.py" not in seen
        assert "paper2code" not in seen.replace("paper2code_paper.tex", "")
    cat_of_idle = [
        o for r in server.requests for o in _tool_outputs(r) if "def softmax" in o and IDLE in o
    ]
    assert cat_of_idle and all("e = np.exp(z)" not in o for o in cat_of_idle)

    # the transcript and the costs are kept per sample
    events = read_transcript(out / "problems" / PAPER / WRONG / "agent-0" / "transcript.jsonl")
    tools = [e.name for e in events if isinstance(e, ToolEvent)]
    assert tools == ["bash", "bash", "python", "submit"]
    costs = [json.loads(x) for x in (out / "costs.jsonl").read_text().splitlines()]
    assert len(costs) == len(server.requests) == 4 + 4 + 4 + 5 + 0  # wreck/no-marker/wrong: 4
    assert {c["stage"] for c in costs} == {"rcb-agent"}

    sent = len(server.requests)
    again = runner.invoke(
        app,
        _args(root, server, "--resume", str(out), "--max-steps", "5"),
        env={"OPENAI_API_KEY": "sk-test"},
    )
    assert again.exit_code == 0, again.output
    assert len(server.requests) == sent  # every agent's answer was kept


def test_a_limit_flag_without_agent_mode_is_refused(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "rcb",
            "run",
            "--rcb-dir",
            str(PSET.parent),
            "--model",
            "openai/gpt-4o",
            "--max-steps",
            "3",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--max-steps" in result.output and "--mode agent" in result.output


def test_the_agents_file_keeps_only_what_is_between_the_markers() -> None:
    problems = load_problem_set(PSET.parent)
    snippet = next(s for s in problems.snippets if s.name == "scale logits")
    text = (problems.paper(PAPER).folder / snippet.file).read_text()
    masked = agent_masked(text, snippet)
    assert "paper2code" not in masked and "z = z / temperature" not in masked
    assert masked.count(begin_marker(snippet)) == 1 and masked.count(end_marker(snippet)) == 1
    code, why = take_answer(masked, snippet)
    assert code is None and why == "the agent wrote no code between the marker lines"
    done = masked.replace(
        f"{begin_marker(snippet)}\n", f"{begin_marker(snippet)}\n    z = z / temperature\n"
    )
    code, why = take_answer(done, snippet)
    assert why is None and code is not None
    assert code.splitlines()[0] == "    z = z / temperature"  # the TODO comments follow
    assert take_answer(done.replace(begin_marker(snippet), "# gone"), snippet)[0] is None


def test_the_sandbox_hides_the_test_and_every_reference_copy(tmp_path: Path) -> None:
    problems = load_problem_set(PSET.parent)
    paper = problems.paper(PAPER)
    assert hidden(paper, with_paper=True) == ["paper2code_test.py", "softmax_ref.py"]
    assert "paper2code_paper.tex" in hidden(paper, with_paper=False)


def test_agents_whose_model_cannot_be_called_fail_saying_why(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    args = ["rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o", "--mode", "agent"]
    args += ["--papers", PAPER, "--out", str(tmp_path / "out"), "--sandbox", "local"]
    result = runner.invoke(app, args, env={"OPENAI_API_KEY": None})  # no key, no base URL
    assert result.exit_code == 1, result.output
    assert "OPENAI_API_KEY" in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "out" / "problems").rglob("answer-*.json"))
    assert not (tmp_path / "out" / "summary.json").exists()
