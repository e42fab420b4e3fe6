"""A rollout that pauses (provider unavailable past its retries, sandbox lost too often) in
``paperbench run``: recorded like a lost sandbox (failed, resumable, its reason and a log line),
shown as paused, and continued when the group is run again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from paperbench.agents import RolloutPausedError
from paperbench.runs import _pipeline
from paperbench.runs._pipeline import load_outcome, run_stages
from paperbench.runs._progress import GroupProgress
from tests.runs.groups import make_group


def test_a_paused_rollout_is_resumable_counted_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (spec,) = make_group(tmp_path, "paused", sleep_s=0, seeds=1)
    real = _pipeline.rollout

    async def paused(paper: Any, agent: Any, options: Any, *, out_dir: Path, **kw: Any) -> Any:
        raise RolloutPausedError(out_dir, "provider", "the model provider is unavailable: 503")

    monkeypatch.setattr(_pipeline, "rollout", paused)
    outcome = asyncio.run(run_stages(spec))
    assert outcome is not None and outcome.status == "failed"
    assert outcome.failed_stage == "rollout"
    assert outcome.reason == "paused (provider): the model provider is unavailable: 503"
    log = (spec.folder / "run.log").read_text()
    assert "rollout: paused (provider); it resumes when the group is run again" in log
    progress = GroupProgress(Path(spec.group_dir), [spec.key])
    progress.poll()
    assert progress.runs[0].status == "paused"

    monkeypatch.setattr(_pipeline, "rollout", real)
    again = asyncio.run(run_stages(spec))
    assert again is not None and again.status != "failed", again
    assert load_outcome(spec.folder) == again
