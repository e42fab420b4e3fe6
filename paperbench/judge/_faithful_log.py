"""reproduce.log for the faithful mode, folded and cut as PaperBench's SimpleJudge does.

PaperBench reads the first 200,000 characters of the log, masks the parts of each line that
change from one line to the next (ISO timestamps, dates, times, IP addresses, hex strings of 8
or more digits; a progress bar becomes one placeholder), clusters the masked lines with the
drain3 template miner and folds each run of consecutive lines of one cluster into its first
line plus ``  (repeated N times)``. It then keeps the first half of the model's window of the
folded log, and, if the paper and the log still exceed the window, cuts the log to
``window - paper - 5000`` tokens (from the end, keeping the head).

:func:`fold_like_paperbench` runs drain3 itself with the settings PaperBench gets from
``TemplateMiner()`` (drain3's defaults: similarity 0.4, depth 4, 100 children per node, numeric
tokens as wildcards, no masking of its own). They are passed explicitly, so a ``drain3.ini`` in
the working folder (which ``TemplateMiner()`` would read) changes nothing.
"""

from __future__ import annotations

import re

from drain3 import TemplateMiner
from drain3.template_miner_config import TemplateMinerConfig

from paperbench.judge._faithful_files import cut_to_tokens
from paperbench.llm import count_tokens

_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T[0-9:.]+Z")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{2}:\d{2}:\d{2}\b")
_BAR = re.compile(r"\d+%?\|[█=]+|[KMG]?B/s|\d+%\s*\||[▏▎▍▌▋▊▉]{2,}")
_IP = re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b")
_HEXSTR = re.compile(r"\b[0-9a-fA-F]{8,}\b")
PAPER_MARGIN = 5000
"""Tokens kept free when the paper and the log together exceed the window."""


def _mask(line: str) -> str:
    line = _ISO.sub("<TIMESTAMP>", line)
    line = _DATE.sub("<DATE>", line)
    line = _TIME.sub("<TIME>", line)
    if _BAR.search(line):
        line = "<PROGRESS_BAR>"
    line = _IP.sub("<IP>", line)
    return _HEXSTR.sub("<HEX>", line)


def fold_like_paperbench(text: str) -> str:
    """Consecutive lines of one drain3 cluster folded to the first plus ``(repeated N times)``."""
    miner = TemplateMiner(config=TemplateMinerConfig())
    out: list[str] = []
    previous: int | None = None
    repeats = 1
    for line in text.splitlines():
        cluster: int = miner.add_log_message(_mask(line))["cluster_id"]
        if previous is not None and cluster == previous:
            repeats += 1
            continue
        if repeats > 1:
            out.append(f"  (repeated {repeats} times)")
        out.append(line)
        repeats = 1
        previous = cluster
    if repeats > 1:
        out.append(f"  (repeated {repeats} times)")
    return "\n".join(out)


def faithful_log(raw_head: str, *, paper_tokens: int, window: int, model: str) -> str:
    """The log as the grading prompt holds it: folded, its first half-window of tokens, then
    cut further when the paper and the log exceed the window."""
    folded = fold_like_paperbench(raw_head)
    log = cut_to_tokens(folded, window // 2, model)
    if count_tokens(log, model) + paper_tokens > window:
        log = cut_to_tokens(log, window - paper_tokens - PAPER_MARGIN, model)
    return log
