"""Test helpers that users and later stages can rely on: fake model servers."""

from typing import TYPE_CHECKING

from paperbench import _lazy

if TYPE_CHECKING:
    from paperbench.testing.fake_llm import (
        FakeLLMServer,
        FakeReply,
        FakeToolCall,
        FakeUsage,
        Fault,
        RecordedRequest,
        default_reply,
        requested_schema,
    )

__all__ = [
    "FakeLLMServer",
    "FakeReply",
    "FakeToolCall",
    "FakeUsage",
    "Fault",
    "RecordedRequest",
    "default_reply",
    "requested_schema",
]

if not TYPE_CHECKING:  # the names imported above, on first use
    __getattr__, __dir__ = _lazy.exports(__name__)
