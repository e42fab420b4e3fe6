"""What the runs of a group have already spent, read from the run store, so that a resumed
group's budget counts the money its earlier attempts spent."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from paperbench.llm import read_cost_journal
from paperbench.runs._store import RunFolder


def run_spent(folder: Path) -> float:
    """Dollars a run's model calls cost so far (known costs only): the rollout's
    costs.jsonl and grading/costs.jsonl (a last line cut short by a kill is skipped).

    Raises:
        InputError: another line of a ledger is not a cost record.
    """
    files = RunFolder(folder)
    records = [*read_cost_journal(files.rollout_costs), *read_cost_journal(files.grading_costs)]
    return sum(record.cost_usd or 0.0 for record in records)


def group_spent(folders: Iterable[Path]) -> float:
    """The sum of :func:`run_spent` over the runs' folders."""
    return sum(run_spent(folder) for folder in folders)
