"""A fake model server that answers like a judge, to try ``paperbench grade`` offline.

    python -m paperbench.testing.judge_server --port 8765 [--score 1]
    paperbench grade SUBMISSION --paper ID --base-url http://127.0.0.1:8765/v1 \\
        --model openai/gpt-4o

It answers every call a judge makes: the simple mode's shortlist (for each criterion, the
first six ``.py`` and ``.md`` paths of the map) and verdicts (one per criterion key, all
with ``--score``), the faithful mode's ranking (the ``.py`` and ``.md`` paths of the file
tree), grading (a short verdict) and parsing (the score). Nothing it says is a real grade.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable

from paperbench.testing.fake_llm import FakeLLMServer, FakeReply, RecordedRequest, requested_schema

_KEY = re.compile(r"^\[(\d+)\]$", re.M)
_PATH = re.compile(r"^\s*(\S+\.(?:py|md))$", re.M)
_MAP_PATH = re.compile(r"^(\S+\.(?:py|md)) \[", re.M)
_CRITERION = "The criterion you grade now"


def _last_text(request: RecordedRequest) -> str:
    messages = request.body.get("messages") or request.body.get("input") or []
    if not messages:
        return ""
    content = messages[-1].get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content or "")


def _all_text(request: RecordedRequest) -> str:
    """Every message's text (the shortlist's map may come before its criteria)."""
    texts = []
    for message in request.body.get("messages") or request.body.get("input") or []:
        content = message.get("content")
        if isinstance(content, list):
            texts.append("".join(str(part.get("text", "")) for part in content))
        else:
            texts.append(str(content or ""))
    return "\n".join(texts)


def judge_handler(score: float = 1.0) -> Callable[[RecordedRequest], FakeReply]:
    """A handler that gives every criterion ``score``, in whichever call asks."""

    def answer(request: RecordedRequest) -> FakeReply:
        last = _last_text(request)
        schema = requested_schema(request)
        if schema is not None and "picks" in schema.get("properties", {}):
            paths = _MAP_PATH.findall(_all_text(request))[:6]
            picks = [{"key": key, "paths": paths} for key in _KEY.findall(last)]
            return FakeReply(json={"picks": picks})
        if schema is not None and "verdicts" in schema.get("properties", {}):
            verdicts = [
                {"key": key, "explanation": "scripted verdict", "score": score}
                for key in _KEY.findall(last)
            ]
            return FakeReply(json={"verdicts": verdicts})
        if schema is not None:
            return FakeReply(json={"valid_score": True, "score": score, "explanation": "scripted"})
        if _CRITERION in last:
            tail = last[last.index(_CRITERION) :][:300]
            return FakeReply(text=f"Expected: {tail}\nFound: scripted.\nScore: {score:g}")
        return FakeReply(text="\n".join(_PATH.findall(last)[:10]))

    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="0: any free port")
    parser.add_argument("--score", type=float, default=1.0)
    args = parser.parse_args()
    server = FakeLLMServer(port=args.port, validate=True)
    server.handler = judge_handler(args.score)
    with server:
        print(
            f"judge server on {server.openai_url} (every criterion scores {args.score:g})",
            flush=True,
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
