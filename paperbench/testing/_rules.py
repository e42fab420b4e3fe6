"""The requests the real model APIs refuse, refused the same way by the fake server.

Each check returns a :class:`Refusal` (HTTP 400 with the message, parameter and code the real
API gives) or ``None``. The top-level parameters are checked against the request TypedDicts of
the installed ``openai`` and ``anthropic`` SDKs; the rest are the rules the APIs document:

- OpenAI: unknown or missing parameters; ``max_tokens`` or a temperature for a reasoning model;
  strict JSON Schemas that break strict mode (an object not closed with
  ``additionalProperties: false``, a property not required, an unsupported keyword, a ``$ref``
  with siblings); Responses reasoning items sent back without their encrypted content while
  ``store`` is false, or with content the server did not issue, or with no item after them;
  Chat assistant turns with null content and no tool calls, tool messages answering no call,
  tool calls left unanswered; Responses function calls without their output or outputs
  without their call; reasoning parameters for a model that does not reason (unless
  ``refuse_plain_reasoning`` is off); a request over the model's context window
  (``context_length_exceeded``).
- Anthropic: unknown or missing parameters (``max_tokens`` is required); empty text blocks;
  a first turn that is not the user's, or turns that do not alternate; thinking blocks without
  a signature, with a signature the server did not issue for that text, or (in a tool loop
  with thinking on) not exactly the blocks issued with that turn; a schema object not closed;
  a tool_use not answered by a tool_result in the next message, or a tool_result answering
  no tool_use of the message before; more than four ``cache_control`` breakpoints; a prompt
  over the model's context window ("prompt is too long").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from paperbench.llm._schema import OPENAI_STRICT_UNSUPPORTED

REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")
PLAIN_PREFIXES = ("gpt-4", "gpt-3.5", "chatgpt-4o")
"""OpenAI models that do not reason (they refuse reasoning parameters); other names (open
models behind a compatible server) may take them."""
MAX_BREAKPOINTS = 4
"""Anthropic: blocks with ``cache_control`` in one request."""
"""OpenAI models that reason (they refuse ``max_tokens`` and a temperature)."""

UNLISTED = {"responses": frozenset({"client_metadata"})}
"""Body fields the real API takes that the SDK's request types do not list: Responses'
``client_metadata`` (a string map OpenAI's own Codex CLI sends with every request)."""

ANTHROPIC_UNSUPPORTED = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    | {"minLength", "maxLength", "patternProperties", "minProperties", "maxProperties"}
)
"""Schema keywords Anthropic's structured outputs refuse."""


@dataclass(frozen=True)
class Refusal:
    """A 400 as the real API sends it."""

    message: str
    param: str | None = None
    code: str | None = None
    status: int = 400

    def body(self, protocol: str) -> dict[str, Any]:
        if protocol == "messages":
            return {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": self.message},
            }
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass
class Issued:
    """What the server handed out and may see again: reasoning it signed or encrypted."""

    thinking: dict[str, str] = field(default_factory=dict)
    """signature -> the thinking text it signs."""
    redacted: set[str] = field(default_factory=set)
    turns: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Anthropic tool_use id -> the thinking blocks of the turn that made it."""
    encrypted: dict[str, str] = field(default_factory=dict)
    """OpenAI reasoning item id -> its encrypted content."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def check(
    protocol: str,
    body: dict[str, Any],
    issued: Issued,
    window: int | None = None,
    *,
    plain_reasoning: bool = False,
    beta: bool = False,
) -> Refusal | None:
    """The refusal of the real API for this request, or ``None``; ``window`` is the model's
    context window (``None``: not checked); ``plain_reasoning`` refuses reasoning
    parameters sent to OpenAI models that do not reason; ``beta`` (an Anthropic request
    with an ``anthropic-beta`` header) also takes the beta API's parameters."""
    if plain_reasoning and protocol != "messages":
        refusal = _reasoning_on_plain_model(protocol, body)
        if refusal is not None:
            return refusal
    if protocol == "chat":
        refusal = _check_chat(body)
    elif protocol == "responses":
        refusal = _check_responses(body, issued)
    else:
        refusal = _check_messages(body, issued, beta=beta)
    if refusal is None and window is not None:
        refusal = _check_window(protocol, body, window)
    return refusal


def _reasoning_on_plain_model(protocol: str, body: dict[str, Any]) -> Refusal | None:
    plain = str(body.get("model", "")).startswith(PLAIN_PREFIXES)
    if plain and ("reasoning_effort" in body or "reasoning" in body):
        name = "reasoning_effort" if protocol == "chat" else "reasoning.effort"
        return Refusal(
            f"Unsupported parameter: '{name}' is not supported with this model.",
            name,
            "unsupported_parameter",
        )
    return None


def _check_window(protocol: str, body: dict[str, Any], window: int) -> Refusal | None:
    from paperbench.testing._prompt import request_tokens

    tokens = request_tokens(protocol, body)
    if tokens <= window:
        return None
    if protocol == "chat":
        return Refusal(
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages.",
            "messages",
            "context_length_exceeded",
        )
    if protocol == "responses":
        return Refusal(
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again.",
            "input",
            "context_length_exceeded",
        )
    return Refusal(f"prompt is too long: {tokens} tokens > {window} maximum")


# -- OpenAI -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _allowed() -> dict[str, frozenset[str]]:
    from anthropic.types import message_create_params as messages
    from anthropic.types.beta import message_create_params as beta
    from openai.types.chat import completion_create_params as chat
    from openai.types.responses import response_create_params as responses

    def keys(*typed: Any) -> frozenset[str]:
        return frozenset(k for t in typed for k in (*t.__required_keys__, *t.__optional_keys__))

    return {
        "chat": keys(chat.CompletionCreateParamsNonStreaming, chat.CompletionCreateParamsStreaming),
        "responses": keys(
            responses.ResponseCreateParamsNonStreaming, responses.ResponseCreateParamsStreaming
        ),
        "messages": keys(
            messages.MessageCreateParamsNonStreaming, messages.MessageCreateParamsStreaming
        ),
        # ``betas`` and the other header parameters of the beta SDK call are not body fields
        "messages-beta": keys(
            beta.MessageCreateParamsNonStreaming, beta.MessageCreateParamsStreaming
        )
        - {"betas", "user_profile_id", "workspace_id"},
    }


def _openai_common(
    protocol: str, body: dict[str, Any], required: tuple[str, ...]
) -> Refusal | None:
    for name in body:
        if name not in _allowed()[protocol] and name not in UNLISTED.get(protocol, ()):
            return Refusal(f"Unrecognized request argument supplied: {name}")
    for name in required:
        if name not in body:
            return Refusal(
                f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
            )
    if body.get("stream_options") is not None and body.get("stream") is not True:
        return Refusal(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
        )
    model = str(body.get("model", ""))
    reasoning = model.startswith(REASONING_PREFIXES)
    effort = body.get("reasoning_effort") or (body.get("reasoning") or {}).get("effort")
    if reasoning and "temperature" in body and effort != "none":
        return Refusal(
            f"Unsupported value: 'temperature' does not support {body['temperature']} with "
            "this model. Only the default (1) value is supported.",
            "temperature",
            "unsupported_value",
        )
    return None


def _check_chat(body: dict[str, Any]) -> Refusal | None:
    refusal = _openai_common("chat", body, ("model", "messages"))
    if refusal is not None:
        return refusal
    refusal = _chat_turns(body.get("messages"))
    if refusal is not None:
        return refusal
    if str(body["model"]).startswith(REASONING_PREFIXES) and "max_tokens" in body:
        return Refusal(
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema") or {}
        if spec.get("strict"):
            problem = strict_schema_problem(spec.get("schema") or {})
            if problem is not None:
                return Refusal(
                    f"Invalid schema for response_format '{spec.get('name')}': {problem}",
                    "response_format",
                    "invalid_json_schema",
                )
    return None


def _chat_turns(messages: Any) -> Refusal | None:
    """Chat Completions' rules on the order of assistant tool calls and tool answers."""
    if not isinstance(messages, list):
        return None
    open_calls: list[str] = []  # ids of the last assistant turn's calls not yet answered
    answerable: set[str] = set()
    asked_at = 0
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in answerable:
                return Refusal(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i}].role",
                )
            if call_id in open_calls:
                open_calls.remove(call_id)
            continue
        if open_calls:
            return _unanswered(asked_at, open_calls)
        answerable = set()
        if role != "assistant":
            continue
        calls = [str(c.get("id")) for c in message.get("tool_calls") or []]
        if message.get("content") is None and not calls:
            return Refusal(
                "Invalid value for 'content': expected a string, got null.",
                f"messages.[{i}].content",
            )
        open_calls, answerable, asked_at = list(calls), set(calls), i
    if open_calls:
        return _unanswered(asked_at, open_calls)
    return None


def _unanswered(index: int, ids: list[str]) -> Refusal:
    return Refusal(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(ids),
        f"messages.[{index}].role",
    )


CALL_KINDS = {"function_call": "function call", "custom_tool_call": "custom tool call"}
"""Responses call items (each answered by an item of the same type + ``_output``)."""


def _responses_calls(items: list[Any]) -> Refusal | None:
    """Every (function or custom tool) call has its output in the input, and every output
    its call."""
    for kind, label in CALL_KINDS.items():
        typed = [
            i for i in items if isinstance(i, dict) and i.get("type") in (kind, kind + "_output")
        ]
        outputs = {i.get("call_id") for i in typed if i.get("type") != kind}
        seen: set[Any] = set()
        for item in typed:
            if item.get("type") == kind:
                seen.add(item.get("call_id"))
            elif item.get("call_id") not in seen:
                return Refusal(
                    f"No tool call found for {label} output with call_id {item.get('call_id')}.",
                    "input",
                )
        for call_id in sorted(seen - outputs, key=str):
            return Refusal(f"No tool output found for {label} {call_id}.", "input")
    return None


def _check_responses(body: dict[str, Any], issued: Issued) -> Refusal | None:
    refusal = _openai_common("responses", body, ("model",))
    if refusal is not None:
        return refusal
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema" and fmt.get("strict"):
        problem = strict_schema_problem(fmt.get("schema") or {})
        if problem is not None:
            return Refusal(
                f"Invalid schema for response_format '{fmt.get('name')}': {problem}",
                "text.format.schema",
                "invalid_json_schema",
            )
    items = body.get("input")
    if not isinstance(items, list):
        return None
    refusal = _responses_calls(items)
    if refusal is not None:
        return refusal
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        item_id = str(item.get("id"))
        with issued.lock:
            known = issued.encrypted.get(item_id)
        content = item.get("encrypted_content")
        if body.get("store") is False and not content:
            return Refusal(
                f"Item with id '{item_id}' not found. Items are not persisted when `store` is "
                "set to false. Try again with `store` set to true, or remove this item from "
                "your input.",
                "input",
            )
        if content and content != known:
            return Refusal(
                f"The encrypted content for item {item_id} could not be verified.",
                f"input[{i}].encrypted_content",
                "invalid_encrypted_content",
            )
        following = items[i + 1] if i + 1 < len(items) else None
        if not isinstance(following, dict) or not (
            following.get("type") in ("reasoning", *CALL_KINDS)
            or following.get("role") == "assistant"
        ):
            return Refusal(
                f"Item '{item_id}' of type 'reasoning' was provided without its required "
                "following item.",
                "input",
            )
    return None


def strict_schema_problem(schema: Any, context: tuple[str, ...] = ()) -> str | None:
    """Why OpenAI's strict mode refuses ``schema``, or ``None``."""
    if not isinstance(schema, dict):
        return None
    where = f"In context={context}, "
    if "$ref" in schema and len(schema) > 1:
        others = sorted(k for k in schema if k != "$ref")
        return f"{where}$ref cannot have keywords {others}."
    for key in schema:
        if key in OPENAI_STRICT_UNSUPPORTED or key == "patternProperties":
            return f"{where}'{key}' is not permitted."
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"{where}'additionalProperties' is required to be supplied and to be false."
        props = schema.get("properties") or {}
        required = schema.get("required") or []
        missing = [name for name in props if name not in required]
        if missing:
            return (
                f"{where}'required' is required to be supplied and to be an array including "
                f"every key in properties. Missing '{missing[0]}'."
            )
    for key in ("properties", "$defs", "definitions"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            for name, value in sub.items():
                problem = strict_schema_problem(value, (*context, key, name))
                if problem is not None:
                    return problem
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        for i, value in enumerate(schema.get(key) or []):
            problem = strict_schema_problem(value, (*context, key, str(i)))
            if problem is not None:
                return problem
    if isinstance(schema.get("items"), dict):
        return strict_schema_problem(schema["items"], (*context, "items"))
    return None


# -- Anthropic ----------------------------------------------------------------------------


def _check_messages(body: dict[str, Any], issued: Issued, *, beta: bool = False) -> Refusal | None:
    allowed = _allowed()["messages-beta" if beta else "messages"]
    for name in body:
        if name not in allowed:
            return Refusal(f"{name}: Extra inputs are not permitted")
    for name in ("model", "messages", "max_tokens"):
        if name not in body:
            return Refusal(f"{name}: Field required")
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    if thinking and body["max_tokens"] <= body["thinking"].get("budget_tokens", 0):
        return Refusal("`max_tokens` must be greater than `thinking.budget_tokens`.")
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            if block.get("type") == "text" and not block.get("text"):
                return Refusal(f"system.{i}: text content blocks must be non-empty")
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
    if isinstance(schema, dict):
        problem = _anthropic_schema_problem(schema)
        if problem is not None:
            return Refusal(f"output_config.format.schema: {problem}")
    refusal = _check_breakpoints(body)
    if refusal is not None:
        return refusal
    return _check_turns(body["messages"], thinking, issued)


def _check_breakpoints(body: dict[str, Any]) -> Refusal | None:
    blocks: list[Any] = list(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        blocks.extend(body["system"])
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks.extend(message["content"])
    found = sum(isinstance(b, dict) and "cache_control" in b for b in blocks)
    if found > MAX_BREAKPOINTS:
        return Refusal(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return None


def _tool_pairs(messages: list[Any]) -> Refusal | None:
    """Each tool_use is answered by a tool_result in the very next (user) message, and each
    tool_result answers a tool_use of the message just before it."""
    for i, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "user":
            before = messages[i - 1].get("content") if i else None
            uses = (
                {
                    b.get("id")
                    for b in before or []
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                }
                if isinstance(before, list)
                else set()
            )
            for j, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in uses:
                    return Refusal(
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous "
                        "message."
                    )
            continue
        uses_here = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if not uses_here:
            continue
        after = messages[i + 1].get("content") if i + 1 < len(messages) else None
        answered = {
            b.get("tool_use_id")
            for b in (after if isinstance(after, list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        missing = [u for u in uses_here if u not in answered]
        if missing:
            return Refusal(
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(str(m) for m in missing)}. Each `tool_use` "
                "block must have a corresponding `tool_result` block in the next message."
            )
    return None


def _check_turns(messages: Any, thinking: bool, issued: Issued) -> Refusal | None:
    """The user/assistant turns; ``system`` messages (mid-conversation instructions, text
    only) stand outside their alternation and tool pairing."""
    if not isinstance(messages, list) or not messages:
        return Refusal("messages: at least one message is required")
    for i, message in enumerate(messages):
        if message.get("role") != "system":
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        if not content or any(b.get("type") != "text" or not b.get("text") for b in blocks):
            return Refusal(f"messages.{i}: system messages must have non-empty text content")
    messages = [m for m in messages if m.get("role") != "system"]
    if not messages:
        return Refusal("messages: at least one message is required")
    if messages[0].get("role") != "user":
        return Refusal('messages: first message must use the "user" role')
    for i, message in enumerate(messages):
        if i and message.get("role") == messages[i - 1].get("role"):
            return Refusal(
                'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{message.get("role")}" roles in a row'
            )
        content = message.get("content")
        last = i == len(messages) - 1
        if content in ("", []) and not (last and message.get("role") == "assistant"):
            return Refusal(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            refusal = _check_block(block, f"messages.{i}.content.{j}", issued)
            if refusal is not None:
                return refusal
    refusal = _tool_pairs(messages)
    if refusal is not None:
        return refusal
    if thinking:
        return _check_tool_loop(messages, issued)
    return None


def _check_block(block: Any, where: str, issued: Issued) -> Refusal | None:
    kind = block.get("type")
    if kind == "text" and not block.get("text"):
        return Refusal("messages: text content blocks must be non-empty")
    if kind == "thinking":
        if not block.get("signature"):
            return Refusal(f"{where}.thinking.signature: Field required")
        with issued.lock:
            signed = issued.thinking.get(block["signature"])
        if signed is None or signed != block.get("thinking"):
            return Refusal(f"{where}: Invalid `signature` in `thinking` block")
    if kind == "redacted_thinking":
        with issued.lock:
            known = block.get("data") in issued.redacted
        if not known:
            return Refusal(f"{where}: Invalid `data` in `redacted_thinking` block")
    return None


def _check_tool_loop(messages: list[Any], issued: Issued) -> Refusal | None:
    """With thinking on, the assistant turn whose tool use is being answered must carry the
    thinking blocks it came with, unchanged and in order."""
    last_assistant = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"),
        None,
    )
    if last_assistant is None:
        return None
    content = messages[last_assistant].get("content")
    if not isinstance(content, list):
        return None
    uses = [b.get("id") for b in content if b.get("type") == "tool_use"]
    with issued.lock:
        expected = issued.turns.get(str(uses[0])) if uses else None
    if expected is None:
        return None
    sent = [b for b in content if b.get("type") in ("thinking", "redacted_thinking")]
    if sent != expected or (content and content[0].get("type") == "tool_use" and expected):
        return Refusal(
            f"messages.{last_assistant}.content: thinking blocks in the latest assistant "
            "message cannot be modified. These blocks must remain as they were in the "
            "original response."
        )
    return None


def _anthropic_schema_problem(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    for key in schema:
        if key in ANTHROPIC_UNSUPPORTED:
            return f"property '{key}' is not supported"
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        return "For 'object' type, 'additionalProperties' must be explicitly set to false"
    subs: list[Any] = []
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            subs.extend(schema[key].values())
    for key in ("anyOf", "allOf", "oneOf"):
        subs.extend(schema.get(key) or [])
    if isinstance(schema.get("items"), dict):
        subs.append(schema["items"])
    for sub in subs:
        problem = _anthropic_schema_problem(sub)
        if problem is not None:
            return problem
    return None
