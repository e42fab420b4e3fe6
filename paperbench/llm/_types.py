"""The data that crosses the provider boundary: messages, tools, requests, outputs, usage.

Every model here is a pydantic model so that it can be logged, cached and sent to another
process as JSON. Provider modules translate these to and from their SDK's types.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

DEFAULT_MAX_CONNECTIONS = 32
"""Requests in flight per provider endpoint, unless a command or config says otherwise."""

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""How hard a reasoning model thinks; ``None`` leaves the provider's default."""

StopReason = Literal["stop", "max_tokens", "tool_calls", "content_filter", "unknown"]
"""Why the model stopped: normalised across providers."""

CallOutcome = Literal["ok", "incomplete", "retried", "cache_hit", "failed", "budget_exhausted"]
"""How a call (or one attempt of it) ended, as recorded in the cost ledger: ``incomplete``
is an answer that did not end normally (see :attr:`ModelOutput.complete`), ``retried`` an
attempt that failed in a way worth retrying and was retried."""

CallLabel = str
"""The purpose of a call, for the cost report. Well-known values are in :data:`LABELS`."""

LABELS: tuple[str, ...] = ("agent_step", "judge_ranking", "judge_grading", "parsing", "check")
"""Conventional call labels: an agent's step, the judge ranking files, grading, parsing."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SystemMessage(_Frozen):
    """The system prompt."""

    role: Literal["system"] = "system"
    content: str
    cache: bool = False
    """Mark the end of a long shared prefix: providers with explicit prompt caching
    (Anthropic ``cache_control``) place a cache breakpoint after this message."""


class UserMessage(_Frozen):
    """A user turn (instructions, reminders, notes)."""

    role: Literal["user"] = "user"
    content: str
    cache: bool = False
    """See :attr:`SystemMessage.cache`."""


class ToolCall(_Frozen):
    """A call of one tool the model asked for; ``truncated`` when the answer was cut inside it."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None
    """Set when the call must not be run: its arguments were not a JSON object
    (``arguments`` is then empty), or the answer was cut off at the output limit while the
    call was being written (:attr:`truncated`)."""
    truncated: bool = False
    """The answer stopped at ``max_tokens`` (``stop_reason == "max_tokens"``): the call may be
    incomplete even when its arguments parse, so it carries a ``parse_error`` too."""


class ReasoningItem(_Frozen):
    """One piece of a model's reasoning, kept exactly as the provider sent it so that it can
    be sent back with the next turn (a tool loop with extended thinking or a reasoning model
    continues only when its reasoning is replayed unchanged, in order).

    ``type`` says whose it is: ``thinking`` and ``redacted_thinking`` are Anthropic content
    blocks, ``reasoning`` an OpenAI Responses item. A provider sends back only its own types.
    """

    type: Literal["thinking", "redacted_thinking", "reasoning"]
    text: str = ""
    """The readable part: a thinking block's text, or a reasoning item's summaries joined."""
    signature: str | None = None
    """Anthropic: the signature of a thinking block."""
    data: str | None = None
    """Anthropic: a redacted_thinking block's data. OpenAI: the item's encrypted_content."""
    id: str | None = None
    """OpenAI: the reasoning item's id."""
    summary: tuple[str, ...] = ()
    """OpenAI: the reasoning item's summary texts, in order."""


def _legacy_signature(data: Any) -> Any:
    """Read the ``reasoning_signature`` field of earlier versions (cached answers, stored
    conversations) as the one thinking block it stood for."""
    if isinstance(data, dict) and "reasoning_signature" in data:
        data = dict(data)
        signature = data.pop("reasoning_signature")
        if signature is not None and not data.get("reasoning_items"):
            text = data.get("reasoning") or ""
            data["reasoning_items"] = [{"type": "thinking", "text": text, "signature": signature}]
    return data


class AssistantMessage(_Frozen):
    """The model's turn: its text, tool calls and reasoning (sent back as the provider needs)."""

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    """The readable reasoning (thinking text or summaries); informational, never sent."""
    reasoning_items: tuple[ReasoningItem, ...] = ()
    """The opaque reasoning of this turn, in the order the provider sent it; sent back."""

    _legacy = model_validator(mode="before")(_legacy_signature)


class ToolMessage(_Frozen):
    """The result of one tool call, answering the call with ``tool_call_id``."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str
    name: str | None = None
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any message of a conversation, told apart by its ``role``."""


class ToolDef(_Frozen):
    """A function the model may call; ``parameters`` is a JSON Schema object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class OutputSchema(_Frozen):
    """A structured-output request: the answer must be JSON matching ``json_schema``."""

    name: str = "answer"
    json_schema: dict[str, Any]
    strict: bool = True


class ModelRequest(_Frozen):
    """One call as sent to a provider, with every generation parameter resolved."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    output: OutputSchema | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    prompt_cache_key: str | None = None
    """Calls sharing this key share a prompt cache: OpenAI gets ``prompt_cache_key``, and
    Anthropic a rolling ``cache_control`` breakpoint on the last block of the conversation.
    Not part of the response-cache key (it never changes the answer)."""


class Usage(_Frozen):
    """Token counts of one call. ``input_tokens`` includes cached and cache-written input;
    ``output_tokens`` includes reasoning tokens (both as the providers bill them)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelOutput(BaseModel):
    """What one successful call returned."""

    model_config = ConfigDict(extra="forbid")

    model: str
    """The ``provider/model`` string that answered."""
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parsed: Any = None
    """The validated structured output: an instance of the requested pydantic model, or the
    JSON value for a JSON Schema request; ``None`` when no structured output was asked."""
    reasoning: str | None = None
    """The readable reasoning: thinking text or reasoning summaries."""
    reasoning_items: list[ReasoningItem] = Field(default_factory=list)
    """The reasoning as the provider sent it, for the next turn (see :class:`ReasoningItem`)."""
    stop_reason: StopReason = "stop"
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    """Cost of the calls behind this answer (re-asks included); ``None`` if the model has no
    price; ``0.0`` for a response-cache hit."""
    cached: bool = False
    """True when the answer came from the response cache: no tokens were spent."""
    attempts: int = 1
    """Provider calls made, counting structured-output re-asks (not transport retries)."""
    latency_s: float = 0.0

    _legacy = model_validator(mode="before")(_legacy_signature)

    @property
    def complete(self) -> bool:
        """True when the answer ended normally: the model stopped (or stopped to call tools)
        after giving text or tool calls. An answer cut off at ``max_tokens``, a refusal
        (``content_filter``), one with an ``unknown`` stop reason, or an empty one is not
        complete: it is never cached, and a structured-output call raises
        :class:`~paperbench.errors.IncompleteAnswerError` for it."""
        if self.stop_reason not in ("stop", "tool_calls"):
            return False
        return bool(self.tool_calls) or bool(self.text.strip())

    def assistant_message(self) -> AssistantMessage:
        """This output as the next assistant turn of a conversation."""
        return AssistantMessage(
            content=self.text,
            tool_calls=tuple(self.tool_calls),
            reasoning=self.reasoning,
            reasoning_items=tuple(self.reasoning_items),
        )


class ModelConfig(BaseModel):
    """Everything needed to build a model client, in any process.

    Plain and serialisable: ``api_key`` is never dumped, pickled or shown in a repr; when it
    is not given, the provider reads its variable (``OPENAI_API_KEY``, ...) from the
    environment or a ``.env`` file in the working directory.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    """``provider/model``, e.g. ``openai/gpt-4o``, ``anthropic/claude-sonnet-4-5``,
    ``mockllm/echo``, or ``<endpoint>/<model>`` for a named OpenAI-compatible endpoint."""
    base_url: str | None = None
    """An OpenAI-compatible (or Anthropic-compatible) server; default: the provider's own,
    or ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` when set."""
    api_key: SecretStr | None = Field(default=None, exclude=True, repr=False)
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1)
    """Concurrent requests per provider endpoint, shared by every caller in the process."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Timeout of one HTTP request."""
    max_retry_wait_s: float = Field(default=900.0, ge=0)
    """Total time one call may spend retrying 429/5xx/timeouts before it fails."""
    retry_initial_s: float = Field(default=1.0, ge=0)
    retry_max_s: float = Field(default=60.0, ge=0)
    """Largest single backoff (a ``retry-after`` header may ask for more, within the total)."""
    structured_retries: int = Field(default=2, ge=0)
    """Times a malformed structured answer is re-asked before the call fails."""
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    cache: bool = False
    """Use the response cache (the judge turns it on)."""
    cache_path: str | None = None
    """The SQLite cache file; default ``$PAPERBENCH_CACHE_DIR/llm-cache.sqlite``."""
    cache_version: str | None = None
    """Part of every cache key: change it to stop reusing answers stored before a change
    that the request itself does not show (how answers are read, say)."""
    shared_backoff: bool = True
    """The callers of one endpoint in this process back off together: when one is told to
    wait (``retry-after``) all wait, and each rate-limit answer halves how many requests
    are sent at once (it grows back with the answers). Off: each call waits only for its
    own 429s."""
    batch: bool = False
    """Send the calls through the provider's batch API, gathered with other callers' into
    one batch, at the batch price (see :mod:`paperbench.llm._batch`)."""
    prices_path: str | None = None
    """A YAML price table merged over the bundled one (also ``PAPERBENCH_PRICES``)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific options, validated by the provider (unknown keys are errors)."""

    @field_validator("model")
    @classmethod
    def _check_model(cls, value: str) -> str:
        provider, _, name = value.partition("/")
        if not provider or not name:
            raise ValueError(f"expected 'provider/model', got {value!r}")
        return value

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_base_url(value)
        return value

    @property
    def provider(self) -> str:
        return self.model.partition("/")[0]

    @property
    def model_name(self) -> str:
        return self.model.partition("/")[2]

    def __getstate__(self) -> dict[Any, Any]:
        # Never pickle the key (Ray ships configs between processes): the other side reads
        # it from its own environment.
        state: dict[Any, Any] = super().__getstate__()
        values = dict(state.get("__dict__", {}))
        values["api_key"] = None
        return {**state, "__dict__": values}


def check_base_url(value: str) -> str:
    """``value`` if it is an http(s) URL with a host; else :class:`ValueError` saying so."""
    parsed = urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"expected an http(s) URL such as http://localhost:8000/v1, got {value!r}")
    return value


def env_value(name: str) -> str | None:
    """A variable from the environment, else from ``.env`` in the working directory."""
    value = os.environ.get(name)
    if value:
        return value
    return _dotenv().get(name) or None


_DOTENV_CACHE: dict[str, dict[str, str | None]] = {}


def _dotenv() -> dict[str, str | None]:
    path = os.path.join(os.getcwd(), ".env")
    if path not in _DOTENV_CACHE:
        if os.path.isfile(path):
            from dotenv import dotenv_values

            _DOTENV_CACHE[path] = dict(dotenv_values(path))
        else:
            _DOTENV_CACHE[path] = {}
    return _DOTENV_CACHE[path]
