"""A scripted judge model for the fake server: verdicts chosen by the criterion's text."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from paperbench.testing import FakeReply, Fault, RecordedRequest, requested_schema

_KEY = re.compile(r"^\[(\d+)\]\n((?:> .*(?:\n|$))+)", re.M)
_CRITERION = re.compile(r"The criterion you grade now \([^)]*\):\n\n((?:> .*(?:\n|$))+)")
_SCORE = re.compile(r"SCORE=([0-9.]+)")


def last_user_text(request: RecordedRequest) -> str:
    body = request.body
    messages = body.get("messages") or body.get("input") or []
    content = messages[-1]["content"]
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content)
    return str(content)


def all_text(request: RecordedRequest) -> str:
    body = request.body
    messages = body.get("messages") or body.get("input") or []
    parts: list[str] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts.extend(str(part.get("text", "")) for part in content)
        else:
            parts.append(str(content))
    return "\n".join(parts)


def _quoted(block: str) -> str:
    return "\n".join(line.removeprefix("> ") for line in block.strip("\n").split("\n"))


def is_shortlist(request: RecordedRequest) -> bool:
    """The simple mode's shortlist call (paths per criterion, not verdicts)."""
    schema = requested_schema(request)
    return schema is not None and "picks" in schema.get("properties", {})


def batch_criteria(request: RecordedRequest) -> list[tuple[str, str]]:
    """(key, requirements) of every criterion a simple-mode grading call asks about."""
    if is_shortlist(request):
        return []
    return [(m.group(1), _quoted(m.group(2))) for m in _KEY.finditer(last_user_text(request))]


@dataclass
class ScriptedJudge:
    """Answers simple (batched), ranking, grading and parsing calls.

    ``score(requirements)`` gives a criterion's score; ``None`` leaves it out of the answer.
    ``fault(requirements)`` may fail the call instead.
    """

    score: Callable[[str], float | None]
    fault: Callable[[str], FakeReply | Fault | None] = lambda _: None
    ranked: list[str] = field(default_factory=lambda: ["main.py", "README.md"])
    shortlist: Callable[[str], list[str]] = lambda _: []
    """The simple mode's shortlist: paths for a criterion (none by default)."""
    graded: list[str] = field(default_factory=list)
    """Requirements of every criterion asked about, in order."""

    def __call__(self, request: RecordedRequest) -> FakeReply | Fault:
        schema = requested_schema(request)
        text = last_user_text(request)
        if is_shortlist(request):
            picks = [
                {"key": m.group(1), "paths": self.shortlist(_quoted(m.group(2)))}
                for m in _KEY.finditer(text)
            ]
            return FakeReply(json={"picks": picks})
        if schema is not None and "verdicts" in schema.get("properties", {}):
            criteria = batch_criteria(request)
            for _, requirements in criteria:
                self.graded.append(requirements)
                failure = self.fault(requirements)
                if failure is not None:
                    return failure
            verdicts = []
            for key, requirements in criteria:
                value = self.score(requirements)
                if value is not None:
                    verdicts.append({"key": key, "explanation": f"judged {key}", "score": value})
            return FakeReply(json={"verdicts": verdicts})
        if schema is not None:  # faithful parsing
            found = _SCORE.search(text)
            if found is None:
                return FakeReply(json={"valid_score": False, "score": 0, "explanation": "none"})
            return FakeReply(
                json={"valid_score": True, "score": float(found.group(1)), "explanation": "ok"}
            )
        criterion = _CRITERION.search(text)
        if criterion is not None:  # faithful grading
            requirements = _quoted(criterion.group(1))
            self.graded.append(requirements)
            failure = self.fault(requirements)
            if failure is not None:
                return failure
            return FakeReply(text=f"Expected ... Found ... SCORE={self.score(requirements)}")
        return FakeReply(text="\n".join(self.ranked))  # faithful ranking


def json_of(request: RecordedRequest) -> str:
    return json.dumps(request.body)
