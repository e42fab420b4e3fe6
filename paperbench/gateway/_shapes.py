"""The providers' own error bodies, so that an SDK raises the error it would raise for the
real API (``AuthenticationError``, ``RateLimitError``, ``BadRequestError``, ...)."""

from __future__ import annotations

import json
from typing import Literal

Protocol = Literal["messages", "responses", "chat"]
"""The wire protocol of a request: Anthropic Messages, OpenAI Responses, Chat Completions."""

Family = Literal["anthropic", "openai"]
"""Whose API a route belongs to (its error shape, its auth header)."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

CREDIT_MESSAGE = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)
"""Anthropic's answer (400) to a request it will not serve for lack of credit."""

QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. "
    "For more information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)
"""OpenAI's answer (429 ``insufficient_quota``) to a request past the account's quota."""


def error_body(
    family: Family,
    status: int,
    message: str,
    *,
    kind: str | None = None,
    code: str | None = None,
) -> bytes:
    """An error body in ``family``'s shape: Anthropic ``{"type": "error", "error": {"type",
    "message"}}``, OpenAI ``{"error": {"message", "type", "param", "code"}}``."""
    if family == "anthropic":
        anthropic_kind = kind or _ANTHROPIC_TYPES.get(status, "api_error")
        payload: dict[str, object] = {
            "type": "error",
            "error": {"type": anthropic_kind, "message": message},
        }
    else:
        openai_kind = kind or ("server_error" if status >= 500 else "invalid_request_error")
        payload = {"error": {"message": message, "type": openai_kind, "param": None, "code": code}}
    return json.dumps(payload).encode()


def auth_error(family: Family) -> tuple[int, bytes]:
    """401 for a missing or wrong per-run token."""
    message = "invalid x-api-key" if family == "anthropic" else "Incorrect API key provided."
    return 401, error_body(family, 401, message, code="invalid_api_key")


def budget_error(family: Family) -> tuple[int, bytes]:
    """What the provider answers when the account is out of money: Anthropic 400 with the
    credit message, OpenAI 429 ``insufficient_quota``."""
    if family == "anthropic":
        return 400, error_body(family, 400, CREDIT_MESSAGE)
    body = error_body(
        family, 429, QUOTA_MESSAGE, kind="insufficient_quota", code="insufficient_quota"
    )
    return 429, body


def model_error(family: Family, model: str, why: str) -> tuple[int, bytes]:
    """404 for a model the run may not use (or no model of the provider at all)."""
    if family == "anthropic":
        return 404, error_body(family, 404, f"model: {model}: {why}")
    message = f"The model `{model}` does not exist or you do not have access to it ({why})."
    return 404, error_body(family, 404, message, code="model_not_found")
