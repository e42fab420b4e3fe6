"""What the runs of a group have already spent, read from the run store, so that a resumed
group's budget counts the money its earlier attempts spent."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from paperbench.errors import InputError
from paperbench.llm import CostRecord, CostReport
from paperbench.runs._store import GRADING_DIR

ROLLOUT_COSTS = "costs.jsonl"
GRADING_COSTS = "costs.json"


def run_spent(folder: Path) -> float:
    """Dollars a run's model calls cost so far (known costs only): the rollout's
    costs.jsonl, whose last line may be cut short, and grading/costs.json.

    Raises:
        InputError: grading/costs.json is not a costs report.
    """
    spent = 0.0
    try:
        lines = (folder / ROLLOUT_COSTS).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            spent += CostRecord.model_validate_json(line).cost_usd or 0.0
        except ValidationError:
            continue  # the record in flight when a process died
    path = folder / GRADING_DIR / GRADING_COSTS
    if path.is_file():
        try:  # written whole (atomically): unreadable means another version's file
            spent += CostReport.model_validate_json(path.read_bytes()).total.cost_usd
        except ValidationError as exc:
            raise InputError(
                f"not a costs report ({exc.errors()[0]['msg']}); move it away to resume",
                file=path,
            ) from None
    return spent


def group_spent(folders: Iterable[Path]) -> float:
    """The sum of :func:`run_spent` over the runs' folders."""
    return sum(run_spent(folder) for folder in folders)
