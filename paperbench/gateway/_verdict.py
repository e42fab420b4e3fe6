"""What the gateway's upstream answered to the model calls it forwarded, and whether that puts
an agent's end outside the agent, as the model layer's errors do for the in-process agents.

The run's host decides from this record, never from the agent's words: the agent learns of a
refused key or an outage through its own failed calls (the gateway passes the upstream's answer
on) and gives up after its own retries. When the last model call the upstream answered failed

- with 401 or 403: the key was rejected (:class:`~paperbench.errors.ModelAuthError`, as the
  model layer words it);
- without reaching the provider (no connection, no answer in time: the gateway's 502/504), with
  408, 409, 429 or a 5xx, or with a stream that broke off or ended before its last event: the
  provider was unavailable past the agent's retries
  (:class:`~paperbench.errors.ModelUnavailableError`).

A call answered (or replayed), or refused for what the agent sent (any other 4xx), clears the
record: what came after is the agent's own doing. The gateway's own refusals (the budget, a
model the run may not use) are not the upstream's answers and leave the record as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from paperbench._console import plural
from paperbench.errors import ModelError, ModelUnavailableError
from paperbench.gateway._call import GatewayCall
from paperbench.gateway._shapes import Family
from paperbench.llm._retry import status_error

KEY_HINTS: dict[Family, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
"""What the model layer's 401 message tells the user to check."""


def _transient(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


@dataclass
class UpstreamRecord:
    """The model calls that failed in a row for a cause outside the agent (see the module)."""

    failed: int = 0
    """How many, since the last call answered (or refused for what the agent sent)."""
    last: GatewayCall | None = None
    """The last of them."""
    message: str = ""
    """Its error as the upstream (or the gateway's connection to it) gave it."""
    family: Family = "openai"
    reached: bool = True
    """Whether the upstream answered it at all."""

    def note(
        self,
        call: GatewayCall,
        family: Family,
        *,
        reached: bool,
        message: str,
        client_gone: bool = False,
    ) -> None:
        """A model call the gateway forwarded, once settled: ``reached`` is whether the
        upstream answered at all (``call.status`` is then its status); ``client_gone``, that
        the agent went away before the answer's end."""
        outside = not reached or call.status in (401, 403) or _transient(call.status)
        if reached and call.status < 400:  # a stream cut off or left unfinished by the upstream
            outside = call.outcome == "incomplete" and not client_gone
        if not outside:
            self.failed, self.last, self.message = 0, None, ""
            return
        self.failed += 1
        self.last, self.message, self.family, self.reached = call, message, family, reached

    def error(self) -> ModelError | None:
        """The model layer's error for the record, or ``None`` when the last call the upstream
        answered did not fail for a cause outside the agent."""
        call = self.last
        if call is None:
            return None
        model = call.model or "-"
        if call.status in (401, 403):
            hint = KEY_HINTS[self.family]
            refused = status_error(
                call.status, self.message, headers={}, model=model, key_hint=hint
            )
            assert isinstance(refused, ModelError)  # a ModelAuthError for 401 and 403
            return refused
        calls = plural(self.failed, "model call")
        last = self.message
        if self.reached and call.status >= 400:
            last = f"HTTP {call.status}: {last}"
        return ModelUnavailableError(
            f"{model}: the agent gave up after {calls} in a row failed at the provider "
            f"(the last: {last})"
        )
