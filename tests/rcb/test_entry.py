"""``paperbench.rcb_run(RcbSettings)``: ``paperbench rcb run`` from Python, on the settings the
command is made from: the real OpenAI SDK against the fake server, each answer graded by the
paper's test in the local sandbox; a resume takes the run's own options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import paperbench
from paperbench.errors import UsageError
from paperbench.rcb import RcbSettings
from paperbench.testing.fake_llm import FakeLLMServer
from tests.rcb.broken import copy_pset, reference_bodies
from tests.rcb.test_run import _answers

PAPER = "softmax-temperature"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    for name in ("OPENAI_BASE_URL", "PAPERBENCH_PRICES", "PAPERBENCH_RCB_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with FakeLLMServer() as fake:
        fake.handler = _answers(reference_bodies())
        yield fake


@pytest.mark.slow
def test_rcb_run_from_python_takes_the_settings_of_the_command(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root, out = copy_pset(tmp_path), tmp_path / "out"
    settings = RcbSettings(
        model="openai/gpt-4o",
        base_url=server.openai_url,
        rcb_dir=root,
        papers=[PAPER],
        without_paper=True,
        sandbox="local",
        out=out,
        concurrency={"tests": 4},
    )
    result = paperbench.rcb_run(settings)
    assert result.out_dir == out and result.report == out / "report" / "index.html"
    assert result.report.is_file()
    summary = result.summary
    assert [p.paper for p in summary.papers] == [PAPER] and not summary.with_paper
    assert summary.overall.problems == 4 and len(server.requests) == 4
    assert summary.errors == {"no_code": 1, "assertion": 1}, summary.errors
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["with_paper"] is False and recorded["rcb_dir"] == str(root.resolve())

    # a resume sets only its folder: the run's own options, its problem set; nothing paid again
    again = paperbench.rcb_run(RcbSettings(resume=out, sandbox="local"))
    assert again.summary.overall == summary.overall and len(server.requests) == 4
    with pytest.raises(UsageError, match=r"--samples 2 \(the run's: 1\)") as refused:
        paperbench.rcb_run(RcbSettings(resume=out, samples=2, sandbox="local"))
    assert "\n" not in str(refused.value) and len(server.requests) == 4


def test_a_bad_setting_is_refused_in_one_line_before_any_folder_is_made(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    good = RcbSettings(model="openai/gpt-4o", rcb_dir=copy_pset(tmp_path), out=out)
    bad = {
        "--max-steps: limits an agent; give it with --mode agent": {"max_steps": 3},
        "--max-time: limits an agent; give it with --mode agent": {"max_time_s": 60.0},
        "--resume FOLDER continues the run in FOLDER; drop --out": {"resume": tmp_path},
        "--model: give the model that answers": {"model": None},
        "--papers: unknown paper nosuch": {"papers": ["nosuch"]},
    }
    for message, change in bad.items():
        with pytest.raises(UsageError) as refused:
            paperbench.rcb_run(good.model_copy(update=change))
        assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
        assert not out.exists(), message
    with pytest.raises(UsageError, match=r"^--concurrency gpus=1: expected STAGE=N"):
        RcbSettings(concurrency={"gpus": 1})
    with pytest.raises(UsageError, match=r"^--rcb-dir: no problem set given"):
        paperbench.rcb_run(RcbSettings(model="openai/gpt-4o", out=out))
    assert not out.exists() and not server.requests
