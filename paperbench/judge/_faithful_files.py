"""What the faithful mode shows of a submission, chosen as PaperBench's SimpleJudge chooses it.

- **Files by category** (:func:`category_files`): a file is eligible by its extension, from
  three classes (docs, code, tables; ``.json``, ``.yaml``, ``.yml`` and ``.toml`` are code and
  tables both). Code Development and Code Execution see docs and code; Result Analysis sees
  docs and the tables the reproduction created or changed; a subtree graded as one unit sees
  docs, code and such tables. A folder whose name *contains* one of :data:`SKIP_PARTS` is left
  out, as PaperBench matches them.
- **Changed** (:func:`is_changed`): as PaperBench reads it, a file modified at or after
  ``view.log_created`` (the integer in ``reproduce.log.creation_time``, else the log's mtime;
  nothing is changed when neither exists), whatever its bytes and whatever a reproduction's
  metadata says.
- **The Result Analysis shortcut** (:func:`no_results`): no changed docs or tables → every
  Result Analysis leaf scores 0 without a model call.
- **Large files**: the first 200,000 characters of a text file, the first 200 kB of a binary
  one decoded (``ViewFile.head``), listed in the tree like any file.
- **The tree** (:func:`ranking_tree`): every eligible path, in walk order (a folder's own
  files before its folders, as ``os.walk`` meets them); if its tokens reach the room the window
  leaves, only files at most four folders deep; if still too long, the paths that fit, in walk
  order, so the top folder's files (``reproduce.sh``, the README) are kept first.
- **The files** (:func:`shown_files`): the files the ranking names, in order, while they fit in
  ``window - paper - log (not Code Development) - answer room - 2000``; the first that does
  not fit is cut in token space to fill the room (ending at a whole line), and the rest are
  left out.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from paperbench.judge._context import JOIN_TOKENS, ContextCategory, ContextFile
from paperbench.judge._fence import fence
from paperbench.judge._prompts import file_tree, walk_order
from paperbench.judge._view import SubmissionView, ViewFile
from paperbench.llm import count_tokens

DOCS = frozenset({".md", ".txt", ".rst"})
CODE = frozenset(
    {
        ".py", ".R", ".Rmd", ".m", ".jl", ".c", ".h", ".cpp", ".hpp", ".cc", ".cxx", ".hxx",
        ".java", ".js", ".ts", ".scala", ".go", ".rs", ".sh", ".config", ".cfg", ".json",
        ".yaml", ".yml", ".toml", ".ini",
    }
)  # fmt: skip
TABLES = frozenset(
    {
        ".csv", ".tsv", ".psv", ".json", ".jsonl", ".html", ".xml", ".yaml", ".yml", ".toml",
        ".arff", ".tex", ".svm", ".libsvm",
    }
)  # fmt: skip
"""Extension classes as PaperBench has them (case-sensitive: ``.R``, not ``.r``)."""
SKIP_PARTS = (
    "venv", ".venv", ".env", "wandb", ".egg-info", ".git", ".github", "__pycache__",
    "node_modules",
)  # fmt: skip
"""A file is left out when a folder on its path contains one of these."""
SHALLOW_DEPTH = 4
"""Folders deep a file may sit in the shortened tree (PaperBench's ``max_file_depth``)."""
FILES_MARGIN = 2000
"""Tokens PaperBench keeps free below its file budget."""


def readable(f: ViewFile) -> str | None:
    """What the faithful mode reads of a file: the text, or the first 200,000 characters."""
    return f.text if f.text is not None else f.head


def is_changed(view: SubmissionView, f: ViewFile) -> bool:
    """PaperBench's rule: modified at or after the log's creation time."""
    if view.log_created is None or f.mtime is None or f.mtime != f.mtime:
        return False
    return f.mtime >= view.log_created


def _skipped(path: str) -> bool:
    folders = path.split("/")[:-1]
    return any(part in folder for folder in folders for part in SKIP_PARTS)


def category_files(view: SubmissionView, category: ContextCategory) -> list[ViewFile]:
    """The readable files a leaf of ``category`` may be shown, in path order."""
    out: list[ViewFile] = []
    for f in view.files:
        if readable(f) is None or _skipped(f.path) or f.mtime != f.mtime:
            continue
        suffix = PurePosixPath(f.path).suffix
        if suffix in DOCS:
            ok = True
        elif category in ("Code Development", "Code Execution"):
            ok = suffix in CODE
        elif category == "Result Analysis":
            ok = suffix in TABLES and is_changed(view, f)
        else:
            ok = suffix in CODE or (suffix in TABLES and is_changed(view, f))
        if ok:
            out.append(f)
    return out


def no_results(view: SubmissionView) -> bool:
    """PaperBench's rule: no doc or table was created or changed by the reproduction."""
    return not any(
        is_changed(view, f)
        for f in view.files
        if readable(f) is not None
        and not _skipped(f.path)
        and PurePosixPath(f.path).suffix in DOCS | TABLES
    )


def cut_to_tokens(text: str, limit: int, model: str) -> str:
    """The longest prefix of ``text`` of at most ``limit`` tokens."""
    if limit <= 0:
        return ""
    if count_tokens(text, model) <= limit:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid], model) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def ranking_tree(view: SubmissionView, paths: list[str], room: int, model: str) -> str:
    """The fenced tree of ``paths``, shortened until its tokens are below ``room``."""
    tree = file_tree(view, paths)
    if count_tokens(tree, model) < room:
        return tree
    shallow = [p for p in paths if p.count("/") <= SHALLOW_DEPTH]
    tree = file_tree(view, shallow)
    if count_tokens(tree, model) < room:
        return tree
    ordered = walk_order(shallow)
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(file_tree(view, ordered[:mid]), model) < room:
            lo = mid
        else:
            hi = mid - 1
    return file_tree(view, ordered[:lo])


def shown_files(
    named: list[tuple[str, ViewFile]], room: int, model: str
) -> tuple[list[ContextFile], int]:
    """The ``named`` files (label, file; in order) that fit in ``room`` tokens, the first that
    does not fit cut to fill what is left; and the tokens they take."""
    out: list[ContextFile] = []
    used = 0
    for name, f in named:
        text = readable(f)
        if text is None:
            continue
        path = f.path
        label = f"file: {name}"
        block = fence(text, label)
        tokens = count_tokens(block, model) + JOIN_TOKENS
        cut = False
        if used + tokens > room:
            overhead = count_tokens(fence("", label), model) + JOIN_TOKENS + 2
            part = cut_to_tokens(text, room - used - overhead, model)
            part = part.rsplit("\n", 1)[0] if "\n" in part else ""
            if not part:
                break
            block = fence(part, label)
            tokens = count_tokens(block, model) + JOIN_TOKENS
            cut = True
        kind = f.kind
        out.append(
            ContextFile(
                path=path,
                kind=kind,
                changed=f.changed,
                score=0.0,
                text=block,
                tokens=tokens,
                cut=cut,
            )
        )
        used += tokens
        if cut:
            break
    return out, used
