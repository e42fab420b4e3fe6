"""The exceptions paperbench raises.

Every error a user can cause is one clear line: the file, the JSON path or field, and
what was expected. The CLI prints ``str(error)`` and exits 1 for bad input, 2 for usage.

    PaperbenchError
    ├── InputError                 bad user input: a file, a JSON path, what was expected
    │   ├── RubricError            a rubric or graded-tree file that does not fit the schema
    │   ├── PaperError             a paper bundle that cannot be used
    │   │   └── LfsPointerError    paper.md is a Git LFS pointer, not the paper
    │   ├── ConfigError            a YAML/JSON configuration file that does not validate
    │   └── ShapeMismatchError     a predicted tree unlike its gold tree [judge._eval]
    ├── UsageError                 a command used wrongly (exit 2)
    ├── ModelError                 a model call that failed (providers in paperbench.llm)
    │   ├── MissingKeyError        no API key in the environment or .env
    │   ├── UnknownProviderError   a provider/model string with no registered provider
    │   ├── ModelRequestError      the provider refused the request (400/401/403/404)
    │   │   ├── ModelAuthError     the key was rejected or lacks the permission (401/403)
    │   │   └── ContextLengthError  the conversation does not fit the context window
    │   ├── ModelUnavailableError  retries exhausted: 429/5xx/timeouts/dropped connections
    │   ├── StructuredOutputError  the answer never matched the requested schema
    │   ├── IncompleteAnswerError  cut off at max_tokens, refused, or empty (``stop_reason``)
    │   ├── BudgetExhaustedError   a cost cap was reached; no new call was started
    │   └── ProviderNotInstalledError  the provider's SDK is not installed (install hint)
    ├── SandboxError               a sandbox that could not be created or used
    │   ├── SandboxLostError         a started sandbox is gone; a rollout restarts it
    │   ├── SandboxUnavailableError  no engine/backend answers
    │   │   └── DiskCapUnavailableError  the disk cap cannot be enforced [sandbox._disk]
    │   ├── ImageBuildError          an image could not be built
    │   │   └── DerivedBuildError    a derived image's build failed [sandbox._images]
    │   ├── UnsafeArchiveError       an archive member that would escape (also InputError)
    │   ├── EgressProxyError         the egress proxy (network policy filtered) failed
    │   └── FirewallError            host firewall rules not set [sandbox._docker_firewall]
    ├── RolloutPausedError         a rollout stopped and kept resumable (``kind``, ``reason``)
    ├── ExecutorUnavailableError   the executor asked for cannot work (a Ray cluster)
    └── StagePaused                a run's stage paused; resumed with the group [runs._pipeline]

A class marked ``[module]`` is defined in ``paperbench.<module>``, beside the code that
raises it; every other class is defined here. ``(also X)`` names a second base class.
Control-flow signals that never reach a user (``TransientError`` of the retry loop,
``LimitReached``, ``StageFailed``) are not part of this tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal


class PaperbenchError(Exception):
    """Base class of every error paperbench raises on purpose."""


class InputError(PaperbenchError):
    """Bad user input. ``str()`` is one line: ``file: $.json.path: message``."""

    def __init__(self, message: str, *, file: str | Path | None = None, path: str | None = None):
        self.file = str(file) if file is not None else None
        self.path = path
        self.message = message
        super().__init__(self._line())

    def _line(self) -> str:
        parts = [p for p in (self.file, self.path) if p]
        return ": ".join([*parts, self.message])


class RubricError(InputError):
    """A rubric or graded-tree file that does not fit the schema."""


class PaperError(InputError):
    """A paper bundle that cannot be used."""


class LfsPointerError(PaperError):
    """paper.md (or another file) is a Git LFS pointer, not its content."""


class ConfigError(InputError):
    """A configuration file (YAML or JSON) that does not validate."""


class UsageError(PaperbenchError):
    """A command used wrongly: exit code 2."""


class ModelError(PaperbenchError):
    """A model call that failed."""


class MissingKeyError(ModelError):
    """No API key for a provider."""


class UnknownProviderError(ModelError):
    """A ``provider/model`` string whose provider is not registered."""


class ModelRequestError(ModelError):
    """The provider refused the request (400/401/403/404): retrying will not help."""


class ModelAuthError(ModelRequestError):
    """The provider rejected the key (``status`` 401) or denied the permission (403):
    nothing the caller sends will change it."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[object, ...]:  # a Ray worker's error reaches the driver
        return (_auth_error, (str(self), self.status))


def _auth_error(message: str, status: int) -> ModelAuthError:
    return ModelAuthError(message, status=status)


class ContextLengthError(ModelRequestError):
    """The provider refused the request because the conversation does not fit the model's
    context window (OpenAI ``context_length_exceeded``, Anthropic "prompt is too long").
    ``tokens`` and ``limit`` are the counts the provider named, when it named them."""

    def __init__(self, message: str, *, tokens: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class ModelUnavailableError(ModelError):
    """Retries exhausted on rate limits, server errors, timeouts or dropped connections."""


class StructuredOutputError(ModelError):
    """The model's answer never matched the requested schema within the allowed re-asks."""


class IncompleteAnswerError(ModelError):
    """The model's answer did not end normally: cut off at ``max_tokens``, refused, or empty.
    ``stop_reason`` says which; the answer was paid for and recorded, never cached."""

    def __init__(self, message: str, *, stop_reason: str) -> None:
        super().__init__(message)
        self.stop_reason = stop_reason


class BudgetExhaustedError(ModelError):
    """A cost cap was reached, so no new call was started."""


class SandboxError(PaperbenchError):
    """A sandbox that could not be created or used."""


class SandboxLostError(SandboxError):
    """A started sandbox is gone (stopped, killed, or its engine lost): nothing more can run
    in it. A rollout starts a new one from the last snapshot."""


class SandboxUnavailableError(SandboxError):
    """No sandbox engine or backend answers."""


class ImageBuildError(SandboxError):
    """An image could not be built."""


class UnsafeArchiveError(SandboxError, InputError):
    """An archive member that would escape its folder (``..``, absolute, links, devices)."""

    def __init__(self, message: str, *, file: str | Path | None = None, path: str | None = None):
        InputError.__init__(self, message, file=file, path=path)


class ProviderNotInstalledError(ModelError):
    """A provider whose SDK package is not installed; the message names the pip command."""


class EgressProxyError(SandboxError):
    """The egress proxy behind network policy ``filtered`` could not be set up or run."""


PauseKind = Literal["provider", "sandbox"]


class RolloutPausedError(PaperbenchError):
    """The rollout stopped before its end and is kept resumable (no status.json): the
    provider stayed unavailable past the model layer's retries (``provider``), or the sandbox
    was lost more often than ``max_restarts`` (``sandbox``)."""

    def __init__(self, out_dir: Path, kind: PauseKind, reason: str) -> None:
        super().__init__(f"{out_dir}: the run is paused: {reason}")
        self.out_dir = out_dir
        self.kind: PauseKind = kind
        self.reason = reason


class ExecutorUnavailableError(PaperbenchError):
    """The executor asked for cannot work (a Ray cluster that cannot be joined); nothing of
    the group was written."""


__all__ = [
    "OUTSIDE_MODEL_ERRORS",
    "BudgetExhaustedError",
    "ConfigError",
    "ContextLengthError",
    "EgressProxyError",
    "ExecutorUnavailableError",
    "ImageBuildError",
    "IncompleteAnswerError",
    "InputError",
    "LfsPointerError",
    "MissingKeyError",
    "ModelAuthError",
    "ModelError",
    "ModelRequestError",
    "ModelUnavailableError",
    "PaperError",
    "PaperbenchError",
    "ProviderNotInstalledError",
    "RolloutPausedError",
    "RubricError",
    "SandboxError",
    "SandboxLostError",
    "SandboxUnavailableError",
    "StructuredOutputError",
    "UnknownProviderError",
    "UnsafeArchiveError",
    "UsageError",
]


OUTSIDE_MODEL_ERRORS: tuple[type[ModelError], ...] = (
    ModelUnavailableError,
    MissingKeyError,
    ModelAuthError,
)
"""Model errors that no agent causes (no key, a key refused, the provider down past the
retries). A rollout that meets one pauses (resumable) instead of ending with a submission
to grade."""
