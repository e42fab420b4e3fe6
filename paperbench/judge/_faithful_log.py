"""reproduce.log for the faithful mode, folded and cut as PaperBench's SimpleJudge does.

PaperBench reads the first 200 kB of the log, masks the parts of each line that change from
one line to the next (ISO timestamps, dates, times, IP addresses, hex strings of 8 or more
digits; a progress bar becomes one placeholder), clusters the masked lines with the drain3
template miner (default settings) and folds each run of consecutive lines of one cluster into
its first line plus ``  (repeated N times)``. It then keeps the first half of the model's
window of the folded log, and, if the paper and the log still exceed the window, cuts the log
to ``window - paper - 5000`` tokens (from the end, keeping the head).

:func:`fold_like_paperbench` implements drain3's default clustering without the dependency:
lines group by token count and their first two tokens (a token holding a digit counts as a
wildcard), and a line joins the cluster whose template shares the most tokens with it when at
least 40% of its tokens match (the template's wildcards do not count), the template then
turning every differing token into a wildcard.
"""

from __future__ import annotations

import re

from paperbench._console import plural
from paperbench.judge._faithful_files import cut_to_tokens
from paperbench.llm import count_tokens

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T[0-9:.]+Z")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{2}:\d{2}:\d{2}\b")
_BAR = re.compile(r"\d+%?\|[█=]+|[KMG]?B/s|\d+%\s*\||[▏▎▍▌▋▊▉]{2,}")
_IP = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")
_HEXSTR = re.compile(r"\b[0-9a-fA-F]{8,}\b")
_WILD = "<*>"
_SIMILARITY = 0.4
_PREFIX_TOKENS = 2
PAPER_MARGIN = 5000
"""Tokens kept free when the paper and the log together exceed the window."""


def _mask(line: str) -> str:
    line = _ISO.sub("<TIMESTAMP>", line)
    line = _DATE.sub("<DATE>", line)
    line = _TIME.sub("<TIME>", line)
    if _BAR.search(line):
        return "<PROGRESS_BAR>"
    line = _IP.sub("<IP>", line)
    return _HEXSTR.sub("<HEX>", line)


def _key(tokens: list[str]) -> tuple[object, ...]:
    head = tuple(_WILD if any(c.isdigit() for c in t) else t for t in tokens[:_PREFIX_TOKENS])
    return (len(tokens), *head)


def _similarity(template: list[str], tokens: list[str]) -> float:
    if not tokens:
        return 1.0
    same = sum(1 for a, b in zip(template, tokens, strict=True) if a != _WILD and a == b)
    return same / len(tokens)


def fold_like_paperbench(text: str) -> str:
    """Consecutive lines of one template folded to the first plus ``(repeated N times)``."""
    clusters: dict[tuple[object, ...], list[list[str]]] = {}
    out: list[str] = []
    previous: tuple[tuple[object, ...], int] | None = None
    repeats = 1
    for line in text.splitlines():
        tokens = _mask(line).strip().split()
        key = _key(tokens)
        bucket = clusters.setdefault(key, [])
        best, best_sim = -1, -1.0
        for i, template in enumerate(bucket):
            sim = _similarity(template, tokens)
            if sim > best_sim:
                best, best_sim = i, sim
        if best >= 0 and best_sim >= _SIMILARITY:
            template = bucket[best]
            bucket[best] = [a if a == b else _WILD for a, b in zip(template, tokens, strict=True)]
        else:
            bucket.append(tokens)
            best = len(bucket) - 1
        cluster = (key, best)
        if previous is not None and cluster == previous:
            repeats += 1
            continue
        if repeats > 1:
            out.append(f"  (repeated {plural(repeats, 'time')})")
        out.append(line)
        repeats = 1
        previous = cluster
    if repeats > 1:
        out.append(f"  (repeated {plural(repeats, 'time')})")
    return "\n".join(out)


def faithful_log(raw_head: str, *, paper_tokens: int, window: int, model: str) -> str:
    """The log as the grading prompt holds it: folded, its first half-window of tokens, then
    cut further when the paper and the log exceed the window."""
    folded = fold_like_paperbench(raw_head)
    log = cut_to_tokens(folded, window // 2, model)
    if count_tokens(log, model) + paper_tokens > window:
        log = cut_to_tokens(log, window - paper_tokens - PAPER_MARGIN, model)
    return log
