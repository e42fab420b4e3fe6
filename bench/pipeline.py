"""Where the time of ``paperbench run`` goes, and the orchestration overhead per run.

    .venv/bin/python bench/pipeline.py [--papers 20] [--seeds 3] [--sandbox local|docker]
        [--no-ray]

A PaperBench-layout data directory of synthetic papers (a 12-leaf rubric each) is run with
two dummy agents (they write a trivial reproduce.sh without a model) and the simple judge
against an instant fake model server (paperbench.testing.judge_server), through every stage:
rollout, monitor, reproduction, grading. It is run once with the local executor and once
with the Ray executor (a Ray runtime started in this process), on the same machine.

Per executor the table shows the wall time, the time spent in each stage (summed over runs),
the start-up before the first stage began, and per run: the gap (time between its first
stage's start and its outcome not spent in a stage), how much of it was waiting for a stage
slot (in run.json: the local executor's stage slots; for Ray, from a task's submission to
its start, which holds Ray's queue and any worker start-up), the orchestration overhead
(the gap less the slot waits: markers, run.json, logs, starting the next stage), and the
bookkeeping of a ``--resume`` over the finished group (every marker read, nothing left to
do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.runs import RunOutcome, RunState
from paperbench.testing import FakeLLMServer
from paperbench.testing.judge_server import judge_handler

STAGES = ("rollout", "monitor", "reproduction", "grading")


def _leaf(text: str, category: str) -> dict[str, object]:
    return {
        "id": str(uuid.uuid4()),
        "requirements": text,
        "weight": 1,
        "sub_tasks": [],
        "task_category": category,
        "finegrained_task_category": None,
    }


def synthetic_papers(root: Path, n: int) -> Path:
    """A data directory with ``n`` papers: paper.md, config.yaml, blacklist, rubric."""
    categories = ["Code Development", "Code Execution", "Result Analysis"]
    for i in range(n):
        folder = root / "papers" / f"synthetic-{i:02d}"
        folder.mkdir(parents=True)
        (folder / "paper.md").write_text(f"# Synthetic paper {i}\n\nTrain a model; report it.\n")
        (folder / "config.yaml").write_text(f"id: synthetic-{i:02d}\ntitle: Synthetic {i}\n")
        (folder / "blacklist.txt").write_text("none\n")
        groups = [
            {
                "id": str(uuid.uuid4()),
                "requirements": f"Part {g} of paper {i}.",
                "weight": 1,
                "sub_tasks": [
                    _leaf(f"Criterion {g}.{k} of paper {i}.", categories[k % 3]) for k in range(4)
                ],
                "task_category": None,
                "finegrained_task_category": None,
            }
            for g in range(3)
        ]
        rubric = {
            "id": str(uuid.uuid4()),
            "requirements": f"Replicate synthetic paper {i}.",
            "weight": 1,
            "sub_tasks": groups,
            "task_category": None,
            "finegrained_task_category": None,
        }
        (folder / "rubric.json").write_text(json.dumps(rubric))
    return root


def _agents(root: Path) -> list[Path]:
    out = []
    for name in ("dummy-a", "dummy-b"):
        path = root / f"{name}.yaml"
        path.write_text(f"type: dummy\nname: {name}\nlimits:\n  wall_time_s: 600\n")
        out.append(path)
    return out


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", "from paperbench.cli import app; app()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"paperbench {' '.join(args[:3])} failed:\n{result.stderr[-3000:]}")
    return time.monotonic() - started


def measure(
    executor: str, work: Path, data: Path, server: FakeLLMServer, seeds: int, sandbox: str
) -> dict[str, float]:
    group = f"bench-{executor}"
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench", "COLUMNS": "120"}
    env["PAPERBENCH_CACHE_DIR"] = str(work / f"cache-{executor}")
    args = ["run", "--group", group, "--data-dir", str(data), "--seeds", str(seeds)]
    for agent in _agents(work):
        args += ["--agent", str(agent)]
    args += ["--judge-model", "openai/gpt-4o", "--judge-base-url", server.openai_url]
    args += ["--sandbox", sandbox, "--no-report", "--executor", executor]
    args += ["--concurrency", "rollout=4,reproduction=4,grading=4"]
    launched = datetime.now(UTC)
    wall = _run(args, work, env)
    group_dir = work / "runs" / group
    stage_s = dict.fromkeys(STAGES, 0.0)
    gaps = []
    waits = []
    firsts = []
    runs = 0
    for run_json in group_dir.glob("*/*/seed-*/run.json"):
        state = RunState.model_validate_json(run_json.read_text())
        outcome = RunOutcome.model_validate_json((run_json.parent / "outcome.json").read_text())
        assert outcome.status == "scored", (run_json, outcome.reason)
        runs += 1
        own = 0.0
        for stage, record in state.stages.items():
            stage_s[stage] += record.seconds
            own += record.seconds
        first = state.stages["rollout"].started_at
        assert first is not None
        firsts.append(first)
        gaps.append((outcome.finished_at - first).total_seconds() - own)
        # the rollout's own wait came before its start, so it is not part of the gap
        waits.append(sum(r.waited_s for stage, r in state.stages.items() if stage != "rollout"))
    resume = _run(["run", "--resume", str(group_dir), "--no-report"], work, env)
    return {
        "runs": runs,
        "wall": wall,
        **{f"{s}_s": v for s, v in stage_s.items()},
        "startup": (min(firsts) - launched).total_seconds(),
        "gap": statistics.mean(gaps),
        "waited": statistics.mean(waits),
        "overhead": statistics.mean(g - w for g, w in zip(gaps, waits, strict=True)),
        "bookkeeping": resume / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--papers", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sandbox", choices=["local", "docker"], default="local")
    parser.add_argument("--no-ray", action="store_true", help="measure the local executor only")
    args = parser.parse_args()
    console = Console()
    executors = ["local"] if args.no_ray else ["local", "ray"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp, FakeLLMServer() as server:
        server.handler = judge_handler(1.0)
        work = Path(tmp)
        data = synthetic_papers(work / "data", args.papers)
        for executor in executors:
            size = f"{args.papers} papers × 2 agents × {args.seeds} seeds"
            console.print(f"running {size}: {executor}")
            results[executor] = measure(executor, work, data, server, args.seeds, args.sandbox)
    table = Table(
        title=f"paperbench run: {args.papers} papers × 2 dummy agents × {args.seeds} seeds, "
        f"{args.sandbox} sandbox, instant fake judge"
    )
    table.add_column("")
    for executor in executors:
        table.add_column(executor, justify="right")
    rows = [
        ("runs", "runs", "{:.0f}"),
        ("wall time (s)", "wall", "{:.1f}"),
        *[(f"  {s} (s, summed over runs)", f"{s}_s", "{:.1f}") for s in STAGES],
        ("start-up before the first stage (s)", "startup", "{:.1f}"),
        ("gap between stages per run (s)", "gap", "{:.3f}"),
        ("  of it waiting for a slot (Ray: queue and worker start-up) (s)", "waited", "{:.3f}"),
        ("  orchestration overhead per run: gap less slot waits (s)", "overhead", "{:.3f}"),
        ("bookkeeping per run: --resume of the finished group (s)", "bookkeeping", "{:.3f}"),
    ]
    for label, key, fmt in rows:
        table.add_row(label, *[fmt.format(results[e][key]) for e in executors])
    console.print(table)


if __name__ == "__main__":
    main()
