"""The response cache: one SQLite file, content-addressed, safe under concurrent writers.

A key is the SHA-256 of the canonical JSON of everything that shapes the answer: the model,
the provider and base URL actually called (after ``OPENAI_BASE_URL`` and named endpoints are
resolved, so a vLLM server and OpenAI never share entries), the provider ``options``, the
config's ``cache_version`` (change it to invalidate entries after a change the request does
not show) and the whole request (messages, tools, output schema, generation parameters).
Only complete answers are stored (see :attr:`~paperbench.llm.ModelOutput.complete`), as the
JSON of a :class:`~paperbench.llm.ModelOutput`. API keys are never part of a key or a value.

The file uses WAL mode so many processes can read while one writes; each write is its own
short transaction and ``busy_timeout`` makes writers wait for each other. The schema evolves
by forward-only, named migrations recorded in the file itself. :meth:`ResponseCache.aget`
and :meth:`ResponseCache.aput` run the SQLite calls in the cache's own thread, off the event
loop.

A cache holds its connection until :meth:`ResponseCache.close`. The caches of
:func:`shared_cache` are counted: each :func:`shared_cache` is matched by a
:func:`release_shared` (a :class:`~paperbench.llm.Model` does it in ``aclose``), and the
last release closes the file. Whatever is still open when the process exits is closed then.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from paperbench.llm._types import ModelOutput, ModelRequest

CACHE_DIR_ENV = "PAPERBENCH_CACHE_DIR"

KEY_VERSION = 2
"""The layout of a key's payload; bumped when what goes into a key changes."""

_BUSY_TIMEOUT_S = 30.0
_OPEN_ATTEMPTS = 20

T = TypeVar("T")

_MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_responses",
        """
        CREATE TABLE responses (
            key TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            created REAL NOT NULL,
            output TEXT NOT NULL
        )
        """,
    ),
)


def default_cache_path() -> Path:
    """``$PAPERBENCH_CACHE_DIR/llm-cache.sqlite``, else ``~/.cache/paperbench/...``."""
    root = os.environ.get(CACHE_DIR_ENV)
    base = Path(root) if root else Path.home() / ".cache" / "paperbench"
    return base / "llm-cache.sqlite"


def cache_key(
    *,
    model: str,
    provider: str,
    base_url: str | None,
    options: Mapping[str, Any],
    version: str | None,
    request: ModelRequest,
) -> str:
    """The content address of one request to one resolved endpoint."""
    payload: dict[str, Any] = {
        "v": KEY_VERSION,
        "model": model,
        "provider": provider,
        "base_url": base_url,
        "options": dict(options),
        "cache_version": version,
        # the prompt cache key only routes the call to a provider cache: same answer
        "request": request.model_dump(mode="json", exclude={"prompt_cache_key"}),
    }
    canonical = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _while_busy(step: Callable[[], T]) -> T:
    """Run ``step``, again after a short pause while SQLite says the file is busy (a bounded
    number of times). Switching a file to WAL does not wait on ``busy_timeout``, so several
    processes opening a fresh file at once need this."""
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or attempt == _OPEN_ATTEMPTS - 1:
                raise
        time.sleep(min(0.5, 0.01 * 2**attempt))
    raise AssertionError("unreachable")


class ResponseCache:
    """A SQLite file of answers by request key. One instance may be shared by every task of
    a process; other processes open their own on the same file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False
        self._conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        # One thread does this cache's I/O, so that callers on an event loop never block it.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-cache")
        _OPEN.add(self)
        try:
            _while_busy(self._open)
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        """Set up the connection and bring the schema up to date. Several processes may open
        a fresh file at once: only one of them switches it to WAL (the others find it done),
        and each step is retried while another process holds the lock."""
        conn = self._conn
        with self._lock:
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")  # waits on busy_timeout for other writers
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL)"
                )
                done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
                for name, sql in _MIGRATIONS:
                    if name not in done:
                        conn.execute(sql)
                        conn.execute(
                            "INSERT INTO migrations (name, applied) VALUES (?, ?)",
                            (name, time.time()),
                        )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def get(self, key: str) -> ModelOutput | None:
        """The stored answer for ``key`` (blocking; on an event loop use :meth:`aget`)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT output FROM responses WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        return ModelOutput.model_validate_json(row[0])

    def put(self, key: str, output: ModelOutput) -> None:
        """Store ``output`` under ``key`` (blocking; on an event loop use :meth:`aput`)."""
        data = output.model_dump_json(exclude={"parsed"})
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO responses (key, model, created, output) "
                "VALUES (?, ?, ?, ?)",
                (key, output.model, time.time(), data),
            )

    async def aget(self, key: str) -> ModelOutput | None:
        """:meth:`get` in the cache's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.get, key)

    async def aput(self, key: str, output: ModelOutput) -> None:
        """:meth:`put` in the cache's thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.put, key, output)

    def __len__(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Finish this cache's pending I/O and close its connection (again: nothing)."""
        self._executor.shutdown(wait=True)
        with self._lock:
            self._conn.close()
            self._closed = True
        _OPEN.discard(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_OPEN: weakref.WeakSet[ResponseCache] = weakref.WeakSet()
"""Every cache of this process whose connection is open."""

_SHARED: dict[Path, ResponseCache] = {}
_USERS: dict[Path, int] = {}
_SHARED_LOCK = threading.Lock()


def shared_cache(path: str | Path | None) -> ResponseCache:
    """One :class:`ResponseCache` per file per process, opened by its first user; each call
    is one more user, to be matched by :func:`release_shared`."""
    resolved = (Path(path) if path is not None else default_cache_path()).resolve()
    with _SHARED_LOCK:
        cache = _SHARED.get(resolved)
        if cache is None:
            cache = _SHARED[resolved] = ResponseCache(resolved)
        _USERS[resolved] = _USERS.get(resolved, 0) + 1
        return cache


def release_shared(cache: ResponseCache) -> None:
    """One user of a :func:`shared_cache` is done; the last one closes it."""
    with _SHARED_LOCK:
        path = cache.path
        if _SHARED.get(path) is not cache:
            return
        _USERS[path] -= 1
        if _USERS[path] > 0:
            return
        del _SHARED[path], _USERS[path]
    cache.close()


def open_caches() -> int:
    """How many caches of this process have their connection open."""
    return len(_OPEN)


@atexit.register
def _close_all() -> None:
    with _SHARED_LOCK:
        _SHARED.clear()
        _USERS.clear()
    for cache in list(_OPEN):
        cache.close()
