"""One request through the gateway, as the rollout's callback gets it and as gateway.jsonl
holds it (one line each); the bodies are kept up to a size, and where they were cut is said."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field

from paperbench.gateway._shapes import Protocol
from paperbench.llm import CallOutcome, StopReason, Usage

BODY_CAP = 256 * 1024
"""Bytes of a request or answer body kept in a log line; the rest is cut (and said)."""

GatewayOutcome = CallOutcome | Literal["unauthorized", "passed", "refused"]


class GatewayCall(BaseModel):
    """One request the gateway answered.

    ``outcome`` is a cost-ledger outcome (``ok``, ``incomplete`` for a stream cut before
    its end, ``failed``, ``cache_hit`` for an answer replayed from the store,
    ``budget_exhausted``), ``unauthorized`` for a request without the run's token,
    ``refused`` for a route or query parameter the gateway does not forward (never sent), or
    ``passed`` for a request that costs nothing (listing models, counting tokens)."""

    model_config = ConfigDict(extra="forbid")

    time: float = Field(default_factory=time.time)
    method: str
    route: str
    """The path asked of the gateway, with its query string, as sent (not decoded)."""
    protocol: Protocol | None = None
    """``messages``, ``responses`` or ``chat`` for a model call."""
    model: str | None = None
    """``provider/model`` as asked (the provider is the upstream's)."""
    stream: bool = False
    status: int
    """The status the client got."""
    outcome: GatewayOutcome
    usage: Usage | None = None
    """``None`` when the answer did not say (a Chat stream without ``include_usage``)."""
    cost_usd: float | None = None
    saved_usd: float | None = None
    latency_s: float = 0.0
    """From the request's arrival to the answer's last byte."""
    stop_reason: StopReason | None = None
    error: str | None = None
    replay_key: str | None = None
    request: Any = None
    """The request body: JSON, or text cut at :data:`BODY_CAP` (``request_cut_at``)."""
    request_cut_at: int | None = None
    answer: Any = None
    """The answer: a JSON body, or a stream's raw events as text, cut at :data:`BODY_CAP`."""
    answer_cut_at: int | None = None


def kept_body(data: bytes, *, as_json: bool) -> tuple[Any, int | None]:
    """``data`` as a log line keeps it: parsed JSON when it fits and parses, else text cut at
    :data:`BODY_CAP` (and the offset where it was cut)."""
    if not data:
        return None, None
    if as_json and len(data) <= BODY_CAP:
        try:
            return json.loads(data), None
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    if len(data) > BODY_CAP:
        return data[:BODY_CAP].decode("utf-8", "replace"), BODY_CAP
    return data.decode("utf-8", "replace"), None


class CallLog:
    """gateway.jsonl: one :class:`GatewayCall` a line, appended and flushed per call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None
        self._lock = threading.Lock()

    def write(self, call: GatewayCall) -> None:
        line = call.model_dump_json() + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
