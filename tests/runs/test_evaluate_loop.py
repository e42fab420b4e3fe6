"""One event loop per entry point: ``paperbench.evaluate()`` runs the whole evaluation
(preflight, sandbox choice, the runs) in one; where a loop is running already (Jupyter) it
refuses in one line naming ``evaluate_async``, which runs in the caller's loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

import paperbench
from paperbench.errors import UsageError
from paperbench.runs import EvalConfig, JudgeSettings, ReproductionSettings, SandboxSettings

PAPER = "calibration-binning"


def _config(runs_dir: Path, group: str) -> EvalConfig:
    return EvalConfig(
        group=group,
        runs_dir=runs_dir,
        papers=PAPER,
        judge=JudgeSettings(config="dummy"),
        sandbox=SandboxSettings(backend="local"),
        reproduction=ReproductionSettings(skip=True),
        report=False,
    )


def test_evaluate_starts_one_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    real: Callable[..., Any] = asyncio.run

    def counted(main: Coroutine[Any, Any, Any], **kw: Any) -> Any:
        started.append(main.__qualname__)
        return real(main, **kw)

    monkeypatch.setattr(asyncio, "run", counted)
    result = paperbench.evaluate(_config(tmp_path / "runs", "one"))
    assert result.outcomes[0].status == "scored"
    assert started == ["evaluate_async"]


def test_evaluate_where_a_loop_runs_says_to_await_evaluate_async(tmp_path: Path) -> None:
    config = _config(tmp_path / "runs", "nb")

    async def notebook_cell() -> None:
        paperbench.evaluate(config)

    with pytest.raises(UsageError) as refused:
        asyncio.run(notebook_cell())
    (line,) = str(refused.value).splitlines()
    assert "await paperbench.evaluate_async(" in line
    assert not (tmp_path / "runs").exists()  # refused before any work

    async def resumed() -> None:
        paperbench.resume("nb", runs_dir=tmp_path / "runs")

    with pytest.raises(UsageError, match=r"await paperbench\.resume_async\("):
        asyncio.run(resumed())


def test_evaluate_async_and_resume_async_run_in_the_callers_loop(tmp_path: Path) -> None:
    async def notebook_cells() -> tuple[paperbench.Evaluation, paperbench.Evaluation]:
        loop = asyncio.get_running_loop()
        result = await paperbench.evaluate_async(_config(tmp_path / "runs", "nb"))
        again = await paperbench.resume_async("nb", runs_dir=tmp_path / "runs")
        assert asyncio.get_running_loop() is loop
        return result, again

    result, again = asyncio.run(notebook_cells())
    assert [o.status for o in result.outcomes] == ["scored"]
    assert [o.score for o in again.outcomes] == [o.score for o in result.outcomes]
