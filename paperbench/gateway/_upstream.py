"""Where the gateway sends a provider's requests, with which key and which headers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multidict import CIMultiDict

from paperbench.errors import ConfigError
from paperbench.gateway._shapes import Family
from paperbench.llm import ModelConfig
from paperbench.llm._registry import resolve

DEFAULT_BASE_URLS: dict[Family, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
"""Where a provider's requests go when its config names no base URL."""

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST = _HOP_BY_HOP | {"host", "content-length", "accept-encoding", "x-api-key"}
_DROP_REQUEST |= {"authorization"}
# which of the operator's organisations, projects or workspaces the key acts in is the
# operator's choice, not the agent's
_DROP_REQUEST |= {"openai-organization", "openai-project", "anthropic-workspace-id"}

_PASS_RESPONSE = frozenset(
    {
        "content-type",
        "request-id",  # Anthropic's, read by its SDKs
        "x-request-id",  # OpenAI's, read by its SDKs
        "retry-after",
        "retry-after-ms",
        "x-should-retry",
        "openai-model",  # Codex compares it with the model it asked for
    }
)
_PASS_RESPONSE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
"""The answer headers an agent gets: the SDKs' retry hints, request ids and rate limits.
Everything else stays on the host, among them the headers that name the operator's account
(``openai-organization``, ``openai-project``, ``anthropic-organization-id``,
``anthropic-workspace-id``) and the provider's cookies."""


def passed_headers(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """The headers of an upstream answer (or of a stored one) that the agent gets."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers:
        lower = name.lower()
        if lower in _PASS_RESPONSE or lower.startswith(_PASS_RESPONSE_PREFIXES):
            out.add(name, value)
    return out


@dataclass(frozen=True)
class Upstream:
    family: Family
    config: ModelConfig
    base_url: str
    key: str | None

    def url(self, tail: str, query: str) -> str:
        """``tail`` is the path after the gateway's base URL of this provider."""
        url = f"{self.base_url.rstrip('/')}/{tail}"
        return f"{url}?{query}" if query else url

    def headers(self, incoming: CIMultiDict[str]) -> CIMultiDict[str]:
        """The client's headers minus hop-by-hop ones and its token, plus the real key."""
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in incoming.items():
            if name.lower() not in _DROP_REQUEST:
                out.add(name, value)
        if self.key is not None:
            if self.family == "anthropic":
                out["x-api-key"] = self.key
            else:
                out["Authorization"] = f"Bearer {self.key}"
        return out

    def model_id(self, name: str) -> str:
        return f"{self.config.provider}/{name}"


def upstream_for(family: Family, config: ModelConfig) -> Upstream:
    _, target = resolve(config)
    if target.provider != family:
        raise ConfigError(
            f"{config.model}: the gateway's {family} upstream needs an {family} model "
            f"(this one speaks {target.provider})",
            path=f"gateway.{family}",
        )
    return Upstream(
        family=family,
        config=config,
        base_url=target.base_url or DEFAULT_BASE_URLS[family],
        key=target.api_key,
    )
