"""Model providers behind one async interface, with retries, limits, costs and a cache.

    from paperbench.llm import Model, ModelConfig, UserMessage

    model = Model(ModelConfig(model="openai/gpt-4o", cache=True), stage="grading")
    out = await model.generate([UserMessage(content="...")], output=Grade, label="judge_grading")
    out.parsed, out.usage, out.cost_usd, model.ledger.report()

Providers are chosen by the ``provider/model`` string: ``openai``, ``anthropic``,
``mockllm`` (offline, deterministic) and named OpenAI-compatible endpoints (``ollama``,
``vllm``, ``litellm``, ``openrouter``, or your own). A failed call raises a
:class:`~paperbench.errors.ModelError` subclass: record it as invalid, never as an answer.

The public names serve two readers: whoever calls models (a judge, an agent: the model,
its config, messages, outputs, costs and budgets, the cache) and whoever adds a provider
(:class:`ModelAPI`, :class:`Target`, :class:`TransientError`, :func:`register_provider`).
Whoever plans a long conversation counts it (:func:`count_message_tokens`, exact for OpenAI
models and an estimate otherwise: :func:`token_count_kind`) against the model's limits
(:func:`context_window`, :func:`max_output_tokens`).
Whoever spreads a group of runs over processes installs a :class:`Coordinator` in each
(:func:`set_coordinator`): the group's budget, connection limits and rate-limit pauses are
then shared by all of them (:class:`LocalCoordinator` in one process, :class:`RayCoordinator`
on a Ray cluster). Everything else (cache keys, connection limits, schema handling) is
internal.
"""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.llm._budget import BudgetCaps
    from paperbench.llm._cache import ResponseCache, default_cache_path
    from paperbench.llm._costs import (
        CostJournal,
        CostLedger,
        CostRecord,
        CostReport,
        CostTotal,
        ModelPrice,
        PriceTable,
        read_cost_journal,
    )
    from paperbench.llm._limits import context_window, max_output_tokens, takes_reasoning_effort
    from paperbench.llm._model import Model
    from paperbench.llm._registry import ModelAPI, Target, providers, register_provider
    from paperbench.llm._retry import TransientError
    from paperbench.llm._shared import (
        Coordinator,
        Grant,
        GroupSpend,
        LocalCoordinator,
        RayCoordinator,
        current_coordinator,
        set_coordinator,
    )
    from paperbench.llm._tokens import (
        TokenCountKind,
        count_message_tokens,
        count_tokens,
        token_count_kind,
    )
    from paperbench.llm._types import (
        LABELS,
        AssistantMessage,
        CallOutcome,
        Message,
        ModelConfig,
        ModelOutput,
        ModelRequest,
        OutputSchema,
        ReasoningEffort,
        StopReason,
        SystemMessage,
        ToolCall,
        ToolDef,
        ToolMessage,
        Usage,
        UserMessage,
    )

__all__ = [
    "LABELS",
    "AssistantMessage",
    "BudgetCaps",
    "CallOutcome",
    "Coordinator",
    "CostJournal",
    "CostLedger",
    "CostRecord",
    "CostReport",
    "CostTotal",
    "Grant",
    "GroupSpend",
    "LocalCoordinator",
    "Message",
    "Model",
    "ModelAPI",
    "ModelConfig",
    "ModelOutput",
    "ModelPrice",
    "ModelRequest",
    "OutputSchema",
    "PriceTable",
    "RayCoordinator",
    "ReasoningEffort",
    "ResponseCache",
    "StopReason",
    "SystemMessage",
    "Target",
    "TokenCountKind",
    "ToolCall",
    "ToolDef",
    "ToolMessage",
    "TransientError",
    "Usage",
    "UserMessage",
    "context_window",
    "count_message_tokens",
    "count_tokens",
    "current_coordinator",
    "default_cache_path",
    "max_output_tokens",
    "providers",
    "read_cost_journal",
    "register_provider",
    "set_coordinator",
    "takes_reasoning_effort",
    "token_count_kind",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
