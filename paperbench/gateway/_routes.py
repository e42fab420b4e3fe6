"""What the gateway forwards: one table of routes per provider, matched on the raw request
target (before any percent-decoding). Anything else is refused by the gateway itself.

    /anthropic/v1/messages               POST  a model call      ?beta
    /anthropic/v1/messages/count_tokens  POST  passed, no cost   ?beta
    /anthropic/v1/models                 GET   passed, no cost   ?beta after_id before_id limit
    /anthropic/v1/models/{model}         GET   passed, no cost   ?beta
    /openai/v1/responses                 POST  a model call
    /openai/v1/chat/completions          POST  a model call
    /openai/v1/models                    GET   passed, no cost   ?client_version (Codex)
    /openai/v1/models/{model}            GET   passed, no cost

Each segment of the path is the table's, or for ``{model}`` one model id: a letter or digit,
then letters, digits and ``. _ : @ + -`` (no ``..``). So no percent-escape passes (no encoded
``/``, ``\\`` or ``.``, once or twice), nor ``\\``, ``;``, an empty segment or a trailing
slash. A query parameter whose raw name the route does not list is refused (its value is
forwarded as given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from paperbench.gateway._shapes import Family, Protocol

PREFIXES: dict[Family, str] = {"anthropic": "/anthropic/", "openai": "/openai/v1/"}
"""Where each provider's routes live on the gateway; the rest of the path is appended to the
upstream's base URL (``https://api.anthropic.com``, ``https://api.openai.com/v1``)."""


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    """Below the provider's prefix; ``{model}`` stands for one model id."""
    protocol: Protocol | None = None
    """The wire protocol of a model call (priced, budgeted); ``None``: passed at no cost."""
    query: frozenset[str] = frozenset()
    """The query parameters it takes (raw names)."""


_ANTHROPIC_LIST = frozenset({"beta", "after_id", "before_id", "limit"})
ROUTES: dict[Family, tuple[Route, ...]] = {
    "anthropic": (
        Route("POST", "v1/messages", "messages", frozenset({"beta"})),
        Route("POST", "v1/messages/count_tokens", None, frozenset({"beta"})),
        Route("GET", "v1/models", None, _ANTHROPIC_LIST),
        Route("GET", "v1/models/{model}", None, frozenset({"beta"})),
    ),
    "openai": (
        Route("POST", "responses", "responses"),
        Route("POST", "chat/completions", "chat"),
        Route("GET", "models", None, frozenset({"client_version"})),
        Route("GET", "models/{model}"),
    ),
}

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,255}")


@dataclass(frozen=True)
class Match:
    route: Route
    tail: str
    """The path below the prefix, as asked (forwarded below the upstream's base URL)."""
    query: str
    """The raw query string, as asked (its names checked)."""


@dataclass(frozen=True)
class NoRoute:
    status: int
    message: str
    """What the client is told (and the call log records)."""


def family_of(target: str) -> Family:
    """Whose error shape and auth header a request target gets (OpenAI's unless it is under
    the Anthropic prefix)."""
    return "anthropic" if target.startswith(PREFIXES["anthropic"]) else "openai"


def match_route(family: Family, method: str, target: str) -> Match | NoRoute:
    """The route of ``method`` ``target`` (the raw request target: path and query as sent)."""
    path, _, query = target.partition("?")
    prefix = PREFIXES[family]
    tail = path[len(prefix) :]
    if path.startswith(prefix):
        for route in ROUTES[family]:
            if route.method == method and _fits(route.path, tail):
                names = [part.partition("=")[0] for part in query.split("&")] if query else []
                unknown = [name for name in names if name not in route.query]
                if unknown:
                    shown = _shown(unknown[0])
                    message = f"the gateway does not pass the query parameter {shown!r} of "
                    return NoRoute(400, message + f"{method} {prefix}{route.path}")
                return Match(route, tail, query)
    served = ", ".join(f"{r.method} {prefix}{r.path}" for r in ROUTES[family])
    message = f"the gateway forwards model calls only ({served}), not {method} {_shown(path)}"
    return NoRoute(404, message)


def _fits(template: str, tail: str) -> bool:
    want, got = template.split("/"), tail.split("/")
    return len(want) == len(got) and all(
        _is_model_id(g) if w == "{model}" else w == g for w, g in zip(want, got, strict=True)
    )


def _is_model_id(segment: str) -> bool:
    return _MODEL_ID.fullmatch(segment) is not None and ".." not in segment


def _shown(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "..."
