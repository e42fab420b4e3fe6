"""Budget caps: a dollar limit per run and per stage.

The caps live in a run's configuration; the run's :class:`~paperbench.llm.CostLedger`
enforces them. Before every attempt is sent (the first and each retry), once it holds a
connection slot, the ledger is asked; once the money spent reaches a cap, nothing more is
sent and the caller gets :class:`~paperbench.errors.BudgetExhaustedError`, which it records
as its own outcome (never as an answer, never as a zero score). An attempt's cost is recorded
before its slot is given back, so however many calls wait, a cap can be passed by at most
the cost of the calls in flight: ``max_connections`` of them per endpoint. Calls whose cost
is unknown (a model with no price) are not counted. A provider batch is counted before it
is submitted at its worst case (every request's input and its whole ``max_tokens`` of
output, at the batch price) and held until its answers are recorded, so a batch never
takes a cap past its limit: one that would is not submitted.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from paperbench.errors import BudgetExhaustedError


class BudgetCaps(BaseModel):
    """Dollar caps; ``None`` means no cap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_usd: float | None = Field(default=None, ge=0)
    stages_usd: dict[str, float] = Field(default_factory=dict)
    """Per stage, e.g. ``{"rollout": 10, "grading": 2}``."""

    def check(self, *, model: str, stage: str | None, spent: float, stage_spent: float) -> None:
        if self.run_usd is not None and spent >= self.run_usd:
            raise BudgetExhaustedError(
                f"{model}: run budget exhausted (${spent:.4f} spent of ${self.run_usd:g}); "
                "raise the cap to continue"
            )
        cap = self.stages_usd.get(stage) if stage is not None else None
        if cap is not None and stage_spent >= cap:
            raise BudgetExhaustedError(
                f"{model}: budget of stage {stage!r} exhausted "
                f"(${stage_spent:.4f} spent of ${cap:g}); raise the cap to continue"
            )

    def check_worst(
        self, *, what: str, stage: str | None, spent: float, stage_spent: float, extra: float
    ) -> None:
        """Refuse ``extra`` dollars more (a batch's worst case) if they would pass a cap."""
        if self.run_usd is not None and spent + extra > self.run_usd:
            raise BudgetExhaustedError(
                f"{what}: its worst case ${extra:.4f} would pass the run budget "
                f"(${spent:.4f} spent or held of ${self.run_usd:g}); not submitted, "
                "raise the cap to continue"
            )
        cap = self.stages_usd.get(stage) if stage is not None else None
        if cap is not None and stage_spent + extra > cap:
            raise BudgetExhaustedError(
                f"{what}: its worst case ${extra:.4f} would pass the budget of stage "
                f"{stage!r} (${stage_spent:.4f} spent or held of ${cap:g}); not submitted, "
                "raise the cap to continue"
            )
