"""The group's budget (``--budget-dollars``) under the local executor: every run's model calls
share it through the coordinator the executor installs, and a resumed group counts what its
runs spent before. The judge's calls go to the fake server through the real SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from paperbench.errors import InputError
from paperbench.llm import current_coordinator
from paperbench.runs import RunOutcome
from paperbench.runs._executor import LocalExecutor
from paperbench.runs._spend import group_spent, run_spent
from paperbench.testing import FakeLLMServer
from paperbench.testing.judge_server import judge_handler
from tests.runs.groups import make_group


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAPERBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with FakeLLMServer() as server:
        server.handler = judge_handler(1.0)
        yield server


def _judged(root: Path, name: str, server: FakeLLMServer, budget: float | None) -> list[RunOutcome]:
    specs = make_group(
        root,
        name,
        sleep_s=0,
        seeds=2,
        judge={"config": "simple", "model": "openai/gpt-4o", "base_url": server.openai_url},
        reproduction={"skip": True},
        budget_dollars=budget,
    )
    outcomes = asyncio.run(LocalExecutor().run(specs))
    assert current_coordinator() is None  # removed after the group
    return outcomes


@pytest.mark.slow
def test_the_group_budget_stops_the_judge_calls(server: FakeLLMServer, tmp_path: Path) -> None:
    # the group without money first: the judge's answers are cached, and a cached answer
    # costs nothing
    broke = _judged(tmp_path, "broke", server, 0.0)
    assert server.requests == []
    free = _judged(tmp_path, "free", server, None)
    assert len(server.requests) > 0
    for paid, refused in zip(free, broke, strict=True):
        assert paid.coverage is not None and refused.coverage is not None
        assert refused.coverage == 0.0 < paid.coverage
        assert refused.invalid_leaves == refused.leaves > paid.invalid_leaves
    costs = json.loads(
        (tmp_path / "runs/broke/calibration-binning/sleeper/seed-0/grading/costs.json").read_text()
    )
    assert (
        costs["total"]["budget_exhausted"] > 0
        and costs["total"]["calls"] == (costs["total"]["budget_exhausted"])
    )


def test_spent_is_read_from_the_store(tmp_path: Path) -> None:
    """The rollout's costs.jsonl and grading/costs.jsonl (a last line cut short by a kill is
    skipped; a call without a price adds nothing)."""
    run = tmp_path / "run"
    (run / "grading").mkdir(parents=True)
    record = {"model": "openai/gpt-4o", "label": "agent", "cost_usd": 0.25}
    (run / "costs.jsonl").write_text(
        json.dumps(record) + "\n" + json.dumps({**record, "cost_usd": None}) + '\n{"model": "op'
    )
    judged = {**record, "label": "judge_grading", "stage": "grading"}
    (run / "grading" / "costs.jsonl").write_text(
        json.dumps({**judged, "cost_usd": 1.0}) + "\n" + json.dumps({**judged, "cost_usd": 0.5})
    )
    assert run_spent(run) == pytest.approx(1.75)
    assert group_spent([run, tmp_path / "never-started"]) == pytest.approx(1.75)


def test_a_damaged_ledger_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "grading").mkdir(parents=True)
    (run / "grading" / "costs.jsonl").write_text('garbage\n{"model": "x", "label": "y"}\n')
    with pytest.raises(InputError) as caught:
        run_spent(run)
    assert str(run / "grading" / "costs.jsonl") in str(caught.value)
    assert "line 1: not a cost record" in str(caught.value)
