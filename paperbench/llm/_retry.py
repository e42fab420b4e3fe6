"""What is retried, how long to wait, and when a call gives up.

Providers translate their SDK's errors into :class:`TransientError` (429, 5xx, timeouts,
dropped connections: worth retrying) or a :class:`~paperbench.errors.ModelRequestError`
(400/401/403/404: fail at once); anything else is a bug and is never retried.
:class:`RetryClock` decides each wait: the server's ``retry-after`` when it gave one, else
exponential backoff with full jitter, until the next wait would take the call past its total
retry budget. The budget is counted from the call's first send and leaves out the time the
call waited for a connection slot, so a call queued behind thousands of others keeps all of
its retries. :func:`retrying` makes that policy a tenacity ``AsyncRetrying`` (its wait, its
stop, and hooks that record each failed attempt); the loop over it is in
:meth:`paperbench.llm.Model.generate`, whose attempts hold the connection slot only while they
send, so the slot is back before every wait.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, NoReturn

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type
from tenacity.stop import stop_base
from tenacity.wait import wait_base, wait_random_exponential

from paperbench._console import plural
from paperbench.errors import (
    ContextLengthError,
    ModelAuthError,
    ModelRequestError,
    ModelUnavailableError,
)

log = logging.getLogger("paperbench.llm")


class TransientError(Exception):
    """A failure worth retrying. ``retry_after`` is the server's requested wait, if any;
    ``status`` the HTTP status when the server answered with an error (nothing is billed
    then), ``None`` otherwise (a timeout, a dropped connection, a broken body).

    ``answered`` says whether an HTTP answer came at all: an error status, or a 200 whose
    body was broken (by default: whether there is a ``status``). Without one (a refused,
    reset or dropped connection, a timeout) the server may never have received the request,
    so the ledger counts the attempt apart from the requests (``CostTotal.unanswered``)."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        status: int | None = None,
        answered: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
        self.answered = status is not None if answered is None else answered
        self.latency_s = 0.0
        """From the attempt's send to this failure (set by the caller that sent it)."""


_CONNECTION_REASONS = {
    "RemoteProtocolError": "connection closed by the server",
    "ServerDisconnectedError": "connection closed by the server",
    "ReadError": "connection closed by the server",
    "ConnectionResetError": "connection reset by the server",
    "ConnectError": "connection refused",
    "ConnectionRefusedError": "connection refused",
}


def connection_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words: the first non-empty message down the
    exception's chain (its causes, below the SDK's generic "Connection error."), else what
    the innermost exception's type says (``connection closed by the server``), else its name."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for link in chain[1:]:
        text = str(link).strip()
        if text:
            return text.splitlines()[0]
    for link in reversed(chain):
        if type(link).__name__ in _CONNECTION_REASONS:
            return _CONNECTION_REASONS[type(link).__name__]
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(chain[-1]).__name__


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date)."""
    if not headers:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


_OPENAI_WINDOW = re.compile(
    r"maximum context length is (\d+) tokens.*?(?:resulted in|requested) (\d+) tokens", re.DOTALL
)
_ANTHROPIC_WINDOW = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_WINDOW_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "exceeds the context window",
    "prompt is too long",
)


def context_length_error(
    status: int, message: str, *, code: str | None, model: str
) -> ContextLengthError | None:
    """The provider's "the conversation does not fit the window" refusal as a typed error,
    with the token counts it named; ``None`` for any other answer. Never retried."""
    if status not in (400, 413):
        return None
    text = " ".join(message.split())
    if code != "context_length_exceeded" and not any(h in text for h in _WINDOW_HINTS):
        return None
    tokens = limit = None
    if found := _OPENAI_WINDOW.search(text):
        limit, tokens = int(found.group(1)), int(found.group(2))
    elif found := _ANTHROPIC_WINDOW.search(text):
        tokens, limit = int(found.group(1)), int(found.group(2))
    counts = f" ({tokens} tokens > {limit})" if tokens is not None else ""
    return ContextLengthError(
        f"{model}: the conversation does not fit the model's context window{counts}: {text[:300]}",
        tokens=tokens,
        limit=limit,
    )


def status_error(
    status: int,
    message: str,
    *,
    headers: Any,
    model: str,
    key_hint: str,
    code: str | None = None,
) -> Exception:
    """The error for an HTTP status: retry 408/409/429/5xx, refuse the rest at once (a
    context-window refusal as :class:`ContextLengthError`)."""
    window = context_length_error(status, message, code=code, model=model)
    if window is not None:
        return window
    message = " ".join(message.split())[:300]
    if status in (408, 409, 429) or status >= 500:
        return TransientError(
            f"HTTP {status}: {message}", retry_after=parse_retry_after(headers), status=status
        )
    if status == 401:
        return ModelAuthError(
            f"{model}: the API key was rejected (HTTP 401: {message}); check {key_hint}",
            status=401,
        )
    if status == 403:
        return ModelAuthError(f"{model}: permission denied (HTTP 403: {message})", status=403)
    if status == 404:
        why = f"unknown model or wrong base URL (HTTP 404: {message})"
    else:
        why = f"request refused (HTTP {status}: {message})"
    return ModelRequestError(f"{model}: {why}")


class RetryClock:
    """The retry budget of one call: ``max_wait_s`` of time since the first send, not
    counting the time spent waiting for a connection slot."""

    def __init__(self, *, model: str, max_wait_s: float, initial_s: float, cap_s: float) -> None:
        self.model = model
        self.max_wait_s = max_wait_s
        self.initial_s = initial_s
        self.cap_s = cap_s
        self.attempts = 0
        self._first_send: float | None = None
        self._queued_s = 0.0

    def queued(self, seconds: float) -> None:
        """The call waited ``seconds`` for a connection slot (not charged to its budget)."""
        if self._first_send is not None:
            self._queued_s += seconds

    def sending(self) -> None:
        """An attempt is about to be sent; the clock starts at the first."""
        self.attempts += 1
        if self._first_send is None:
            self._first_send = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        """Budget used so far."""
        if self._first_send is None:
            return 0.0
        return time.monotonic() - self._first_send - self._queued_s

    def give_up(self, exc: TransientError) -> ModelUnavailableError:
        return ModelUnavailableError(
            f"{self.model}: gave up after {plural(self.attempts, 'attempt')} "
            f"(retry budget {self.max_wait_s:g}s): {exc}"
        )


class _WaitRetryAfter(wait_base):
    """The server's ``retry-after`` when it gave one, else exponential backoff with full
    jitter (a uniform draw below ``initial_s`` doubled per attempt, at most ``cap_s``)."""

    def __init__(self, clock: RetryClock) -> None:
        self._backoff = wait_random_exponential(multiplier=clock.initial_s, max=clock.cap_s)

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = _failure(retry_state)
        return exc.retry_after if exc.retry_after is not None else self._backoff(retry_state)


class _StopByBudget(stop_base):
    """Stop when the coming wait would take the call past its retry budget."""

    def __init__(self, clock: RetryClock) -> None:
        self.clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.clock.elapsed_s + retry_state.upcoming_sleep > self.clock.max_wait_s


def _failure(retry_state: RetryCallState) -> TransientError:
    outcome = retry_state.outcome
    exc = outcome.exception() if outcome is not None else None
    assert isinstance(exc, TransientError)  # only these are retried
    return exc


Record = Callable[..., None]
"""Writes one attempt's ledger record: ``record(exc, outcome=..., error=...)``."""


def retrying(clock: RetryClock, record: Record) -> AsyncRetrying:
    """The retry policy of one call as a tenacity ``AsyncRetrying``: a
    :class:`TransientError` is retried after :class:`_WaitRetryAfter`'s wait until
    :class:`_StopByBudget` says the budget is spent; anything else ends the call at once.
    Each failed attempt is recorded through ``record``: ``retried`` before its wait, or
    ``failed`` with the :class:`ModelUnavailableError` the call then raises."""

    def before_sleep(retry_state: RetryCallState) -> None:
        exc = _failure(retry_state)
        record(exc, outcome="retried", error=str(exc))
        log.info(
            "%s: attempt %d failed (%s); retrying in %.2fs",
            clock.model,
            clock.attempts,
            exc,
            retry_state.upcoming_sleep,
        )

    def give_up(retry_state: RetryCallState) -> NoReturn:
        exc = _failure(retry_state)
        failure = clock.give_up(exc)
        record(exc, outcome="failed", error=str(failure))
        raise failure from exc

    return AsyncRetrying(
        retry=retry_if_exception_type(TransientError),
        wait=_WaitRetryAfter(clock),
        stop=_StopByBudget(clock),
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        sleep=asyncio.sleep,
    )
