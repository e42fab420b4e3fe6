"""Providers by name, and how a ``provider/model`` string resolves to one.

A provider is a :class:`ModelAPI` subclass, registered under a name with the import path of
its module, so that its SDK is imported only when it is first used (a missing SDK gives an
install hint). A name that is not a provider may be a *named endpoint*: an OpenAI-compatible
server listed in ``paperbench/_data/endpoints.yaml`` or in a file named by
``PAPERBENCH_ENDPOINTS`` (``ollama/llama3.2`` talks to Ollama through the openai SDK).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from paperbench._io import json_path, read_text
from paperbench.errors import (
    ConfigError,
    MissingKeyError,
    ModelRequestError,
    ModelUnavailableError,
    ProviderNotInstalledError,
    UnknownProviderError,
)
from paperbench.llm._loopclose import close_at_loop_end
from paperbench.llm._retry import TransientError
from paperbench.llm._types import (
    ModelConfig,
    ModelOutput,
    ModelRequest,
    StopReason,
    ToolCall,
    check_base_url,
    env_value,
)

ClientT = TypeVar("ClientT")

ENDPOINTS_ENV = "PAPERBENCH_ENDPOINTS"


class ModelAPI(ABC):
    """One provider's client. :meth:`generate` makes exactly one HTTP call and raises
    :class:`~paperbench.llm._retry.TransientError` for failures worth retrying and
    :class:`~paperbench.errors.ModelRequestError` for refusals; retries, concurrency,
    caching, costs and structured-output checks are done around it, once for all providers.
    """

    key_env: ClassVar[str | None] = None
    """The variable holding the API key; ``None`` if the provider needs none."""
    base_url_env: ClassVar[str | None] = None
    """The variable the SDK reads a base URL from (honoured when no base URL is given)."""
    official_hosts: ClassVar[tuple[str, ...]] = ()
    """The provider's own API hosts: a base URL on one of them is not a custom endpoint."""

    def __init__(self, target: Target) -> None:
        self.target = target

    @property
    def protocol(self) -> str:
        """The wire protocol calls use (``chat``, ``responses``, ``messages``, ...)."""
        return self.target.provider

    @property
    def connection_key(self) -> str:
        """Callers with the same key share one concurrency limit."""
        return f"{self.target.provider}|{self.target.base_url or ''}"

    @abstractmethod
    async def generate(self, request: ModelRequest) -> ModelOutput:
        """Make one call."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    # -- the provider's batch API (see paperbench.llm._batch) ---------------------------

    def request_params(self, request: ModelRequest) -> tuple[str, dict[str, Any]]:
        """The route and body :meth:`generate` would send for ``request``."""
        raise ModelRequestError(f"{self.target.model}: this provider has no batch API")

    async def probe_batches(self) -> None:
        """Raise when the server does not serve the batch API's routes."""
        raise ModelRequestError(f"{self.target.model}: this provider has no batch API")

    async def submit_batch(self, route: str, lines: list[tuple[str, dict[str, Any]]]) -> str:
        """Submit ``lines`` (custom_id, body) as one batch; its id."""
        raise ModelRequestError(f"{self.target.model}: this provider has no batch API")

    async def batch_state(self, batch_id: str) -> BatchState:
        raise ModelRequestError(f"{self.target.model}: this provider has no batch API")

    async def batch_results(self, batch_id: str) -> dict[str, ModelOutput | Exception]:
        raise ModelRequestError(f"{self.target.model}: this provider has no batch API")


class BatchState(BaseModel):
    """What a provider says of a batch when it is polled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: str
    ended: bool
    """No request of it will be answered any more (completed, failed, expired, cancelled)."""
    error: str | None = None
    """Why the whole batch failed (OpenAI's validation errors)."""
    done: int = 0
    """Requests answered so far."""


def batch_error(exc: Exception) -> Exception:
    """The error of one request that failed inside a batch: a failure a live call would have
    retried is final there (the batch was its attempt)."""
    if isinstance(exc, TransientError):
        return ModelUnavailableError(f"failed inside the batch: {exc}")
    return exc


OptionsT = TypeVar("OptionsT", bound=BaseModel)

PLACEHOLDER_KEY = "no-key"
"""Sent to servers that need no key (the SDKs refuse to start without one)."""


def parse_options(model: type[OptionsT], target: Target) -> OptionsT:
    """A provider's ``options`` from its config; one line naming the bad option otherwise."""
    try:
        return model.model_validate(target.config.options)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(
            f"{target.model}: {err['msg']}", path="options." + ".".join(map(str, err["loc"]))
        ) from None


class SDKModelAPI(ModelAPI, Generic[ClientT]):
    """A provider backed by an async SDK client. A client belongs to the event loop that
    made it, so a model used from a new loop gets a new client."""

    def __init__(self, target: Target) -> None:
        super().__init__(target)
        self._client: ClientT | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closer: AsyncGenerator[None, None] | None = None

    client_class: ClassVar[Callable[..., Any]]
    """The SDK's async client class."""

    def new_client(self) -> ClientT:
        """Build the SDK client (retries off: paperbench retries around it)."""
        client: ClientT = self.client_class(
            api_key=self.target.api_key or PLACEHOLDER_KEY,
            base_url=self.target.base_url,
            timeout=self.target.config.timeout_s,
            max_retries=0,
        )
        return client

    @property
    def client(self) -> ClientT:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._loop = loop
            self._client = self.new_client()
            # closed when its loop ends, also when it is never closed by hand
            self._closer = close_at_loop_end(self._client.close)  # type: ignore[attr-defined]
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()  # type: ignore[attr-defined]
            self._client = None


def cut_calls(calls: list[ToolCall], stop: StopReason) -> list[ToolCall]:
    """``calls`` as they must be read when the answer stopped for ``stop``: cut off at the
    output limit, each may be incomplete, so each is marked ``truncated`` and given a
    ``parse_error`` (the caller must not run it)."""
    if stop != "max_tokens":
        return calls
    return [
        c.model_copy(
            update={
                "truncated": True,
                "parse_error": c.parse_error
                or "the answer was cut off at max_tokens while this call was being written",
            }
        )
        for c in calls
    ]


@dataclass(frozen=True)
class Target:
    """A resolved ``provider/model``: what a :class:`ModelAPI` is built from."""

    config: ModelConfig
    provider: str
    """The registered provider that serves the call (``openai`` for a named endpoint)."""
    model_name: str
    base_url: str | None
    api_key: str | None = field(default=None, repr=False)
    """Never shown in a repr (nor in ``str()``, which is the repr for a dataclass)."""
    custom_endpoint: bool = False
    """True for a base URL whose host is not the provider's own (an OpenAI-compatible
    server); ``https://api.openai.com/v1`` from ``OPENAI_BASE_URL`` is not custom."""
    missing_key: str | None = None
    """The variable to set when the provider needs a key and none was found (resolved with
    ``require_key=False``); :meth:`require_key` raises then."""

    @property
    def model(self) -> str:
        return self.config.model

    def require_key(self) -> None:
        """Raise :class:`MissingKeyError` if a request would need a key that is not set."""
        if self.missing_key is not None:
            raise MissingKeyError(missing_key_message(self.model, self.missing_key))


ProviderFactory = Callable[[], type[ModelAPI]]

_PROVIDERS: dict[str, str | ProviderFactory] = {
    "openai": "paperbench.llm._openai:OpenAIAPI",
    "anthropic": "paperbench.llm._anthropic:AnthropicAPI",
    "mockllm": "paperbench.llm._mock:MockAPI",
}
_DEFAULT_PROVIDERS = dict(_PROVIDERS)
_SDK_HINTS = {"openai": "openai>=3,<4", "anthropic": "anthropic>=2,<3"}


_BUILTIN_KEYS = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}
"""The key and base-URL variables of the built-in SDK providers (their classes'
``key_env`` and ``base_url_env``), known without importing the SDK."""


def missing_key_message(model: str, variable: str) -> str:
    """What to do about a missing key, in one line."""
    return f"{model}: set {variable} (environment or .env)"


def known_missing_key(config: ModelConfig) -> str | None:
    """The key variable a built-in provider's call would lack, said without importing its SDK
    (a second or so): ``None`` when a key, a base URL or another provider is given, so that
    :func:`resolve` decides."""
    keys = _BUILTIN_KEYS.get(config.provider)
    if keys is None or _PROVIDERS.get(config.provider) != _DEFAULT_PROVIDERS[config.provider]:
        return None
    key_env, base_url_env = keys
    if config.api_key is not None or config.base_url is not None or env_value(base_url_env):
        return None
    return None if env_value(key_env) else key_env


def check_model_name(model: str) -> str:
    """``model`` if it is ``provider/model`` with a registered provider or a named endpoint;
    else :class:`ValueError` saying what is expected (nothing imported, nothing called)."""
    name, _, rest = model.partition("/")
    if not name or not rest:
        example = f"openai/{rest or name or 'gpt-4o'}"
        raise ValueError(f"expected provider/model such as {example}, got {model!r}")
    if name not in _PROVIDERS and name not in endpoints():
        known = ", ".join(providers() + sorted(endpoints()))
        raise ValueError(f"unknown provider {name!r} in {model!r} (known: {known})")
    return model


class ModelChecks(BaseModel):
    """A config that names a model (a ``model`` field) and its server (``base_url``), as its
    subclass declares them: both are checked as given, before any work."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("model", check_fields=False)
    @classmethod
    def _check_model(cls, value: str | None) -> str | None:
        return None if value is None else check_model_name(value)

    @field_validator("base_url", check_fields=False)
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        return None if value is None else check_base_url(value)


def register_provider(name: str, factory: str | ProviderFactory) -> None:
    """Register a provider: ``"module.path:ClassName"`` or a function returning the class."""
    _PROVIDERS[name] = factory


def providers() -> list[str]:
    """The provider prefixes a model string may start with (``openai``, ``anthropic``, ...)."""
    return sorted(_PROVIDERS)


def provider_class(provider: str, model: str) -> type[ModelAPI]:
    factory = _PROVIDERS[provider]
    if callable(factory):
        return factory()
    module_name, _, attr = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        package = (exc.name or "").split(".")[0]
        if package in _SDK_HINTS:
            raise ProviderNotInstalledError(
                f"{model}: the {provider} provider needs the {package} package: "
                f"pip install '{_SDK_HINTS[package]}'"
            ) from exc
        raise
    cls: type[ModelAPI] = getattr(module, attr)
    return cls


class Endpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str
    api_key_env: str | None = None
    key_optional: bool = False


class _EndpointFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpoints: dict[str, Endpoint]


def endpoints() -> dict[str, Endpoint]:
    """The bundled named endpoints, merged with ``$PAPERBENCH_ENDPOINTS`` if set."""
    return _load_endpoints(os.environ.get(ENDPOINTS_ENV) or None)


@lru_cache(maxsize=8)
def _load_endpoints(override: str | None) -> dict[str, Endpoint]:
    text = resources.files("paperbench").joinpath("_data/endpoints.yaml").read_text("utf-8")
    found = _parse_endpoints(text, "paperbench/_data/endpoints.yaml")
    if override:
        found.update(_parse_endpoints(read_text(override), override))
    return found


def _parse_endpoints(text: str, file: str) -> dict[str, Endpoint]:
    try:
        data: Any = yaml.safe_load(text) or {"endpoints": {}}
        return _EndpointFile.model_validate(data).endpoints
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}".splitlines()[0], file=file) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(err["msg"], file=file, path=json_path(err["loc"])) from None


def is_official(base_url: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``base_url`` is on one of the provider's own hosts (any path, slashes or
    port): ``https://api.openai.com``, ``https://api.openai.com/v1/`` and so on."""
    host = urlsplit(base_url).hostname
    return host is not None and host.lower().rstrip(".") in hosts


def resolve(config: ModelConfig, *, require_key: bool = True) -> tuple[type[ModelAPI], Target]:
    """Find the provider of ``config.model`` and its base URL and key.

    With ``require_key=False`` a missing key is noted on the target (``missing_key``) instead
    of raised, so that what needs no request (a response-cache hit) works without one.

    Raises:
        UnknownProviderError: neither a provider nor a named endpoint.
        ProviderNotInstalledError: the provider's SDK is missing.
        MissingKeyError: the provider needs a key, none was found and ``require_key``.
    """
    name, model_name = config.provider, config.model_name
    endpoint: Endpoint | None = None
    if name in _PROVIDERS:
        provider = name
    else:
        endpoint = endpoints().get(name)
        if endpoint is None:
            known = ", ".join(providers() + sorted(endpoints()))
            raise UnknownProviderError(
                f"{config.model}: unknown provider {name!r} (known: {known}; "
                f"add an OpenAI-compatible endpoint in a file named by {ENDPOINTS_ENV})"
            )
        provider = "openai"
    cls = provider_class(provider, config.model)

    base_url = config.base_url
    if base_url is None and endpoint is not None:
        base_url = endpoint.base_url
    if base_url is None and cls.base_url_env:
        base_url = env_value(cls.base_url_env)
        if base_url is not None:
            try:
                check_base_url(base_url)
            except ValueError as exc:
                raise ConfigError(f"{exc}; fix or unset it", path=cls.base_url_env) from None
    custom = base_url is not None and not is_official(base_url, cls.official_hosts)

    key_env = endpoint.api_key_env if endpoint is not None else cls.key_env
    api_key = config.api_key.get_secret_value() if config.api_key is not None else None
    if api_key is None and key_env:
        api_key = env_value(key_env)
    needs_key = (
        endpoint.api_key_env is not None and not endpoint.key_optional
        if endpoint is not None
        else cls.key_env is not None and not custom
    )
    missing = key_env if api_key is None and needs_key else None
    target = Target(
        config=config,
        provider=provider,
        model_name=model_name,
        base_url=base_url,
        api_key=api_key,
        custom_endpoint=custom,
        missing_key=missing,
    )
    if require_key:
        target.require_key()
    return cls, target
