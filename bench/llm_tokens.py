"""Token counting: how fast, and how far the estimates are from the exact count.

    .venv/bin/python bench/llm_tokens.py [--kb 256]

For four kinds of text an agent's conversation holds (English prose, Python code, a base64
blob, a numeric training log), each about ``--kb`` KiB, it prints the exact o200k count
(``count_tokens(text, "openai/gpt-4o")``: tiktoken with the bundled vocabulary), the time it
takes (MB/s), and the error of each estimate against it: the density-aware estimate
(``paperbench.llm._tokens.estimate_tokens``), the Claude count (the same estimate plus 15%)
and a flat bytes/4. When ``bpe-openai``'s own tokenizer is importable its speed is shown too
(its count must equal tiktoken's). Goal: the estimate within 20% of the exact count on every
kind, never below by more than 15%; exact counting faster than 5 MB/s.
"""

from __future__ import annotations

import argparse
import base64
import math
import random
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from paperbench.llm import count_tokens
from paperbench.llm._tokens import estimate_tokens

ROOT = Path(__file__).resolve().parent.parent


def samples(size: int) -> dict[str, str]:
    rng = random.Random(0)
    prose = (ROOT / "README.md").read_text() + (ROOT / "SECURITY.md").read_text()
    code = "".join(p.read_text() for p in sorted((ROOT / "paperbench" / "llm").glob("*.py")))
    blob = base64.b64encode(rng.randbytes(size)).decode()
    log = "\n".join(
        f"step {i} loss={rng.random():.6f} lr={rng.random() * 1e-3:.3e} acc={rng.random():.2%}"
        for i in range(size // 40)
    )

    def fit(text: str) -> str:
        return (text * (size // max(1, len(text)) + 1))[:size]

    return {"prose": fit(prose), "code": fit(code), "base64": fit(blob), "numbers": fit(log)}


def timed(count: Callable[[str], int], text: str, repeat: int = 3) -> tuple[int, float]:
    best = math.inf
    result = 0
    for _ in range(repeat):
        started = time.perf_counter()
        result = count(text)
        best = min(best, time.perf_counter() - started)
    return result, best


def bpe_openai_counter() -> Callable[[str], int] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import bpe_openai  # type: ignore[import-untyped]

            tokenizer = bpe_openai.get_encoding("o200k_base")
    except Exception:
        return None
    return lambda text: len(tokenizer.encode(text, disallowed_special=()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=256)
    args = parser.parse_args()
    count_tokens("warm up", "openai/gpt-4o")  # builds the encoding once
    other = bpe_openai_counter()
    table = Table(title=f"token counting, {args.kb} KiB per kind")
    for column in ("kind", "exact", "MB/s", "estimate", "Claude", "bytes/4", "estimate MB/s"):
        table.add_column(column, justify="right")
    if other is not None:
        table.add_column("bpe-openai MB/s", justify="right")
    for kind, text in samples(args.kb * 1024).items():
        size_mb = len(text.encode()) / 1e6
        exact, exact_s = timed(lambda t: count_tokens(t, "openai/gpt-4o"), text)
        estimate, estimate_s = timed(estimate_tokens, text)
        claude = count_tokens(text, "anthropic/claude-sonnet-4-5")
        quarter = math.ceil(len(text.encode()) / 4)

        def error(value: int, exact: int = exact) -> str:
            return f"{(value - exact) / exact:+.1%}"

        row = [
            kind,
            f"{exact}",
            f"{size_mb / exact_s:.1f}",
            error(estimate),
            error(claude),
            error(quarter),
            f"{size_mb / estimate_s:.1f}",
        ]
        if other is not None:
            theirs, their_s = timed(other, text)
            same = "" if theirs == exact else f" (count {theirs})"
            row.append(f"{size_mb / their_s:.1f}{same}")
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
