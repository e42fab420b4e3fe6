"""The model gateway: agents that call model providers themselves (Claude Code, Codex CLI)
talk to it instead, with a per-run token; it holds the real key on the host, forwards each
request, enforces the rollout's budget and records every call.

    async with ModelGateway(anthropic=ModelConfig(model="anthropic/claude-sonnet-4-5"),
                            log_dir=run / "gateway", ledger=ledger) as gateway:
        env = {"ANTHROPIC_BASE_URL": gateway.anthropic_base_url,
               "ANTHROPIC_API_KEY": gateway.token}
        ...
        if gateway.exhausted: ...  # the run ends as budget_exhausted

Each request becomes a :class:`GatewayCall` (a line of ``gateway.jsonl``, the ``on_call``
callback) and a :class:`~paperbench.llm.CostRecord` with label ``gateway``.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.gateway._call import GatewayCall
    from paperbench.gateway._gateway import ModelGateway

__all__ = ["GatewayCall", "ModelGateway"]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
