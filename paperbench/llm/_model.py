"""The one interface for a model call: :class:`Model`.

``Model(ModelConfig(model="openai/gpt-4o"))`` resolves the provider lazily (so a config can be
built anywhere and sent to another process), then every :meth:`Model.generate` goes through
the same steps whatever the provider:

    response cache → for each attempt: connection slot → send window → shared pause
    → the group's slot and pause (when a coordinator is installed: ``_shared``)
    → budget check → provider call → ledger record → the group's slot back with the cost
    → (retry after a wait, outside the slot: the tenacity policy of ``llm._retry``)
    → completeness and structured-output checks (re-ask a bounded number of times) → cache

Every attempt sent is one record in the ledger (``ok``, ``incomplete``, ``retried`` or
``failed``); one that got no HTTP answer (a refused, reset or dropped connection, a timeout)
says so (``answered=False``), and the ledger counts it apart from the requests. A call that
cannot give an answer raises a :class:`~paperbench.errors.ModelError` subclass: callers
record it as *invalid*, never as an answer.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import jsonschema
from pydantic import BaseModel, ValidationError

from paperbench._console import plural
from paperbench.errors import (
    BudgetExhaustedError,
    IncompleteAnswerError,
    ModelError,
    StructuredOutputError,
)
from paperbench.llm._cache import ResponseCache, cache_key, release_shared, shared_cache
from paperbench.llm._costs import CostLedger, CostRecord, PriceTable
from paperbench.llm._gate import EndpointGate, endpoint_gate
from paperbench.llm._registry import ModelAPI, Target, resolve
from paperbench.llm._retry import RetryClock, TransientError, retrying
from paperbench.llm._shared import Coordinator, Grant, current_coordinator, endpoint_id
from paperbench.llm._types import (
    Message,
    ModelConfig,
    ModelOutput,
    ModelRequest,
    OutputSchema,
    ReasoningEffort,
    ToolDef,
    Usage,
    UserMessage,
)

OutputSpec = type[BaseModel] | dict[str, Any] | None
"""A structured-output request: a pydantic model class or a JSON Schema (dict)."""


class Model:
    """A model to call. Cheap to build; the SDK client is made on first use.

    Args:
        config: what to call and how (plain, serialisable).
        ledger: where cost records go, and the budget caps (default: a new ledger).
        stage: the stage recorded with every call unless ``generate(stage=...)`` says otherwise.
        cache: a response cache to use instead of the shared one at ``config.cache_path``.
    """

    def __init__(
        self,
        config: ModelConfig | str,
        *,
        ledger: CostLedger | None = None,
        stage: str | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.config = ModelConfig(model=config) if isinstance(config, str) else config
        self.ledger = ledger if ledger is not None else CostLedger()
        self.stage = stage
        self._cache = cache
        self._shared_cache = False  # the cache is the shared one, taken on first use
        self._api: ModelAPI | None = None
        self._prices = PriceTable.load(self.config.prices_path)

    @property
    def name(self) -> str:
        return self.config.model

    def __repr__(self) -> str:
        return f"Model({self.config.model!r})"

    @property
    def api(self) -> ModelAPI:
        """The provider client (resolving the provider, base URL and key on first use; a
        missing key is raised when a request is sent, so cache hits need none)."""
        if self._api is None:
            cls, target = resolve(self.config, require_key=False)
            self._api = cls(target)
        return self._api

    @property
    def target(self) -> Target:
        return self.api.target

    @property
    def cache(self) -> ResponseCache:
        if self._cache is None:
            self._cache = shared_cache(self.config.cache_path)
            self._shared_cache = True
        return self._cache

    async def aclose(self) -> None:
        """Close the provider client and give back the shared cache (the last user of a
        cache file closes it); the model may be used again after."""
        try:
            if self._api is not None:
                await self._api.aclose()
        finally:
            if self._shared_cache and self._cache is not None:
                release_shared(self._cache)
                self._cache = None
                self._shared_cache = False

    async def __aenter__(self) -> Model:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def generate(
        self,
        messages: Sequence[Message] | str,
        *,
        tools: Sequence[ToolDef] = (),
        output: OutputSpec = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        reasoning_effort: ReasoningEffort | None = None,
        label: str = "unlabelled",
        stage: str | None = None,
        cache: bool | None = None,
        prompt_cache_key: str | None = None,
    ) -> ModelOutput:
        """Call the model once (plus bounded re-asks for malformed structured output).

        Each attempt waits for a connection slot of the endpoint, then for any pause another
        caller of the endpoint was asked for (``retry-after``), then checks the budget caps,
        and only then is sent. 429/5xx/timeouts/dropped connections are retried within
        ``config.max_retry_wait_s``, counted from the first send (time spent waiting for a
        slot is not counted). Every attempt that reached the provider is one ledger record.

        An answer that did not end normally (see :attr:`ModelOutput.complete`: cut off at
        ``max_tokens``, refused, empty, or an unknown stop reason) is never cached and is
        recorded with outcome ``incomplete``. Without ``output``, it is returned with
        ``complete == False`` and its ``stop_reason``, for the caller to treat as it must (a
        judge records the leaf as invalid). With ``output``, an empty answer is re-asked like
        a malformed one, and an incomplete answer that remains raises
        :class:`IncompleteAnswerError` (at once for one cut off, refused or stopped for an
        unknown reason). An answer of tool calls with no text is a normal answer.

        Args:
            messages: the conversation, or a single user prompt.
            tools: :class:`ToolDef` s the model may call.
            output: a pydantic model class or JSON Schema the answer must match;
                ``ModelOutput.parsed`` then holds the validated value.
            label: the purpose of the call, for the cost report (see ``LABELS``).
            stage: the stage, for the cost report and the stage's budget cap.
            cache: use the response cache (default: ``config.cache``).
            prompt_cache_key: calls sharing this key (the steps of one tool loop) share the
                provider's prompt cache: OpenAI gets ``prompt_cache_key``, Anthropic a
                rolling cache breakpoint on the last block of the conversation.

        Raises:
            MissingKeyError, UnknownProviderError, ProviderNotInstalledError: set-up problems.
            ModelRequestError: the provider refused the request (400/401/403/404).
            ContextLengthError: (a ModelRequestError) the conversation does not fit the
                model's context window; ``tokens``/``limit`` when the provider named them.
            ModelUnavailableError: retries exhausted (429/5xx/timeouts/dropped connections).
            IncompleteAnswerError: with ``output``, the answer did not end normally.
            StructuredOutputError: the answer never matched ``output``.
            BudgetExhaustedError: a cost cap was reached before an attempt was sent.
        """
        started = time.perf_counter()
        stage = stage if stage is not None else self.stage
        schema = output_schema(output)
        request = self._request(
            messages, tools, schema, max_tokens, temperature, reasoning_effort, prompt_cache_key
        )
        use_cache = self.config.cache if cache is None else cache
        key = self._cache_key(request, label, stage) if use_cache else None
        if key is not None:
            hit = await self._cache_hit(key, output, label, stage, started)
            if hit is not None:
                return hit
        result = await self._attempts(request, output, schema, label, stage, started)
        if key is not None and result.complete:
            await self.cache.aput(key, result)
        return result

    def _request(
        self,
        messages: Sequence[Message] | str,
        tools: Sequence[ToolDef],
        schema: OutputSchema | None,
        max_tokens: int | None,
        temperature: float | None,
        reasoning_effort: ReasoningEffort | None,
        prompt_cache_key: str | None,
    ) -> ModelRequest:
        """The request :meth:`generate` sends: its arguments, the config's where not given."""
        if isinstance(messages, str):
            messages = [UserMessage(content=messages)]
        config = self.config
        return ModelRequest(
            messages=tuple(messages),
            tools=tuple(tools),
            output=schema,
            max_tokens=max_tokens if max_tokens is not None else config.max_tokens,
            temperature=temperature if temperature is not None else config.temperature,
            reasoning_effort=reasoning_effort or config.reasoning_effort,
            prompt_cache_key=prompt_cache_key,
        )

    def _cache_key(self, request: ModelRequest, label: str, stage: str | None) -> str:
        """The response cache's key for ``request`` to this model at this endpoint."""
        config = self.config
        target = self._provider(label, stage).target
        return cache_key(
            model=config.model,
            provider=target.provider,
            base_url=target.base_url,
            options=config.options,
            version=config.cache_version,
            request=request,
        )

    async def _attempts(
        self,
        request: ModelRequest,
        output: OutputSpec,
        schema: OutputSchema | None,
        label: str,
        stage: str | None,
        started: float,
    ) -> ModelOutput:
        """The answer to ``request``, re-asked (within ``config.structured_retries``) while
        it does not match ``output``, with the usage, cost and count of all its attempts."""
        config = self.config
        usage = Usage()
        cost: float | None = 0.0
        conversation = request
        error = ""
        attempt = 0
        while True:
            attempt += 1
            answer = await self._send(conversation, label, stage)
            usage = usage + answer.usage
            cost = None if cost is None or answer.cost_usd is None else cost + answer.cost_usd
            if output is None:
                parsed = None
                break
            if not answer.complete:
                error = _incomplete(answer)
                # An empty answer is re-asked like a malformed one; an answer cut off,
                # refused or stopped for an unknown reason is not (it would only repeat).
                if _incomplete_reason(answer) != "empty" or attempt > config.structured_retries:
                    raise IncompleteAnswerError(
                        f"{config.model}: {error} after {attempt} attempt(s); "
                        "the answer was not used",
                        stop_reason=_incomplete_reason(answer),
                    )
            else:
                try:
                    parsed = parse_structured(answer.text, output)
                    break
                except ValueError as exc:
                    error = str(exc)
                if attempt > config.structured_retries:
                    # Each attempt is already in the ledger with its cost; the call as a
                    # whole fails here, for the caller to record as invalid.
                    raise StructuredOutputError(
                        f"{config.model}: the answer did not match the schema "
                        f"{schema.name if schema else ''!r} after "
                        f"{plural(attempt, 'attempt')}: {error}"
                    )
            conversation = conversation.model_copy(
                update={"messages": (*conversation.messages, *_reask(answer, error))}
            )
        return answer.model_copy(
            update={
                "parsed": parsed,
                "usage": usage,
                "cost_usd": cost,
                "attempts": attempt,
                "latency_s": time.perf_counter() - started,
            }
        )

    def _provider(self, label: str, stage: str | None, *, send: bool = False) -> ModelAPI:
        """:attr:`api`; a set-up error is recorded (nothing was sent) and raised."""
        try:
            api = self.api
            if send:
                api.target.require_key()
            return api
        except ModelError as exc:
            self._record(label, stage, outcome="failed", cost_usd=0.0, error=str(exc), sent=False)
            raise

    async def _cache_hit(
        self, key: str, output: OutputSpec, label: str, stage: str | None, started: float
    ) -> ModelOutput | None:
        hit = await self.cache.aget(key)
        if hit is None or not hit.complete:
            return None  # an incomplete answer stored by an older version: a miss
        try:
            parsed = parse_structured(hit.text, output) if output is not None else None
        except ValueError:
            return None  # the output type changed since: treat as a miss
        latency = time.perf_counter() - started
        self._record(
            label,
            stage,
            outcome="cache_hit",
            cost_usd=0.0,
            saved_usd=hit.cost_usd,
            latency_s=latency,
            stop_reason=hit.stop_reason,
        )
        return hit.model_copy(
            update={
                "parsed": parsed,
                "cached": True,
                "usage": Usage(),
                "cost_usd": 0.0,
                "latency_s": latency,
            }
        )

    def _record(self, label: str, stage: str | None, **fields: Any) -> None:
        self.ledger.add(CostRecord(model=self.config.model, label=label, stage=stage, **fields))

    async def _send(self, request: ModelRequest, label: str, stage: str | None) -> ModelOutput:
        """One provider call with its retries; each attempt is recorded in the ledger."""
        config = self.config
        api = self._provider(label, stage, send=True)
        if config.batch:
            return await self._batched(api, request, label, stage)
        gate = endpoint_gate(api.connection_key)
        clock = RetryClock(
            model=config.model,
            max_wait_s=config.max_retry_wait_s,
            initial_s=config.retry_initial_s,
            cap_s=config.retry_max_s,
        )
        shared = current_coordinator()

        def record(exc: TransientError, **fields: Any) -> None:
            # an error answer is not billed; no answer at all may have been
            cost = 0.0 if exc.status is not None else None
            timing = {"latency_s": exc.latency_s, "answered": exc.answered}
            self._record(label, stage, cost_usd=cost, **timing, **fields)

        async for attempt in retrying(clock, record):
            with attempt:  # the slot is given back before tenacity waits, so others may send
                async with gate.slot(config.max_connections) as queued_s:
                    clock.queued(queued_s)
                    if not config.shared_backoff:
                        return await self._shared(shared, api, request, clock, label, stage, None)
                    async with gate.sending(config.max_connections) as window_s:
                        clock.queued(window_s)
                        await gate.wait_open()
                        return await self._shared(shared, api, request, clock, label, stage, gate)
        raise AssertionError("unreachable: the policy returns an answer or raises")

    async def _batched(
        self, api: ModelAPI, request: ModelRequest, label: str, stage: str | None
    ) -> ModelOutput:
        """The call sent in a provider batch (:mod:`paperbench.llm._batch`): no connection
        slot (a batch is one upload), its record written when the batch answers."""
        from paperbench.llm._batch import current_runner

        try:
            self.ledger.check_budget(self.config.model, stage)
        except BudgetExhaustedError as exc:
            self._record(label, stage, outcome="budget_exhausted", error=str(exc), sent=False)
            raise
        return await current_runner().generate(self, api, request, label, stage)

    async def _shared(
        self,
        coordinator: Coordinator | None,
        api: ModelAPI,
        request: ModelRequest,
        clock: RetryClock,
        label: str,
        stage: str | None,
        gate: EndpointGate | None,
    ) -> ModelOutput:
        """:meth:`_attempt`, inside one of the group's slots when a coordinator is installed
        (see :mod:`paperbench.llm._shared`): the slot is given back with the attempt's cost
        once the attempt is recorded."""
        if coordinator is None:
            return await self._attempt(api, request, clock, label, stage, gate)
        config = self.config
        grant = await coordinator.acquire(
            endpoint_id(api.connection_key),
            config.max_connections,
            lease_s=config.timeout_s + 60.0,
        )
        clock.queued(grant.waited_s)
        cost: float | None = 0.0
        try:
            result = await self._attempt(
                api, request, clock, label, stage, gate, (coordinator, grant)
            )
            cost = result.cost_usd
            return result
        finally:  # also when cancelled: the slot is the group's
            await asyncio.shield(coordinator.release(grant, cost))

    async def _attempt(
        self,
        api: ModelAPI,
        request: ModelRequest,
        clock: RetryClock,
        label: str,
        stage: str | None,
        gate: EndpointGate | None,
        shared: tuple[Coordinator, Grant] | None = None,
    ) -> ModelOutput:
        """Check the budget, send once and record what happened: the answer, or a
        :class:`TransientError` for the retry policy (which records it, as retried or as the
        call's failure). Runs inside a connection slot, so that the next
        caller's budget check sees this attempt's cost. With ``gate`` (shared backoff), a
        rate-limit answer slows every caller of the endpoint down and an answer speeds
        them up again; with ``shared`` (a coordinator and its slot), the group's budget is checked
        too and the pause reaches every process of the group."""
        config = self.config
        try:
            self.ledger.check_budget(config.model, stage)
            if shared is not None and shared[1].refused is not None:
                raise BudgetExhaustedError(f"{config.model}: {shared[1].refused}")
        except BudgetExhaustedError as exc:
            self._record(label, stage, outcome="budget_exhausted", error=str(exc), sent=False)
            raise
        clock.sending()
        sent_at = time.monotonic()
        sent = time.perf_counter()
        try:
            answer = await api.generate(request)
        except TransientError as exc:
            exc.latency_s = time.perf_counter() - sent
            if gate is not None and (exc.status == 429 or exc.retry_after is not None):
                gate.rate_limited(sent_at, exc.retry_after)
                if shared is not None and exc.retry_after:
                    await shared[0].pause(shared[1].endpoint, exc.retry_after)
            raise
        except ModelError as exc:  # refused (400/401/403/404): an error answer, not billed
            self._record(
                label,
                stage,
                outcome="failed",
                cost_usd=0.0,
                latency_s=time.perf_counter() - sent,
                error=str(exc),
            )
            raise
        except BaseException as exc:
            # A bug or a cancellation: never retried, but the request may have reached the
            # provider, so it is on the record (cost unknown, no answer).
            why = "cancelled" if isinstance(exc, asyncio.CancelledError) else repr(exc)
            self._record(
                label,
                stage,
                outcome="failed",
                latency_s=time.perf_counter() - sent,
                error=f"{config.model}: {why}",
                answered=False,
            )
            raise
        latency = time.perf_counter() - sent
        if gate is not None:
            gate.answered()
        cost = self._prices.cost(config.model, answer.usage)
        self._record(
            label,
            stage,
            outcome="ok" if answer.complete else "incomplete",
            usage=answer.usage,
            cost_usd=cost,
            latency_s=latency,
            stop_reason=answer.stop_reason,
            error=None if answer.complete else _incomplete(answer),
        )
        return answer.model_copy(update={"cost_usd": cost, "latency_s": latency})


def _incomplete_reason(answer: ModelOutput) -> str:
    """The stop reason of an incomplete answer, or ``empty`` for an empty normal stop."""
    return "empty" if answer.stop_reason in ("stop", "tool_calls") else answer.stop_reason


def _incomplete(answer: ModelOutput) -> str:
    reason = _incomplete_reason(answer)
    return {
        "max_tokens": "the answer was cut off at max_tokens (raise max_tokens)",
        "content_filter": "the model refused to answer (content_filter)",
        "empty": "the answer was empty",
    }.get(reason, f"the answer ended for an unknown reason (stop_reason {reason!r})")


def _reask(answer: ModelOutput, error: str) -> tuple[Message, ...]:
    return (
        answer.assistant_message(),
        UserMessage(
            content="Your answer was not valid JSON matching the required schema "
            f"({error}). Reply again with only the JSON object."
        ),
    )


@lru_cache(maxsize=256)
def _schema_of_class(cls: type[BaseModel]) -> OutputSchema:
    return OutputSchema(name=_schema_name(cls.__name__), json_schema=cls.model_json_schema())


def output_schema(output: OutputSpec) -> OutputSchema | None:
    """The :class:`OutputSchema` of a structured-output request: the caller's plain JSON
    Schema, asked for strictly. Each provider makes it the form its API takes with its SDK's
    own helper (``paperbench.llm._schema``); answers are validated against this plain one."""
    if output is None:
        return None
    if isinstance(output, dict):
        name = _schema_name(str(output.get("title", "answer")))
        return OutputSchema(name=name, json_schema=output)
    return _schema_of_class(output)


def _schema_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "answer"


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def parse_structured(text: str, output: type[BaseModel] | dict[str, Any]) -> Any:
    """Validate ``text`` against ``output``; :class:`ValueError` says why it does not fit."""
    match = _FENCE.match(text)
    if match:
        text = match.group(1)
    if isinstance(output, dict):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
        try:
            _validator(json.dumps(output, sort_keys=True)).validate(value)
        except jsonschema.ValidationError as exc:
            where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
            raise ValueError(f"{where}: {exc.message}") from None
        return value
    try:
        return output.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        raise ValueError(f"{where}: {err['msg']}") from None


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)
