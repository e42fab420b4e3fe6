"""reproduce.log for a judge: repeated lines folded, then cut to a token budget.

PaperBench's judge folds the log with a template miner (drain3) after masking timestamps,
progress bars, IP addresses and long hex strings, collapsing a run of consecutive lines of the
same template into its first line plus ``(repeated N times)``; it then keeps at most half the
model's window of the log, cut from the end. Here the masking is done by regular expressions
(every number counts as one placeholder, so ``epoch 3 loss 0.41`` and ``epoch 4 loss 0.39``
are the same line). Unlike PaperBench, a short run (a table of five seeds) is kept whole, and a
long run keeps its last lines too (the last epoch is the one a judge needs); a marker says how
many lines were folded. A cut keeps the head and the tail (set-up
errors sit at the start, results at the end) and says what was cut, never silently; for the
default mode's graders (:meth:`LineCosts.cut_relevant`) the room between them goes to the
windows of lines that share the most words with the criteria graded, so the part of a long
log that speaks of them is shown in place.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from itertools import accumulate

from pydantic import BaseModel, ConfigDict

from paperbench.llm import count_tokens

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ][0-9:.,]+Z?|\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b")
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_PROGRESS = re.compile(r"\d+%\s*\||[█▏▎▍▌▋▊▉#=]{4,}|[KMG]?i?B/s|it/s|s/it")
_SPACE = re.compile(r"\s+")


class LogExcerpt(BaseModel):
    """What of the log is shown, and what was left out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    tokens: int
    """Tokens of ``text`` as counted for the model it was cut for."""
    lines_cut: int = 0
    """Lines of the folded log left out of the middle (0: shown whole)."""
    shown: list[tuple[int, int]] = []
    """The line ranges of the text cut (first and last line, from 1) that ``text`` holds."""


def _ranges(keep: list[bool]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i, kept in enumerate(keep, start=1):
        if kept:
            if out and out[-1][1] == i - 1:
                out[-1] = (out[-1][0], i)
            else:
                out.append((i, i))
    return out


def _template(line: str) -> str:
    if _PROGRESS.search(line):
        return "<progress>"
    line = _TIMESTAMP.sub("<t>", line)
    line = _HEX.sub("<hex>", line)
    line = _NUMBER.sub("<n>", line)
    return _SPACE.sub(" ", line).strip()


FOLD_MIN_RUN = 8
"""Runs of similar lines up to this long are kept whole (a table of five seeds stays)."""
FOLD_KEEP_HEAD = 2
FOLD_KEEP_TAIL = 3


def fold_log(text: str) -> str:
    """Fold repeated lines and long runs of lines that differ only in numbers or times.

    A carriage return starts a new line (progress bars redraw with ``\\r``). Three or more
    identical lines in a row keep one, with a marker; a run of more than
    :data:`FOLD_MIN_RUN` similar lines keeps its first :data:`FOLD_KEEP_HEAD` and last
    :data:`FOLD_KEEP_TAIL` lines (the last epoch is the one a judge needs), with a marker
    saying how many were folded between them.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and lines[j] == lines[i]:
            j += 1
        if j - i >= 3:
            out.append(lines[i])
            out.append(f"[... the line above repeated {j - i - 1} more times ...]")
            i = j
            continue
        key = _template(lines[i])
        j = i + 1
        while j < len(lines) and _template(lines[j]) == key:
            j += 1
        run = j - i
        if run > FOLD_MIN_RUN:
            out.extend(lines[i : i + FOLD_KEEP_HEAD])
            folded = run - FOLD_KEEP_HEAD - FOLD_KEEP_TAIL
            out.append(f"[... {folded} similar lines folded ...]")
            out.extend(lines[j - FOLD_KEEP_TAIL : j])
        else:
            out.extend(lines[i:j])
        i = j
    return "\n".join(out)


class LineCosts:
    """A text's lines with their token counts, counted once, for repeated cuts."""

    def __init__(self, text: str, model: str) -> None:
        self.text = text
        self.model = model
        self.lines = text.split("\n")
        self.prefix = list(accumulate((count_tokens(line + "\n", model) for line in self.lines),
                                      initial=0))  # fmt: skip
        self.whole = count_tokens(text, model)

    def cut(self, budget_tokens: int) -> LogExcerpt:
        """Keep whole lines from the head and the tail within ``budget_tokens``.

        The head gets a third of the budget, the tail the rest (results come last); the
        marker that names the cut is counted in the budget. Returns an empty excerpt when not
        even the marker fits.
        """
        if self.whole <= budget_tokens:
            return LogExcerpt(text=self.text, tokens=self.whole, shown=[(1, len(self.lines))])
        lines, prefix, n = self.lines, self.prefix, len(self.lines)
        widest = f"[... {n} lines (0000000000 tokens) cut here ...]\n"
        room = budget_tokens - count_tokens(widest, self.model)
        if room < 0:
            return LogExcerpt(text="", tokens=0, lines_cut=n)
        head = bisect_right(prefix, room // 3) - 1  # lines [0, head) are kept
        tail = max(bisect_left(prefix, prefix[n] - (room - prefix[head])), head)  # [tail, n)
        while True:
            cut_tokens = prefix[tail] - prefix[head]
            marker = f"[... {tail - head} lines ({cut_tokens} tokens) cut here ...]"
            out = "\n".join([*lines[:head], marker, *lines[tail:]])
            tokens = count_tokens(out, self.model)
            if tokens <= budget_tokens:
                keep = [i < head or i >= tail for i in range(n)]
                return LogExcerpt(
                    text=out, tokens=tokens, lines_cut=tail - head, shown=_ranges(keep)
                )
            # an exact tokenizer can count the joined text above the sum of its lines
            if tail < n:
                tail += 1
            elif head > 0:
                head -= 1
            else:
                return LogExcerpt(text="", tokens=0, lines_cut=n)

    def cut_relevant(self, budget_tokens: int, terms: frozenset[str]) -> LogExcerpt:
        """Like :meth:`cut`, but the room between the head and the tail goes to the windows of
        lines that share the most ``terms`` (a criterion's words) — the part of a long log
        that speaks of what is graded — each shown in place with a marker for the lines cut
        around it. Without terms, or when no window shares one, it is :meth:`cut`."""
        if self.whole <= budget_tokens or not terms:
            return self.cut(budget_tokens)
        lines, prefix, n = self.lines, self.prefix, len(self.lines)
        hits = [len(terms & set(_WORD.findall(line.lower()))) for line in lines]
        windows = [
            (sum(hits[start : start + _WINDOW]), start)
            for start in range(0, n, _WINDOW)
            if any(hits[start : start + _WINDOW])
        ]
        if not windows:
            return self.cut(budget_tokens)
        widest = f"[... {n} lines (0000000000 tokens) cut here ...]\n"
        marker_tokens = count_tokens(widest, self.model)
        room = budget_tokens - marker_tokens
        if room < 0:
            return LogExcerpt(text="", tokens=0, lines_cut=n)
        keep = [False] * n
        head = bisect_right(prefix, room // 6) - 1
        tail = max(bisect_left(prefix, prefix[n] - room // 3), head)
        for i in [*range(head), *range(tail, n)]:
            keep[i] = True
        used = prefix[head] + prefix[n] - prefix[tail]
        for _, start in sorted(windows, key=lambda w: (-w[0], w[1])):
            end = min(start + _WINDOW, n)
            cost = sum(prefix[i + 1] - prefix[i] for i in range(start, end) if not keep[i])
            if used + cost + marker_tokens > room:
                continue
            used += cost + marker_tokens
            for i in range(start, end):
                keep[i] = True
        while True:
            out, cut, i = [], 0, 0
            while i < n:
                if keep[i]:
                    out.append(lines[i])
                    i += 1
                    continue
                j = i
                while j < n and not keep[j]:
                    j += 1
                out.append(f"[... {j - i} lines ({prefix[j] - prefix[i]} tokens) cut here ...]")
                cut += j - i
                i = j
            text = "\n".join(out)
            tokens = count_tokens(text, self.model)
            if tokens <= budget_tokens:
                return LogExcerpt(text=text, tokens=tokens, lines_cut=cut, shown=_ranges(keep))
            # an exact tokenizer can count the joined text above the sum of its lines: drop
            # the last window kept beyond the head and the tail, or fall back to the plain cut
            middle = [k for k in range(head, tail) if keep[k]]
            if not middle:
                return self.cut(budget_tokens)
            for k in middle[-_WINDOW:]:
                keep[k] = False


_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
_WINDOW = 8
"""Lines per window of the relevance search."""


def log_terms(requirements: str) -> frozenset[str]:
    """The words of criteria a log window is matched on (three letters or more, lowercase,
    common words left out)."""
    return frozenset(_WORD.findall(requirements.lower())) - _COMMON


_COMMON = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "are",
        "was",
        "were",
        "has",
        "have",
        "its",
        "from",
        "into",
        "each",
        "per",
        "all",
        "any",
        "not",
        "code",
        "run",
        "runs",
        "paper",
        "described",
        "describes",
        "implemented",
        "implements",
        "using",
        "used",
        "results",
        "result",
        "shows",
        "show",
        "table",
        "submission",
    ]
)


def cut_log(text: str, budget_tokens: int, model: str) -> LogExcerpt:
    """Keep whole lines from the head and the tail of ``text`` within ``budget_tokens``
    (see :meth:`LineCosts.cut`)."""
    return LineCosts(text, model).cut(budget_tokens)
