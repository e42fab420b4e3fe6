"""Grading through the providers' batch APIs (``--batch``) against the fake servers, through
the real SDKs: the same verdicts as live, one batch per judge step, the batch price in the
ledger, failed requests as invalid leaves, expiry, budget caps, resume after kill -9, and a
compatible endpoint without the batch routes refused."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import paperbench
from paperbench.cli import app
from paperbench.errors import ModelUnavailableError
from paperbench.judge import LeafGrade, load_judge_config
from paperbench.llm import Model, ModelConfig, PriceTable, read_cost_journal
from paperbench.llm._batch import _with_retries
from paperbench.llm._retry import TransientError
from paperbench.testing import FakeLLMServer, Fault, RecordedRequest
from tests.fixtures import openai_client

from .conftest import EXAMPLES, ROOT
from .scripted import ScriptedJudge

runner = CliRunner()
EXAMPLE = EXAMPLES / "calibration-binning" / "partial"


@pytest.fixture(autouse=True)
def quick_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAPERBENCH_BATCH_WINDOW_S", "0.05")
    monkeypatch.setenv("PAPERBENCH_BATCH_POLL_S", "0.2")


def _args(out: Path, url: str, model: str, *extra: str) -> list[str]:
    return [
        "grade",
        str(EXAMPLE / "submission"),
        "--paper",
        EXAMPLE.parent.name,
        "--log",
        str(EXAMPLE / "reproduce.log"),
        "--out",
        str(out),
        "--base-url",
        url,
        "--model",
        model,
        *extra,
    ]


def _grades(out: Path) -> dict[str, LeafGrade]:
    lines = (out / "grading" / "leaves.jsonl").read_text().splitlines()
    grades = [LeafGrade.model_validate_json(line) for line in lines if line.strip()]
    return {".".join(map(str, g.path)): g for g in grades}


def _bodies(requests: list[RecordedRequest]) -> set[str]:
    return {json.dumps(r.body, sort_keys=True) for r in requests}


def _verdict(text: str) -> float:
    return float(len(text) % 2)


@pytest.mark.parametrize(
    ("model", "which", "judge"),
    [
        ("openai/gpt-4o", "openai_url", "simple"),
        ("anthropic/claude-haiku-4-5", "anthropic_url", "simple-faithful"),
    ],
)
def test_a_batched_grading_gives_the_live_verdicts_in_one_batch_per_step(
    fake_llm: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    which: str,
    judge: str,
) -> None:
    fake_llm.handler = ScriptedJudge(_verdict)
    url = getattr(fake_llm, which)
    live = runner.invoke(app, _args(tmp_path / "live", url, model, "--judge", judge))
    assert live.exit_code == 0, live.output
    sent_live = len(fake_llm.requests)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache2"))  # not the live answers
    # One batch per step needs every leaf of a step to join within the window: 50 ms is not
    # enough on a loaded machine, where the leaves of one step start further apart.
    monkeypatch.setenv("PAPERBENCH_BATCH_WINDOW_S", "1")
    result = runner.invoke(app, _args(tmp_path / "batch", url, model, "--judge", judge, "--batch"))
    assert result.exit_code == 0, result.output
    batched = fake_llm.requests[sent_live:]
    assert batched and all(r.batch is not None for r in batched)
    steps = {"simple": 2, "simple-faithful": 3}[judge]  # shortlist, grading (, parsing)
    # each batched request is exactly a request sent live (cache_control kept); the same
    # request twice in one batch is sent once
    assert _bodies(batched) == _bodies(fake_llm.requests[:sent_live])
    if model.startswith("anthropic/"):
        assert any("cache_control" in body for body in _bodies(batched))
    assert len({r.batch for r in batched}) == steps
    live_grades, batch_grades = _grades(tmp_path / "live"), _grades(tmp_path / "batch")
    assert {p: (g.score, g.valid) for p, g in batch_grades.items()} == {
        p: (g.score, g.valid) for p, g in live_grades.items()
    }
    records = read_cost_journal(tmp_path / "batch" / "grading" / "costs.jsonl")
    sent = [r for r in records if r.sent and r.outcome != "cache_hit"]
    assert len(sent) == len(batched) and all(r.batch_id for r in sent)
    said = " ".join(result.output.split())
    assert f"batches: {steps} submitted, 0 in progress, {steps} done" in said
    assert f"({len(sent)} in provider batches, at the batch price)" in said
    prices = PriceTable.load()
    assert all(r.cost_usd == pytest.approx(prices.cost(model, r.usage) / 2) for r in sent)
    assert sum(r.cost_usd or 0 for r in sent) > 0


def _refuse_some(text: str) -> Fault | None:
    return Fault.http(400, "this criterion is refused") if len(text) % 3 == 0 else None


PROVIDERS = pytest.mark.parametrize(
    ("model", "which"),
    [("openai/gpt-4o", "openai_url"), ("anthropic/claude-haiku-4-5", "anthropic_url")],
)


@PROVIDERS
def test_a_request_failed_inside_a_batch_is_its_leaves_invalid_grade_with_the_reason(
    fake_llm: FakeLLMServer, tmp_path: Path, model: str, which: str
) -> None:
    judge = ScriptedJudge(lambda _: 1.0, fault=_refuse_some)
    fake_llm.handler = judge
    args = _args(tmp_path / "o", getattr(fake_llm, which), model, "--batch")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    grades = [g for g in _grades(tmp_path / "o").values() if g.source == "llm"]
    failed = [g for g in grades if not g.valid]
    assert failed and all(
        g.reason == "failed" and "this criterion is refused" in (g.error or "") for g in failed
    )
    assert any(g.valid and g.score == 1.0 for g in grades)  # the other requests are used
    records = read_cost_journal(tmp_path / "o" / "grading" / "costs.jsonl")
    refused = [r for r in records if r.outcome == "failed"]
    assert refused and all(r.batch_id and r.cost_usd == 0 for r in refused)


@pytest.mark.parametrize(
    ("model", "which", "end"),
    [
        ("openai/gpt-4o", "openai_url", "expire"),
        ("anthropic/claude-haiku-4-5", "anthropic_url", "expire"),
        ("openai/gpt-4o", "openai_url", "cancel"),
    ],
)
def test_an_expired_or_cancelled_batch_sends_again_only_what_it_left_unanswered(
    fake_llm: FakeLLMServer, tmp_path: Path, model: str, which: str, end: str
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    server = fake_llm.batches
    server.delay = 3600.0  # answered only by the hooks below

    def expire_the_first() -> None:
        while not server.batches:
            time.sleep(0.01)
        first = next(iter(server.batches))
        server.process(first, 2)
        if end == "expire":
            server.expire(first)
        else:  # cancelled by someone else (the provider's console, say)
            openai_client(fake_llm).batches.cancel(first)
        server.delay = 0.0

    hooks = threading.Thread(target=expire_the_first, daemon=True)
    hooks.start()
    result = runner.invoke(app, _args(tmp_path / "o", getattr(fake_llm, which), model, "--batch"))
    hooks.join(timeout=10)
    assert result.exit_code == 0, result.output
    first, *later = server.batches.values()
    assert first.status in ("expired", "ended", "cancelled") and len(first.lines) > 2
    answered = {cid for cid, r in first.results.items() if r not in ("expired", "canceled")}
    assert len(answered) == 2
    # the requests left unanswered are sent again (with the next step's), once; the
    # answered ones never
    again = [cid for batch in later for cid, _ in batch.lines if cid in dict(first.lines)]
    assert sorted(again) == sorted({cid for cid, _ in first.lines} - answered)
    assert all(g.valid for g in _grades(tmp_path / "o").values() if g.source == "llm")


def test_a_budget_cap_stops_before_a_batch_that_could_pass_it(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    config = tmp_path / "capped.yaml"
    config.write_text("mode: simple\nroles: {grading: openai/gpt-4o}\nbudgets: {max_usd: 0.001}\n")
    args = _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--batch")
    result = runner.invoke(app, [*args, "--judge", str(config)])
    assert result.exit_code == 1, result.output
    assert not fake_llm.batches.batches and not fake_llm.requests  # nothing submitted
    grades = [g for g in _grades(tmp_path / "o").values() if g.source == "llm"]
    assert grades and all(g.reason == "budget_exhausted" for g in grades)
    assert "would pass the run budget" in (grades[0].error or "")


def test_a_compatible_server_without_the_batch_routes_is_refused_before_any_leaf(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    fake_llm.batches.enabled = False
    args = _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--batch")
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no batch API" in lines[0] and "--base-url" in lines[0]
    assert not fake_llm.requests and not (tmp_path / "o" / "grading" / "leaves.jsonl").exists()


def test_a_batched_grading_killed_after_submitting_polls_its_batch_on_resume(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    server = fake_llm.batches
    server.delay = 3600.0  # submitted, never answered while the first process lives
    out = tmp_path / "o"
    args = _args(out, fake_llm.openai_url, "openai/gpt-4o", "--batch")
    source = str(Path(paperbench.__file__).parents[1])
    path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "paperbench", *args],
            env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    journal = out / "grading" / "batches.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if journal.is_file() and '"submitted"' in journal.read_text():
                break
            time.sleep(0.01)
        assert process.poll() is None, errors.read_text()
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert len(server.batches) == 1
    (first,) = server.batches.values()
    assert first.status in ("validating", "in_progress")  # not answered
    server.delay = 0.0
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # the batch submitted before the kill was polled, never submitted again
    later = [b for b in server.batches.values() if b is not first]
    assert later and first.status == "completed"
    resent = {cid for b in later for cid, _ in b.lines} & {cid for cid, _ in first.lines}
    assert not resent
    grades = [g for g in _grades(out).values() if g.source == "llm"]
    assert grades and all(g.valid for g in grades)


def test_judge_eval_batch_sends_every_call_in_a_batch(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    gold = tmp_path / "gold" / "calibration-binning" / "partial"
    shutil.copytree(EXAMPLE, gold)  # one gold submission
    out = tmp_path / "eval"
    args = ["judge-eval", "--gold", str(gold.parents[1]), "--out", str(out), "--batch"]
    args += ["--base-url", fake_llm.openai_url, "--model", "openai/gpt-4o"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert fake_llm.requests and all(r.batch is not None for r in fake_llm.requests)
    [config] = json.loads((out / "report.json").read_text())["configs"]
    assert set(config["invalid_reasons"]) <= {"not_graded"}  # check leaves: no --executed
    assert config["overall"]["leaves"] > config["overall"]["invalid"]
    assert config["cost"]["requests"] == len(fake_llm.requests)


def _run_args(tmp_path: Path, server: FakeLLMServer) -> list[str]:
    return [
        "run",
        "--papers",
        "calibration-binning",
        "--sandbox",
        "local",
        "--skip-reproduction",
        "--group",
        "g",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--batch",
        "--judge-model",
        "openai/gpt-4o",
        "--judge-base-url",
        server.openai_url,
    ]


def test_run_batch_grades_through_batches_and_its_report_says_so(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    result = runner.invoke(app, _run_args(tmp_path, fake_llm), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert fake_llm.requests and all(r.batch is not None for r in fake_llm.requests)
    sent = len(fake_llm.requests)
    rows = [" ".join(line.replace("│", " ").split()) for line in result.output.splitlines()]
    assert f"all total {sent} ({sent} batched) 0" in " | ".join(rows)
    journal = tmp_path / "runs" / "g" / "calibration-binning" / "replay" / "seed-0" / "grading"
    assert (journal / "batches.jsonl").is_file()


def test_run_batch_refuses_a_judge_server_without_the_batch_routes(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.batches.enabled = False
    result = runner.invoke(app, _run_args(tmp_path, fake_llm), env={"COLUMNS": "300"})
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "no batch API" in lines[0] and "--judge-base-url" in lines[0]
    assert not (tmp_path / "runs").exists() and not fake_llm.requests


def test_batch_in_a_judge_config_keeps_its_identity_and_caches_the_answers(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    simple = (ROOT / "judge" / "simple.yaml").read_text()
    config = tmp_path / "simple.yaml"
    config.write_text(simple + "\nbatch: true\n")
    assert load_judge_config(config).identity == load_judge_config("simple").identity
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    args = _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--judge", str(config))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert fake_llm.requests and all(r.batch is not None for r in fake_llm.requests)
    # the batched answers are in the response cache: grading again sends nothing
    sent, batches = len(fake_llm.requests), len(fake_llm.batches.batches)
    again = _args(tmp_path / "again", fake_llm.openai_url, "openai/gpt-4o", "--judge", str(config))
    result = runner.invoke(app, again)
    assert result.exit_code == 0, result.output
    assert (len(fake_llm.requests), len(fake_llm.batches.batches)) == (sent, batches)
    assert _grades(tmp_path / "again").keys() == _grades(tmp_path / "o").keys()


def test_a_batch_the_provider_refuses_makes_its_leaves_invalid_with_the_reason(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    fake_llm.batches.limits.openai_bytes = 1000  # every input file is over the limit
    args = _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--batch")
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert not fake_llm.batches.batches and not fake_llm.requests
    grades = [g for g in _grades(tmp_path / "o").values() if g.source == "llm"]
    assert grades and all(g.reason == "failed" and "HTTP 400" in (g.error or "") for g in grades)
    records = read_cost_journal(tmp_path / "o" / "grading" / "costs.jsonl")
    assert records and all(not r.sent and r.outcome == "failed" for r in records)


def test_an_upload_or_poll_that_meets_a_5xx_is_retried_within_the_retry_budget() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise TransientError("HTTP 500: busy", status=500)
        return "batch_1"

    fast = {"retry_initial_s": 0.001, "retry_max_s": 0.002}
    model = Model(ModelConfig(model="openai/gpt-4o", **fast))
    assert asyncio.run(_with_retries(flaky, model)) == "batch_1" and calls == 3

    async def down() -> str:
        raise TransientError("HTTP 503: down", status=503)

    model = Model(ModelConfig(model="openai/gpt-4o", max_retry_wait_s=0.01, **fast))
    with pytest.raises(ModelUnavailableError, match=r"gave up after .*HTTP 503: down"):
        asyncio.run(_with_retries(down, model))


def test_a_bad_batch_window_in_the_environment_is_one_line_naming_it(
    fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAPERBENCH_BATCH_WINDOW_S", "soon")
    result = runner.invoke(
        app, _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--batch")
    )
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: PAPERBENCH_BATCH_WINDOW_S: expected a number of seconds above 0, got 'soon'"
    )
    assert not fake_llm.requests and not fake_llm.batches.batches


def test_a_batch_that_fails_validation_makes_its_leaves_invalid_with_the_reason(
    fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    """OpenAI accepts the upload and the batch, then fails it at validation (here: a model
    its batches do not take): every leaf is invalid with the provider's reason (the
    shortlist's batch fails, then the grading's), nothing is billed, nothing sent again."""
    fake_llm.handler = ScriptedJudge(lambda _: 1.0)
    fake_llm.batches.limits.refused_models = {"gpt-4o"}
    args = _args(tmp_path / "o", fake_llm.openai_url, "openai/gpt-4o", "--batch")
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    batches = list(fake_llm.batches.batches.values())
    assert batches and all(b.status == "failed" for b in batches)
    ids = [cid for b in batches for cid, _ in b.lines]
    assert len(ids) == len(set(ids))  # none sent again
    grades = [g for g in _grades(tmp_path / "o").values() if g.source == "llm"]
    assert grades and all(not g.valid and "gpt-4o" in (g.error or "") for g in grades), [
        g.error for g in grades
    ]
    records = read_cost_journal(tmp_path / "o" / "grading" / "costs.jsonl")
    assert records and all(r.outcome == "failed" and not r.cost_usd for r in records)
    assert not fake_llm.requests  # no request was answered
