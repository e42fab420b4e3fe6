"""Answers already paid for, kept so that a resumed agent re-sending a request is answered
again without a second payment: ``replay/<sha256>.json.gz`` under the gateway's log folder,
keyed by the method, the route (with its query) and the request body's bytes."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from paperbench.llm import StopReason, Usage

REPLAY_VERSION = 1


def replay_key(method: str, route: str, body: bytes) -> str:
    """The SHA-256 of the method, the route and the body."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode() + b"\n" + route.encode() + b"\n")
    digest.update(body)
    return digest.hexdigest()


@dataclass(frozen=True)
class StoredAnswer:
    """An answered request: what the client got, and what it cost."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes
    model: str
    usage: Usage | None
    cost_usd: float | None
    stop_reason: StopReason | None


class ReplayStore:
    """The stored answers in one folder (written atomically, read back by any gateway).

    The keys on disk are listed once, when the store is opened, so a request with no stored
    answer (nearly all of them) costs a set lookup, not a file system call. Files are renamed
    into place but not synced: a killed process loses nothing written, a power cut may lose
    the last answers (they are then paid again)."""

    SUFFIX = ".json.gz"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            names = []
        self._keys = {n[: -len(self.SUFFIX)] for n in names if n.endswith(self.SUFFIX)}

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{self.SUFFIX}"

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._keys

    def get(self, key: str) -> StoredAnswer | None:
        """The answer stored under ``key``; ``None`` if there is none (or it is unreadable)."""
        if key not in self:
            return None
        try:
            data = json.loads(gzip.decompress(self.path(key).read_bytes()))
        except (OSError, EOFError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("version") != REPLAY_VERSION:
            return None
        usage = data.get("usage")
        return StoredAnswer(
            status=int(data["status"]),
            headers=[(str(k), str(v)) for k, v in data["headers"]],
            body=base64.b64decode(data["body"]),
            model=str(data["model"]),
            usage=Usage.model_validate(usage) if usage is not None else None,
            cost_usd=data.get("cost_usd"),
            stop_reason=data.get("stop_reason"),
        )

    def put(self, key: str, answer: StoredAnswer) -> None:
        payload = {
            "version": REPLAY_VERSION,
            "status": answer.status,
            "headers": answer.headers,
            "body": base64.b64encode(answer.body).decode("ascii"),
            "model": answer.model,
            "usage": answer.usage.model_dump() if answer.usage is not None else None,
            "cost_usd": answer.cost_usd,
            "stop_reason": answer.stop_reason,
        }
        data = gzip.compress(json.dumps(payload).encode(), 5)
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.path(key)
        temporary = target.with_name(f".{target.name}.{threading.get_ident()}.tmp")
        try:
            temporary.write_bytes(data)
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        with self._lock:
            self._keys.add(key)
