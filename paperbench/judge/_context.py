"""Context by category: which files and how much of the log one leaf's grader sees.

``select_context(view, category, budget_tokens, requirements)`` is a pure function: the same
view, category, budget and text give the same context, with no model call.

PaperBench's SimpleJudge spends a model call per leaf on this: it sends the whole paper, the
addendum, the criterion and a tree of the submission's whitelisted files, asks for the most
relevant paths, and reads those of the answer's first 10 lines that exist (each up to 200 kB),
cutting the last one in token space to fit ``window - paper - log - 10k buffer - 2k``. Here a
BM25 index over the files, cut into chunks of lines, ranks them by the leaf's requirements
text instead: built once per submission, queried in microseconds per leaf. A file that does
not fit whole shows its best-matching chunks, in file order, with markers for the lines left
out; a text file too big to read whole (over ``max_file_bytes``) is indexed and shown by its
head, as PaperBench reads the first 200,000 characters of every file. A file shown in part
records the line ranges shown (``ContextFile.lines``).

What each category sees (as in PaperBench, with the log folded and the changes from the
reproduction's metadata rather than file mtimes):

=================  ==========================================================================
Code Development   code and docs, plus ``reproduce.sh``
Code Execution     code and docs, plus ``reproduce.sh`` and ``reproduce.log``
Result Analysis    the text files the reproduction created or modified (first, whatever
                   their words), then docs, plus the script and the log; no such files
                   (when the changes are known) →
                   ``shortcut="no_changed_files"``: score 0 without a model call
Subtree            code, docs and changed files, plus the script and the log (a subtree
                   graded as one unit at ``--max-depth``)
=================  ==========================================================================

With ``code_dev=True`` (PaperBench's Code-Dev) there was no reproduction: neither the script
nor the log is shown. Every token counted here is a token of exactly the fenced text a prompt
will hold; the total never exceeds the budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from paperbench._console import plural
from paperbench.judge._fence import fence
from paperbench.judge._log import LineCosts, LogExcerpt, log_terms
from paperbench.judge._view import FileKind, SubmissionView, ViewFile
from paperbench.llm import count_tokens

ContextCategory = Literal["Code Development", "Code Execution", "Result Analysis", "Subtree"]
CATEGORIES: tuple[ContextCategory, ...] = (
    "Code Development",
    "Code Execution",
    "Result Analysis",
    "Subtree",
)
CHUNK_LINES = 40
"""Lines per chunk of the lexical index."""
JOIN_TOKENS = 1
"""The newline between two fenced blocks."""
SEPARATE_FILES = frozenset({"reproduce.sh", "reproduce.log"})
Why = Literal["run wrote", "shortlist", "import hop", "lexical"]
"""Why a file was shown: the reproduction wrote it (Result Analysis), the model's shortlist
named it, a shortlisted file imports it, or the lexical index ranked it."""
"""Shown in their own place in a prompt, never among the ranked files."""

_KINDS: dict[ContextCategory, frozenset[FileKind]] = {
    "Code Development": frozenset({"code", "doc"}),
    "Code Execution": frozenset({"code", "doc"}),
    "Result Analysis": frozenset({"doc"}),
    "Subtree": frozenset({"code", "doc"}),
}
_WITH_LOG: frozenset[ContextCategory] = frozenset({"Code Execution", "Result Analysis", "Subtree"})
_STOPWORDS = frozenset(
    {
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in",
        "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "will",
        "with", "should", "must", "code", "paper", "result", "submission", "implemented",
        "implementation", "correctly",
    }
)  # fmt: skip
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+")


class ContextFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    kind: FileKind
    changed: Literal["created", "modified"] | None = None
    score: float
    """BM25 relevance to the leaf's requirements (0: no word in common)."""
    text: str
    """The fenced block as a prompt holds it (the whole file, or its chosen chunks)."""
    tokens: int
    cut: bool = False
    """Only part of the file is shown: some of its chunks (markers in ``text`` say which
    lines were left out), or the head of a file too big to read whole."""
    lines: list[tuple[int, int]] = Field(default_factory=list)
    """When ``cut``: the 1-based, inclusive line ranges of the file that ``text`` holds;
    empty when the whole file is shown."""
    why: Why = "lexical"


class LeftOut(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    reason: Literal["budget", "max_files", "binary", "oversized", "symlink", "unreadable"]


class LeafContext(BaseModel):
    """What one leaf's grader is shown of the submission, already fenced as data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: ContextCategory
    budget_tokens: int
    tokens: int
    """Everything below, counted for ``model``; never more than ``budget_tokens``."""
    model: str
    files: list[ContextFile] = Field(default_factory=list)
    reproduce_sh: str | None = None
    """The fenced script, or None when not shown (Code-Dev, no script, or no room)."""
    script_note: str | None = None
    log: LogExcerpt | None = None
    """The log excerpt (its ``text`` fenced), or None when not shown."""
    log_note: str | None = None
    left_out: list[LeftOut] = Field(default_factory=list)
    shortcut: Literal["no_changed_files"] | None = None
    """Set when the caller must score the leaf 0 without a model call, and record why."""
    notes: list[str] = Field(default_factory=list)


def tokenize(text: str) -> list[str]:
    """Lower-case words for the lexical index: identifiers split at ``_``, ``.`` and case."""
    out: list[str] = []
    for word in _WORD.findall(text):
        token = word.lower()
        if len(token) < 2 or token in _STOPWORDS:
            continue
        if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
            token = token[:-1]
        out.append(token)
    return out


_LABELS = {"script": "file: reproduce.sh", "log": "reproduce.log"}


class _Fit(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str | None = None
    tokens: int = 0
    lines_cut: int = 0
    note: str | None = None
    shown: list[tuple[int, int]] = []


class _Chunk(BaseModel):
    model_config = ConfigDict(frozen=True)

    file: int
    first: int
    last: int


class SubmissionIndex:
    """A BM25 index over the text files of one view, cut into chunks of lines.

    Build once per (view, model) and pass it to :func:`select_context` for every leaf; token
    counts of files and chunks are computed once here too.
    """

    def __init__(self, view: SubmissionView, model: str = "openai/gpt-4o") -> None:
        import bm25s

        self.view = view
        self.model = model
        self.files: list[ViewFile] = [
            f for f in view.files if _readable(f) is not None and f.path not in SEPARATE_FILES
        ]
        self.lines: list[list[str]] = [(_readable(f) or "").split("\n") for f in self.files]
        self.position: dict[str, int] = {f.path: i for i, f in enumerate(self.files)}
        """Each indexed file's place in ``files``, by path."""
        self.chunks: list[_Chunk] = []
        corpus: list[list[str]] = []
        for index, (file, lines) in enumerate(zip(self.files, self.lines, strict=True)):
            path_words = tokenize(file.path)
            for first in range(0, max(len(lines), 1), CHUNK_LINES):
                last = min(first + CHUNK_LINES, len(lines))
                self.chunks.append(_Chunk(file=index, first=first, last=last))
                corpus.append(path_words + tokenize("\n".join(lines[first:last])))
        self._bm25: bm25s.BM25 | None = None
        if any(corpus):
            self._bm25 = bm25s.BM25()
            self._bm25.index(corpus, show_progress=False)
        self.per_file: dict[int, list[int]] = {}
        for c, chunk in enumerate(self.chunks):
            self.per_file.setdefault(chunk.file, []).append(c)
        self._whole: dict[int, tuple[str, int]] = {}
        self._chunk_tokens: dict[int, int] = {}
        self._texts: dict[str, tuple[LineCosts, str, int]] = {}
        self._fits: dict[tuple[str, int, frozenset[str]], _Fit] = {}

    def fit(
        self, which: Literal["script", "log"], room: int, terms: frozenset[str] = frozenset()
    ) -> _Fit:
        """``reproduce.sh`` or the log, fenced, whole if it fits in ``room``, else its head
        and tail, and for the log with ``terms`` the windows of lines that share the most of
        them; line counts are computed once per view, fits once per room and terms."""
        key = (which, room, terms)
        if key not in self._fits:
            self._fits[key] = self._fit(which, room, terms)
        return self._fits[key]

    def whole_tokens(self, which: Literal["script", "log"]) -> int:
        return self._text(which)[2]

    def _text(self, which: Literal["script", "log"]) -> tuple[LineCosts, str, int]:
        if which not in self._texts:
            log = self.view.log
            raw = self.view.reproduce_sh if which == "script" else log.text if log else None
            if raw is None:
                raise ValueError(f"the view has no {_LABELS[which]}")
            whole = fence(raw, _LABELS[which])
            tokens = count_tokens(whole, self.model) + JOIN_TOKENS
            self._texts[which] = (LineCosts(raw, self.model), whole, tokens)
        return self._texts[which]

    def _fit(self, which: Literal["script", "log"], room: int, terms: frozenset[str]) -> _Fit:
        costs, whole, tokens = self._text(which)
        if tokens <= room:
            return _Fit(text=whole, tokens=tokens, shown=[(1, len(costs.lines))])
        label = _LABELS[which]
        overhead = count_tokens(fence("", label), self.model) + JOIN_TOKENS + 2
        excerpt = costs.cut_relevant(room - overhead, terms)
        lines = len(costs.lines)
        if excerpt.text:
            cut = fence(excerpt.text, label)
            tokens = count_tokens(cut, self.model) + JOIN_TOKENS
            if tokens <= room:
                where = "around the lines that speak of the criteria" if terms else "of the middle"
                note = f"cut to fit: {plural(excerpt.lines_cut, 'line')} left out {where}"
                return _Fit(
                    text=cut,
                    tokens=tokens,
                    lines_cut=excerpt.lines_cut,
                    note=note,
                    shown=excerpt.shown,
                )
        return _Fit(lines_cut=lines, note="not shown: no room in the budget")

    def chunk_tokens(self, chunk: int) -> int:
        if chunk not in self._chunk_tokens:
            c = self.chunks[chunk]
            text = "\n".join(self.lines[c.file][c.first : c.last]) + "\n"
            self._chunk_tokens[chunk] = count_tokens(text, self.model)
        return self._chunk_tokens[chunk]

    def chunk_scores(self, requirements: str) -> list[float]:
        """BM25 score of every chunk for ``requirements`` (0.0 where no word is shared)."""
        query = tokenize(requirements)
        if self._bm25 is None or not query:
            return [0.0] * len(self.chunks)
        scores: list[float] = self._bm25.get_scores(query).tolist()
        return scores

    def file_scores(self, requirements: str) -> list[float]:
        """Every file's relevance to ``requirements``: its best chunk's BM25 score and a
        tenth of the rest's sum (0.0 where no word is shared)."""
        per_chunk = self.chunk_scores(requirements)
        out = []
        for i in range(len(self.files)):
            scores = [per_chunk[c] for c in self.per_file.get(i, [])]
            out.append(max(scores, default=0.0) + 0.1 * sum(scores))
        return out

    def whole(self, file: int) -> tuple[str, int]:
        """The fenced file (of a file too big to read whole, its head) and its tokens."""
        if file not in self._whole:
            f = self.files[file]
            text = fence(_readable(f) or "", _label(f, excerpts=False))
            self._whole[file] = (text, count_tokens(text, self.model) + JOIN_TOKENS)
        return self._whole[file]


def _readable(f: ViewFile) -> str | None:
    """What the index holds of a file: its text, or the head of a text file too big to read
    whole (as PaperBench reads the first 200,000 characters of every file); never anything
    of a binary file, whatever the view holds of it."""
    if f.text is not None:
        return f.text
    return f.head if f.unread == "oversized" and f.kind != "binary" else None


def _label(f: ViewFile, *, excerpts: bool) -> str:
    if f.text is None:
        head = f"its first {len(f.head or ''):,} characters of {f.size:,} bytes"
        return f"file: {f.path} (excerpts of {head})" if excerpts else f"file: {f.path} ({head})"
    return f"file: {f.path} (excerpts)" if excerpts else f"file: {f.path}"


def _line_count(lines: list[str]) -> int:
    """A text's lines, the empty string after a final newline not counted."""
    return len(lines) - 1 if len(lines) > 1 and lines[-1] == "" else len(lines)


def _ranges(index: SubmissionIndex, file: int, chosen: list[int]) -> list[tuple[int, int]]:
    """The 1-based, inclusive line ranges the chunks ``chosen`` of ``file`` cover, adjacent
    ones merged."""
    end = _line_count(index.lines[file])
    out: list[tuple[int, int]] = []
    for k in sorted(chosen):
        chunk = index.chunks[k]
        first, last = chunk.first + 1, min(chunk.last, end)
        if first > last:
            continue
        if out and out[-1][1] == chunk.first:
            out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


def selectable(index: SubmissionIndex, category: ContextCategory) -> frozenset[str]:
    """The paths a leaf of ``category`` can be shown among the ranked files."""
    return frozenset(f.path for f in index.files if _eligible(index.view, category, f))


def _eligible(view: SubmissionView, category: ContextCategory, f: ViewFile) -> bool:
    if f.path in SEPARATE_FILES:
        return False
    if f.kind in _KINDS[category]:
        return True
    if category in ("Result Analysis", "Subtree"):
        if view.changes_known:
            return f.changed is not None
        return category == "Result Analysis" and f.kind == "data"
    return False


_MARKER_TOKENS = 16
"""A generous count for one ``[... lines a-b not shown ...]`` marker."""


def _render_chunks(index: SubmissionIndex, file: int, chosen: list[int]) -> str:
    f = index.files[file]
    lines = index.lines[file]
    parts: list[str] = []
    shown_to = 0
    for k in sorted(chosen):
        chunk = index.chunks[k]
        if chunk.first > shown_to:
            parts.append(f"[... lines {shown_to + 1}-{chunk.first} not shown ...]")
        parts.extend(lines[chunk.first : chunk.last])
        shown_to = chunk.last
    if shown_to < len(lines):
        parts.append(f"[... lines {shown_to + 1}-{len(lines)} not shown ...]")
    return fence("\n".join(parts), _label(f, excerpts=True))


def _partial(
    index: SubmissionIndex, file: int, scores: Sequence[float], room: int
) -> tuple[str, int, list[tuple[int, int]]] | None:
    """The best-scoring chunks of one file that fit in ``room``, in file order, fenced, with
    the line ranges they cover.

    Chunks are added best first while their counted tokens and a marker each fit; the
    rendered text is then counted exactly and the weakest chunk dropped until it fits.
    """
    label = _label(index.files[file], excerpts=True)
    fixed = count_tokens(fence("", label), index.model) + JOIN_TOKENS
    order = sorted(index.per_file.get(file, []), key=lambda c: (-scores[c], c))
    chosen: list[int] = []
    estimate = fixed + _MARKER_TOKENS
    for c in order:
        cost = index.chunk_tokens(c) + _MARKER_TOKENS
        if estimate + cost <= room:
            chosen.append(c)
            estimate += cost
    while chosen:
        text = _render_chunks(index, file, chosen)
        tokens = count_tokens(text, index.model) + JOIN_TOKENS
        if tokens <= room:
            return text, tokens, _ranges(index, file, chosen)
        chosen.pop()
    return None


def _script(
    view: SubmissionView,
    index: SubmissionIndex,
    budget: int,
    script_share: float,
    code_dev: bool,
) -> tuple[str | None, int, str | None]:
    """The fenced ``reproduce.sh`` cut to its share of ``budget``, its tokens and its note."""
    if code_dev:
        return None, 0, "not shown: Code-Dev grades code only"
    if view.reproduce_sh is None:
        return None, 0, "the submission has no reproduce.sh (or it could not be read)"
    fit = index.fit("script", int(budget * script_share))
    return fit.text, fit.tokens, fit.note


def _ranked(
    view: SubmissionView,
    category: ContextCategory,
    index: SubmissionIndex,
    file_scores: Sequence[float],
    preferred: Mapping[str, Why] | None,
) -> list[tuple[int, float, Why]]:
    """The indexed files a leaf of ``category`` may see, in the order they are offered, each
    with its relevance and why it is offered: for Result Analysis what the run wrote, then
    the ``preferred`` files in their order, then the rest; by relevance, then path, within."""
    rank = {path: n for n, path in enumerate(preferred or {})}
    candidates: list[tuple[int, int, float, int]] = []
    whys: dict[int, Why] = {}
    for i, f in enumerate(index.files):
        if not _eligible(view, category, f):
            continue
        file_score = file_scores[i]
        # Result Analysis: what the run wrote comes first, whatever its words
        if f.changed is not None and category == "Result Analysis":
            priority, whys[i] = 0, "run wrote"
        elif f.path in rank:
            priority, whys[i] = 1, (preferred or {})[f.path]
        else:
            priority, whys[i] = 2, "lexical"
        candidates.append((priority, rank.get(f.path, len(rank)), -file_score, i))
    candidates.sort(key=lambda t: (t[0], t[1], t[2], index.files[t[3]].path))
    return [(i, -neg_score, whys[i]) for _, _, neg_score, i in candidates]


def _fill(
    index: SubmissionIndex,
    ranked: list[tuple[int, float, Why]],
    score_list: Sequence[float],
    room: int,
    max_files: int | None,
) -> tuple[list[ContextFile], list[LeftOut], int]:
    """The ``ranked`` files shown within ``room`` (whole, or their best chunks), those left
    out, and the tokens used."""
    files: list[ContextFile] = []
    left_out: list[LeftOut] = []
    used = 0
    for i, score, why in ranked:
        f = index.files[i]
        if max_files is not None and len(files) >= max_files:
            left_out.append(LeftOut(path=f.path, reason="max_files"))
            continue
        text, tokens = index.whole(i)
        head = f.text is None  # a file too big to read whole: its head only
        cut, lines = head, [(1, _line_count(index.lines[i]))] if head else []
        if used + tokens > room:
            part = _partial(index, i, score_list, room - used)
            if part is None:
                left_out.append(LeftOut(path=f.path, reason="budget"))
                continue
            text, tokens, lines = part
            cut = True
        files.append(
            ContextFile(
                path=f.path, kind=f.kind, changed=f.changed, score=score,
                text=text, tokens=tokens, cut=cut, lines=lines, why=why,
            )
        )  # fmt: skip
        used += tokens
    return files, left_out, used


def _unread(view: SubmissionView, category: ContextCategory) -> list[LeftOut]:
    """The files a leaf of ``category`` would see but nothing of which could be indexed."""
    left_out: list[LeftOut] = []
    for f in view.files:
        if f.unread is not None and f.path not in SEPARATE_FILES and _eligible(view, category, f):
            if _readable(f) is not None:
                continue  # its head is in the index, ranked with the rest
            reason = f.unread if f.unread in ("binary", "oversized", "symlink") else "unreadable"
            left_out.append(LeftOut(path=f.path, reason=reason))  # type: ignore[arg-type]
    return left_out


def _log_excerpt(
    index: SubmissionIndex, with_log: bool, show_log: bool, room: int, requirements: str
) -> tuple[LogExcerpt | None, str | None]:
    """The log excerpt that fits in ``room`` (around the lines that speak of the
    ``requirements``) and its note."""
    if with_log and index.view.log is None:
        return None, "no reproduce.log"
    if not show_log:
        return None, None
    fit = index.fit("log", room, log_terms(requirements))
    if fit.text is None:
        return None, fit.note
    log = LogExcerpt(text=fit.text, tokens=fit.tokens, lines_cut=fit.lines_cut, shown=fit.shown)
    return log, fit.note


def select_context(
    view: SubmissionView,
    category: ContextCategory,
    budget_tokens: int,
    requirements: str,
    *,
    model: str = "openai/gpt-4o",
    index: SubmissionIndex | None = None,
    max_files: int | None = 10,
    code_dev: bool = False,
    script_share: float = 0.15,
    log_share: float = 0.4,
    preferred: Mapping[str, Why] | None = None,
) -> LeafContext:
    """The files, script and log excerpt one leaf's grader sees, within ``budget_tokens``.

    ``budget_tokens`` is the room for submission content only: the caller takes the model's
    window minus the prompt's fixed parts (instructions, paper, addenda, criterion) and the
    room kept for the answer. ``max_files`` bounds the files shown (PaperBench: 10).
    ``script_share`` and ``log_share`` cap the script and the log before files are chosen;
    room the files leave unused goes back to the log. ``preferred`` (path → why, in order:
    the model's shortlist, then files those import) comes before the lexical ranking; for
    Result Analysis, the files the run wrote come first (among them, preferred ones first).
    """
    if index is None:
        index = SubmissionIndex(view, model)
    elif index.view is not view or index.model != model:
        raise ValueError("the index was built for another view or model")
    budget = max(budget_tokens, 0)
    if (
        category == "Result Analysis"
        and not code_dev
        and view.changes_known
        and not view.changed_files()
    ):
        return LeafContext(
            category=category,
            budget_tokens=budget_tokens,
            model=model,
            tokens=0,
            shortcut="no_changed_files",
            notes=["the reproduction created or modified no file: nothing to analyse"],
        )
    notes: list[str] = []
    if category in ("Result Analysis", "Subtree") and not view.changes_known and not code_dev:
        notes.append("no reproduction metadata: the changed files are unknown; data files shown")
    script_text, script_tokens, script_note = _script(view, index, budget, script_share, code_dev)

    # the log's reserve
    with_log = category in _WITH_LOG and not code_dev
    show_log = with_log and view.log is not None
    log_reserve = 0
    if show_log:
        log_reserve = min(index.whole_tokens("log"), int(budget * log_share))

    # files, ranked by the leaf's requirements
    room = budget - script_tokens - log_reserve
    score_list = index.chunk_scores(requirements)
    ranked = _ranked(view, category, index, index.file_scores(requirements), preferred)
    files, left_out, used = _fill(index, ranked, score_list, room, max_files)
    left_out += _unread(view, category)

    # the log gets its reserve and whatever the files left
    log, log_note = _log_excerpt(
        index, with_log, show_log, budget - script_tokens - used, requirements
    )
    total = script_tokens + used + (log.tokens if log is not None else 0)
    return LeafContext(
        category=category,
        budget_tokens=budget_tokens,
        model=model,
        tokens=total,
        files=files,
        reproduce_sh=script_text,
        script_note=script_note,
        log=log,
        log_note=log_note,
        left_out=left_out,
        notes=notes,
    )
