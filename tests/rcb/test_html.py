"""The HTML report of an RCB run: a real run (the real CLI, the OpenAI SDK against the fake
server, the local sandbox) of the fixture set with a hostile answer, an answer without code,
a broken problem and a problem the model refused; then the pages, as HTML and in Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.rcb._html import write_rcb_report
from paperbench.rcb._load import load_problem_set
from paperbench.rcb._models import ProblemRecord, RcbSummary
from paperbench.rcb._published import load_published
from paperbench.testing.fake_llm import FakeLLMServer, FakeReply, Fault, RecordedRequest
from tests.rcb.broken import copy_pset, reference_bodies
from tests.rcb.test_run import ASKED, WRONG, _user_text
from tests.report.conftest import browser, chromium_path  # noqa: F401

pytestmark = pytest.mark.slow

runner = CliRunner()
HOSTILE = "</script><script>alert(1)</script>"
WRONG_CODE = f"z = np.asarray(logits, dtype=float)  # {HOSTILE}"
REFUSED = "ema variance"
"""The problem the fake model answers with an error (not run)."""
BROKEN = "softmax-temperature/entropy"
NO_CODE = "ema-smoothing/bias correction"
"""The problem the fake model answers in prose only."""
PUBLISHED = Path(__file__).parent / "data" / "overall_stats.json"


def _handler(request: RecordedRequest) -> FakeReply | Fault:
    name = ASKED.search(_user_text(request))
    assert name is not None
    if name.group(1) == REFUSED:
        return Fault.http(400, "refused for the test")
    if name.group(1) == WRONG:
        return FakeReply(text=f"```python\n{WRONG_CODE}\n```")
    if name.group(1) == NO_CODE.split("/")[1]:
        return FakeReply(text="No code, sorry.")
    return FakeReply(text=f"```python\n{reference_bodies()[name.group(1)]}\n```")


def _make_run(tmp: Path, *flags: str) -> Path:
    """A run of the fixture set (its entropy test disabled: that problem is broken) by the
    real ``rcb run``; returns its folder."""
    root = copy_pset(tmp)
    test = root / "pset" / "softmax-temperature" / "paper2code_test.py"
    test.write_text(re.sub(r"def test_entropy", "def _unused_entropy", test.read_text()))
    problems = load_problem_set(root)
    assert REFUSED in {s.name for s in problems.snippets}
    out = tmp / "out"
    with pytest.MonkeyPatch.context() as mp:
        for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
            mp.delenv(name, raising=False)
        mp.setenv("PAPERBENCH_CACHE_DIR", str(tmp / "cache"))
        with FakeLLMServer() as server:
            server.handler = _handler
            args = ["rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o"]
            args += ["--base-url", server.openai_url, "--out", str(out), "--sandbox", "local"]
            result = runner.invoke(app, [*args, *flags], env={"OPENAI_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'report' / 'index.html'}" in result.output.replace("\n", "")
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run folder for the module: its report written by ``rcb run``."""
    return _make_run(tmp_path_factory.mktemp("rcb-html"))


def _page(out: Path, problem: str) -> str:
    paper, name = problem.split("/")
    return (out / "report" / "problems" / paper / f"{name}.html").read_text()


def test_every_problem_folder_records_its_problem(run: Path) -> None:
    record = ProblemRecord.model_validate_json(
        (run / "problems" / "softmax-temperature" / "scale logits" / "problem.json").read_text()
    )
    assert record.line == 9 and record.code_lines == 1 and record.parent == "tempered softmax"
    assert record.reference == "    z = np.asarray(logits, dtype=float) / temperature"
    assert "TODO" in record.masked and "paper2code" not in record.masked
    assert record.indent == "    "


def test_the_index_counts_broken_and_not_run_problems_and_shows_published_rows(
    run: Path,
) -> None:
    summary = RcbSummary.model_validate_json((run / "summary.json").read_text())
    assert summary.broken == [BROKEN] and summary.not_run == [f"ema-smoothing/{REFUSED}"]
    index = write_rcb_report(run, load_published(PUBLISHED))
    text = index.read_text()
    assert "Broken problems (1)" in text and "Problems not run (1)" in text
    assert 'href="problems/softmax-temperature/entropy.html"' in text
    assert 'href="problems/ema-smoothing/ema%20variance.html"' in text
    assert "All problems (8)" in text
    for row in load_published(PUBLISHED):
        assert html.escape(row.pretty_name) in text
    assert "openai/gpt-4o (this run)" in text
    assert '<td class="mono">assertion</td><td class="num">1</td>' in text
    assert '<td class="mono">no_code</td><td class="num">1</td>' in text
    assert HOSTILE not in text
    for problem in json.loads((run / "summary.json").read_text())["broken"]:
        assert (run / "report" / "problems" / f"{problem}.html").is_file()


def test_a_problem_page_escapes_the_answer_and_shows_the_diff_and_the_error(run: Path) -> None:
    page = _page(run, f"softmax-temperature/{WRONG}")
    assert HOSTILE not in page and "<script>" not in page
    assert html.escape(f"+    {WRONG_CODE}", quote=False) in page.replace("&#34;", '"')
    assert '<span class="del">-    z = np.asarray(logits, dtype=float) / temperature</span>' in page
    assert "failed</b>" in page and "(assertion)" in page
    assert "AssertionError" in page
    masked = _page(run, f"softmax-temperature/{WRONG}").split('id="masked">')[1]
    assert "# TODO: write the code of &#34;scale logits&#34; here" in masked
    passed = _page(run, "softmax-temperature/stable exponent")
    assert "The answer is the reference code, line for line." in passed
    no_code = _page(run, NO_CODE)
    assert "(no_code)" in no_code and "The answer held no code block" in no_code
    broken = _page(run, BROKEN)
    assert "broken</b>" in broken and "passes with the snippet left empty" in broken


def test_a_problem_without_problem_json_still_gets_a_page(run: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(run, old, ignore=shutil.ignore_patterns("report"))
    for record in (old / "problems").glob("*/*/problem.json"):
        record.unlink()
    write_rcb_report(old, None)
    page = _page(old, f"softmax-temperature/{WRONG}")
    assert "The masked file is not recorded" in page
    assert html.escape(WRONG_CODE, quote=False) in page.replace("&#34;", '"')
    assert "(assertion)" in page
    refused = _page(old, f"ema-smoothing/{REFUSED}")
    assert "Not run" in refused


def test_with_two_samples_the_scores_show_pass_at_k_and_each_sample(tmp_path: Path) -> None:
    out = _make_run(tmp_path, "--papers", "softmax-temperature", "--samples", "2")
    text = (out / "report" / "index.html").read_text()
    assert '<th class="num">pass@1</th><th class="num">pass@2</th>' in text
    assert "<b>samples</b> 2" in text
    assert "assertion · assertion" in text  # both samples of the wrong answer
    page = _page(out, f"softmax-temperature/{WRONG}")
    assert 'id="sample-0"' in page and 'id="sample-1"' in page
    assert 'id="diff-1"' in page


def test_rcb_report_writes_the_pages_and_no_html_does_not(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    result = runner.invoke(app, ["rcb", "report", str(copy), "--no-html"])
    assert result.exit_code == 0, result.output
    assert not (copy / "report").exists()
    result = runner.invoke(app, ["rcb", "report", str(copy), "--published", str(PUBLISHED)])
    assert result.exit_code == 0, result.output
    assert "report: " in result.output and (copy / "report" / "index.html").is_file()
    missing = runner.invoke(app, ["rcb", "report", str(tmp_path)])
    assert missing.exit_code != 0 and "no summary.json" in missing.output


def test_an_agent_transcript_is_shown_on_the_problem_page(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    agent = copy / "problems" / "softmax-temperature" / WRONG / "agent-0"
    agent.mkdir()
    note = {"type": "note", "step": 1, "kind": "info", "text": HOSTILE}
    (agent / "transcript.jsonl").write_text(json.dumps(note) + "\n")
    write_rcb_report(copy, None)
    page = _page(copy, f"softmax-temperature/{WRONG}")
    assert 'id="transcript-0"' in page and "agent-0/transcript.jsonl" in page
    assert HOSTILE not in page and html.escape(HOSTILE) in page


def test_an_agent_run_s_problem_page_shows_its_transcript_and_how_it_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.rcb import test_agent

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    root = copy_pset(tmp_path)
    out = tmp_path / "out"
    with FakeLLMServer() as server:
        server.handler = test_agent._agent(reference_bodies())
        args = test_agent._args(root, server, "--out", str(out), "--max-steps", "5")
        result = runner.invoke(app, args, env={"OPENAI_API_KEY": "sk-test"})
    assert result.exit_code == 0, result.output
    page = _page(out, f"{test_agent.PAPER}/{test_agent.WRONG}")
    assert 'id="transcript-0"' in page and "agent-0/transcript.jsonl" in page
    assert "tool bash" in page and "tool python" in page
    assert "<th>agent</th><td>submitted, 4 steps" in page
    assert '<span class="add">+    z = np.asarray(logits) * 0.0</span>' in page
    assert "BEGIN and an END marker line" in page
    idle = _page(out, f"{test_agent.PAPER}/{test_agent.IDLE}")
    assert "limit" in idle and 'id="transcript-0"' in idle


# --------------------------------------------------------------------------- in Chromium
# last in the module: while the browser is open this thread has a running event loop, and a
# later test's asyncio.run would refuse to start


def test_the_pages_load_from_disk_without_errors_and_the_links_work(
    run: Path,
    browser: Any,  # noqa: F811 (the fixture imported above)
) -> None:
    index = write_rcb_report(run, load_published(PUBLISHED))
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        page = context.new_page()
        errors: list[str] = []
        dialogs: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(index.as_uri())
        assert "Broken problems (1)" in page.inner_text("body")
        assert "openai/gpt-4o (this run)" in page.inner_text("#scores")
        page.click(f"#problems a:has-text('{WRONG}')")
        page.wait_for_load_state()
        assert page.url.endswith("scale%20logits.html")
        assert "(assertion)" in page.inner_text("#status ~ table")
        assert HOSTILE in page.inner_text("#diff-0")
        assert page.locator("#diff-0 span.add").count() == 1
        assert page.locator("#diff-0 span.del").count() == 1
        assert page.locator("script").count() == 0
        page.click("text=← openai/gpt-4o")
        page.wait_for_load_state()
        assert page.url == index.as_uri()
        assert errors == [] and dialogs == []
        assert [u for u in requests if not u.startswith("file://")] == []
    finally:
        context.close()
