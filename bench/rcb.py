"""What grading one RCB problem costs outside its test, and problems per minute at once.

Runs the empty-fill check of every problem of a problem set (default: this project's own
small set, tests/rcb/pset) through ``rcb validate``'s runner: each test in a fresh sandbox with
no network. For 1 and 4 sandboxes at once, on each backend that answers, prints the seconds
per problem spent outside the test itself (start, copy in, stop: ``overhead_s``), the test's
own seconds, and problems per minute; beside them, the same tests as plain host subprocesses
in a temporary copy (the obvious alternative, with no isolation). Nothing is asserted.
Goal: under 0.2 s outside the test per problem.

    .venv/bin/python bench/rcb.py [--rcb-dir tests/rcb] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.rcb._load import load_problem_set
from paperbench.rcb._mask import fill
from paperbench.rcb._models import TEST_ENTRY, ProblemSet, Snippet, TestOutcome
from paperbench.rcb._runner import EMPTY_FILL
from paperbench.rcb._test import run_test
from paperbench.sandbox import SandboxConfig, docker_engine_answers

ROOT = Path(__file__).resolve().parents[1]


def _jobs(problems: ProblemSet) -> list[tuple[Snippet, Path, dict[str, str]]]:
    jobs = []
    for snippet in problems.snippets:
        folder = problems.paper(snippet.paper).folder
        text = (folder / snippet.file).read_text(encoding="utf-8")
        jobs.append((snippet, folder, {snippet.file: fill(text, snippet, EMPTY_FILL)}))
    return jobs


async def _sandboxed(
    jobs: list[tuple[Snippet, Path, dict[str, str]]], backend: str, at_once: int
) -> tuple[list[TestOutcome], float]:
    gate = asyncio.Semaphore(at_once)
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]

    async def one(folder: Path, files: dict[str, str]) -> TestOutcome:
        async with gate:
            return await run_test(folder, files, sandbox=config, timeout_s=120)

    start = time.monotonic()
    outcomes = await asyncio.gather(*(one(folder, files) for _, folder, files in jobs))
    return list(outcomes), time.monotonic() - start


def _host(jobs: list[tuple[Snippet, Path, dict[str, str]]]) -> tuple[list[float], float]:
    seconds = []
    start = time.monotonic()
    for _, folder, files in jobs:
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / folder.name
            shutil.copytree(folder, copy)
            for name, text in files.items():
                (copy / name).write_text(text, encoding="utf-8")
            began = time.monotonic()
            subprocess.run([sys.executable, TEST_ENTRY], cwd=copy, capture_output=True, timeout=120)
            seconds.append(time.monotonic() - began)
    return seconds, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rcb-dir", type=Path, default=ROOT / "tests" / "rcb")
    parser.add_argument("--repeat", type=int, default=2, help="runs of every problem")
    args = parser.parse_args()
    problems = load_problem_set(args.rcb_dir)
    jobs = _jobs(problems) * args.repeat
    table = Table(title=f"RCB grading: {len(jobs)} tests of {len(problems.snippets)} problems")
    for col in ("where", "at once", "outside the test s", "test s", "problems/min", "failed"):
        table.add_column(col, justify="left" if col == "where" else "right")
    backends = ["local"] + (["docker"] if asyncio.run(docker_engine_answers()) else [])
    for backend in backends:
        for at_once in (1, 4):
            outcomes, wall = asyncio.run(_sandboxed(jobs, backend, at_once))
            broken = sum(o.error_class == "sandbox_error" for o in outcomes)
            table.add_row(
                f"{backend} sandbox",
                str(at_once),
                f"{statistics.median(o.overhead_s for o in outcomes):.3f}",
                f"{statistics.median(o.seconds for o in outcomes):.3f}",
                f"{len(jobs) / wall * 60:.1f}",
                str(broken),
            )
    seconds, wall = _host(jobs)
    table.add_row(
        "host subprocess (no isolation)",
        "1",
        "-",
        f"{statistics.median(seconds):.3f}",
        f"{len(jobs) / wall * 60:.1f}",
        "-",
    )
    Console().print(table)


if __name__ == "__main__":
    main()
