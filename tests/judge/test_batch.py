"""Grading through the providers' batch APIs (``--batch``) against the fake servers, through
the real SDKs: the same verdicts as live, one batch per judge step, the batch price in the
ledger, failed requests as invalid leaves, expiry, budget caps, resume after kill -9, and a
compatible endpoint without the batch routes refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paperbench.cli import app
from paperbench.judge import LeafGrade
from paperbench.llm import PriceTable, read_cost_journal
from paperbench.testing import FakeLLMServer, RecordedRequest

from .conftest import EXAMPLES
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
    prices = PriceTable.load()
    assert all(r.cost_usd == pytest.approx(prices.cost(model, r.usage) / 2) for r in sent)
    assert sum(r.cost_usd or 0 for r in sent) > 0
