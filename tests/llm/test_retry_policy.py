"""The retry policy on its own: tenacity's loop with our wait (the server's retry-after, else
jittered backoff), our stop (the call's retry budget) and a record per failed attempt. The
model's retries end to end are in test_faults.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from paperbench.errors import ModelRequestError, ModelUnavailableError
from paperbench.llm._retry import RetryClock, TransientError, retrying


def _run(
    clock: RetryClock, failures: list[Exception], records: list[dict[str, Any]] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """Attempts that raise ``failures`` in turn, then answer; the records written."""
    records = [] if records is None else records

    def record(exc: TransientError, **fields: Any) -> None:
        records.append({"status": exc.status, **fields})

    async def call() -> str:
        async for attempt in retrying(clock, record):
            with attempt:
                clock.sending()
                if clock.attempts <= len(failures):
                    raise failures[clock.attempts - 1]
                return f"answer after {clock.attempts} attempts"
        raise AssertionError("unreachable")

    return asyncio.run(call()), records


def _clock(max_wait_s: float = 5.0) -> RetryClock:
    return RetryClock(model="m", max_wait_s=max_wait_s, initial_s=0.001, cap_s=0.002)


def test_transient_failures_are_retried_and_each_is_recorded() -> None:
    failures: list[Exception] = [
        TransientError("HTTP 429: slow down", retry_after=0.01, status=429),
        TransientError("timed out"),
    ]
    answer, records = _run(_clock(), failures)
    assert answer == "answer after 3 attempts"
    assert [(r["status"], r["outcome"]) for r in records] == [(429, "retried"), (None, "retried")]


def test_a_wait_past_the_budget_gives_up_with_the_last_failure_recorded() -> None:
    clock = _clock(max_wait_s=0.05)
    failures: list[Exception] = [TransientError("HTTP 503: busy", retry_after=10, status=503)]
    records: list[dict[str, Any]] = []
    with pytest.raises(ModelUnavailableError, match=r"gave up after 1 attempt .*HTTP 503"):
        _run(clock, failures, records)
    assert [(r["status"], r["outcome"]) for r in records] == [(503, "failed")]
    assert "gave up" in records[0]["error"]
    assert clock.attempts == 1  # retry-after 10 s would pass the 0.05 s budget: no wait


def test_a_refusal_is_not_retried() -> None:
    clock = _clock()
    with pytest.raises(ModelRequestError):
        _run(clock, [ModelRequestError("m: request refused (HTTP 400)")])
    assert clock.attempts == 1
