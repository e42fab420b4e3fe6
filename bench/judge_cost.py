"""What grading costs: the faithful mode (PaperBench's SimpleJudge) against the simple mode.

On the same inputs, against a local fake model server that answers at once with scripted
verdicts, and counting the tokens of what it received:

- a synthetic case: a rubric of ~70 leaves, a ~24k-token paper, a ~90k-token executed
  submission (code, docs, a long log, result files);
- the bundled examples (examples/*/*/, their gold rubrics);
- the engine's overhead on a 9,000-leaf rubric (dummy judge, then the simple mode against
  the instant server);
- on the synthetic case, each mode with and without ``--batch`` (the providers' batch APIs,
  on the fake server's): billed-equivalent input tokens per leaf (the ledger's input tokens,
  cached input at the model's cache rate, cache writes at its write rate, and a batched
  request at the batch discount; prices from paperbench/_data/prices.yaml) and dollars per
  leaf from the ledger, with the verdicts compared.

"prefix-cacheable" is the share of input tokens a provider's prefix cache could serve: for
each request, the longest common prefix (in tokens) with the previous request to the same
model. Prints tables; nothing is asserted. Goal: simple ≤ 1/5 of faithful's input tokens
per leaf, with a verdict for every leaf.

    .venv/bin/python bench/judge_cost.py [--skip-examples] [--big-leaves 9000] [--batch-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from paperbench.judge import (
    GradeOptions,
    ModelSettings,
    build_view,
    grade_submission,
    load_judge_config,
)
from paperbench.judge._view import SubmissionView
from paperbench.llm import PriceTable, count_tokens, read_cost_journal
from paperbench.papers import Paper, PaperSource
from paperbench.rubric import TaskNode, load_graded
from paperbench.testing import FakeLLMServer, RecordedRequest
from paperbench.testing.judge_server import judge_handler

ROOT = Path(__file__).resolve().parents[1]
TOKENS = "openai/gpt-4o"
WORDS = [
    "calibration", "temperature", "platt", "isotonic", "histogram", "binning", "expected",
    "error", "ece", "nll", "brier", "accuracy", "logistic", "regression", "gradient", "descent",
    "seed", "split", "train", "test", "momentum", "nesterov", "heavy", "ball", "condition",
    "number", "quadratic", "learning", "rate", "schedule", "ablation", "table", "figure",
]  # fmt: skip


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content)
    return str(content or "")


def _request_text(request: RecordedRequest) -> str:
    return "\n".join(_text(m) for m in request.body.get("messages") or [])


def _common_prefix(a: str, b: str) -> str:
    """The longest common prefix of two strings (binary search over slices)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return a[:low]


def _measure(requests: list[RecordedRequest]) -> tuple[int, int]:
    """(input tokens, prefix-cacheable tokens) over the requests, in arrival order."""
    total = cacheable = 0
    previous: dict[str, str] = {}
    for request in requests:
        text = _request_text(request)
        total += count_tokens(text, TOKENS)
        before = previous.get(request.model)
        if before is not None:
            common = _common_prefix(before, text)
            cacheable += count_tokens(common, TOKENS)
        previous[request.model] = text
    return total, cacheable


def _paper(folder: Path, rng: random.Random, rubric: TaskNode) -> Paper:
    folder.mkdir(parents=True)
    sections = []
    for s in range(28):
        words = " ".join(rng.choices(WORDS, k=450))
        sections.append(f"## Section {s}\n\n{words}\n")
    (folder / "paper.md").write_text("# A synthetic paper\n\n" + "\n".join(sections))
    (folder / "rubric.json").write_text(json.dumps(rubric.to_dict()))
    return Paper(
        id="synthetic",
        title="synthetic",
        layout="repo",
        folder=folder,
        paper_md=folder / "paper.md",
        rubric_file=folder / "rubric.json",
    )


def _rubric(rng: random.Random, leaves: int, per_group: int = 10) -> TaskNode:
    categories = ["Code Development"] * 2 + ["Code Execution", "Result Analysis"]
    groups = []
    for g in range(max(1, leaves // per_group)):
        kids = [
            {
                "id": f"l{g}-{i}",
                "requirements": " ".join(rng.choices(WORDS, k=25)),
                "weight": 1,
                "sub_tasks": [],
                "task_category": categories[i % len(categories)],
            }
            for i in range(per_group)
        ]
        groups.append({"id": f"g{g}", "requirements": f"Part {g}", "weight": 1, "sub_tasks": kids})
    return TaskNode.model_validate(
        {"id": "root", "requirements": "Replicate", "weight": 1, "sub_tasks": groups}
    )


def _executed(root: Path, rng: random.Random) -> Path:
    staged = root / "staged"
    files: dict[str, str] = {}
    for i in range(24):
        lines = []
        for j in range(110):
            a, b = rng.sample(WORDS, 2)
            lines.append(f"def {a}_{b}_{j}(x, {b}=None):  # {a} {b}\n    return x * {j}")
        files[f"src/module_{i}.py"] = "\n".join(lines) + "\n"
    files["README.md"] = " ".join(rng.choices(WORDS, k=3000)) + "\n"
    files["reproduce.sh"] = "python3 -m src.module_0\n"
    created = []
    for i in range(6):
        rows = [f"{rng.choice(WORDS)},{rng.random():.4f},{rng.random():.4f}" for _ in range(150)]
        files[f"results/table_{i}.csv"] = "method,ece,acc\n" + "\n".join(rows) + "\n"
        created.append(f"results/table_{i}.csv")
    for rel, text in files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text)
    out = root / "executed"
    out.mkdir()
    with tarfile.open(out / "executed.tar.gz", "w:gz") as tar:
        tar.add(staged, arcname="submission")
    log = "\n".join(
        f"epoch {i} loss {1 / (i + 1):.4f} {rng.choice(WORDS)} {rng.choice(WORDS)}"
        for i in range(3000)
    )
    (out / "reproduce.log").write_text(log)
    metadata = {
        "status": "success",
        "exit_code": 0,
        "changed_files": {"created": created, "modified": [], "deleted": []},
    }
    (out / "metadata.json").write_text(json.dumps(metadata))
    return out


def _submission_tokens(view: SubmissionView) -> int:
    total = sum(count_tokens(f.text or "", TOKENS) for f in view.files)
    return total + count_tokens(view.log.text if view.log else "", TOKENS)


async def _grade(
    server: FakeLLMServer,
    view: SubmissionView,
    paper: Paper,
    rubric: TaskNode,
    mode: str,
    out: Path,
    batch: bool = False,
) -> dict[str, Any]:
    before = len(server.requests)
    os.environ["PAPERBENCH_CACHE_DIR"] = str(out / "cache")  # no answer reused across runs
    judge = load_judge_config(mode)
    t0 = time.perf_counter()
    result = await grade_submission(
        view,
        paper,
        judge,
        out_dir=out,
        rubric=rubric,
        options=GradeOptions(),
        settings=ModelSettings(
            base_url=server.openai_url, model=TOKENS, concurrency=16, batch=batch
        ),
    )
    wall = time.perf_counter() - t0
    requests = server.requests[before:]
    tokens, cacheable = _measure(requests)
    leaves = result.leaves
    return {
        "mode": mode,
        "leaves": leaves,
        "valid": leaves - result.invalid_leaves,
        "requests/leaf": len(requests) / leaves,
        "input tok/leaf": tokens / leaves,
        "cacheable": cacheable / tokens if tokens else 0.0,
        "wall s": wall,
    }


def _billed(out: Path, leaves: int) -> tuple[float, float]:
    """Billed-equivalent input tokens and dollars per leaf, from the grading's ledger."""
    prices = PriceTable.load()
    tokens = dollars = 0.0
    for record in read_cost_journal(out / "grading" / "costs.jsonl"):
        if record.outcome == "cache_hit":
            continue
        billed = prices.billed_input(
            record.model, record.usage, batched=record.batch_id is not None
        )
        tokens += billed or 0.0
        dollars += record.cost_usd or 0.0
    return tokens / leaves, dollars / leaves


async def _batch_rows(
    server: FakeLLMServer, view: SubmissionView, paper: Paper, rubric: TaskNode, tmp: Path
) -> None:
    os.environ.setdefault("PAPERBENCH_BATCH_WINDOW_S", "0.05")  # the fake answers at once
    os.environ.setdefault("PAPERBENCH_BATCH_POLL_S", "0.2")
    rows = []
    verdicts: dict[str, dict[str, float]] = {}
    for mode in ("simple-faithful", "simple"):
        for batch in (False, True):
            out = tmp / f"batch-{mode}-{batch}"
            row = await _grade(server, view, paper, rubric, mode, out, batch=batch)
            billed, dollars = _billed(out, row["leaves"])
            grades = json.loads((out / "grading" / "grade.json").read_text())
            tree = grades["graded_task_tree"]
            scores = {
                node["id"]: node["score"]
                for group in tree["sub_tasks"]
                for node in group["sub_tasks"]
            }
            verdicts[f"{mode}-{batch}"] = scores
            rows.append(
                {
                    "mode": mode + (" --batch" if batch else ""),
                    "leaves": row["leaves"],
                    "valid": row["valid"],
                    "requests/leaf": row["requests/leaf"],
                    "input tok/leaf": row["input tok/leaf"],
                    "billed in/leaf": billed,
                    "$/leaf": dollars,
                    "wall s": row["wall s"],
                }
            )
    _print("synthetic case, with and without --batch (gpt-4o prices)", rows)
    for mode in ("simple-faithful", "simple"):
        same = verdicts[f"{mode}-False"] == verdicts[f"{mode}-True"]
        print(f"{mode}: the same verdicts with and without --batch: {same}")
    faithful, simple_batch = rows[0]["billed in/leaf"], rows[3]["billed in/leaf"]
    print(
        f"simple --batch / simple-faithful billed-equivalent input per leaf: "
        f"{simple_batch / faithful:.3f} (goal ≤ 0.050)"
    )


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    if not rows:
        return
    keys = list(rows[0])
    width = {k: max(15, *(len(str(row[k])) for row in rows)) for k in keys}
    print("  ".join(f"{k:>{width[k]}}" for k in keys))
    for row in rows:
        cells = []
        for k in keys:
            v, w = row[k], width[k]
            if k == "$/leaf":
                cells.append(f"{v:>{w}.4f}")
            elif k == "cacheable":
                cells.append(f"{v:>{w}.0%}")
            elif isinstance(v, float):
                cells.append(f"{v:>{w},.2f}" if v < 100 else f"{v:>{w},.0f}")
            else:
                cells.append(f"{v!s:>{w}}")
        print("  ".join(cells))


async def _main(args: argparse.Namespace) -> None:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp_name, FakeLLMServer() as server:
        tmp = Path(tmp_name)
        os.environ["PAPERBENCH_CACHE_DIR"] = str(tmp / "cache")
        server.handler = judge_handler(1.0)
        rubric = _rubric(rng, 70)
        paper = _paper(tmp / "paper", rng, rubric)
        view = build_view(tmp / "none", _executed(tmp, rng))
        print(
            f"synthetic case: {sum(1 for _ in rubric.sub_tasks for _ in _.sub_tasks)} leaves, "
            f"paper {count_tokens(paper.paper_text(), TOKENS):,} tokens, "
            f"submission {_submission_tokens(view):,} tokens"
        )
        if args.batch_only:
            await _batch_rows(server, view, paper, rubric, tmp)
            return
        rows = []
        for mode in ("simple-faithful", "simple"):
            rows.append(await _grade(server, view, paper, rubric, mode, tmp / f"out-{mode}"))
        ratio = rows[1]["input tok/leaf"] / rows[0]["input tok/leaf"]
        _print("synthetic case (fake server, instant answers)", rows)
        print(f"simple / faithful input tokens per leaf: {ratio:.3f} (goal ≤ 0.200)")
        await _batch_rows(server, view, paper, rubric, tmp)

        if not args.skip_examples:
            rows = []
            source = PaperSource.resolve(None)
            for example in sorted(ROOT.glob("examples/*/*")):
                if not (example / "submission").is_dir():
                    continue
                gold = load_graded(example / "expected_result.json").to_rubric()
                ex_paper = source.load(example.parent.name)
                ex_view = build_view(example / "submission", log=example / "reproduce.log")
                for mode in ("simple-faithful", "simple"):
                    out = tmp / "ex" / example.parent.name / example.name / mode
                    row = await _grade(server, ex_view, ex_paper, gold, mode, out)
                    rows.append({"example": f"{example.parent.name}/{example.name}", **row})
            _print("bundled examples (gold rubrics)", rows)

        big = _rubric(rng, args.big_leaves, per_group=100)
        rows = []
        for mode in ("dummy", "simple"):
            t0 = time.perf_counter()
            result = await grade_submission(
                view,
                paper,
                load_judge_config(mode),
                out_dir=tmp / f"big-{mode}",
                rubric=big,
                settings=ModelSettings(base_url=server.openai_url, model=TOKENS, concurrency=32),
            )
            rows.append(
                {
                    "mode": mode,
                    "leaves": result.leaves,
                    "valid": result.leaves - result.invalid_leaves,
                    "requests": result.requests,
                    "wall s": time.perf_counter() - t0,
                }
            )
        _print(
            f"{args.big_leaves:,}-leaf rubric, instant server: engine overhead (goal < 20 s)", rows
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-examples", action="store_true")
    parser.add_argument("--big-leaves", type=int, default=9000)
    parser.add_argument(
        "--batch-only", action="store_true", help="only the synthetic case with and without --batch"
    )
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
