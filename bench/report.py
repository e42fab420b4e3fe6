"""`paperbench report` over a PaperBench-sized group, against plain json.load of its files.

    .venv/bin/python bench/report.py [--papers 20] [--leaves 1000] [--repeats 3]

The group: PAPERS papers x 3 agents x 3 seeds, each run with a graded tree of LEAVES leaves
(PaperBench-sized requirement texts and explanations), its leaves.jsonl, a 400-event
transcript and the rest of a finished run's files.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperbench.report import read_group_files, summarize_group
from paperbench.report._html import write_html
from paperbench.rubric import iter_leaves
from paperbench.runs import AgentEntry, RunKey, RunOutcome
from paperbench.runs._store import write_model
from tests.report.group import build_group, group_config
from tests.rubric.trees import random_rubric

AGENTS = ["agent-a", "agent-b", "agent-c"]
SEEDS = 3


def _graded(rng: random.Random, leaves: int) -> dict[str, object]:
    tree = random_rubric(rng, leaves, max_depth=9)
    stack = [tree]
    while stack:
        node = stack.pop()
        words = ["the", "code", "trains", "model", "on", "data"]
        node["requirements"] = " ".join(rng.choice(words) for _ in range(40))
        node.update(score=0.5, valid_score=True, explanation=" ".join(words * 15))
        node["judge_metadata"] = None
        stack.extend(node["sub_tasks"])  # type: ignore[arg-type]
    return tree


def make_group(root: Path, papers: int, leaves: int) -> Path:
    template = build_group(root / "template") / "p-alpha" / "agent-a" / "seed-0"
    transcript = template / "transcript.jsonl"
    lines = transcript.read_text().splitlines()
    transcript.write_text("\n".join(lines[1:-1] * 60 + [lines[-1]]) + "\n")  # ~400 events
    grade = json.loads((template / "grading" / "grade.json").read_text())
    rng = random.Random(0)
    group = root / "bench"
    names = [f"paper-{i:02d}" for i in range(papers)]
    config = group_config("bench").model_copy(
        update={
            "papers": names,
            "agents": [AgentEntry(name=a, ref=a) for a in AGENTS],
            "seeds": SEEDS,
        }
    )
    group.mkdir()
    write_model(group / "group.json", config)
    from paperbench.judge import LeafGrade
    from paperbench.rubric import GradedTaskNode

    for paper in names:
        tree = _graded(rng, leaves)
        grade_text = json.dumps({**grade, "paper_id": paper, "graded_task_tree": tree})
        nodes = iter_leaves(GradedTaskNode.model_validate(tree))
        leaf_lines = "".join(
            LeafGrade(
                path=path,
                leaf_id=node.id,
                category=node.task_category or "Subtree",
                score=0.5,
                valid=True,
                explanation=node.explanation,
                source="llm",
                files_shown=["train.py"],
            ).model_dump_json()
            + "\n"
            for path, node in nodes
        )
        for agent in AGENTS:
            for seed in range(SEEDS):
                key = RunKey(paper=paper, agent=agent, seed=seed)
                folder = key.folder(group)
                shutil.copytree(template, folder)
                outcome = RunOutcome(key=key, status="scored", score=rng.random(), coverage=1.0)
                write_model(folder / "outcome.json", outcome)
                (folder / "grading" / "grade.json").write_text(grade_text)
                (folder / "grading" / "leaves.jsonl").write_text(leaf_lines)
    return group


def timed(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--papers", type=int, default=20)
    parser.add_argument("--leaves", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        group = make_group(Path(tmp), args.papers, args.leaves)
        files = [p for p in group.rglob("*") if p.suffix in (".json", ".jsonl")]
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        runs = args.papers * len(AGENTS) * SEEDS

        def plain() -> None:
            for path in files:
                text = path.read_text()
                if path.suffix == ".jsonl":
                    [json.loads(line) for line in text.splitlines() if line]
                else:
                    json.loads(text)

        def metrics() -> None:
            summarize_group(read_group_files(group))

        def everything() -> None:
            found = read_group_files(group)
            write_html(summarize_group(found), found, Path(tmp) / "html")

        rows = [
            ("json.load of every file (baseline)", timed(plain, args.repeats)),
            ("read + metrics (--no-html)", timed(metrics, args.repeats)),
            ("read + metrics + HTML report", timed(everything, args.repeats)),
        ]
        html_mb = sum(p.stat().st_size for p in (Path(tmp) / "html").rglob("*.html")) / 1e6
    base = rows[0][1]
    table = Table(
        title=f"paperbench report: {runs} runs, {args.leaves} leaves each, "
        f"{size_mb:.0f} MB of JSON; HTML {html_mb:.0f} MB (median of {args.repeats})"
    )
    table.add_column("what")
    table.add_column("seconds", justify="right")
    table.add_column("ms / run", justify="right")
    table.add_column("× json.load", justify="right")
    for name, seconds in rows:
        table.add_row(
            name, f"{seconds:.2f}", f"{1000 * seconds / runs:.0f}", f"{seconds / base:.1f}×"
        )
    Console().print(table)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Console().print(f"peak memory of this process: {peak:.0f} MB")


if __name__ == "__main__":
    main()
