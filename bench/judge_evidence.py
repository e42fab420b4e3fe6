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
shown when its marker is in a request that grades it (a request holding its criterion). Both
modes are given a perfect ranker (the faithful mode's ranking calls answer with the evidence
file first, the simple mode's shortlist calls with the evidence file), so it is the ceiling of
what ranking can give. Per mode and category the table shows
the share of leaves whose evidence was shown, input tokens per leaf (counted on the requests'
text) and requests per leaf. Nothing is asserted.

    .venv/bin/python bench/judge_evidence.py [--leaves 178] [--modes simple,simple-faithful]

``--case classes`` measures instead the four classes of evidence of issue 28, at each of
``--sizes`` (submission tokens besides the log; 70k and 400k by default), ``--per-class``
leaves each (17): (a) evidence written with the criterion's words; (b) with words disjoint
from the whole rubric, beside a design note that uses the criterion's words and holds no
evidence; (c) split across two files (the step with two of the criterion's words, its
configuration with the third), both needed; (d) Result Analysis evidence in a file the
reproduction created, in the code's words, beside three older notes in the criterion's. The
submission is an executed one (``metadata.json`` lists what the run created; mtimes and
``reproduce.log.creation_time`` say the same). A leaf counts as shown only when every marker
of its evidence is in the request that grades it (the last grading request that asks about
its criterion; preceding criteria shown for context do not count). A mode with a
model-ranked step runs once per ``--rankers``: ``correct`` answers with the case's evidence
files (simple-faithful's ranking: first, then the rest of the tree; simple's shortlist: those
files for each criterion), ``random`` with the tree shuffled, or six paths of the map drawn at
random per criterion (the floor). Tokens and requests per leaf count every request about the
leaf (shortlist, ranking, grading, parsing), a shared request in equal shares.
Billed-equivalent tokens count the part of each request the provider's prefix cache would
serve (the fake server's cache, replayed in arrival order) at the model's cached-input rate
(gpt-4o: half the input price).

    .venv/bin/python bench/judge_evidence.py --case classes [--sizes 70000,400000]

``--case batch`` grades the official-size case with each mode with and without ``--batch``
(the fake server's batch APIs) and prints billed-equivalent input tokens and dollars per leaf
from each grading's ledger (cached input at the model's cached-input rate, batched requests
at the batch discount; prices from paperbench/_data/prices.yaml), whether the verdicts are
the same, and simple --batch's share of simple-faithful's billed input (goal ≤ 0.05).

    .venv/bin/python bench/judge_evidence.py --case batch
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paperbench.judge import GradeOptions, ModelSettings, build_view, load_judge_config
from paperbench.judge._grader import grade_submission
from paperbench.llm import PriceTable, count_tokens, read_cost_journal
from paperbench.papers import load_data_dir_paper
from paperbench.testing import FakeLLMServer, FakeReply, RecordedRequest, requested_schema
from paperbench.testing._prompt import PromptCache

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


def _code(
    words: list[str], rng: random.Random, marker: str | None, others: list[Leaf] | list[ClassLeaf]
) -> str:
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
            _leaf_node(leaf.index, leaf.criterion, leaf.category)
        )
    rubric = _rubric_of(groups)
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


_CRITERION_KEY = re.compile(r"^\[(\d+)\]\n> (.*)$", re.M)
_MAP_PATH = re.compile(r"^(\S+) \[", re.M)


def _shortlist_reply(text: str, files_of: dict[str, list[str]], seed: int | None) -> FakeReply:
    """The simple mode's shortlist: per criterion key, the files ``files_of`` gives for its
    text (a correct ranker), or, with ``seed``, six paths of the map at random (the floor;
    drawn per criterion, so the calls' order changes nothing)."""
    question = text.split("# The criteria", 1)[-1]
    paths = _MAP_PATH.findall(text.split("# The criteria", 1)[0])
    picks = []
    for key, criterion in _CRITERION_KEY.findall(question):
        if seed is not None:
            rng = random.Random(f"{seed}|{criterion.strip()}")
            named = rng.sample(paths, min(6, len(paths)))
        else:
            named = files_of.get(criterion.strip(), [])
        picks.append({"key": key, "paths": named})
    return FakeReply(json={"picks": picks})


def _is_shortlist(request: RecordedRequest) -> bool:
    schema = requested_schema(request)
    return schema is not None and "picks" in schema.get("properties", {})


def _handler(leaves: list[Leaf]) -> object:
    """Answers every call a judge makes; the faithful mode's ranking perfectly."""
    by_criterion = {leaf.criterion: leaf for leaf in leaves}

    files_of = {leaf.criterion: [leaf.evidence_file or ""] for leaf in leaves}

    def answer(request: RecordedRequest) -> FakeReply:
        text = _text(request)
        schema = requested_schema(request)
        if _is_shortlist(request):
            return _shortlist_reply(text, files_of, None)
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


async def _grade(
    mode: str, data: Path, sub: Path, out: Path, server: FakeLLMServer, batch: bool = False
) -> float:
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
        settings=ModelSettings(base_url=server.openai_url, model=MODEL, batch=batch),
    )
    return time.perf_counter() - started


def _billed_per_leaf(out: Path, leaves: int) -> tuple[float, float, dict[str, float]]:
    """Billed-equivalent input tokens and dollars per leaf, from the grading's ledger (cached
    input at the model's cache rate, a batched request at the batch discount: the price
    table's), and each leaf's score."""
    prices = PriceTable.load()
    tokens = dollars = 0.0
    for record in read_cost_journal(out / "grading" / "costs.jsonl"):
        if record.outcome == "cache_hit":
            continue
        batched = record.batch_id is not None
        tokens += prices.billed_input(record.model, record.usage, batched=batched) or 0.0
        dollars += record.cost_usd or 0.0
    lines = (out / "grading" / "leaves.jsonl").read_text().splitlines()
    scores = {g["leaf_id"]: g["score"] for g in map(json.loads, lines)}
    return tokens / leaves, dollars / leaves, scores


def run_batch(args: argparse.Namespace) -> None:
    """The official-size case, each mode with and without ``--batch`` (the fake server's
    batch APIs): billed-equivalent input and dollars per leaf, and whether the verdicts
    are the same."""
    os.environ.setdefault("PAPERBENCH_BATCH_WINDOW_S", "0.05")  # the fake answers at once
    os.environ.setdefault("PAPERBENCH_BATCH_POLL_S", "0.2")
    rng = random.Random(args.seed)
    leaves = _leaves(args.leaves, rng)
    table = Table(title=f"Billed input per leaf, {args.leaves} leaves (gpt-4o prices)")
    for column in ("mode", "input tok/leaf", "billed-eq tok/leaf", "$/leaf", "verdicts"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    billed: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="paperbench-evidence-") as tmp:
        data, sub = _build(Path(tmp), leaves, rng, args.paper_tokens)
        for mode in args.modes.split(","):
            scores: dict[bool, dict[str, float]] = {}
            for batch in (False, True):
                server = FakeLLMServer().start()
                server.handler = _handler(leaves)  # type: ignore[assignment]
                out = Path(tmp) / f"{mode}-{batch}"
                os.environ["PAPERBENCH_CACHE_DIR"] = str(out / "cache")  # nothing reused
                try:
                    asyncio.run(_grade(mode, data, sub, out, server, batch=batch))
                    tokens = sum(count_tokens(_text(r), MODEL) for r in server.requests)
                finally:
                    server.stop()
                paid, dollars, scores[batch] = _billed_per_leaf(out, len(leaves))
                name = mode + (" --batch" if batch else "")
                billed[name] = paid
                same = "" if not batch else "same" if scores[True] == scores[False] else "DIFFER"
                cells = (f"{tokens / len(leaves):,.0f}", f"{paid:,.0f}", f"{dollars:.4f}", same)
                table.add_row(name, *cells)
    Console(width=max(Console().width, 110)).print(table)
    if "simple --batch" in billed and "simple-faithful" in billed:
        ratio = billed["simple --batch"] / billed["simple-faithful"]
        Console().print(f"simple --batch / simple-faithful billed-equivalent input: {ratio:.4f}")


# -- the four classes of evidence (issue 28), at a given submission size ------------------

CLASSES = {
    "a": "(a) criterion's words",
    "b": "(b) words disjoint from the rubric",
    "c": "(c) split across two files",
    "d": "(d) a file the run wrote",
}


class ClassLeaf:
    """A leaf of the classes case: its criterion, the markers its evidence carries (all must
    be in the request that grades it) and the files that hold them (a correct ranker's
    answer)."""

    def __init__(self, index: int, kind: str, words: list[str]) -> None:
        self.index, self.kind, self.words = index, kind, words
        self.category = "Result Analysis" if kind == "d" else "Code Development"
        self.tag = f"[leaf {index:04d}]"
        a, b, c = words
        if kind == "c":
            self.criterion = f"The {a} {b} step is implemented, and it is configured with {c}."
        elif kind == "d":
            self.criterion = f"The results show {a} {b} better than {c}, as in the paper's table."
        else:
            self.criterion = f"The code implements the {a} {b} step, using {c} as the paper says."
        self.markers: list[str] = []
        self.files: list[str] = []

    def evidence(self, path: str, marker: str) -> str:
        self.files.append(path)
        self.markers.append(marker)
        return marker


def _fresh(rng: random.Random, used: set[str], n: int = 3) -> list[str]:
    words: list[str] = []
    while len(words) < n:
        w = _word(rng)
        if w not in used:
            used.add(w)
            words.append(w)
    return words


def _class_leaves(per_class: int, rng: random.Random, used: set[str]) -> list[ClassLeaf]:
    out: list[ClassLeaf] = []
    for kind in CLASSES:
        for _ in range(per_class):
            out.append(ClassLeaf(len(out), kind, _fresh(rng, used)))
    return out


def _class_rubric(leaves: list[ClassLeaf]) -> dict[str, object]:
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for leaf in leaves:  # siblings of one class, eight at most (the simple mode's batch)
        groups[f"class {leaf.kind} {leaf.index // 8}"].append(
            _leaf_node(leaf.index, leaf.criterion, leaf.category)
        )
    return _rubric_of(groups)


def _leaf_node(index: int, criterion: str, category: str) -> dict[str, object]:
    return {
        "id": f"leaf-{index}",
        "requirements": criterion,
        "weight": 1,
        "sub_tasks": [],
        "task_category": category,
        "finegrained_task_category": None,
    }


def _rubric_of(groups: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    """A rubric whose root holds one node per group of leaves."""
    return {
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


def _write_class_files(
    sub: Path, leaves: list[ClassLeaf], rng: random.Random, used: set[str]
) -> list[str]:
    """Every leaf's evidence (and, for (b) and (d), a decoy that shares the criterion's words
    and holds no evidence); the paths the run created."""
    created: list[str] = []
    for leaf in leaves:
        a, b, c = leaf.words
        marker = f"EVIDENCE-{leaf.index:04d}"
        others = rng.sample([o for o in leaves if o is not leaf], 2)
        if leaf.kind == "a":
            path = f"src/{a}_{b}.py"
            text = _code(leaf.words, rng, leaf.evidence(path, marker), others)
        elif leaf.kind == "b":  # what the code calls things, not what the rubric does
            path = f"src/pkg_{leaf.index}/{'_'.join(_fresh(rng, used, 2))}.py"
            text = _code(_fresh(rng, used), rng, leaf.evidence(path, marker), [])
            (sub / f"docs/design_{leaf.index}.md").write_text(
                f"## The {a} {b} step\n\nThe {a} {b} step, using {c}, is planned (see the "
                f"modules).\n"
            )
        elif leaf.kind == "c":  # the step in one file, its configuration with c in another
            first = f"src/{a}_{b}.py"
            part = _code(
                [a, b, *_fresh(rng, used, 1)], rng, leaf.evidence(first, marker + "-A"), []
            )
            (sub / first).write_text(part)
            path = f"src/config_{leaf.index}.py"
            text = _code([c, *_fresh(rng, used, 2)], rng, leaf.evidence(path, marker + "-B"), [])
        else:  # results the run wrote (in the code's words), among older notes on them
            path = f"results/run_{leaf.index}.json"
            run = "_".join(_fresh(rng, used, 2))  # the code's name for it, not the rubric's
            text = json.dumps({"run": run, "score": 0.91, "baseline": 0.84, "id": marker})
            leaf.evidence(path, marker)
            created.append(path)
            for j in range(3):
                (sub / f"notes/old_{leaf.index}_{j}.md").write_text(
                    f"Earlier plan ({j}): the results should show {a} {b} better than {c}.\n"
                )
        target = sub / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return created


def _build_classes(
    root: Path,
    leaves: list[ClassLeaf],
    rng: random.Random,
    used: set[str],
    size: int,
    paper_tokens: int,
) -> tuple[Path, Path, int]:
    """The data directory, an executed submission of about ``size`` tokens (besides its log)
    and its size in tokens."""
    data = root / "data" / "papers" / "evidence"
    data.mkdir(parents=True)
    (data / "config.yaml").write_text("id: evidence\ntitle: Evidence recall\n")
    paper = ["# A synthetic paper", ""] + [f"We study {' '.join(lf.words)}." for lf in leaves]
    while count_tokens("\n".join(paper), MODEL) < paper_tokens:
        words = rng.choice(leaves).words
        paper.append(" ".join(rng.choice([*words, "the", "of", "we"]) for _ in range(300)))
    (data / "paper.md").write_text("\n".join(paper))
    (data / "addendum.md").write_text("")
    (data / "blacklist.txt").write_text("none\n")
    (data / "rubric.json").write_text(json.dumps(_class_rubric(leaves)))

    sub = root / "submission"
    for folder in ("src", "docs", "notes", "results"):
        (sub / folder).mkdir(parents=True)
    (sub / "README.md").write_text("# Replication\n\nRun `bash reproduce.sh`.\n")
    (sub / "reproduce.sh").write_text("#!/bin/bash\npython -m src.run\n")
    created = _write_class_files(sub, leaves, rng, used)
    total = sum(count_tokens(p.read_text(), MODEL) for p in sub.rglob("*") if p.is_file())
    k = 0
    while total < size:  # code of its own words that calls into the leaves' modules
        text = _code(_fresh(rng, used), rng, None, rng.sample(leaves, 3))
        (sub / f"src/lib/util_{k}.py").parent.mkdir(parents=True, exist_ok=True)
        (sub / f"src/lib/util_{k}.py").write_text(text)
        total += count_tokens(text, MODEL)
        k += 1
    old, start = time.time() - 3600, int(time.time() - 60)
    for path in sub.rglob("*"):
        if path.is_file() and path.relative_to(sub).as_posix() not in created:
            os.utime(path, (old, old))
    (sub / "reproduce.log.creation_time").write_text(f"{start}\n")
    (sub / "reproduce.log").write_text("".join(f"step {i} loss 0.{i:03d}\n" for i in range(300)))
    executed = root / "executed"
    executed.mkdir()
    with tarfile.open(executed / "executed.tar.gz", "w:gz") as tar:
        for path in sorted(sub.rglob("*")):
            tar.add(path, arcname=path.relative_to(sub).as_posix(), recursive=False)
    shutil.copy(sub / "reproduce.log", executed / "reproduce.log")
    metadata = {
        "schema_version": 1,
        "status": "success",
        "exit_code": 0,
        "changed_files": {"created": created, "modified": [], "deleted": []},
    }
    (executed / "metadata.json").write_text(json.dumps(metadata))
    return root / "data", executed, total


def _class_handler(leaves: list[ClassLeaf], ranker: str, seed: int) -> object:
    """Answers every call: verdicts 1 (each grading answer carries its leaf's tag, so the
    parsing call that reads it is counted for that leaf); ranking calls with the leaf's
    evidence files first (``correct``) or the tree in a random order (``random``, drawn per
    request text, so the calls' order changes nothing)."""
    files_of = {leaf.criterion: leaf.files for leaf in leaves}

    def answer(request: RecordedRequest) -> FakeReply:
        text = _text(request)
        schema = requested_schema(request)
        if _is_shortlist(request):
            return _shortlist_reply(text, files_of, seed if ranker == "random" else None)
        if schema is not None and "verdicts" in schema.get("properties", {}):
            keys = _KEY.findall(text)
            verdicts = [{"key": k, "explanation": "scripted", "score": 1} for k in keys]
            return FakeReply(json={"verdicts": verdicts})
        if schema is not None:
            return FakeReply(json={"valid_score": True, "score": 1, "explanation": "scripted"})
        mine = [leaf for leaf in leaves if leaf.criterion in _graded_part(text)]
        if _GRADING in text:
            tag = mine[0].tag if mine else ""
            return FakeReply(text=f"Expected: the criterion. {tag}\nFound: scripted.\nScore: 1")
        tree = _tree_paths(text)
        first = mine[0].files if mine and ranker == "correct" else []
        rest = [p for p in tree if p not in first]
        if ranker == "random":
            random.Random(f"{seed}|{text}").shuffle(rest)
        return FakeReply(text="\n".join([*first, *rest]))

    return answer


def _graded_part(text: str) -> str:
    """What a grading request asks about: the text after "you grade now" (the preceding
    criteria, shown for context, come before it)."""
    return text.split("you grade now", 1)[-1]


def _is_grading(request: RecordedRequest, text: str) -> bool:
    """The simple mode's structured verdicts, or the faithful mode's free-text grading call
    (its parsing call has a schema and no criterion)."""
    schema = requested_schema(request)
    if schema is not None:
        return "verdicts" in schema.get("properties", {})
    return _GRADING in text


def _billed(requests: list[RecordedRequest], tokens: list[int]) -> list[float]:
    """Each request's input tokens as billed, in uncached-token equivalents: the part its
    provider's prefix cache would serve (the fake server's cache replayed in arrival order)
    at the model's cached-input rate over its input rate (the price table's)."""
    price = PriceTable.load().lookup(MODEL)
    rate = price.cached_input / price.input if price and price.cached_input is not None else 1.0
    cache = PromptCache()
    out = []
    for request, counted in zip(requests, tokens, strict=True):
        use = cache.use(request.protocol, request.body)
        share = use.read / use.input if use.input else 0.0
        out.append(counted * (1 - share * (1 - rate)))
    return out


def _class_rows(
    leaves: list[ClassLeaf],
    texts: list[str],
    tokens: list[int],
    billed: list[float],
    grading: list[bool],
) -> dict[str, tuple[float, float, float, float]]:
    """Per class: the share of leaves whose every marker is in the request that grades it
    (the last grading request that asks about its criterion), and input tokens (counted, and
    billed-equivalent) and requests per leaf over every request about it (ranking, grading,
    parsing; a request about several leaves counted in equal shares)."""
    parts = [_graded_part(t) if g else t for t, g in zip(texts, grading, strict=True)]
    held = [[lf for lf in leaves if lf.criterion in p or lf.tag in p] for p in parts]
    rows: dict[str, tuple[float, float, float, float]] = {}
    for kind in CLASSES:
        mine = [leaf for leaf in leaves if leaf.kind == kind]
        shown, tok, paid, reqs = 0, 0.0, 0.0, 0.0
        for leaf in mine:
            asks = [i for i, h in enumerate(held) if leaf in h]
            graded = [i for i in asks if grading[i]]
            if graded and all(m in texts[graded[-1]] for m in leaf.markers):
                shown += 1
            for i in asks:
                tok += tokens[i] / len(held[i])
                paid += billed[i] / len(held[i])
                reqs += 1 / len(held[i])
        n = len(mine)
        rows[kind] = (100 * shown / n, tok / n, paid / n, reqs / n)
    return rows


def run_classes(args: argparse.Namespace) -> None:
    """The four classes at each size, for each mode (and ranker, where the mode has a
    model-ranked step)."""
    table = Table(
        title=f"Evidence shown by class, {args.per_class} leaves per class (a fake model)"
    )
    numbers = ("shown", "input tok/leaf", "billed-eq tok/leaf", "req/leaf")
    for column in ("class", "size", "mode", "ranker", *numbers):
        table.add_column(column, justify="right" if column in numbers else "left")
    results: list[tuple[str, str, str, str, tuple[float, float, float, float]]] = []
    for size in (int(s) for s in args.sizes.split(",")):
        rng = random.Random(args.seed)
        used: set[str] = set()
        leaves = _class_leaves(args.per_class, rng, used)
        with tempfile.TemporaryDirectory(prefix="paperbench-evidence-") as tmp:
            data, executed, total = _build_classes(
                Path(tmp), leaves, rng, used, size, args.paper_tokens
            )
            Console().print(f"submission of {total:,} tokens (target {size:,})")
            for mode in args.modes.split(","):
                for ranker in args.rankers.split(","):
                    server = FakeLLMServer().start()
                    server.handler = _class_handler(leaves, ranker, args.seed)  # type: ignore[assignment]
                    try:
                        paper = load_data_dir_paper(data, "evidence")
                        view = build_view(Path(tmp) / "submission", executed)
                        started = time.perf_counter()
                        asyncio.run(
                            grade_submission(
                                view,
                                paper,
                                load_judge_config(mode),
                                out_dir=Path(tmp) / f"{mode}-{ranker}",
                                options=GradeOptions(samples=1),
                                settings=ModelSettings(base_url=server.openai_url, model=MODEL),
                            )
                        )
                        seconds = time.perf_counter() - started
                        requests = list(server.requests)
                    finally:
                        server.stop()
                    texts = [_text(r) for r in requests]
                    tokens = [count_tokens(t, MODEL) for t in texts]
                    grading = [_is_grading(r, t) for r, t in zip(requests, texts, strict=True)]
                    Console().print(f"{mode} ({ranker}): {len(requests)} requests, {seconds:.0f} s")
                    billed = _billed(requests, tokens)
                    rows = _class_rows(leaves, texts, tokens, billed, grading)
                    for kind, row in rows.items():
                        results.append((kind, f"{total // 1000}k", mode, ranker, row))
    for kind, size_label, mode, ranker, row in sorted(results, key=lambda r: r[0]):
        shown, tok, paid, reqs = row
        cells = (f"{shown:.0f} %", f"{tok:,.0f}", f"{paid:,.0f}", f"{reqs:.2f}")
        table.add_row(CLASSES[kind], size_label, mode, ranker, *cells)
    Console(width=max(Console().width, 120)).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=178)
    parser.add_argument("--modes", default="simple,simple-faithful")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--paper-tokens", type=int, default=25_000, help="the paper's length (every call holds it)"
    )
    parser.add_argument(
        "--case",
        choices=("official", "classes", "batch"),
        default="official",
        help="official: an official-size rubric by category; classes: the four classes of "
        "evidence at each --sizes; batch: the official case's billed input per leaf, each "
        "mode with and without --batch",
    )
    parser.add_argument("--per-class", type=int, default=17, help="classes: leaves per class")
    parser.add_argument(
        "--sizes", default="70000,400000", help="classes: submission sizes in tokens"
    )
    parser.add_argument(
        "--rankers",
        default="correct,random",
        help="classes: the fake ranker of a mode with a ranking call (correct: the case's "
        "answer first; random: the tree shuffled)",
    )
    args = parser.parse_args()
    if args.case == "classes":
        run_classes(args)
        return
    if args.case == "batch":
        run_batch(args)
        return
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
