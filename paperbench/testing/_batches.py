"""The providers' batch APIs on the fake server, with their real wire shapes.

    OpenAI Files     POST /v1/files (multipart, purpose=batch), GET /v1/files/{id}[/content]
    OpenAI Batch     POST /v1/batches, GET /v1/batches[/{id}], POST /v1/batches/{id}/cancel
    Anthropic        POST /v1/messages/batches, GET /v1/messages/batches[/{id}[/results]],
                     POST /v1/messages/batches/{id}/cancel

Each request in a batch is answered by the server as if it had been sent alone (its
refusals, script, ``handler`` and faults; their delays are not waited for) and recorded like
any request, with the batch it came in (``RecordedRequest.batch`` and ``custom_id``).
Nothing runs in the background: a batch is processed when it is next looked at once
:attr:`Batches.delay` seconds have passed since it was created, or at once by the test hooks
:meth:`Batches.process` (some or all of its requests) and :meth:`Batches.expire`. What the
real APIs refuse is refused as they do: an OpenAI input file over the size limit or of the
wrong purpose, a batch for an endpoint the Batch API does not take, and input lines without
a unique ``custom_id``, of another url or model, or of a model not taken in batches (the
batch ``failed``, with its ``errors``); an Anthropic ``custom_id`` that is not 1-64
characters of ``[a-zA-Z0-9_-]`` or is repeated (a 400).
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Answer = Callable[[Any], tuple[int, dict[str, Any]]]
"""A recorded request -> the status and body the server answers it with."""

OPENAI_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/responses": "responses"}
OPENAI_OTHER_ENDPOINTS = (
    "/v1/embeddings",
    "/v1/completions",
    "/v1/moderations",
    "/v1/images/generations",
    "/v1/images/edits",
    "/v1/videos",
)
"""Endpoints the Batch API takes but the fake server does not serve."""
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
DAY = 24 * 3600
CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclass
class Limits:
    openai_bytes: int = 200 * 1024 * 1024
    openai_requests: int = 50_000
    anthropic_bytes: int = 256 * 1024 * 1024
    anthropic_requests: int = 100_000
    refused_models: set[str] = field(
        default_factory=lambda: {"gpt-4o-realtime-preview", "gpt-4o-audio-preview"}
    )
    """Models the batch APIs do not take (a dated snapshot counts as its family)."""


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "expires_at": self.created_at + 30 * DAY if self.purpose.startswith("batch") else None,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass
class Batch:
    """One batch of either provider; ``lines`` are ``(custom_id, body)`` in input order."""

    id: str
    provider: str
    endpoint: str
    lines: list[tuple[str, dict[str, Any]]]
    headers: dict[str, str]
    created: float
    status: str
    input_file_id: str = ""
    metadata: Any = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, tuple[int, dict[str, Any]] | str] = field(default_factory=dict)
    """custom_id -> (status, body) as answered, or ``"expired"`` / ``"canceled"``."""
    times: dict[str, int] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def model(self) -> str | None:
        return str(self.lines[0][1].get("model")) if self.lines else None


class Batches:
    """The files and batches of one server; its test hooks are public."""

    def __init__(
        self, answer: Answer, make_request: Callable[..., Any], base_url: Callable[[], str]
    ) -> None:
        self._answer = answer
        self._make_request = make_request
        self._base_url = base_url
        self.enabled = True
        """``False``: no batch routes (a 404, as a compatible server without them answers)."""
        self.delay = 0.0
        """Seconds after creation before a batch is processed (when next looked at)."""
        self.limits = Limits()
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, Batch] = {}
        self._lock = threading.RLock()

    # -- test hooks -------------------------------------------------------------------------

    def process(self, batch_id: str, count: int | None = None) -> None:
        """Answer the next ``count`` requests of the batch (all with ``None``) now."""
        with self._lock:
            batch = self.batches[batch_id]
            self._validate(batch)
            self._run(batch, count)

    def expire(self, batch_id: str) -> None:
        """End the batch as its 24 h window would: the requests not answered expire."""
        with self._lock:
            batch = self.batches[batch_id]
            self._validate(batch)
            if batch.provider == "openai":
                self._finish(batch, "expired", "expired")
            else:
                self._finish(batch, "ended", "expired")

    # -- routing ----------------------------------------------------------------------------

    @staticmethod
    def _parts(path: str) -> list[str]:
        parts = path.rstrip("/").split("/")[1:]
        return parts[1:] if parts[:1] == ["v1"] else parts

    def owns(self, path: str) -> bool:
        """``path`` is one of the batch APIs' (with or without ``/v1``)."""
        parts = self._parts(path)
        routes = parts[:2] == ["messages", "batches"] or parts[:1] in (["files"], ["batches"])
        return self.enabled and routes

    def route(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> tuple[int, bytes, str]:
        """The status, body and content type of the answer to a batch API request."""
        parts = self._parts(path)
        if parts[:2] == ["messages", "batches"]:
            return self._anthropic(method, parts[2:], headers, raw)
        return self._openai(method, parts, headers, raw)

    def _openai(
        self, method: str, parts: list[str], headers: dict[str, str], raw: bytes
    ) -> tuple[int, bytes, str]:
        with self._lock:
            if method == "POST" and parts == ["files"]:
                return self._upload(headers, raw)
            if method == "GET" and len(parts) in (2, 3) and parts[0] == "files":
                stored = self.files.get(parts[1])
                if stored is None:
                    return _openai_error(404, f"No such File object: {parts[1]}", "id")
                if len(parts) == 2:
                    return _json(200, stored.object())
                if parts[2] == "content":
                    return 200, stored.data, "application/octet-stream"
            if method == "POST" and parts == ["batches"]:
                return self._create_openai(headers, raw)
            if method == "GET" and parts == ["batches"]:
                return _json(200, self._list("openai", self._openai_object) | {"object": "list"})
            if len(parts) in (2, 3) and parts[0] == "batches":
                batch = self.batches.get(parts[1])
                if batch is None or batch.provider != "openai":
                    return _openai_error(404, f"No batch found with id '{parts[1]}'.", None)
                if method == "GET" and len(parts) == 2:
                    self._advance(batch)
                    return _json(200, self._openai_object(batch))
                if method == "POST" and parts[2:] == ["cancel"]:
                    return self._cancel(batch)
        return _openai_error(404, f"no route {method} /v1/{'/'.join(parts)}", None)

    def _anthropic(
        self, method: str, parts: list[str], headers: dict[str, str], raw: bytes
    ) -> tuple[int, bytes, str]:
        with self._lock:
            if method == "POST" and not parts:
                return self._create_anthropic(headers, raw)
            if method == "GET" and not parts:
                return _json(200, self._list("anthropic", self._anthropic_object))
            batch = self.batches.get(parts[0]) if parts else None
            if batch is None or batch.provider != "anthropic":
                return _anthropic_error(404, "not_found_error", "message batch not found")
            if method == "GET" and len(parts) == 1:
                self._advance(batch)
                return _json(200, self._anthropic_object(batch))
            if method == "GET" and parts[1:] == ["results"]:
                self._advance(batch)
                if batch.status != "ended":
                    return _anthropic_error(
                        400, "invalid_request_error", "Message Batch is still processing."
                    )
                lines = [_anthropic_line(cid, batch.results[cid]) for cid, _ in batch.lines]
                return 200, _jsonl(lines), "application/binary"
            if method == "POST" and parts[1:] == ["cancel"]:
                return self._cancel(batch)
        return _anthropic_error(404, "not_found_error", "not found")

    def _list(self, provider: str, render: Callable[[Batch], dict[str, Any]]) -> dict[str, Any]:
        """All of a provider's batches, newest first, in one page."""
        mine = [b for b in reversed(self.batches.values()) if b.provider == provider]
        for batch in mine:
            self._advance(batch)
        ids = [b.id for b in mine]
        return {
            "data": [render(b) for b in mine],
            "has_more": False,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }

    # -- OpenAI -----------------------------------------------------------------------------

    def _upload(self, headers: dict[str, str], raw: bytes) -> tuple[int, bytes, str]:
        ctype = headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            return _openai_error(400, "The request must be multipart/form-data.", None)
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"content-type: " + ctype.encode() + b"\r\n\r\n" + raw
        )
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = (part.get_filename(), payload)
        purpose = fields.get("purpose", (None, b""))[1].decode()
        if "file" not in fields:
            return _openai_error(400, "Missing required parameter: 'file'.", "file")
        if purpose not in FILE_PURPOSES:
            return _openai_error(
                400, f"'{purpose}' is not one of {list(FILE_PURPOSES)} - 'purpose'", "purpose"
            )
        filename, data = fields["file"]
        if purpose == "batch" and len(data) > self.limits.openai_bytes:
            limit = self.limits.openai_bytes
            return _openai_error(
                400, f"File is too large: the Batch API takes files up to {limit} bytes.", "file"
            )
        stored = self._store(filename or "upload", purpose, data)
        return _json(200, stored.object())

    def _store(self, filename: str, purpose: str, data: bytes) -> StoredFile:
        stored = StoredFile(
            f"file-{secrets.token_hex(12)}", filename, purpose, data, int(time.time())
        )
        self.files[stored.id] = stored
        return stored

    def _create_openai(self, headers: dict[str, str], raw: bytes) -> tuple[int, bytes, str]:
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return _openai_error(400, "We could not parse the JSON body of your request.", None)
        for name in ("input_file_id", "endpoint", "completion_window"):
            if name not in body:
                return _openai_error(400, f"Missing required parameter: '{name}'.", name)
        endpoint = body["endpoint"]
        if endpoint not in OPENAI_ENDPOINTS:
            known = endpoint in OPENAI_OTHER_ENDPOINTS
            why = "is not served by this server" if known else "is not supported"
            return _openai_error(
                400, f"Invalid value for 'endpoint': {endpoint} {why}.", "endpoint"
            )
        if body["completion_window"] != "24h":
            return _openai_error(
                400,
                "Invalid value for 'completion_window': only '24h' is supported.",
                "completion_window",
            )
        stored = self.files.get(str(body["input_file_id"]))
        if stored is None:
            return _openai_error(
                404, f"No such File object: {body['input_file_id']}", "input_file_id"
            )
        if stored.purpose != "batch":
            return _openai_error(
                400,
                f"The input file must have purpose 'batch', not '{stored.purpose}'.",
                "input_file_id",
            )
        batch = Batch(
            id=f"batch_{secrets.token_hex(12)}",
            provider="openai",
            endpoint=endpoint,
            lines=[],
            headers=headers,
            created=time.monotonic(),
            status="validating",
            input_file_id=stored.id,
            metadata=body.get("metadata"),
        )
        batch.times["created_at"] = int(time.time())
        batch.errors = self._parse_openai(batch, stored.data)
        self.batches[batch.id] = batch
        return _json(200, self._openai_object(batch))

    def _parse_openai(self, batch: Batch, data: bytes) -> list[dict[str, Any]]:
        """Read the input file into ``batch.lines``; the validation errors, if any."""
        errors: list[dict[str, Any]] = []

        def error(line: int | None, code: str, message: str, param: str | None = None) -> None:
            errors.append({"code": code, "message": message, "param": param, "line": line})

        seen: set[str] = set()
        model: str | None = None
        rows = [row for row in data.decode(errors="replace").splitlines() if row.strip()]
        if len(rows) > self.limits.openai_requests:
            limit = self.limits.openai_requests
            error(None, "too_many_requests", f"A batch can hold at most {limit} requests.")
            return errors
        for number, row in enumerate(rows, 1):
            try:
                line = json.loads(row)
            except json.JSONDecodeError:
                error(number, "invalid_json_line", "This line is not parseable as valid JSON.")
                continue
            if not isinstance(line, dict):
                error(number, "invalid_json_line", "This line is not a JSON object.")
                continue
            custom_id = line.get("custom_id")
            body = line.get("body")
            if not isinstance(custom_id, str) or not custom_id:
                error(number, "missing_required_parameter", "Missing 'custom_id'.", "custom_id")
            elif custom_id in seen:
                error(
                    number,
                    "duplicate_custom_id",
                    "The custom_id for this request is a duplicate of another request. "
                    "The custom_id parameter must be unique for each request in a batch.",
                    "custom_id",
                )
            elif line.get("method") != "POST":
                error(number, "invalid_method", "Only the POST method is supported.", "method")
            elif line.get("url") != batch.endpoint:
                error(
                    number,
                    "mismatched_endpoint",
                    f"The url '{line.get('url')}' does not match the batch's endpoint "
                    f"'{batch.endpoint}'.",
                    "url",
                )
            elif not isinstance(body, dict) or not isinstance(body.get("model"), str):
                error(number, "missing_required_parameter", "Missing 'body.model'.", "body.model")
            elif self._refused(body["model"]):
                error(
                    number,
                    "model_not_found",
                    f"The provided model '{body['model']}' is not supported by the Batch API.",
                    "body.model",
                )
            elif model is not None and body["model"] != model:
                error(
                    number,
                    "mismatched_model",
                    "A batch's requests must all use the same model.",
                    "body.model",
                )
            else:
                model = body["model"]
                seen.add(custom_id)
                batch.lines.append((custom_id, body))
        if not rows:
            error(None, "empty_file", "The input file holds no requests.")
        return errors

    def _refused(self, model: str) -> bool:
        return any(model == m or model.startswith(m + "-") for m in self.limits.refused_models)

    def _openai_object(self, batch: Batch) -> dict[str, Any]:
        done = [r for r in batch.results.values() if not isinstance(r, str) and r[0] == 200]
        counts = {"total": len(batch.lines), "completed": len(done)}
        counts["failed"] = len(batch.results) - len(done)
        usage = [r[1].get("usage") or {} for r in done]
        input_tokens = sum(u.get("prompt_tokens", u.get("input_tokens", 0)) for u in usage)
        output_tokens = sum(u.get("completion_tokens", u.get("output_tokens", 0)) for u in usage)
        details = [
            u.get("prompt_tokens_details") or u.get("input_tokens_details") or {} for u in usage
        ]
        reasoning = [
            u.get("completion_tokens_details") or u.get("output_tokens_details") or {}
            for u in usage
        ]
        times = batch.times
        failed = batch.status == "failed"
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": batch.model,
            "errors": {"object": "list", "data": batch.errors} if failed else None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": times["created_at"],
            "in_progress_at": times.get("in_progress_at"),
            "expires_at": times["created_at"] + DAY,
            "finalizing_at": times.get("finalizing_at"),
            "completed_at": times.get("completed_at"),
            "failed_at": times.get("failed_at"),
            "expired_at": times.get("expired_at"),
            "cancelling_at": times.get("cancelling_at"),
            "cancelled_at": times.get("cancelled_at"),
            "request_counts": counts,
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {
                    "cached_tokens": sum(d.get("cached_tokens", 0) for d in details)
                },
                "output_tokens": output_tokens,
                "output_tokens_details": {
                    "reasoning_tokens": sum(r.get("reasoning_tokens", 0) for r in reasoning)
                },
                "total_tokens": input_tokens + output_tokens,
            },
            "metadata": batch.metadata,
        }

    def _write_openai_files(self, batch: Batch) -> None:
        ok: list[dict[str, Any]] = []
        bad: list[dict[str, Any]] = []
        for custom_id, _ in batch.lines:
            result = batch.results.get(custom_id)
            if result is None:
                continue
            line: dict[str, Any] = {
                "id": f"batch_req_{secrets.token_hex(12)}",
                "custom_id": custom_id,
            }
            if isinstance(result, str):
                reason = {
                    "expired": (
                        "batch_expired",
                        "This request could not be executed before the completion window expired.",
                    ),
                    "canceled": ("batch_cancelled", "This request was cancelled."),
                }[result]
                line |= {"response": None, "error": {"code": reason[0], "message": reason[1]}}
                bad.append(line)
                continue
            status, body = result
            request_id = f"req_{secrets.token_hex(16)}"
            line |= {
                "response": {"status_code": status, "request_id": request_id, "body": body},
                "error": None,
            }
            (ok if status == 200 else bad).append(line)
        if ok:
            batch.output_file_id = self._store(
                f"{batch.id}_output.jsonl", "batch_output", _jsonl(ok)
            ).id
        if bad:
            batch.error_file_id = self._store(
                f"{batch.id}_error.jsonl", "batch_output", _jsonl(bad)
            ).id

    # -- Anthropic --------------------------------------------------------------------------

    def _create_anthropic(self, headers: dict[str, str], raw: bytes) -> tuple[int, bytes, str]:
        def refuse(message: str) -> tuple[int, bytes, str]:
            return _anthropic_error(400, "invalid_request_error", message)

        if len(raw) > self.limits.anthropic_bytes:
            return _anthropic_error(413, "request_too_large", "Request exceeds the maximum size")
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return refuse("The request body is not valid JSON.")
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return refuse("requests: List should have at least 1 item after validation, not 0")
        if len(requests) > self.limits.anthropic_requests:
            limit = self.limits.anthropic_requests
            return refuse(f"requests: List should have at most {limit} items after validation")
        lines: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for i, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            params = item.get("params") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not CUSTOM_ID.match(custom_id):
                return refuse(
                    f"requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
                )
            if custom_id in seen:
                return refuse(f"requests.{i}.custom_id: Duplicate custom_id '{custom_id}'")
            if not isinstance(params, dict) or not isinstance(params.get("model"), str):
                return refuse(f"requests.{i}.params.model: Field required")
            if self._refused(params["model"]):
                return refuse(
                    f"requests.{i}.params.model: '{params['model']}' is not supported in batches"
                )
            seen.add(custom_id)
            lines.append((custom_id, params))
        batch = Batch(
            id=f"msgbatch_{secrets.token_hex(12)}",
            provider="anthropic",
            endpoint="/v1/messages",
            lines=lines,
            headers=headers,
            created=time.monotonic(),
            status="in_progress",
        )
        batch.times["created_at"] = int(time.time())
        self.batches[batch.id] = batch
        return _json(200, self._anthropic_object(batch))

    def _anthropic_object(self, batch: Batch) -> dict[str, Any]:
        ended = batch.status == "ended"
        kinds = ["succeeded", "errored", "canceled", "expired"]
        counts = dict.fromkeys(kinds, 0) | {"processing": len(batch.lines)}
        if ended:
            counts["processing"] = 0
            for result in batch.results.values():
                kind = (
                    result
                    if isinstance(result, str)
                    else ("succeeded" if result[0] == 200 else "errored")
                )
                counts[kind] += 1
        times = batch.times
        results_url = f"{self._base_url()}/v1/messages/batches/{batch.id}/results"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.status,
            "request_counts": counts,
            "ended_at": _rfc3339(times.get("ended_at")),
            "created_at": _rfc3339(times["created_at"]),
            "expires_at": _rfc3339(times["created_at"] + DAY),
            "archived_at": None,
            "cancel_initiated_at": _rfc3339(times.get("cancelling_at")),
            "results_url": results_url if ended else None,
        }

    # -- both -------------------------------------------------------------------------------

    def _validate(self, batch: Batch) -> None:
        """Leave OpenAI's ``validating``: ``failed`` with errors, else ``in_progress``."""
        if batch.status != "validating":
            return
        now = int(time.time())
        if batch.errors:
            batch.status = "failed"
            batch.times["failed_at"] = now
        else:
            batch.status = "in_progress"
            batch.times["in_progress_at"] = now

    def _advance(self, batch: Batch) -> None:
        """What has happened to ``batch`` by now, seen by a client looking at it."""
        self._validate(batch)
        if batch.status in ("cancelling", "canceling"):
            final = "cancelled" if batch.provider == "openai" else "ended"
            self._finish(batch, final, "canceled")
        elif batch.status == "in_progress" and time.monotonic() - batch.created >= self.delay:
            self._run(batch, None)

    def _run(self, batch: Batch, count: int | None) -> None:
        if batch.status != "in_progress":
            return
        pending = [(cid, body) for cid, body in batch.lines if cid not in batch.results]
        for custom_id, body in pending[:count]:
            protocol = OPENAI_ENDPOINTS.get(batch.endpoint, "messages")
            request = self._make_request(
                protocol, batch.endpoint, batch.headers, body, time.time(), batch.id, custom_id
            )
            batch.results[custom_id] = self._answer(request)
        if len(batch.results) == len(batch.lines):
            if batch.provider == "openai":
                batch.times["finalizing_at"] = int(time.time())
            self._finish(batch, "completed" if batch.provider == "openai" else "ended", "")

    def _finish(self, batch: Batch, status: str, rest: str) -> None:
        """End ``batch`` in ``status``, the requests not answered marked ``rest``."""
        for custom_id, _ in batch.lines:
            batch.results.setdefault(custom_id, rest)
        batch.status = status
        now = int(time.time())
        key = {"ended": "ended_at"}.get(status, f"{status}_at")
        batch.times[key] = now
        if batch.provider == "openai":
            self._write_openai_files(batch)

    def _cancel(self, batch: Batch) -> tuple[int, bytes, str]:
        self._validate(batch)
        if batch.status != "in_progress":
            if batch.provider == "openai":
                return _openai_error(
                    409, f"Cannot cancel a batch with status '{batch.status}'.", None
                )
            return _json(200, self._anthropic_object(batch))
        batch.status = "cancelling" if batch.provider == "openai" else "canceling"
        batch.times["cancelling_at"] = int(time.time())
        if batch.provider == "openai":
            return _json(200, self._openai_object(batch))
        return _json(200, self._anthropic_object(batch))


def _anthropic_line(custom_id: str, result: tuple[int, dict[str, Any]] | str) -> dict[str, Any]:
    if isinstance(result, str):
        return {"custom_id": custom_id, "result": {"type": result}}
    status, body = result
    if status == 200:
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": body}}
    error = {**body, "request_id": f"req_{secrets.token_hex(12)}"}
    return {"custom_id": custom_id, "result": {"type": "errored", "error": error}}


def _rfc3339(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _json(status: int, payload: Any) -> tuple[int, bytes, str]:
    return status, json.dumps(payload).encode(), "application/json"


def _openai_error(status: int, message: str, param: str | None) -> tuple[int, bytes, str]:
    kind = "invalid_request_error"
    return _json(
        status, {"error": {"message": message, "type": kind, "param": param, "code": None}}
    )


def _anthropic_error(status: int, kind: str, message: str) -> tuple[int, bytes, str]:
    return _json(status, {"type": "error", "error": {"type": kind, "message": message}})
