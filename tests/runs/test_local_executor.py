"""The local executor's stage slots: a stage given one slot runs one run at a time, and the
time a run waited for its slot is recorded in run.json (not counted as the stage's time)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from paperbench.runs import RunState
from paperbench.runs._executor import LocalExecutor
from tests.runs.groups import make_group


def test_one_reproduction_slot_runs_reproductions_one_at_a_time(tmp_path: Path) -> None:
    specs = make_group(tmp_path, "one-slot", sleep_s=1.5, seeds=2)
    outcomes = asyncio.run(LocalExecutor({"reproduction": 1}).run(specs))
    assert [o.status for o in outcomes] == ["scored", "scored"]
    records = [
        RunState.model_validate_json((spec.folder / "run.json").read_text()).stages["reproduction"]
        for spec in specs
    ]
    first, second = sorted(records, key=lambda r: r.started_at or 0)
    assert first.finished_at is not None and second.started_at is not None
    assert first.finished_at <= second.started_at  # never both at once
    # the second waited for the first's 1.5 s sleep; the wait is not the stage's time
    assert second.waited_s >= 1.0
    assert first.waited_s < 1.0
    assert all(1.5 <= r.seconds < 1.5 + 30 for r in records)
    for record in records:
        assert record.status == "done" and record.attempts == 1


def test_two_reproduction_slots_overlap(tmp_path: Path) -> None:
    specs = make_group(tmp_path, "two-slots", sleep_s=1.5, seeds=2)
    asyncio.run(LocalExecutor({"reproduction": 2}).run(specs))
    records = [
        RunState.model_validate_json((spec.folder / "run.json").read_text()).stages["reproduction"]
        for spec in specs
    ]
    first, second = sorted(records, key=lambda r: r.started_at or 0)
    assert first.finished_at is not None and second.started_at is not None
    assert second.started_at < first.finished_at  # both at once
    assert all(r.waited_s < 1.0 for r in records)
