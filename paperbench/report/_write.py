"""Writing a group's report: ``summary.json`` and the static HTML pages."""

from __future__ import annotations

from pathlib import Path

from paperbench.errors import InputError
from paperbench.report._files import read_group_files
from paperbench.report._html import write_html
from paperbench.report._metrics import Summary, summarize_group
from paperbench.runs._store import REPORT_DIR, SUMMARY_FILE, write_model

INDEX_FILE = "index.html"


def html_dir(group_dir: Path, out: Path | None = None) -> Path:
    """Where the HTML report of ``group_dir`` goes: ``out``, else ``group_dir/report``."""
    return out if out is not None else group_dir / REPORT_DIR


def summary_path(group_dir: Path) -> Path:
    """The group's ``summary.json``."""
    return group_dir / SUMMARY_FILE


def write_report(group_dir: Path, out: Path | None = None, *, html: bool = True) -> Summary:
    """Read a run group's files, compute its metrics and write them.

    Writes ``group_dir/summary.json`` and, with ``html``, the static HTML report
    (``index.html`` and one page per run, opened from disk) into ``out`` (default
    ``group_dir/report``). A run file that cannot be read does not stop the report: it is
    left out and listed in the returned summary's ``problems``.

    Returns:
        The group's :class:`Summary` (what ``summary.json`` holds).

    Raises:
        InputError: ``out`` exists and is not a folder, ``group_dir`` is not a run group
            (no readable group.json), or a file of the report cannot be written.
    """
    if out is not None and out.exists() and not out.is_dir():
        raise InputError("not a folder; give a folder for the HTML report", file=out)
    files = read_group_files(group_dir)
    summary = summarize_group(files)
    try:
        write_model(summary_path(group_dir), summary)
        if html:
            write_html(summary, files, html_dir(group_dir, out))
    except OSError as exc:
        where = exc.filename2 or exc.filename or group_dir
        raise InputError(
            f"cannot write ({exc.strerror}); make the folder writable or give --out elsewhere",
            file=where,
        ) from None
    return summary
