"""Choosing each leaf's context without a model call: time and tokens per leaf.

Builds a synthetic submission of about 90k tokens (code, docs, results and a long log) and a
rubric-like list of leaves, then selects the context of every leaf with the lexical index,
against the obvious alternative of sending the whole submission (what a judge without file
choice would send). Prints a table; nothing here is asserted.

    .venv/bin/python bench/judge_context.py [--leaves 9000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from paperbench.judge import SubmissionIndex, build_view, select_context
from paperbench.llm import count_tokens

WORDS = [
    "calibration",
    "temperature",
    "platt",
    "isotonic",
    "histogram",
    "binning",
    "expected",
    "error",
    "ece",
    "nll",
    "brier",
    "accuracy",
    "logistic",
    "regression",
    "gradient",
    "descent",
    "seed",
    "split",
    "train",
    "test",
    "momentum",
    "nesterov",
    "heavy",
    "ball",
    "condition",
    "number",
    "quadratic",
    "learning",
    "rate",
    "schedule",
    "ablation",
    "table",
    "figure",
]
CATEGORIES = ("Code Development", "Code Execution", "Result Analysis")


def _submission(root: Path, rng: random.Random) -> Path:
    sub = root / "submission"
    for i in range(60):
        lines = []
        for j in range(120):
            a, b = rng.sample(WORDS, 2)
            lines.append(f"def {a}_{b}_{j}(x, {b}=None):  # {a} {b}\n    return x * {j}")
        (sub / "src").mkdir(parents=True, exist_ok=True)
        (sub / "src" / f"module_{i}.py").write_text("\n".join(lines) + "\n")
    (sub / "README.md").write_text(" ".join(rng.choices(WORDS, k=3000)) + "\n")
    (sub / "reproduce.sh").write_text("python3 -m src.module_0\n")
    log = root / "reproduce.log"
    log.write_text(
        "\n".join(f"epoch {i} loss {1 / (i + 1):.4f} {rng.choice(WORDS)}" for i in range(40_000))
    )
    return sub


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leaves", type=int, default=9000)
    args = parser.parse_args()
    rng = random.Random(0)
    model = "openai/gpt-4o"
    with tempfile.TemporaryDirectory() as tmp:
        sub = _submission(Path(tmp), rng)
        t0 = time.perf_counter()
        view = build_view(sub, log=Path(tmp) / "reproduce.log")
        t_view = time.perf_counter() - t0
        whole = sum(count_tokens(f.text or "", model) for f in view.files)
        whole += count_tokens(view.log.text if view.log else "", model)
        t0 = time.perf_counter()
        index = SubmissionIndex(view, model)
        t_index = time.perf_counter() - t0
        tokens: list[int] = []
        t0 = time.perf_counter()
        for i in range(args.leaves):
            leaf = " ".join(rng.choices(WORDS, k=25))
            context = select_context(
                view, CATEGORIES[i % 3], 12_000, leaf, model=model, index=index
            )
            tokens.append(context.tokens)
        t_select = time.perf_counter() - t0
    rows = [
        ("submission text + folded log (tokens)", f"{whole:,}"),
        ("build the view (s)", f"{t_view:.2f}"),
        ("build the BM25 index (s)", f"{t_index:.2f}"),
        (f"select context for {args.leaves:,} leaves (s)", f"{t_select:.2f}"),
        ("per leaf (ms)", f"{1000 * t_select / args.leaves:.2f}"),
        ("submission tokens per leaf, mean (budget 12,000)", f"{statistics.mean(tokens):,.0f}"),
        ("whole submission per leaf, no choice (tokens)", f"{whole:,}"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>10}")


if __name__ == "__main__":
    main()
