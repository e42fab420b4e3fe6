"""The judge's view of a submission: one serialisable object every judge takes.

``build_view(submission, executed)`` reads a submission (a folder or a .tar/.tar.gz) and,
optionally, an executed submission (the output folder of ``paperbench reproduce``:
``metadata.json``, ``executed.tar.gz``, ``reproduce.log``) into a :class:`SubmissionView`:

- every file with its size, kind (code / doc / data / binary / other) and mtime (an archive
  member's own), and the text of the text files no bigger than ``max_file_bytes``; binary
  files are listed without ``text``; of an oversized text file only the first
  ``max_file_bytes`` characters are kept, in ``head``, which both modes show (the faithful
  one as PaperBench reads the first 200,000 characters of every file it names); of a binary
  file only its first ``max_file_bytes`` bytes, decoded as UTF-8 else as Latin-1,
  in ``head``, which only the faithful mode shows (as PaperBench reads any file its ranking
  names), and ``simple`` never shows anything of a binary file;
- ``.git``, virtual environments (by name, or any folder holding ``pyvenv.cfg``), caches and
  ``node_modules`` skipped, by exact folder name (PaperBench matches substrings, so it also
  drops e.g. ``src/myvenv_tools/``; we do not);
- ``reproduce.sh`` and ``reproduce.log`` (repeated lines folded, capped at
  ``log_max_tokens`` with head and tail kept, the cut said; the raw log's first
  ``max_file_bytes`` too, for the faithful mode);
- when the log was created (``log_created``: ``reproduce.log.creation_time``, else the
  log's mtime), and the files the reproduction created or modified: from its metadata
  (content hashes) and, as PaperBench tells them, every file modified at or after
  ``log_created`` (a file the run wrote again with the same bytes is an output too).

When an executed submission is given, the files are those of ``executed.tar.gz`` (the
submission after ``reproduce.sh`` ran, outputs included), as PaperBench's judge sees them.
PaperBench finds the changed files by comparing mtimes with ``reproduce.log.creation_time``;
with a reproduction's metadata we take the union of that rule and its content hashes (which
also catch a file the run changed but dated back). The mtimes are set inside the sandbox,
by the submission's own code as much as by the run.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from paperbench._console import plural
from paperbench.errors import InputError
from paperbench.judge._log import cut_log, fold_log
from paperbench.judge._view_read import LOG_NAME, RawFile, RawTree, read_log_file, read_tree

VIEW_SCHEMA_VERSION = 1

FileKind = Literal["code", "doc", "data", "binary", "other"]

SKIPPED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "venv", ".venv", "__pycache__", "node_modules", ".mypy_cache",
        ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".tox", ".nox", ".cache",
        "site-packages", ".eggs", "wandb",
    }
)  # fmt: skip
"""Folders never listed (any depth). Names ending in ``.egg-info`` are skipped too."""

CODE_SUFFIXES = frozenset(
    {
        ".py", ".pyx", ".ipynb", ".r", ".rmd", ".m", ".jl", ".c", ".h", ".cpp", ".hpp", ".cc",
        ".cxx", ".hxx", ".cu", ".java", ".js", ".ts", ".scala", ".go", ".rs", ".sh", ".bash",
        ".cfg", ".ini", ".toml", ".yaml", ".yml", ".config", ".mk", ".sql",
    }
)  # fmt: skip
CODE_NAMES = frozenset({"makefile", "dockerfile", "requirements.txt", "setup.py", "justfile"})
DOC_SUFFIXES = frozenset({".md", ".txt", ".rst", ".tex"})
DATA_SUFFIXES = frozenset(
    {".csv", ".tsv", ".psv", ".json", ".jsonl", ".xml", ".html", ".arff", ".svm", ".libsvm",
     ".log", ".out"}
)  # fmt: skip
BINARY_SUFFIXES = frozenset(
    {
        ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".pdf", ".svgz", ".pt", ".pth", ".ckpt", ".bin",
        ".npy", ".npz", ".pkl", ".pickle", ".h5", ".hdf5", ".safetensors", ".onnx", ".zip",
        ".gz", ".tgz", ".tar", ".bz2", ".xz", ".7z", ".so", ".o", ".a", ".pyc", ".whl",
        ".parquet", ".feather", ".arrow", ".mp4", ".wav", ".mp3",
    }
)  # fmt: skip

_SNIFF_BYTES = 8192


class ViewLimits(BaseModel):
    """What the view reads. Defaults follow PaperBench where it has a number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_file_bytes: int = Field(default=200_000, ge=1)
    """Text files bigger than this (in bytes) are not read whole, only their head: this many
    characters (PaperBench passes its ``SIZE_LIMIT_BYTES`` to a text-mode ``read``, which
    counts characters); of a binary file, this many bytes."""
    max_files: int | None = Field(default=None, ge=1)
    """Files listed at most (None: every file, as PaperBench walks every file, within the
    caps on reading an untrusted tree); the rest are counted in
    ``SubmissionView.files_not_listed`` and said in ``SubmissionView.cuts``."""
    log_max_tokens: int = Field(default=64_000, ge=256)
    """The folded log is cut to this (PaperBench: half of a 128k window), head and tail kept."""
    token_model: str = "openai/gpt-4o"
    """Whose tokenizer counts the log cap."""


class ViewFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    """POSIX path relative to the submission's top folder."""
    size: int
    kind: FileKind
    text: str | None = None
    """The content, for text files within the size limit; else None (see ``unread``)."""
    unread: str | None = None
    """Why ``text`` is None: ``binary``, ``oversized``, ``symlink``, ``unreadable``."""
    changed: Literal["created", "modified"] | None = None
    """Whether the reproduction created or modified this file (None: neither, or unknown);
    ``modified`` also when it wrote the same bytes again (its mtime says so)."""
    mtime: float | None = None
    """Last modification (POSIX seconds), as the folder or the archive member records it."""
    head: str | None = None
    """For an oversized text file: its first ``max_file_bytes`` characters, which both modes
    show (the faithful one as PaperBench reads the first 200,000 characters of a file). For a
    binary file: its first ``max_file_bytes`` bytes, decoded as PaperBench decodes them
    (UTF-8, else Latin-1), which only the faithful mode shows (PaperBench reads any file its
    ranking names); ``simple`` never shows anything of a binary file. ``text`` stays None."""


class ReproductionSummary(BaseModel):
    """What the judge needs from a reproduction's metadata.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: str
    exit_code: int | None = None
    timed_out: bool = False
    wall_time_s: float = 0.0
    created: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    log_truncated: bool = False
    """The reproduction itself capped the log before it was written."""


class LogView(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    """Where the log was read from."""
    head: str = ""
    """The raw log's first ``max_file_bytes`` characters (what the faithful mode folds)."""
    text: str
    """Folded, and cut to ``ViewLimits.log_max_tokens`` when longer (the marker says so)."""
    raw_bytes: int
    raw_lines: int
    folded_lines: int
    lines_cut: int = 0


class SubmissionView(BaseModel):
    """Everything a judge may show of one submission; JSON in, JSON out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = VIEW_SCHEMA_VERSION
    submission: str
    executed: str | None = None
    files: list[ViewFile]
    files_not_listed: int = 0
    skipped_dirs: list[str] = Field(default_factory=list)
    reproduce_sh: str | None = None
    """The top-level ``reproduce.sh`` (None: the submission has none)."""
    log: LogView | None = None
    log_created: float | None = None
    """When reproduce.log was created (POSIX seconds), as PaperBench reads it: the integer in
    the submission's ``reproduce.log.creation_time``, else the log file's mtime; None when
    neither exists."""
    reproduction: ReproductionSummary | None = None
    notes: list[str] = Field(default_factory=list)
    """Anything the view did differently from the usual, in one line each."""
    cuts: list[str] = Field(default_factory=list)
    """What a cap kept out of the view (files not listed or not read), one line per cap: no
    judge can show those files, so every grade of this view carries these lines, on each
    leaf and in ``grade.json``."""
    limits: ViewLimits = Field(default_factory=ViewLimits)

    @property
    def changes_known(self) -> bool:
        """True when a reproduction's metadata says which files it created or modified."""
        return self.reproduction is not None

    def changed_files(self) -> list[ViewFile]:
        return [f for f in self.files if f.changed is not None]

    def file(self, path: str) -> ViewFile | None:
        return next((f for f in self.files if f.path == path), None)


def classify(path: str, head: bytes | None) -> FileKind:
    """The kind of a file from its name and, when given, its first bytes."""
    pure = PurePosixPath(path)
    suffix, name = pure.suffix.lower(), pure.name.lower()
    if suffix in BINARY_SUFFIXES or (head is not None and _looks_binary(head)):
        return "binary"
    if name in CODE_NAMES or suffix in CODE_SUFFIXES:
        return "code"
    if suffix in DOC_SUFFIXES or name in {"readme", "license", "notes"}:
        return "doc"
    if suffix in DATA_SUFFIXES:
        return "data"
    return "other"


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    decoded = head.decode("utf-8", errors="replace")
    # a multi-byte character cut at the end of the sample is not evidence
    return decoded[:-1].count("\ufffd") > max(1, len(decoded) // 100)


def _skipped_dirs(tree: RawTree) -> set[str]:
    """Folders never listed: by name, ``*.egg-info``, or holding a ``pyvenv.cfg``."""
    out = {
        d
        for d in tree.dirs
        if (n := d.rsplit("/", 1)[-1]) in SKIPPED_DIRS or n.endswith(".egg-info")
    }
    out |= {f.path.rpartition("/")[0] for f in tree.files if f.path.endswith("/pyvenv.cfg")}
    return out


def _under(path: str, folders: set[str]) -> str | None:
    """The outermost of ``folders`` that holds ``path``, if any."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        top = "/".join(parts[:i])
        if top in folders:
            return top
    return None


def _scan(tree: RawTree, limits: ViewLimits) -> tuple[list[ViewFile], int, list[str]]:
    files: list[ViewFile] = []
    not_listed = 0
    skip = _skipped_dirs(tree)
    skipped: set[str] = set()
    for raw in sorted(tree.files, key=lambda f: f.path):
        top = _under(raw.path, skip)
        if top is not None:
            skipped.add(top)
            continue
        if limits.max_files is not None and len(files) >= limits.max_files:
            not_listed += 1
            continue
        files.append(_view_file(raw, limits))
    skipped |= {d for d in skip if _under(d, skip) is None}
    return files, not_listed, sorted(skipped)


def _as_text(data: bytes) -> str:
    """Bytes as PaperBench decodes a file it reads: UTF-8, else Latin-1."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _view_file(raw: RawFile, limits: ViewLimits) -> ViewFile:
    rel, size, mtime = raw.path, raw.size, raw.mtime
    if raw.kind == "symlink":
        return ViewFile(path=rel, size=size, kind="other", unread="symlink", mtime=mtime)
    if raw.data is None:
        unread = raw.unread or "unreadable"
        return ViewFile(path=rel, size=size, kind=classify(rel, None), unread=unread, mtime=mtime)
    kind = classify(rel, raw.data[:_SNIFF_BYTES])
    data = raw.data[: limits.max_file_bytes]
    if kind != "binary":
        text = data.decode("utf-8", errors="replace")
        if not _looks_binary(text.encode("utf-8", errors="replace")[: 4 * _SNIFF_BYTES]) and (
            text.count("\ufffd") <= max(1, len(text) // 100)
        ):
            if size > limits.max_file_bytes:
                head = head_chars(raw.data, limits.max_file_bytes)
                return ViewFile(
                    path=rel, size=size, kind=kind, unread="oversized", mtime=mtime, head=head
                )
            return ViewFile(path=rel, size=size, kind=kind, text=text, mtime=mtime)
    head = _as_text(data)
    return ViewFile(path=rel, size=size, kind="binary", unread="binary", mtime=mtime, head=head)


def head_chars(data: bytes, chars: int) -> str:
    """The first ``chars`` characters of ``data`` (UTF-8), as PaperBench's text-mode read of
    its 200,000 "bytes" returns them; a character the end of ``data`` splits is left out."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=False)[:chars]


def _read_metadata(executed: Path) -> ReproductionSummary:
    meta_file = executed / "metadata.json"
    if not meta_file.is_file():
        raise InputError(
            "not an executed submission: no metadata.json (give the output folder of "
            "`paperbench reproduce`)",
            file=executed,
        )
    try:
        data = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable JSON: {exc}", file=meta_file) from exc
    if not isinstance(data, dict):
        raise InputError("expected a JSON object", file=meta_file, path="$")
    changed = data.get("changed_files") or {}
    try:
        return ReproductionSummary.model_validate(
            {
                "status": data.get("status"),
                "exit_code": data.get("exit_code"),
                "timed_out": data.get("timed_out", False),
                "wall_time_s": data.get("wall_time_s", 0.0),
                "created": changed.get("created", []),
                "modified": changed.get("modified", []),
                "deleted": changed.get("deleted", []),
                "log_truncated": data.get("log_truncated", False),
            }
        )
    except (ValidationError, AttributeError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else None
        where = "$." + ".".join(str(p) for p in first["loc"]) if first else "$.changed_files"
        message = first["msg"] if first else "expected an object"
        raise InputError(message, file=meta_file, path=where) from exc


CREATION_TIME_FILE = "reproduce.log.creation_time"
"""PaperBench's record of when reproduce.log was created: an integer, POSIX seconds."""


def _log_created(files: list[ViewFile], log_mtime: float | None) -> float | None:
    """PaperBench's reading: ``int(reproduce.log.creation_time)``, else the log's mtime."""
    stamp = next((f for f in files if f.path == CREATION_TIME_FILE), None)
    if stamp is not None and stamp.text is not None:
        try:
            return float(int(stamp.text.strip()))
        except ValueError:
            pass
    return log_mtime


def written_by_run(f: ViewFile, log_created: float | None) -> bool:
    """PaperBench's rule for a file the run wrote: modified at or after the log's creation
    time, whatever its bytes (the log and its creation time, written after the run, aside).
    The mtimes come from the sandbox, so the submission's own code sets them."""
    if log_created is None or f.mtime is None or f.mtime != f.mtime:
        return False
    return f.mtime >= log_created and f.path not in (LOG_NAME, CREATION_TIME_FILE)


def _mark_changed(
    files: list[ViewFile], reproduction: ReproductionSummary, log_created: float | None
) -> list[ViewFile]:
    """``changed`` from the reproduction's record (content hashes), and ``modified`` for a
    file the run wrote again with the same bytes (:func:`written_by_run`)."""
    created, modified = set(reproduction.created), set(reproduction.modified)
    out: list[ViewFile] = []
    for f in files:
        changed: Literal["created", "modified"] | None = None
        if f.path in created:
            changed = "created"
        elif f.path in modified or written_by_run(f, log_created):
            changed = "modified"
        out.append(f.model_copy(update={"changed": changed}))
    return out


def _log_view(source: str, raw: bytes, size: int, limits: ViewLimits) -> LogView:
    """The log from its bytes as read (at most :data:`LOG_READ_CAP`, head and tail)."""
    text = raw.decode("utf-8", errors="replace")
    folded = fold_log(text)
    excerpt = cut_log(folded, limits.log_max_tokens, limits.token_model)
    return LogView(
        source=source,
        head=head_chars(raw[: 4 * limits.max_file_bytes], limits.max_file_bytes),
        text=excerpt.text,
        raw_bytes=size,
        raw_lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
        folded_lines=folded.count("\n") + (1 if folded else 0),
        lines_cut=excerpt.lines_cut,
    )


def build_view(
    submission: Path,
    executed: Path | None = None,
    *,
    log: Path | None = None,
    limits: ViewLimits | None = None,
) -> SubmissionView:
    """Read a submission (and its reproduction) into a :class:`SubmissionView`.

    ``log`` names reproduce.log explicitly (e.g. the bundled examples keep it beside
    ``submission/``); otherwise it is ``executed/reproduce.log``, else a top-level
    ``reproduce.log`` inside the files (PaperBench's executed submissions keep it there).

    Raises:
        InputError: a missing or unreadable submission, executed folder or log.
        UnsafeArchiveError: never; unsafe archive members are left out and noted.
    """
    limits = limits or ViewLimits()
    notes: list[str] = []
    reproduction = _read_metadata(executed) if executed is not None else None
    if executed is None and not submission.exists():
        raise InputError("not found: give a folder or a .tar/.tar.gz/.tgz file", file=submission)
    source: Path = submission
    if executed is not None:
        archive = executed / "executed.tar.gz"
        if archive.is_file():
            source = archive
        else:
            notes.append(
                f"{archive} is missing (reproduction status "
                f"{reproduction.status if reproduction else '?'}): "
                "the files shown are the submission as submitted"
            )
    # Read entry by entry: nothing is written to disk, no link is followed, what is held is
    # capped (the files came out of a sandbox).
    tree = read_tree(source, limits.max_file_bytes)
    notes.extend(tree.notes)
    files, not_listed, skipped = _scan(tree, limits)
    cuts = tree.cuts()
    if not_listed:
        cuts.append(f"{plural(not_listed, 'file')} over the limit of {limits.max_files} not listed")
    log_view: LogView | None = None
    log_mtime: float | None = None
    if log is not None:
        if not log.is_file():
            raise InputError("no such log file", file=log)
        raw, size = read_log_file(log)
        log_view, log_mtime = _log_view(str(log), raw, size, limits), log.stat().st_mtime
    elif executed is not None and (executed / "reproduce.log").is_file():
        path = executed / "reproduce.log"
        raw, size = read_log_file(path)
        log_view, log_mtime = _log_view(str(path), raw, size, limits), path.stat().st_mtime
    elif tree.log is not None:
        notes.append("reproduce.log read from inside the submission")
        log_view = _log_view("reproduce.log (in the submission)", tree.log, tree.log_size, limits)
        inner = next((f for f in files if f.path == LOG_NAME), None)
        log_mtime = inner.mtime if inner is not None else None
    log_created = _log_created(files, log_mtime)
    if reproduction is not None:
        files = _mark_changed(files, reproduction, log_created)
    script = next((f for f in files if f.path == "reproduce.sh"), None)
    return SubmissionView(
        submission=str(submission),
        executed=str(executed) if executed is not None else None,
        files=files,
        files_not_listed=not_listed + tree.not_listed,
        skipped_dirs=skipped,
        reproduce_sh=script.text if script is not None else None,
        log=log_view,
        log_created=log_created,
        reproduction=reproduction,
        notes=notes,
        cuts=cuts,
        limits=limits,
    )
