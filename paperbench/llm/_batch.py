"""Provider batches: a model whose config says ``batch`` sends its requests through the
provider's batch API (OpenAI Batch over an uploaded JSONL file; Anthropic Message Batches)
instead of one by one, at the batch price.

Concurrent :meth:`~paperbench.llm.Model.generate` calls are gathered by a
:class:`BatchRunner`: a request waits until no new one has joined for
``PAPERBENCH_BATCH_WINDOW_S`` seconds (default 2) or the batch is full, then every request
gathered is submitted as one batch per endpoint, route and model. So a judge whose leaves are
all at the same step submits one batch per step, not one per leaf. Each line's body is exactly
what the provider's adapter sends for a single call (``ModelAPI.request_params``), and its
``custom_id`` is a digest of that body: the same request always has the same id.

Before a batch is submitted, its worst case (each request's input, counted as the token
budgets count it, and its whole ``max_tokens`` of output, at the batch price) is held against
the ledger's caps; a batch that would pass one is not submitted, and its requests fail with
:class:`~paperbench.errors.BudgetExhaustedError`. Once the provider returns a batch's id it
is written to the run store's journal (``batches.jsonl``, appended and synced) before the
first poll, with its ``custom_id`` s. A later process given the same journal (a resumed
grading) attaches a request whose ``custom_id`` is there to that batch and polls it: a batch
is never submitted twice. A request that a batch left without an answer (it expired or was
cancelled) is submitted again in a new batch; one that failed inside the batch is that
call's :class:`~paperbench.errors.ModelError`, with the provider's reason. Polls start after
a fifth of a second and double up to ``PAPERBENCH_BATCH_POLL_S`` (default 60) seconds.

Each request is one ledger record at the batch price, with its batch's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paperbench.errors import BudgetExhaustedError, ConfigError, ModelError, ModelRequestError
from paperbench.llm._registry import ModelAPI
from paperbench.llm._tokens import count_message_tokens, count_tokens, token_count_kind
from paperbench.llm._types import ModelOutput, ModelRequest

if TYPE_CHECKING:
    from paperbench.llm._model import Model

WINDOW_ENV = "PAPERBENCH_BATCH_WINDOW_S"
POLL_ENV = "PAPERBENCH_BATCH_POLL_S"
DEFAULT_WINDOW_S = 2.0
DEFAULT_POLL_S = 60.0
FIRST_POLL_S = 0.2
MAX_REQUESTS = 10_000
"""Requests in one batch at most (both providers take more)."""
UNBOUNDED_OUTPUT = 128_000
"""The output tokens counted for a request that sets no ``max_tokens``."""
JOURNAL = "batches.jsonl"


def _env_seconds(name: str, default: float) -> float:
    """A number of seconds from the environment; :class:`ConfigError` naming the variable
    for anything else."""
    value = os.environ.get(name)
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"expected a number of seconds above 0, got {value!r}", path=name)
    return seconds


def custom_id(key: tuple[str, str, str], body: dict[str, Any]) -> str:
    """The id of a request in a batch: a digest of its endpoint, route and body."""
    text = json.dumps([key, body], sort_keys=True, ensure_ascii=False)
    return "pb-" + hashlib.sha256(text.encode()).hexdigest()[:56]


@dataclass
class _Item:
    model: Model
    request: ModelRequest
    label: str
    stage: str | None
    worst_usd: float
    future: asyncio.Future[ModelOutput | Exception]


@dataclass
class _Group:
    api: ModelAPI
    route: str
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    items: dict[str, list[_Item]] = field(default_factory=dict)


@dataclass
class BatchCounts:
    """What the batches of a runner are doing, for progress."""

    submitted: int = 0
    running: int = 0
    done: int = 0
    requests: int = 0
    answered: int = 0


class BatchJournal:
    """The run store's record of the batches submitted: one JSON line per event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.known: dict[str, str] = {}
        """custom_id -> the latest batch it was submitted in."""
        if path.exists():
            for raw in path.read_text(encoding="utf-8").splitlines():
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue  # the line in flight when the process died
                if isinstance(line, dict) and line.get("event") == "submitted":
                    for cid in line.get("custom_ids", []):
                        self.known[str(cid)] = str(line["batch_id"])

    def write(self, **line: Any) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({**line, "time": time.time()}) + "\n")
            out.flush()
            os.fsync(out.fileno())


class BatchRunner:
    """Gathers batched requests and submits, polls and answers their batches."""

    def __init__(
        self,
        journal: Path | None = None,
        *,
        on_change: Callable[[BatchCounts], None] | None = None,
    ) -> None:
        self.journal = BatchJournal(journal) if journal is not None else None
        self.window_s = _env_seconds(WINDOW_ENV, DEFAULT_WINDOW_S)
        self.poll_s = _env_seconds(POLL_ENV, DEFAULT_POLL_S)
        self.counts = BatchCounts()
        self.on_change = on_change if on_change is not None else _ON_CHANGE.get()
        self._groups: dict[tuple[str, str, str], _Group] = {}
        self._last = 0.0
        self._flusher: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._polling: dict[str, dict[str, list[_Item]]] = {}

    async def generate(
        self, model: Model, api: ModelAPI, request: ModelRequest, label: str, stage: str | None
    ) -> ModelOutput:
        """One request of ``model`` answered through a batch."""
        try:
            route, body = api.request_params(request)
        except ModelError as exc:  # refused before anything was sent
            model._record(label, stage, outcome="failed", cost_usd=0.0, error=str(exc), sent=False)
            raise
        key = (api.connection_key, route, str(body.get("model", "")))
        cid = custom_id(key, body)
        loop = asyncio.get_running_loop()
        item = _Item(
            model, request, label, stage, _worst_usd(model, request, body), loop.create_future()
        )
        known = self.journal.known.get(cid) if self.journal is not None else None
        if known is not None:
            self._attach(known, api, {cid: [item]})
        else:
            group = self._groups.setdefault(key, _Group(api, route))
            group.bodies[cid] = body
            group.items.setdefault(cid, []).append(item)
            self._last = loop.time()
            if sum(len(g.bodies) for g in self._groups.values()) >= MAX_REQUESTS:
                self._flush()
            elif self._flusher is None or self._flusher.done():
                self._flusher = loop.create_task(self._wait_and_flush())
        result = await item.future
        if isinstance(result, Exception):
            raise result
        return result

    async def aclose(self) -> None:
        for task in [*self._tasks, *([self._flusher] if self._flusher else [])]:
            task.cancel()
        for task in [*self._tasks]:
            with contextlib.suppress(BaseException):
                await task

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.counts)

    async def _wait_and_flush(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            left = self._last + self.window_s - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(left)
        self._flush()

    def _flush(self) -> None:
        groups, self._groups = self._groups, {}
        for group in groups.values():
            items = [i for its in group.items.values() for i in its]
            self._spawn(self._submit(group), items)

    def _spawn(self, work: Coroutine[Any, Any, None], items: list[_Item]) -> None:
        """Run ``work`` in the background; if it fails (a bug), its callers get the error
        instead of waiting for ever."""

        async def guarded() -> None:
            try:
                await work
            except Exception as exc:
                for item in items:
                    _settle(item, exc)
                raise

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _submit(self, group: _Group) -> None:
        items = [i for its in group.items.values() for i in its]
        model = items[0].model.config.model
        held: dict[tuple[int, str | None], float] = {}
        try:
            for item in items:
                k = (id(item.model.ledger), item.stage)
                held[k] = held.get(k, 0.0) + item.worst_usd
            by_ledger = {id(i.model.ledger): i.model.ledger for i in items}
            taken: list[tuple[int, str | None]] = []
            try:
                for (ledger_id, stage), usd in held.items():
                    by_ledger[ledger_id].hold(
                        f"{model}: a batch of {len(group.bodies)} requests", stage, usd
                    )
                    taken.append((ledger_id, stage))
            except BudgetExhaustedError:
                for ledger_id, stage in taken:
                    by_ledger[ledger_id].release(stage, held[(ledger_id, stage)])
                held = {}
                raise
            lines = list(group.bodies.items())
            batch_id = await _with_retries(
                lambda: group.api.submit_batch(group.route, lines), items[0].model
            )
        except ModelError as exc:
            outcome = "budget_exhausted" if isinstance(exc, BudgetExhaustedError) else "failed"
            by_ledger = {id(i.model.ledger): i.model.ledger for i in items}
            for (ledger_id, stage), usd in held.items():  # nothing was submitted
                by_ledger[ledger_id].release(stage, usd)
            for item in items:
                item.model._record(
                    item.label,
                    item.stage,
                    outcome=outcome,
                    cost_usd=0.0,
                    error=str(exc),
                    sent=False,
                )
                _settle(item, exc)
            return
        if self.journal is not None:
            self.journal.write(
                event="submitted",
                batch_id=batch_id,
                model=model,
                route=group.route,
                custom_ids=[c for c, _ in lines],
            )
            for cid, _ in lines:
                self.journal.known[cid] = batch_id
        self.counts.submitted += 1
        self.counts.requests += len(lines)
        self._changed()
        await self._poll(batch_id, group.api, dict(group.items), held, items)

    def _attach(self, batch_id: str, api: ModelAPI, items: dict[str, list[_Item]]) -> None:
        """Wait for ``items`` in a batch already submitted (polled once for all)."""
        waiting = self._polling.get(batch_id)
        if waiting is not None:
            for cid, its in items.items():
                waiting.setdefault(cid, []).extend(its)
            return
        self._polling[batch_id] = dict(items)
        self.counts.submitted += 1
        waiting = self._polling[batch_id]
        everyone = [i for its in waiting.values() for i in its]
        self._spawn(self._poll(batch_id, api, waiting, {}, []), everyone)

    async def _poll(
        self,
        batch_id: str,
        api: ModelAPI,
        waiting: dict[str, list[_Item]],
        held: dict[tuple[int, str | None], float],
        held_items: list[_Item],
    ) -> None:
        self._polling[batch_id] = waiting
        self.counts.running += 1
        self._changed()
        started = time.perf_counter()
        status = ""
        delay = FIRST_POLL_S
        some = next(i for its in waiting.values() for i in its)
        try:
            while True:
                state = await _with_retries(lambda: api.batch_state(batch_id), some.model)
                if state.status != status and self.journal is not None:
                    self.journal.write(event="state", batch_id=batch_id, status=state.status)
                status = state.status
                if state.ended:
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.poll_s)
            if state.error:
                results: dict[str, ModelOutput | Exception] = {
                    cid: ModelRequestError(
                        f"{some.model.config.model}: batch {batch_id} failed: {state.error}"
                    )
                    for cid in waiting
                }
            else:
                results = await _with_retries(lambda: api.batch_results(batch_id), some.model)
        except ModelError as exc:
            results = dict.fromkeys(waiting, exc)
        finally:
            self._polling.pop(batch_id, None)
            self.counts.running -= 1
            self.counts.done += 1
        latency = time.perf_counter() - started
        again: dict[str, list[_Item]] = {}
        for cid, items in waiting.items():
            result = results.get(cid)
            if result is None:
                again[cid] = items  # expired or cancelled before it was answered
                continue
            self.counts.answered += 1
            for n, item in enumerate(items):
                _settle(item, _record(item, result, batch_id, latency, first=n == 0))
        by_ledger = {id(i.model.ledger): i.model.ledger for i in held_items}
        for (ledger_id, stage), usd in held.items():
            by_ledger[ledger_id].release(stage, usd)
        self._changed()
        for cid, items in again.items():
            if self.journal is not None and self.journal.known.get(cid) == batch_id:
                del self.journal.known[cid]
            for item in items:
                self._spawn(self._again(item), [item])

    async def _again(self, item: _Item) -> None:
        """Send a request left unanswered by its batch in a new one."""
        try:
            result: ModelOutput | Exception = await self.generate(
                item.model, item.model.api, item.request, item.label, item.stage
            )
        except ModelError as exc:
            result = exc
        _settle(item, result)


def _settle(item: _Item, result: ModelOutput | Exception) -> None:
    if not item.future.done():
        item.future.set_result(result)


def _record(
    item: _Item, result: ModelOutput | Exception, batch_id: str, latency: float, *, first: bool
) -> ModelOutput | Exception:
    """Record ``item``'s answer in its ledger at the batch price; what its caller gets."""
    model = item.model
    if isinstance(result, Exception):
        model._record(
            item.label,
            item.stage,
            outcome="failed",
            cost_usd=0.0,
            error=str(result),
            batch_id=batch_id,
            latency_s=latency,
        )
        return result
    cost = model._prices.batch_cost(model.config.model, result.usage)
    if not first:
        # the same request twice in one batch: answered (and billed) once
        model._record(
            item.label,
            item.stage,
            outcome="cache_hit",
            cost_usd=0.0,
            saved_usd=cost,
            batch_id=batch_id,
        )
        return result.model_copy(update={"cost_usd": 0.0, "cached": True})
    model._record(
        item.label,
        item.stage,
        outcome="ok" if result.complete else "incomplete",
        usage=result.usage,
        cost_usd=cost,
        latency_s=latency,
        stop_reason=result.stop_reason,
        batch_id=batch_id,
        error=None if result.complete else f"the answer ended with {result.stop_reason}",
    )
    return result.model_copy(update={"cost_usd": cost, "latency_s": latency})


async def _with_retries(call: Callable[[], Any], model: Model) -> Any:
    """``call()`` with the model's retry policy for 429/5xx/timeouts (an upload or a poll:
    not a model request, so its attempts are not ledger records)."""
    from paperbench.llm._retry import RetryClock, retrying

    config = model.config
    clock = RetryClock(
        model=config.model,
        max_wait_s=config.max_retry_wait_s,
        initial_s=config.retry_initial_s,
        cap_s=config.retry_max_s,
    )
    async for attempt in retrying(clock, lambda *_, **__: None):
        with attempt:
            clock.sending()
            return await call()
    raise AssertionError("the retry policy ends with an answer or an error")


def _worst_usd(model: Model, request: ModelRequest, body: dict[str, Any]) -> float:
    """A request's worst case at the batch price: its input, all of it uncached, and its
    whole output room. A model counted exactly (OpenAI's) has its input counted as the token
    budgets count it (messages, tools and schema); one whose count is an estimate
    (Anthropic's: no offline tokenizer) is counted by the UTF-8 bytes of the request's body,
    a bound no tokenizer passes (a token stands for at least one byte of what it encodes), so
    a cap is never overrun by an estimate that fell short."""
    name = model.config.model
    price = model._prices.lookup(name)
    if price is None:
        return 0.0  # unpriced: not counted (as a live call)
    if token_count_kind(name) == "exact":
        extra = json.dumps([t.model_dump() for t in request.tools]) if request.tools else ""
        if request.output is not None:
            extra += json.dumps(request.output.json_schema)
        tokens_in = count_message_tokens(request.messages, name) + count_tokens(extra, name)
    else:
        tokens_in = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
    out = next(
        (
            int(body[k])
            for k in ("max_tokens", "max_completion_tokens", "max_output_tokens")
            if isinstance(body.get(k), int)
        ),
        UNBOUNDED_OUTPUT,
    )
    from paperbench.llm._types import Usage

    cost = model._prices.batch_cost(name, Usage(input_tokens=tokens_in, output_tokens=out))
    return cost or 0.0


_RUNNER: contextvars.ContextVar[BatchRunner | None] = contextvars.ContextVar(
    "paperbench_batch_runner", default=None
)
_ON_CHANGE: contextvars.ContextVar[Callable[[BatchCounts], None] | None] = contextvars.ContextVar(
    "paperbench_batch_progress", default=None
)
_DEFAULT: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, BatchRunner] = (
    weakref.WeakKeyDictionary()
)


def current_runner() -> BatchRunner:
    """The runner installed by :func:`batching`, else one for this event loop (no journal)."""
    runner = _RUNNER.get()
    if runner is not None:
        return runner
    loop = asyncio.get_running_loop()
    if loop not in _DEFAULT:
        _DEFAULT[loop] = BatchRunner()
    return _DEFAULT[loop]


@contextlib.contextmanager
def batching(runner: BatchRunner) -> Iterator[BatchRunner]:
    """Send the batched requests of this context through ``runner``."""
    token = _RUNNER.set(runner)
    try:
        yield runner
    finally:
        _RUNNER.reset(token)


@contextlib.contextmanager
def batch_progress(on_change: Callable[[BatchCounts], None]) -> Iterator[None]:
    """Runners made in this context (a grading's) report their :class:`BatchCounts` to
    ``on_change`` as batches are submitted and end (for a progress display)."""
    token = _ON_CHANGE.set(on_change)
    try:
        yield
    finally:
        _ON_CHANGE.reset(token)
