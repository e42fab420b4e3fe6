"""``paperbench rcb run`` end to end: the real CLI, the real OpenAI SDK against the fake
server, each answer graded by the paper's test in a real sandbox; what the model was shown,
the scores, and a resume that pays for nothing again."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._models import RcbSummary
from paperbench.rcb._published import load_published
from paperbench.testing.fake_llm import FakeLLMServer, FakeReply, RecordedRequest
from tests.rcb.broken import PSET, copy_pset, reference_bodies

pytestmark = pytest.mark.slow

runner = CliRunner()
ASKED = re.compile(r'The missing part is "([^"]+)"')
NO_CODE = "entropy"
"""The problem the fake model answers in prose only."""
WRONG = "scale logits"
"""The problem it answers with code that runs and is wrong."""


def _user_text(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content", "")) for m in request.body.get("messages", []))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with FakeLLMServer() as fake:
        fake.handler = _answers(reference_bodies())
        yield fake


def _answers(bodies: dict[str, str]) -> Callable[[RecordedRequest], FakeReply]:

    def answer(request: RecordedRequest) -> FakeReply:
        name = ASKED.search(_user_text(request))
        assert name is not None, _user_text(request)[-500:]
        if name.group(1) == NO_CODE:
            return FakeReply(text="The entropy is minus the sum of p log p.")
        if name.group(1) == WRONG:
            return FakeReply(text="```python\nz = np.asarray(logits, dtype=float)\n```")
        return FakeReply(text=f"Here it is:\n```python\n{bodies[name.group(1)]}\n```\n")

    return answer


def _run(root: Path, server: FakeLLMServer, out: Path, *more: str) -> RcbSummary:
    args = ["rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o"]
    args += ["--base-url", server.openai_url, "--out", str(out), "--sandbox", "local", *more]
    result = runner.invoke(app, args, env={"OPENAI_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.output
    return RcbSummary.model_validate_json((out / "summary.json").read_text())


def _resume(root: Path, server: FakeLLMServer, out: Path) -> RcbSummary:
    args = ["rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o"]
    args += ["--base-url", server.openai_url, "--resume", str(out), "--sandbox", "local"]
    result = runner.invoke(app, args, env={"OPENAI_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.output
    return RcbSummary.model_validate_json((out / "summary.json").read_text())


def test_a_run_grades_every_problem_and_a_resume_pays_nothing_again(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    out = tmp_path / "out"
    summary = _run(root, server, out)
    problems = load_problem_set(root)
    assert len(server.requests) == len(problems.snippets) == 8
    assert summary.overall.problems == 8 and summary.overall.lines == 19
    assert summary.errors == {"no_code": 1, "assertion": 1}, summary.errors
    failed_lines = sum(s.code_lines for s in problems.snippets if s.name in (NO_CODE, WRONG))
    assert summary.overall.line_weighted == pytest.approx((19 - failed_lines) / 19)
    assert summary.overall.unweighted == pytest.approx(6 / 8)
    assert not summary.broken and not summary.not_run
    costs = (out / "costs.jsonl").read_text().splitlines()
    assert len(costs) == 8 and all(json.loads(line)["sent"] for line in costs)

    again = _resume(root, server, out)
    assert len(server.requests) == 8  # every answer was kept
    assert again.overall == summary.overall

    published = Path(__file__).parent / "data" / "overall_stats.json"
    shown = runner.invoke(app, ["rcb", "report", str(out), "--published", str(published)])
    assert shown.exit_code == 0, shown.output
    assert "openai/gpt-4o (this run)" in shown.stdout and "84.2 %" in shown.stdout
    for row in load_published(published):
        assert row.pretty_name in shown.stdout


def test_the_model_sees_the_paper_and_the_masked_file_never_the_answer(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    _run(root, server, tmp_path / "with", "--papers", "softmax-temperature")
    _run(root, server, tmp_path / "without", "--papers", "softmax-temperature", "--without-paper")
    paper = (PSET / "softmax-temperature" / "paper2code_paper.tex").read_text()
    first_line = next(line for line in paper.splitlines() if line.strip())
    shown = {}
    for request in server.requests:
        text = _user_text(request)
        shown.setdefault(ASKED.search(text).group(1), []).append(text)  # type: ignore[union-attr]
    assert set(shown) == {"tempered softmax", "scale logits", "stable exponent", "entropy"}
    for with_paper, without_paper in shown.values():
        assert first_line in with_paper and first_line not in without_paper
        for text in (with_paper, without_paper):
            assert "<paper2code" not in text and "</paper2code" not in text  # no tag
            assert "TODO" in text
    # the answer to "stable exponent" is nowhere in its own prompt; its siblings' code is
    assert "e = np.exp(z)" not in shown["stable exponent"][0]
    assert "np.max(z, axis=axis, keepdims=True)" not in shown["tempered softmax"][0]
    assert "p = np.clip(p, 1e-12, 1.0)" in shown["stable exponent"][0]


def test_a_problem_whose_test_passes_empty_is_left_out_as_broken(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    test = root / "pset" / "softmax-temperature" / "paper2code_test.py"
    # the test no longer checks the entropy: its problem passes with the snippet empty
    text = test.read_text()
    test.write_text(re.sub(r"def test_entropy", "def _unused_entropy", text))
    summary = _run(root, server, tmp_path / "out", "--papers", "softmax-temperature")
    assert summary.broken == ["softmax-temperature/entropy"]
    assert summary.overall.problems == 3


def test_a_model_without_its_key_is_refused_before_anything_is_tested_or_written(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    args = ["rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o", "--papers"]
    args += ["softmax-temperature", "--out", str(tmp_path / "out"), "--sandbox", "local"]
    result = runner.invoke(app, args, env={"OPENAI_API_KEY": None})  # no key, no base URL
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "--model: openai/gpt-4o needs OPENAI_API_KEY" in (
        result.output
    )
    assert not server.requests and not (tmp_path / "out").exists()
