"""Whether a model server answers at all, asked once before a command fans out its calls.

A grading of a few hundred leaves against a server that is down would otherwise retry each
leaf on its own for many minutes before saying anything. One plain HTTP request to each base
URL the command will call (any HTTP answer counts, even a 404: the server is there) finds a
closed port, an unknown host or a server that does not answer within ``timeout_s``. It costs
nothing and sends no model request. The providers' own APIs (no base URL) are not asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import aiohttp

from paperbench.errors import ModelRequestError, ModelUnavailableError
from paperbench.llm._types import ModelConfig

PROBE_TIMEOUT_S = 15.0
"""How long one server may take to answer the probe."""


def base_url_of(config: ModelConfig) -> str | None:
    """The base URL ``config``'s calls go to (given, a named endpoint's, or from the
    provider's variable), or ``None`` for the provider's own API."""
    from paperbench.llm._registry import resolve

    _, target = resolve(config, require_key=False)
    return target.base_url if target.custom_endpoint else None


async def _no_answer(client: aiohttp.ClientSession, url: str, timeout_s: float) -> str | None:
    try:
        async with client.get(url, allow_redirects=False) as response:
            await response.read()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except aiohttp.ClientError as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    return None


async def probe_servers(
    servers: Iterable[tuple[str, ModelConfig]], *, timeout_s: float = PROBE_TIMEOUT_S
) -> None:
    """Ask each distinct server of ``servers`` (the flag that chose it, its model) once, all
    at the same time.

    Raises:
        ModelUnavailableError: a server did not answer, one line naming the flag and URL.
    """
    urls: dict[str, str] = {}
    for flag, config in servers:
        url = base_url_of(config)
        if url is not None:
            urls.setdefault(url, flag)
    if not urls:
        return
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=True) as client:
        reasons = await asyncio.gather(*(_no_answer(client, url, timeout_s) for url in urls))
    for (url, flag), reason in zip(urls.items(), reasons, strict=True):
        if reason is not None:
            raise ModelUnavailableError(
                f"{flag} {url}: the server does not answer ({reason}); start it or give "
                f"another {flag}"
            )


async def probe_batch_routes(servers: Iterable[tuple[str, ModelConfig]]) -> None:
    """Ask each distinct server of ``servers`` whether it serves the provider's batch API
    (OpenAI ``GET /v1/batches``; Anthropic ``GET /v1/messages/batches``), listing at most one
    batch: nothing is sent to a model. A server without a key to ask is left alone.

    Raises:
        ModelRequestError: a server answered 404 (it has no batch API), one line naming the
            flag and the server.
    """
    from paperbench.llm._registry import resolve

    seen: set[str] = set()
    for flag, config in servers:
        cls, target = resolve(config, require_key=False)
        api = cls(target)
        if api.connection_key in seen or target.missing_key is not None:
            continue
        seen.add(api.connection_key)
        try:
            await api.probe_batches()
        except ModelRequestError as exc:
            where = target.base_url or f"the {target.provider} API"
            if "no batch API" in str(exc):
                raise ModelRequestError(f"{flag}: {exc}; grade without --batch") from None
            if "HTTP 404" not in str(exc):
                raise
            raise ModelRequestError(
                f"{flag} {where}: the server has no batch API (HTTP 404 on its batch routes); "
                "grade without --batch, or give a server that has them"
            ) from None
        finally:
            await api.aclose()
