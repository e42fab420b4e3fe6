"""Evidence recall of the judge modes: was each leaf's evidence in what the model was shown?

Builds a synthetic executed submission for an official-size rubric (178 leaves by default:
Code Development, Code Execution and Result Analysis in PaperBench's proportions) in which
each leaf's evidence sits in one place, written as code or output would be (identifiers and
comments from the words of its criterion, never its sentence), among distractor files that
use the other leaves' words:

- Code Development: one source file per leaf, among ~190 distractors (~125k tokens in all);
- Code Execution: a few lines of a long ``reproduce.log`` (tens of thousands of lines);
- Result Analysis: a results table the reproduction wrote (newer than
  ``reproduce.log.creation_time``), among older tables and code;
- the paper: ~25k tokens (``--paper-tokens``), as PaperBench's papers are, since every
  grading call holds it.

Every evidence place carries a marker (``EVIDENCE-0042``) that no criterion mentions. Each
mode grades the whole tree against a local fake model server; a leaf's evidence counts as
shown when its marker is in a request that grades it (a request holding its criterion). The
faithful mode is given a perfect ranker (its ranking calls answer with the evidence file
first), so it is the ceiling of what ranking can give. Per mode and category the table shows
the share of leaves whose evidence was shown, input tokens per leaf (counted on the requests'
text) and requests per leaf. Nothing is asserted.

    .venv/bin/python bench/judge_evidence.py [--leaves 178] [--modes simple,simple-faithful]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperbench.judge import GradeOptions, ModelSettings, build_view, load_judge_config
from paperbench.judge._grader import grade_submission
from paperbench.llm import count_tokens
from paperbench.papers import load_data_dir_paper
from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest, requested_schema

CATEGORIES = ("Code Development", "Code Execution", "Result Analysis")
SHARES = (0.68, 0.17, 0.15)
MODEL = "openai/gpt-4o"
_KEY = re.compile(r"^\[(\d+)\]$", re.M)
_DATA = re.compile(r"<<<DATA (\w+)>>>\n(.*?)<<<END DATA \1>>>", re.S)

SYLLABLES = [
    "ka", "lo", "mi", "ne", "po", "ru", "sa", "ti", "vo", "ze", "bra", "cli", "dro", "fen",
    "gra", "hol", "jun", "kel", "mar", "nor", "pel", "qua", "ros", "sil", "tor", "ulm", "ven",
]  # fmt: skip


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3))


class Leaf:
    def __init__(self, index: int, category: str, words: list[str]) -> None:
        self.index = index
        self.category = category
        self.words = words
        self.marker = f"EVIDENCE-{index:04d}"
        a, b, c = words
        if category == "Code Development":
            self.criterion = f"The code implements the {a} {b} step, using {c} as the paper says."
        elif category == "Code Execution":
            self.criterion = f"The {a} {b} experiment is run with {c}, as the paper describes."
        else:
            self.criterion = f"The results show {a} {b} better than {c}, as in the paper's table."
        self.evidence_file: str | None = None


def _leaves(n: int, rng: random.Random) -> list[Leaf]:
    counts = [round(n * s) for s in SHARES]
    counts[0] += n - sum(counts)
    used: set[str] = set()
    out: list[Leaf] = []
    for category, count in zip(CATEGORIES, counts, strict=True):
        for _ in range(count):
            words = []
            while len(words) < 3:
                w = _word(rng)
                if w not in used:
                    used.add(w)
                    words.append(w)
            out.append(Leaf(len(out), category, words))
    return out


def _code(words: list[str], rng: random.Random, marker: str | None, others: list[Leaf]) -> str:
    """A module built on ``words``; it also calls into the modules of ``others`` (so their
    words compete in a lexical ranking, as a real code base's do)."""
    a, b, c = words
    lines = [f'"""Helpers for {a} and {b}."""', "", "import numpy as np", ""]
    lines += [f"from .{o.words[0]}_{o.words[1]} import {o.words[0]}_{o.words[1]}_0" for o in others]
    if marker:
        lines.append(f"# {marker}")
    for j in range(rng.randint(5, 9)):
        lines += [
            f"def {a}_{b}_{j}(x, {c}=0.5):",
            f"    # apply the {b} update to the {a} state, scaled by {c}",
            f"    y = np.asarray(x) * {c} + {j}",
            "    return y - y.mean() if y.size else y",
            "",
        ]
    for o in others:
        x, y, z = o.words
        lines += [
            f"def use_{x}_{y}(state, {z}=1.0):",
            f"    # the {x} {y} step of the other stage, with {z}",
            f"    return {x}_{y}_0(state, {z})",
            "",
        ]
    return "\n".join(lines)


def _build(
    root: Path, leaves: list[Leaf], rng: random.Random, paper_tokens: int
) -> tuple[Path, Path]:
    """The data directory (paper, rubric) and the executed submission."""
    data = root / "data" / "papers" / "evidence"
    data.mkdir(parents=True)
    (data / "config.yaml").write_text("id: evidence\ntitle: Evidence recall\n")
    paper = ["# A synthetic paper", ""]
    paper += [f"We study {' '.join(leaf.words)}." for leaf in leaves]
    while count_tokens("\n".join(paper), MODEL) < paper_tokens:  # a paper's usual length
        words = rng.choice(leaves).words
        paper.append(
            " ".join(
                rng.choice([*words, "the", "of", "and", "we", "model", "results"])
                for _ in range(300)
            )
        )
    (data / "paper.md").write_text("\n".join(paper))
    (data / "addendum.md").write_text("")
    (data / "blacklist.txt").write_text("none\n")
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for leaf in leaves:
        groups[f"{leaf.category} {leaf.index // 8}"].append(
            {
                "id": f"leaf-{leaf.index}",
                "requirements": leaf.criterion,
                "weight": 1,
                "sub_tasks": [],
                "task_category": leaf.category,
                "finegrained_task_category": None,
            }
        )
    rubric = {
        "id": "root",
        "requirements": "The paper is replicated.",
        "weight": 1,
        "task_category": None,
        "finegrained_task_category": None,
        "sub_tasks": [
            {
                "id": f"group-{i}",
                "requirements": name,
                "weight": 1,
                "task_category": None,
                "finegrained_task_category": None,
                "sub_tasks": subs,
            }
            for i, (name, subs) in enumerate(groups.items())
        ],
    }
    (data / "rubric.json").write_text(json.dumps(rubric))

    sub = root / "submission"
    (sub / "src").mkdir(parents=True)
    (sub / "results").mkdir()
    (sub / "README.md").write_text("# Replication\n\nRun `bash reproduce.sh`.\n")
    (sub / "reproduce.sh").write_text("#!/bin/bash\npython -m src.run\n")
    for leaf in leaves:  # one evidence file per CD leaf; a distractor for every other leaf
        name = f"src/{'_'.join(leaf.words[:2])}.py"
        is_cd = leaf.category == "Code Development"
        others = rng.sample([lf for lf in leaves if lf is not leaf], 3)
        (sub / name).write_text(_code(leaf.words, rng, leaf.marker if is_cd else None, others))
        if is_cd:
            leaf.evidence_file = name
    for k in range(140):  # distractors: words of their own, calls into the leaves' modules
        fresh = [_word(rng), _word(rng), _word(rng)]
        (sub / f"src/util_{k}.py").write_text(_code(fresh, rng, None, rng.sample(leaves, 4)))
    old = time.time() - 3600
    for k in range(20):  # pre-existing tables: older than the reproduction
        path = sub / f"results/old_{k}.csv"
        path.write_text("name,value\n" + "".join(f"{_word(rng)},{k}\n" for _ in range(40)))
        os.utime(path, (old, old))
    log: list[str] = []
    ce = [leaf for leaf in leaves if leaf.category == "Code Execution"]
    places = {rng.randrange(40_000): leaf for leaf in ce}
    for i in range(40_000):
        log.append(f"step {i} loss {rng.random():.4f} lr {rng.random() / 100:.5f}")
        if i in places:
            leaf = places[i]
            a, b, c = leaf.words
            log += [f"starting {a}_{b} run ({c})", f"{leaf.marker} {a}_{b} finished, {c} ok"]
    start = time.time() - 60
    (sub / "reproduce.log").write_text("\n".join(log) + "\n")
    (sub / "reproduce.log.creation_time").write_text(f"{start}\n")
    for leaf in leaves:
        if leaf.category == "Result Analysis":
            a, b, c = leaf.words
            name = f"results/table_{leaf.index}.md"
            (sub / name).write_text(
                f"| method | score |\n|---|---|\n| {a} {b} | 0.91 |\n| {c} | 0.84 |\n\n"
                f"<!-- {leaf.marker} -->\n"
            )
            leaf.evidence_file = name
    for path in [*list((sub / "src").iterdir()), sub / "README.md", sub / "reproduce.sh"]:
        os.utime(path, (old, old))
    return root / "data", sub


def _text(request: RecordedRequest) -> str:
    messages = request.body.get("messages") or request.body.get("input") or []
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts += [str(p.get("text", "")) for p in content]
        else:
            parts.append(str(content or ""))
    return "\n".join(parts)


_GRADING = "The criterion you grade now"


def _tree_paths(text: str) -> list[str]:
    """The full paths of an indented file tree (folders end with ``/``) in a DATA block."""
    paths: list[str] = []
    for block in _DATA.findall(text):
        stack: list[str] = []
        for line in block[1].splitlines():
            if not line.strip() or line.strip() == "files:":
                continue
            depth = (len(line) - len(line.lstrip())) // 4
            name = line.strip()
            del stack[depth:]
            if name.endswith("/"):
                stack.append(name)
            else:
                paths.append("".join(stack) + name)
    return paths


def _handler(leaves: list[Leaf]) -> object:
    """Answers every call a judge makes; the faithful mode's ranking perfectly."""
    by_criterion = {leaf.criterion: leaf for leaf in leaves}

    def answer(request: RecordedRequest) -> FakeReply:
        text = _text(request)
        schema = requested_schema(request)
        if schema is not None and "verdicts" in schema.get("properties", {}):
            keys = _KEY.findall(text)
            verdicts = [{"key": k, "explanation": "scripted", "score": 1} for k in keys]
            return FakeReply(json={"verdicts": verdicts})
        if schema is not None:
            return FakeReply(json={"valid_score": True, "score": 1, "explanation": "scripted"})
        if _GRADING in text:
            return FakeReply(text="Expected: the criterion.\nFound: scripted.\nScore: 1")
        ranked = [leaf for c, leaf in by_criterion.items() if c in text]
        first = ranked[0].evidence_file if ranked and ranked[0].evidence_file else None
        tree = [p for p in _tree_paths(text) if p != first]
        return FakeReply(text="\n".join([first, *tree] if first else tree))

    return answer


async def _grade(mode: str, data: Path, sub: Path, out: Path, server: FakeLLMServer) -> float:
    paper = load_data_dir_paper(data, "evidence")
    view = build_view(sub)
    judge = load_judge_config(mode)
    started = time.perf_counter()
    await grade_submission(
        view,
        paper,
        judge,
        out_dir=out,
        options=GradeOptions(samples=1),
        settings=ModelSettings(base_url=server.openai_url, model=MODEL),
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=178)
    parser.add_argument("--modes", default="simple,simple-faithful")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--paper-tokens", type=int, default=25_000, help="the paper's length (every call holds it)"
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    leaves = _leaves(args.leaves, rng)
    table = Table(title=f"Evidence recall, {args.leaves} leaves (a fake model, a perfect ranker)")
    for column in ("mode", "category", "leaves", "evidence shown", "input tok/leaf", "req/leaf"):
        table.add_column(column, justify="left" if column in ("mode", "category") else "right")
    with tempfile.TemporaryDirectory(prefix="paperbench-evidence-") as tmp:
        data, sub = _build(Path(tmp), leaves, rng, args.paper_tokens)
        files = [p for p in sub.rglob("*") if p.is_file()]
        size = sum(count_tokens(p.read_text(), MODEL) for p in files if p.suffix != ".log")
        Console().print(
            f"submission: {len(files)} files, {size:,} tokens besides a "
            f"{(sub / 'reproduce.log').stat().st_size // 1000:,} kB log"
        )
        for mode in args.modes.split(","):
            server = FakeLLMServer().start()
            server.handler = _handler(leaves)  # type: ignore[assignment]
            try:
                seconds = asyncio.run(_grade(mode, data, sub, Path(tmp) / mode, server))
                requests = list(server.requests)
            finally:
                server.stop()
            texts = [_text(r) for r in requests]
            tokens = [count_tokens(t, MODEL) for t in texts]
            held = [[lf for lf in leaves if lf.criterion in t] for t in texts]
            for category in CATEGORIES:
                mine = [leaf for leaf in leaves if leaf.category == category]
                shown, tok, reqs = 0, 0.0, 0.0
                for leaf in mine:
                    grading = [i for i, h in enumerate(held) if leaf in h]
                    shown += any(leaf.marker in texts[i] for i in grading)
                    for i in grading:  # a request's tokens shared by the leaves it holds
                        tok += tokens[i] / len(held[i])
                        reqs += 1 / len(held[i])
                table.add_row(
                    mode,
                    category,
                    str(len(mine)),
                    f"{100 * shown / len(mine):.1f} %",
                    f"{tok / len(mine):,.0f}",
                    f"{reqs / len(mine):.2f}",
                )
            total = sum(tokens) / len(leaves)
            Console().print(
                f"{mode}: {len(requests)} requests in {seconds:.0f} s, "
                f"{total:,.0f} input tokens per leaf over every request"
            )
    Console(width=max(Console().width, 110)).print(table)


if __name__ == "__main__":
    main()
