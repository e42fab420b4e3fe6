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
