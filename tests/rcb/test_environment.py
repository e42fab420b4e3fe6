"""``rcb run`` in an environment that cannot run some problems' tests (a library missing, a
machine too slow for ``--timeout``): each paper's reference solution is tested first, as
``rcb validate`` does; a problem whose reference fails here too is not run (no model call, no
test), listed with the reason on the console, in summary.json and the HTML, and in no rate;
when no problem can run, the command fails in one line naming the image to build and the
option to raise, before anything is asked of the model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.rcb._environment import nothing_runs
from paperbench.rcb._models import RcbSummary
from paperbench.testing.fake_llm import FakeLLMServer
from tests.rcb.broken import copy_pset, reference_bodies
from tests.rcb.test_run import ASKED, _answers, _user_text

pytestmark = pytest.mark.slow

runner = CliRunner()
MISSING = "rcb_absent_library"
"""A module no environment of these tests has (as torch is missing from a small image)."""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PAPERBENCH_PRICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with FakeLLMServer() as fake:
        fake.handler = _answers(reference_bodies())
        yield fake


def _needs(root: Path, paper: str, line: str) -> None:
    """Make ``paper``'s test start with ``line`` (a missing import, a sleep)."""
    test = root / "pset" / paper / "paper2code_test.py"
    test.write_text(f"{line}\n{test.read_text()}")


def _args(root: Path, server: FakeLLMServer, *more: str) -> list[str]:
    return [
        "rcb", "run", "--rcb-dir", str(root), "--model", "openai/gpt-4o", "--base-url",
        server.openai_url, "--sandbox", "local", *more,
    ]  # fmt: skip


def test_a_problem_whose_reference_fails_here_too_is_not_run_and_is_listed(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    _needs(root, "ema-smoothing", f"import {MISSING}")
    out = tmp_path / "out"
    result = runner.invoke(app, _args(root, server, "--out", str(out)), env={"OPENAI_API_KEY": "k"})
    assert result.exit_code == 0, result.output
    asked = {ASKED.search(_user_text(r)).group(1) for r in server.requests}  # type: ignore[union-attr]
    assert len(server.requests) == 4 and "ema" not in asked  # no call for what cannot run
    summary = RcbSummary.model_validate_json((out / "summary.json").read_text())
    ema = [p for p in json.loads(runner.invoke(app, ["rcb", "list", "--rcb-dir", str(root),
           "--json"]).stdout) if p["paper"] == "ema-smoothing"]  # fmt: skip
    assert sorted(summary.not_runnable) == sorted(p["id"] for p in ema) and len(ema) == 4
    missing = f"ModuleNotFoundError: No module named '{MISSING}'"
    reason = f"its reference solution also fails here (import: {missing})"
    assert set(summary.not_runnable.values()) == {reason}
    assert "paperbench images build paperbench-rcb" in summary.environment_advice
    assert "--image paperbench-rcb" in summary.environment_advice
    assert summary.overall.problems == 4 and summary.listed == 8
    assert summary.errors == {"assertion": 1, "no_code": 1}  # the softmax answers only
    rates = {score.paper: score.rate for score in summary.papers}
    assert rates["ema-smoothing"].problems == 0 and rates["ema-smoothing"].line_weighted is None
    said = " ".join(result.output.split())
    assert "not runnable in this environment (4 problems): " + reason in said
    assert "rates over 4 of the 8 problems listed" in said
    assert "paperbench images build paperbench-rcb" in said
    # piped (not a terminal), each finished item is a plain line: which, how, how far
    lines = result.output.splitlines()
    for what, total in (("reference solutions", 2), ("empty fills", 4), ("answers", 4)):
        assert sum(line.startswith(f"{what}: ") for line in lines) == total, result.output
    test_line = r"tests of the answers: \d/3 done, \d+ s: softmax-temperature/scale logits failed"
    assert any(re.match(test_line, x) for x in lines), result.output
    assert any(x.endswith("softmax-temperature/entropy answered, no code") for x in lines)
    assert any(
        x.startswith("reference solutions: ") and "ema-smoothing failed (import)" in x
        for x in lines
    )
    index = (out / "report" / "index.html").read_text()
    assert "Problems that cannot run in this environment (4)" in index
    assert "Rates over 4 of the 8 problems listed." in index and MISSING in index
    page = (out / "report" / "problems" / "ema-smoothing" / "ema update.html").read_text()
    assert "Not runnable in this environment" in page
    assert not list((out / "problems" / "ema-smoothing").glob("*/empty.json"))  # nor tested
    record = json.loads((out / "problems" / "ema-smoothing" / "reference.json").read_text())
    assert record["environment"] == "sandbox local, image default"

    # a resume takes the run's own options (problem set, model, server); in the same
    # environment it reads the references it kept: not tested again
    (root / "pset" / "ema-smoothing" / "paper2code_test.py").write_text("raise SystemExit(0)\n")
    resume = ["rcb", "run", "--resume", str(out), "--sandbox", "local"]
    env = {"OPENAI_API_KEY": "k", "PAPERBENCH_RCB_DIR": None}
    again = runner.invoke(app, resume, env=env)
    assert again.exit_code == 0, again.output
    resumed = RcbSummary.model_validate_json((out / "summary.json").read_text())
    assert resumed.not_runnable == summary.not_runnable and len(server.requests) == 4
    assert resumed.overall == summary.overall

    # an option given that differs from the run's is named (one that matches is not)
    other = [
        *resume,
        "--model",
        "openai/gpt-4o-mini",
        "--timeout",
        "60",
        "--papers",
        "ema-smoothing",
    ]
    refused = runner.invoke(app, other, env=env)
    assert refused.exit_code == 2, refused.output
    line = " ".join(refused.output.split())
    assert line.startswith("error: --resume takes the run's own options"), line
    assert "--model openai/gpt-4o-mini (the run's: openai/gpt-4o)" in line
    assert "--papers ema-smoothing (the run's: not given)" in line and "--timeout" not in line
    assert len(server.requests) == 4


def test_when_no_problem_can_run_the_command_names_the_image_and_the_option(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    root = copy_pset(tmp_path)
    _needs(root, "softmax-temperature", f"import {MISSING}")
    _needs(root, "ema-smoothing", "import time; time.sleep(30)")
    out = tmp_path / "out"
    args = _args(root, server, "--out", str(out), "--timeout", "2")
    result = runner.invoke(app, args, env={"OPENAI_API_KEY": "k"})
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()  # the references' progress, then one error
    assert all(x.startswith("reference solutions: ") for x in lines[:-1]) and len(lines) == 3
    line = lines[-1]
    assert line.startswith("error: no problem can run in this environment"), result.output
    assert "softmax-temperature: its reference solution also fails here (import: " in line
    assert "ema-smoothing: its reference solution also runs past the 2 s --timeout here" in line
    assert "`paperbench images build paperbench-rcb`" in line and "--image paperbench-rcb" in line
    assert "raise --timeout (now 2 s)" in line
    assert not server.requests and not out.exists()


def test_the_one_line_names_each_reason_once_with_its_papers() -> None:
    torch = "its reference solution also fails here (import: No module named 'torch')"
    reasons = {f"paper-{i}": torch for i in range(7)} | {"slow": "past --timeout"}
    line = nothing_runs(reasons, "")
    assert line == (
        "no problem can run in this environment: paper-0, paper-1, paper-2, paper-3, paper-4 "
        f"and 2 more: {torch}; slow: past --timeout"
    )


def test_a_new_run_without_a_model_is_one_line(tmp_path: Path) -> None:
    args = ["rcb", "run", "--rcb-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output == "error: --model: give the model that answers (PROVIDER/MODEL)\n"
    assert not (tmp_path / "out").exists()
