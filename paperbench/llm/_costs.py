"""Prices, cost per call, and the ledger that rolls costs up per run, stage, label and model.

The price table is ``paperbench/_data/prices.yaml`` (dollars per million tokens), merged with
a user file named by ``PAPERBENCH_PRICES`` or :attr:`ModelConfig.prices_path`. A model with
no price gets cost ``None`` and one warning per process, never an error.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Self, TextIO

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._io import atomic_write_json, json_path, read_json, read_text
from paperbench.errors import ConfigError, InputError
from paperbench.llm._budget import BudgetCaps
from paperbench.llm._types import CallOutcome, StopReason, Usage

log = logging.getLogger("paperbench.llm")

PRICES_ENV = "PAPERBENCH_PRICES"
COSTS_VERSION = 1

_DATE_SUFFIX = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


class ModelPrice(BaseModel):
    """Dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    output: float = Field(ge=0)
    batch_discount: float | None = Field(default=None, ge=0, le=1)
    """The share taken off every price above for a request sent in a provider batch (0.5:
    half price); default: the provider's ``batch_discount`` in the table."""

    def cost(self, usage: Usage) -> float:
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        fresh = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
        total = (
            fresh * self.input
            + usage.cached_input_tokens * cached
            + usage.cache_write_tokens * write
            + usage.output_tokens * self.output
        )
        return total / 1_000_000


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelPrice] = Field(default_factory=dict)
    batch_discount: dict[str, float] = Field(default_factory=dict)
    """Per provider: the share taken off its prices for a request sent in a batch."""


class PriceTable:
    """Model prices, looked up by ``provider/model``."""

    def __init__(
        self, prices: dict[str, ModelPrice], batch_discount: dict[str, float] | None = None
    ) -> None:
        self.prices = dict(prices)
        self.batch_discount = dict(batch_discount or {})
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, override: str | Path | None = None) -> PriceTable:
        """The bundled table, merged with ``override`` or ``$PAPERBENCH_PRICES`` if set."""
        override = override or os.environ.get(PRICES_ENV) or None
        return _load_table(str(override) if override else None)

    def lookup(self, model: str) -> ModelPrice | None:
        if model in self.prices:
            return self.prices[model]
        undated = _DATE_SUFFIX.sub("", model)
        if undated in self.prices:
            return self.prices[undated]
        for pattern, price in self.prices.items():
            if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(model, pattern):
                return price
        return None

    def cost(self, model: str, usage: Usage) -> float | None:
        """Cost of ``usage`` on ``model``, or ``None`` (and one warning) if it has no price."""
        price = self.lookup(model)
        if price is None:
            with self._lock:
                if model not in self._warned:
                    self._warned.add(model)
                    log.warning(
                        "%s: no price in the price table; its cost is reported as unknown "
                        "(add it to a file named by %s)",
                        model,
                        PRICES_ENV,
                    )
            return None
        return price.cost(usage)

    def billed_input(self, model: str, usage: Usage, *, batched: bool = False) -> float | None:
        """``usage``'s input tokens as billed, in uncached-token equivalents: cached input at
        the model's cached-input rate over its input rate, cache writes at the write rate,
        and a batched request at the batch discount; ``None`` when the model (or, batched,
        its discount) has no price."""
        price = self.lookup(model)
        if price is None or not price.input:
            return None
        cached = price.input if price.cached_input is None else price.cached_input
        write = price.input if price.cache_write is None else price.cache_write
        fresh = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
        billed = (
            fresh
            + (usage.cached_input_tokens * cached + usage.cache_write_tokens * write) / price.input
        )
        if not batched:
            return billed
        discount = price.batch_discount
        if discount is None:
            discount = self.batch_discount.get(model.partition("/")[0])
        return None if discount is None else billed * (1 - discount)

    def batch_cost(self, model: str, usage: Usage) -> float | None:
        """Cost of ``usage`` on ``model`` for a request sent in a provider batch; ``None``
        (and one warning) when the model or its batch discount is not in the table."""
        full = self.cost(model, usage)
        price = self.lookup(model)
        if full is None or price is None:
            return None
        discount = price.batch_discount
        if discount is None:
            discount = self.batch_discount.get(model.partition("/")[0])
        if discount is None:
            with self._lock:
                if f"batch:{model}" not in self._warned:
                    self._warned.add(f"batch:{model}")
                    log.warning(
                        "%s: no batch discount in the price table; the cost of its batched "
                        "requests is reported as unknown (add batch_discount to a file named "
                        "by %s)",
                        model,
                        PRICES_ENV,
                    )
            return None
        return full * (1 - discount)


@lru_cache(maxsize=8)
def _load_table(override: str | None) -> PriceTable:
    text = resources.files("paperbench").joinpath("_data/prices.yaml").read_text("utf-8")
    table = _parse_prices(text, "paperbench/_data/prices.yaml")
    if override:
        extra = _parse_prices(read_text(override), override)
        table.models.update(extra.models)
        table.batch_discount.update(extra.batch_discount)
    return PriceTable(table.models, table.batch_discount)


def _parse_prices(text: str, file: str) -> _PriceFile:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}".splitlines()[0], file=file) from None
    try:
        return _PriceFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(err["msg"], file=file, path=json_path(err["loc"])) from None


class CostRecord(BaseModel):
    """One attempt sent to a provider, one cache hit, or one call refused before it was
    sent, as written to costs.json. A call retried after a 429 is several records: one
    ``retried`` per failed attempt, then the attempt that ended it."""

    model_config = ConfigDict(extra="forbid")

    model: str
    label: str
    stage: str | None = None
    outcome: CallOutcome = "ok"
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    """``None`` when the model has no price; ``0.0`` for a cache hit."""
    saved_usd: float | None = None
    """For a cache hit: what the original call cost."""
    latency_s: float = 0.0
    """Of this attempt, from its send to its answer (for a cache hit: the lookup)."""
    stop_reason: StopReason | None = None
    """Why the model stopped, for an attempt that got an answer."""
    error: str | None = None
    """What went wrong: the error, or why an ``incomplete`` answer is not an answer."""
    sent: bool = True
    """False for a call refused before anything was sent (no key, no provider, the budget
    reached); ``budget_exhausted`` and ``cache_hit`` records are never sent."""
    batch_id: str | None = None
    """The provider batch the request was sent in (priced at the batch price), if any."""
    answered: bool = True
    """For an attempt sent: whether any HTTP answer came back (an answer, an error status,
    a broken body). False for a refused, reset or dropped connection, a timeout or a
    cancellation: the server may never have received the request."""
    time: float = Field(default_factory=time.time)


class CostTotal(BaseModel):
    """The sum over a group of records. ``calls`` counts every record but the ``retried``
    attempts, which ``retried`` counts; ``sent`` counts the attempts put on the wire (retried
    ones included): ``requests`` those a server answered, with any HTTP status (what a
    server's log counts), and ``unanswered`` those that got no HTTP answer (a refused, reset
    or dropped connection, a timeout), which the server may never have received.
    ``refused`` counts the calls refused before anything was sent (no key, the budget
    reached), ``cache_hits`` the calls answered from the cache; ``cost_usd`` sums the known
    costs; ``unpriced_calls`` counts the records whose cost is unknown, so a total is never
    silently low."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    sent: int = 0
    requests: int = 0
    unanswered: int = 0
    refused: int = 0
    cache_hits: int = 0
    incomplete: int = 0
    failed: int = 0
    budget_exhausted: int = 0
    retried: int = 0
    batched: int = 0
    """Requests sent in provider batches (at the batch price)."""
    unpriced_calls: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    saved_usd: float = 0.0

    def add(self, record: CostRecord) -> None:
        self.calls += record.outcome != "retried"
        unsent = not record.sent or record.outcome == "budget_exhausted"
        self.refused += unsent and record.outcome != "cache_hit"
        sent = not unsent and record.outcome != "cache_hit"
        self.sent += sent
        self.requests += sent and record.answered
        self.unanswered += sent and not record.answered
        self.retried += record.outcome == "retried"
        self.batched += sent and record.batch_id is not None
        self.cache_hits += record.outcome == "cache_hit"
        self.incomplete += record.outcome == "incomplete"
        self.failed += record.outcome == "failed"
        self.budget_exhausted += record.outcome == "budget_exhausted"
        self.usage = self.usage + record.usage
        if record.cost_usd is None:
            self.unpriced_calls += record.outcome not in ("budget_exhausted", "cache_hit")
        else:
            self.cost_usd += record.cost_usd
        self.saved_usd += record.saved_usd or 0.0


class CostReport(BaseModel):
    """costs.json: every record and the roll-ups per stage, label and model."""

    model_config = ConfigDict(extra="forbid")

    version: int = COSTS_VERSION
    total: CostTotal
    by_stage: dict[str, CostTotal]
    by_label: dict[str, CostTotal]
    by_model: dict[str, CostTotal]
    records: list[CostRecord]


class CostLedger:
    """Collects the cost records of a run; safe to share between tasks and threads.

    With ``caps``, :meth:`check_budget` refuses new calls once a cap is reached.
    """

    def __init__(self, records: Iterable[CostRecord] = (), caps: BudgetCaps | None = None) -> None:
        self.caps = caps or BudgetCaps()
        self._records: list[CostRecord] = []
        self._spent = 0.0
        self._spent_by_stage: dict[str | None, float] = {}
        self._held = 0.0
        self._held_by_stage: dict[str | None, float] = {}
        self._lock = threading.Lock()
        for record in records:
            self.add(record)

    def add(self, record: CostRecord) -> None:
        with self._lock:
            self._records.append(record)
            if record.cost_usd:
                self._spent += record.cost_usd
                stage_spent = self._spent_by_stage.get(record.stage, 0.0)
                self._spent_by_stage[record.stage] = stage_spent + record.cost_usd

    def check_budget(self, model: str, stage: str | None) -> None:
        """Raise :class:`BudgetExhaustedError` if the run's or ``stage``'s cap is reached."""
        with self._lock:
            spent, stage_spent = self._spent, self._spent_by_stage.get(stage, 0.0)
        self.caps.check(model=model, stage=stage, spent=spent, stage_spent=stage_spent)

    def hold(self, what: str, stage: str | None, usd: float) -> None:
        """Hold ``usd`` (a batch's worst case) against the caps until :meth:`release`;
        :class:`BudgetExhaustedError` if the spent and held money would then pass one."""
        with self._lock:
            spent = self._spent + self._held
            stage_spent = self._spent_by_stage.get(stage, 0.0) + self._held_by_stage.get(stage, 0.0)
            self.caps.check_worst(
                what=what, stage=stage, spent=spent, stage_spent=stage_spent, extra=usd
            )
            self._held += usd
            self._held_by_stage[stage] = self._held_by_stage.get(stage, 0.0) + usd

    def release(self, stage: str | None, usd: float) -> None:
        """Give back money held by :meth:`hold`."""
        with self._lock:
            self._held = max(self._held - usd, 0.0)
            self._held_by_stage[stage] = max(self._held_by_stage.get(stage, 0.0) - usd, 0.0)

    @property
    def records(self) -> list[CostRecord]:
        with self._lock:
            return list(self._records)

    def spent(self, stage: str | None = None) -> float:
        """Dollars spent so far (known costs only), in one stage or in all."""
        with self._lock:
            return self._spent if stage is None else self._spent_by_stage.get(stage, 0.0)

    def report(self) -> CostReport:
        records = self.records
        total = CostTotal()
        groups: dict[str, dict[str, CostTotal]] = {"stage": {}, "label": {}, "model": {}}
        for record in records:
            total.add(record)
            keys = {"stage": record.stage or "-", "label": record.label, "model": record.model}
            for field, key in keys.items():
                groups[field].setdefault(key, CostTotal()).add(record)
        return CostReport(
            total=total,
            by_stage=groups["stage"],
            by_label=groups["label"],
            by_model=groups["model"],
            records=records,
        )

    def write(self, path: str | Path) -> None:
        """Write costs.json atomically."""
        atomic_write_json(path, self.report().model_dump(mode="json"))

    @classmethod
    def load(cls, path: str | Path, caps: BudgetCaps | None = None) -> CostLedger:
        """Read a costs.json back (to resume a run and keep adding to it)."""
        data: Any = read_json(path)
        try:
            report = CostReport.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(err["msg"], file=path, path=json_path(err["loc"])) from None
        return cls(report.records, caps=caps)


class CostJournal(CostLedger):
    """A ledger that appends each new record to a JSON-lines file (flushed and synced) as it
    is added, so that a killed process loses at most the record in flight. ``records`` are
    those already in the file (:func:`read_cost_journal`); the file is opened at the first
    new one. Close it when done."""

    def __init__(
        self, path: str | Path, records: Iterable[CostRecord] = (), caps: BudgetCaps | None = None
    ) -> None:
        self.path = Path(path)
        self._journal: TextIO | None = None
        self._opened = False
        super().__init__(records, caps=caps)  # these are in the file already
        self._opened = True

    def add(self, record: CostRecord) -> None:
        super().add(record)
        if not self._opened:
            return
        with self._lock:
            if self._journal is None:
                self._journal = self.path.open("a", encoding="utf-8")
            self._journal.write(record.model_dump_json() + "\n")
            self._journal.flush()
            os.fsync(self._journal.fileno())

    def close(self) -> None:
        with self._lock:
            if self._journal is not None:
                self._journal.close()
                self._journal = None

    @classmethod
    def open(cls, path: str | Path, caps: BudgetCaps | None = None) -> Self:
        """The journal at ``path`` with the records it already holds."""
        return cls(path, read_cost_journal(path), caps=caps)


def read_cost_journal(path: str | Path) -> list[CostRecord]:
    """The records of a cost journal (none if there is no file); a last line cut short by a
    killed writer is dropped.

    Raises:
        InputError: another line is not a cost record (its number named).
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in read_text(path).split("\n") if line.strip()]
    records: list[CostRecord] = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(CostRecord.model_validate_json(line))
        except ValidationError:
            if number == len(lines):
                break  # the record in flight when the process died
            raise InputError(f"line {number}: not a cost record", file=path) from None
    return records
