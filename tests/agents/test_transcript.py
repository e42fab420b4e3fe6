"""The transcript file: events round-trip, a line cut by a crash is dropped, others refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from paperbench.agents import (
    EndEvent,
    MessageEvent,
    StartEvent,
    ToolEvent,
    TranscriptWriter,
    read_transcript,
)
from paperbench.errors import InputError
from paperbench.llm import AssistantMessage, ToolCall, UserMessage


def test_events_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    writer = TranscriptWriter(path)
    events = [
        StartEvent(agent="basic", model="openai/gpt-4o", paper_id="p"),
        MessageEvent(step=1, message=UserMessage(content="go")),
        MessageEvent(
            step=1,
            message=AssistantMessage(tool_calls=(ToolCall(id="c1", name="bash", arguments={}),)),
        ),
        ToolEvent(step=1, tool_call_id="c1", name="bash", output="ok", exit_code=0),
        EndEvent(step=1, status="submitted"),
    ]
    for event in events:
        writer.append(event)
    writer.close()
    assert read_transcript(path) == events


def test_a_line_cut_by_a_crash_is_dropped_other_bad_lines_refused(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    good = StartEvent(agent="basic", paper_id="p").model_dump_json()
    path.write_text(good + "\n" + good[:20])
    assert len(read_transcript(path)) == 1
    path.write_text('{"type": "nosuch"}\n' + good + "\n")
    with pytest.raises(InputError, match=r"transcript.jsonl: line 1: not a transcript event"):
        read_transcript(path)
