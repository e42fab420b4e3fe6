"""What grading one RCB problem costs outside its test, and problems per minute at once.

Runs the empty-fill check of every problem of a problem set (default: this project's own
small set, tests/rcb/pset): each test in a fresh sandbox with no network. For 1 and 4 tests at
once, on each backend that answers, three ways:

- ``run_tests``: one batch, the next jobs' sandboxes started and filled while tests run
  (``prepare_ahead`` at its default);
- ``run_tests, nothing ahead``: the same batch with ``prepare_ahead=0`` (each sandbox started
  once a slot is free);
- ``run_test each``: one ``run_test`` per problem, as ``rcb validate``'s runner calls it (the
  backend built, the image resolved and the folder staged per problem).

Columns: the seconds per problem spent outside the test itself (``overhead_s``: its mean, which
counts every second of sandbox work the run waited on, and its median), wall seconds per
problem, the test's own seconds (median), problems per minute, and sandbox errors. Beside them,
the same tests as plain host subprocesses in a temporary copy (the obvious alternative, with no
isolation). Nothing is asserted. Goal: under 0.2 s outside the test per problem.

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
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console
from rich.table import Table

from paperbench.rcb._load import load_problem_set
from paperbench.rcb._mask import fill
from paperbench.rcb._models import TEST_ENTRY, ProblemSet, Snippet, TestOutcome
from paperbench.rcb._runner import EMPTY_FILL
from paperbench.rcb._test import run_test, run_tests
from paperbench.sandbox import SandboxConfig, docker_engine_answers

ROOT = Path(__file__).resolve().parents[1]
Jobs = list[tuple[Snippet, Path, dict[str, str]]]


def _jobs(problems: ProblemSet) -> Jobs:
    jobs = []
    for snippet in problems.snippets:
        folder = problems.paper(snippet.paper).folder
        text = (folder / snippet.file).read_text(encoding="utf-8")
        jobs.append((snippet, folder, {snippet.file: fill(text, snippet, EMPTY_FILL)}))
    return jobs


async def _each(jobs: Jobs, config: SandboxConfig, at_once: int) -> list[TestOutcome]:
    """One ``run_test`` per problem, at most ``at_once`` at a time."""
    gate = asyncio.Semaphore(at_once)

    async def one(folder: Path, files: dict[str, str]) -> TestOutcome:
        async with gate:
            return await run_test(folder, files, sandbox=config, timeout_s=120)

    return list(await asyncio.gather(*(one(folder, files) for _, folder, files in jobs)))


def _batch(ahead: int | None) -> Callable[[Jobs, SandboxConfig, int], Awaitable[list[TestOutcome]]]:
    """One ``run_tests`` of every job, ``prepare_ahead=ahead``."""

    async def batch(jobs: Jobs, config: SandboxConfig, at_once: int) -> list[TestOutcome]:
        pairs = [(folder, files) for _, folder, files in jobs]
        return await run_tests(
            pairs, concurrency=at_once, sandbox=config, timeout_s=120, prepare_ahead=ahead
        )

    return batch


WAYS = {
    "run_tests": _batch(None),
    "run_tests, nothing ahead": _batch(0),
    "run_test each": _each,
}


async def _sandboxed(
    jobs: Jobs, backend: str, at_once: int, way: str
) -> tuple[list[TestOutcome], float]:
    config = SandboxConfig(backend=backend)  # type: ignore[arg-type]
    start = time.monotonic()
    outcomes = await WAYS[way](jobs, config, at_once)
    return outcomes, time.monotonic() - start


def _host(jobs: Jobs) -> tuple[list[float], float]:
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
    columns = (
        "where",
        "how",
        "at once",
        "outside the test s (mean)",
        "(median)",
        "wall s/problem",
        "test s",
        "problems/min",
        "failed",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("where", "how") else "right")
    backends = ["local"] + (["docker"] if asyncio.run(docker_engine_answers()) else [])
    for backend in backends:
        for at_once in (1, 4):
            for way in WAYS:
                outcomes, wall = asyncio.run(_sandboxed(jobs, backend, at_once, way))
                broken = sum(o.error_class == "sandbox_error" for o in outcomes)
                table.add_row(
                    f"{backend} sandbox",
                    way,
                    str(at_once),
                    f"{statistics.mean(o.overhead_s for o in outcomes):.3f}",
                    f"{statistics.median(o.overhead_s for o in outcomes):.3f}",
                    f"{wall / len(jobs):.3f}",
                    f"{statistics.median(o.seconds for o in outcomes):.3f}",
                    f"{len(jobs) / wall * 60:.1f}",
                    str(broken),
                )
    seconds, wall = _host(jobs)
    table.add_row(
        "host subprocess (no isolation)",
        "-",
        "1",
        "-",
        "-",
        f"{wall / len(jobs):.3f}",
        f"{statistics.median(seconds):.3f}",
        f"{len(jobs) / wall * 60:.1f}",
        "-",
    )
    Console(width=max(Console().width, 150)).print(table)


if __name__ == "__main__":
    main()
