"""The blacklist monitor over a long run: seconds per MB of transcript.

Writes a synthetic transcript (agent steps with tool calls and long, noisy tool outputs: pip
logs, code, random text with many dots and slashes) and a network log, then times
``monitor_run`` against reading the transcript alone (``read_transcript``). Prints a table;
nothing here is asserted.

    .venv/bin/python bench/monitor.py [--steps 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.agents import (
    MessageEvent,
    StartEvent,
    ToolEvent,
    TranscriptEvent,
    monitor_run,
    read_transcript,
)
from paperbench.llm import AssistantMessage, ToolCall
from paperbench.sandbox import Blacklist

BLACKLIST = ["https://github.com/owner/repo", "https://owner.github.io/repo", "mirror.example"]


def _noise(rnd: random.Random, n: int) -> str:
    return "".join(rnd.choice(string.ascii_letters + "  ./-_") for _ in range(n))


def make_run(folder: Path, steps: int) -> Path:
    rnd = random.Random(0)
    output = (
        "Collecting torch==2.3.0\n  Downloading https://files.pythonhosted.org/packages/ab/cd/"
        "torch-2.3.0-cp311-manylinux_x86_64.whl (779.1 MB)\n"
        "import numpy as np; x = np.array([1.5]); os.path.join('a', 'b.py')\n"
        "see https://github.com/other/project and https://arxiv.org/abs/2101.00001\n"
    ) * 20
    lines: list[str] = []
    events: list[TranscriptEvent] = [StartEvent(agent="basic", paper_id="p")]
    for i in range(steps):
        call = ToolCall(id=f"c{i}", name="bash", arguments={"cmd": "python train.py --lr 1e-3"})
        events.append(
            MessageEvent(step=i, message=AssistantMessage(content="Next " * 40, tool_calls=(call,)))
        )
        events.append(
            ToolEvent(step=i, tool_call_id=call.id, name="bash", output=output + _noise(rnd, 4000))
        )
    for event in events:
        lines.append(event.model_dump_json())
    (folder / "transcript.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    log = [
        json.dumps({"ts": "t", "method": "GET", "url": f"https://pypi.org/simple/p{i}/",
                    "host": "pypi.org", "verdict": "allowed"})
        for i in range(steps * 5)
    ]  # fmt: skip
    (folder / "network.jsonl").write_text("\n".join(log) + "\n", encoding="utf-8")
    return folder


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    blacklist = Blacklist.from_urls(BLACKLIST)
    with tempfile.TemporaryDirectory() as tmp:
        run = make_run(Path(tmp), args.steps)
        size_mb = (run / "transcript.jsonl").stat().st_size / 1e6
        rows = [
            ("read_transcript (baseline)", timed(lambda: read_transcript(run / "transcript.jsonl"),
                                                 args.repeats)),
            ("monitor_run (transcript + network log)",
             timed(lambda: monitor_run(run, blacklist, policy="flag"), args.repeats)),
        ]  # fmt: skip
    table = Table(
        title=f"Monitor: {args.steps} steps, {size_mb:.1f} MB transcript, "
        f"{args.steps * 5} network entries (median of {args.repeats})"
    )
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_column("s per MB", justify="right")
    for name, seconds in rows:
        table.add_row(name, f"{seconds:.2f}", f"{seconds / size_mb:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
