"""The Ray executor without an address: a Ray runtime of its own on this machine, for the
group only (what `paperbench run --executor ray` does without --ray-address)."""

from __future__ import annotations

import asyncio
import platform
from pathlib import Path

import pytest

from paperbench.runs import RunState
from tests.runs.groups import make_group

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow


def test_a_runtime_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from paperbench.runs._ray import RayExecutor

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # never used: the runtime is new
    assert not ray.is_initialized()
    specs = make_group(tmp_path, "local", sleep_s=0, seeds=1)
    (outcome,) = asyncio.run(RayExecutor().run(specs))
    assert outcome.status == "scored"
    assert not ray.is_initialized()  # stopped with the group
    state = RunState.model_validate_json((specs[0].folder / "run.json").read_bytes())
    assert state.host is not None and state.host.startswith(platform.node() + "/")
    assert all(record.attempts == 1 for record in state.stages.values())


def test_the_time_a_task_waits_in_rays_queue_is_recorded(tmp_path: Path) -> None:
    """With one CPU, one run's rollout task waits in Ray's queue while the other's runs; the
    wait is recorded as the stage's waited_s (not as its time)."""
    from paperbench.runs._ray import RayExecutor

    ray.init(address="local", num_cpus=1, log_to_driver=False)
    try:
        specs = make_group(tmp_path, "one-cpu", sleep_s=0, seeds=2)
        outcomes = asyncio.run(RayExecutor().run(specs))
    finally:
        ray.shutdown()
    assert [o.status for o in outcomes] == ["scored", "scored"]
    states = [
        RunState.model_validate_json((spec.folder / "run.json").read_bytes()) for spec in specs
    ]
    rollouts = sorted(states, key=lambda s: s.stages["rollout"].started_at or 0)
    first, second = (s.stages["rollout"] for s in rollouts)
    assert first.finished_at is not None and second.started_at is not None
    assert first.finished_at <= second.started_at  # one CPU: one task at a time
    assert second.waited_s >= first.seconds * 0.9
    assert first.waited_s < second.waited_s
