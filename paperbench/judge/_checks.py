"""Check leaves: a leaf with ``check`` is graded by running its command, not by a model.

In the spirit of ResearchCodeBench, a check is an executable test hidden from the agent
(``paperbench.rubric.Check``: ``command``, ``timeout_s``, ``files``). Each check runs in a
FRESH reproducer sandbox (the image and backend ``paperbench reproduce`` uses, built with
:func:`paperbench.reproduce.resolve_image`) with no network and capped memory, processes and
disk (:data:`CHECK_LIMITS`):

1. the executed submission is copied to ``/submission`` (the output folder of
   ``paperbench reproduce``, whose ``executed.tar.gz`` holds it under ``submission/``; or such
   an ``executed.tar.gz``; or a plain folder holding the executed submission);
2. the check's ``files`` (sandbox path → path relative to the rubric file's folder) are
   written in; a source outside that folder, or a relative sandbox path, is refused with one
   line naming the leaf's JSON path before any sandbox starts (a rubric error); a source that
   is missing or unreadable makes that leaf's grade ``check_error`` (below);
3. ``command`` runs under ``bash -lc`` in ``/submission`` with the check's timeout, as
   :data:`CHECK_USER` (``SandboxSpec.user``: an unprivileged user who owns ``/submission`` and
   the check's files, where the backend maps one; the Docker backend does), with
   :data:`CHECK_FILES_ENV` naming the check's files.

Exit 0 scores 1; any other exit code of the command itself scores 0 (a failing assertion,
a crash, a missing import): a valid grade with ``source: "check"`` whose explanation gives the
command, the exit code, the time taken and a capped tail of its stdout and stderr.

The exit code is a verdict only because the command's own process runs none of the
submission's code: code that runs in that process can end it with exit code 0 whatever it
computed. A check that calls the submission's code does it in a child process through the
checks' helper (``rubrics/checks/_child.py``, copied in as one of the check's ``files``), which
brings back plain values for the check to judge; the check's process makes itself undumpable
(the child cannot ptrace it or read its memory), deletes the check's files before the child
starts, and refuses to judge (exit 126) when its exit code would pass through a shell the child
could take over. A child that kills the check ends it with a signal's exit code: ``check_error``
or 0, never 1. No verdict line or nonce is asked of the command: code in the check's process
could read one as easily as exit 0, and code outside it cannot change that process's exit code.

A check that did not get to judge the submission is no verdict: the grade is invalid with
reason ``check_error`` (it counts 0 in the score and against coverage, as every invalid leaf),
its error line saying why (:data:`CHECK_ERROR_EXITS`):

- exit 126 (the command cannot be executed), 127 (command not found) or 137 (killed by
  SIGKILL, e.g. the memory cap's OOM killer);
- the check's timeout killed it;
- it could not start: a check file missing or unreadable in the rubric's folder (no sandbox
  is started for it), the sandbox failed (the backend does not answer, the image is missing,
  the copy fails), or the executed submission is missing.

:data:`CheckRunner` is the signature the grading engine calls for one leaf: bind the
submission and sandbox with ``functools.partial(run_check, rubric_dir=..., executed=...,
sandbox=...)``. :func:`run_checks` runs several check leaves of one submission, extracting the
executed submission once and starting one sandbox per check, ``concurrency`` at a time.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from paperbench._io import json_path
from paperbench.errors import InputError, SandboxError
from paperbench.judge._types import LeafGrade
from paperbench.reproduce import ARCHIVE_TOP, SUBMISSION_PATH, resolve_image
from paperbench.rubric import Check, NodePath, TaskNode
from paperbench.sandbox import (
    ExecResult,
    NetworkPolicy,
    SandboxBackend,
    SandboxConfig,
    SandboxLimits,
    SandboxSpec,
    safe_extract,
)

CHECK_LIMITS = SandboxLimits(memory_mb=4096, pids=512, disk_mb=4096)
"""Resources of a check's sandbox unless the caller gives others: a check tests code on
small hidden inputs, so it needs far less than a reproduction."""
OUTPUT_LIMIT_BYTES = 64 * 1024
"""Bytes kept of each of a check's stdout and stderr (head and tail)."""
TAIL_CHARS = 2000
"""Characters of each stream's end quoted in the explanation."""
CHECK_STAGE_LABEL = {"paperbench.stage": "check"}
CHECK_USER: Final = "sandbox"
"""Who runs a check's command (``SandboxSpec.user``): a check needs no root."""
CHECK_ERROR_EXITS: Final[Mapping[int, str]] = {
    126: "the command cannot be executed (exit 126)",
    127: "command not found (exit 127)",
    137: "the command was killed (exit 137: SIGKILL, e.g. out of memory)",
}
"""Exit codes that say the check could not judge the submission: ``check_error``, not 0."""
CHECK_FILES_ENV: Final = "PAPERBENCH_CHECK_FILES"
"""Given to every check's command: a JSON list of the check's files in the sandbox, which the
checks' helper (``rubrics/checks/_child.py``) deletes before the submission's code runs."""

CheckRunner = Callable[[TaskNode, NodePath], Awaitable[LeafGrade]]
"""What the grading engine calls for a leaf with ``check``: ``(leaf, path) -> LeafGrade``,
e.g. ``functools.partial(run_check, rubric_dir=..., executed=..., sandbox=...)``. It never
raises for a failing, crashing or timing-out command; a check that could not judge (see the
module docstring) is an invalid grade with reason ``check_error``; a check file outside the
rubric's folder or a relative sandbox path raises ``InputError``."""


@dataclass(frozen=True)
class _Prepared:
    """One check ready to run: its leaf, where it sits, and its hidden files' contents."""

    path: NodePath
    leaf: TaskNode
    check: Check
    files: dict[str, bytes]
    unusable: str | None = None
    """Why the check cannot start (a check file missing or unreadable), else None."""


def _hidden_files(
    leaf: TaskNode, path: NodePath, rubric_dir: Path
) -> tuple[dict[str, bytes], str | None]:
    """Sandbox path → content of every file the check needs, read from the rubric's folder,
    and why the check cannot start when a file is missing or unreadable (else None).

    Raises:
        InputError: a source outside ``rubric_dir``, or a relative sandbox path.
    """
    assert leaf.check is not None
    root = rubric_dir.resolve()
    loc: list[str | int] = []
    for index in path:
        loc += ["sub_tasks", index]
    out: dict[str, bytes] = {}
    unusable: str | None = None
    for target, source in leaf.check.files.items():
        where = json_path([*loc, "check", "files", target])
        if not target.startswith("/"):
            raise InputError(
                f"the sandbox path {target!r} must be absolute (e.g. /paperbench_checks/x.py)",
                file=rubric_dir,
                path=where,
            )
        resolved = (root / source).resolve()
        if not resolved.is_relative_to(root):
            raise InputError(
                f"{source!r} is outside the rubric's folder {root}; check files must sit "
                "beside the rubric (e.g. checks/<paper>/...)",
                file=rubric_dir,
                path=where,
            )
        if unusable is not None:
            continue
        try:
            out[target] = resolved.read_bytes()
        except OSError as exc:
            unusable = (
                f"cannot read check file {source!r} for {target} ({exc.strerror}; "
                f"looked for {resolved}; rubric {where})"
            )
    return out, unusable


def _executed_source(executed: Path) -> tuple[Path | None, str | None]:
    """The folder or archive holding the executed submission, or None and why not.

    Raises:
        InputError: ``executed`` does not exist.
    """
    if not executed.exists():
        raise InputError(
            "not found: give the output folder of `paperbench reproduce`, its "
            "executed.tar.gz, or a folder holding the executed submission",
            file=executed,
        )
    if executed.is_file():
        return executed, None
    archive = executed / "executed.tar.gz"
    if archive.is_file():
        return archive, None
    if _is_reproduction(executed / "metadata.json"):
        return None, (
            f"{executed}: the reproduction left no executed.tar.gz (see its metadata.json); "
            "rerun `paperbench reproduce` to grade check leaves"
        )
    return executed, None


def _is_reproduction(metadata: Path) -> bool:
    """Whether ``metadata`` is the metadata.json of `paperbench reproduce` (a submission may
    hold a file of that name of its own)."""
    try:
        data = json.loads(metadata.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"status", "submission"} <= data.keys()


def _tail(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= TAIL_CHARS else "[...]" + text[-TAIL_CHARS:]


def _explain(check: Check, result: ExecResult, error: str | None) -> str:
    if result.timed_out:
        outcome = f"timed out after {check.timeout_s:g} s and was killed (exit code none)"
    else:
        outcome = f"exited {result.exit_code} after {result.duration_s:.1f} s"
    if error is not None:
        head = f"check could not judge the submission (check_error: {error}):"
    else:
        head = "check passed:" if result.exit_code == 0 else "check failed:"
    lines = [
        f"{head} `{check.command}` {outcome}.",
        f"exit_code={result.exit_code} timed_out={str(result.timed_out).lower()}",
    ]
    for name, text, cut in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if text.strip():
            note = ", middle cut" if cut else ""
            lines.append(f"--- {name} (last {TAIL_CHARS} characters{note}) ---")
            lines.append(_tail(text))
    return "\n".join(lines)


def _error_of(check: Check, result: ExecResult) -> str | None:
    """Why a finished command is no verdict on the submission (``check_error``), else None."""
    if result.timed_out or result.exit_code is None:
        return f"the check timed out after {check.timeout_s:g} s and was killed"
    return CHECK_ERROR_EXITS.get(result.exit_code)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _grade(
    item: _Prepared,
    *,
    started: float,
    result: ExecResult | None = None,
    error: str | None = None,
) -> LeafGrade:
    """A valid 1 or 0 when the command judged the submission; else ``check_error``."""
    if result is None:
        error = error or "the check's sandbox failed"
        explanation = f"the check `{item.check.command}` could not run: {error}"
    else:
        error = _error_of(item.check, result)
        explanation = _explain(item.check, result, error)
    category = item.leaf.task_category
    return LeafGrade(
        path=item.path,
        leaf_id=item.leaf.id,
        category=category.value if category is not None else "",
        source="check",
        score=1.0 if result is not None and error is None and result.exit_code == 0 else 0.0,
        valid=error is None,
        reason="check_error" if error is not None else None,
        error=error,
        explanation=explanation,
        wall_time_s=time.monotonic() - started,
    )


async def _run_one(
    item: _Prepared,
    backend: SandboxBackend,
    spec: SandboxSpec,
    staged: Path,
    gate: asyncio.Semaphore,
) -> LeafGrade:
    async with gate:
        started = time.monotonic()
        if item.unusable is not None:
            return _grade(item, started=started, error=item.unusable)
        try:
            async with await backend.start(spec) as sb:
                await sb.upload(staged, SUBMISSION_PATH)
                for target, data in item.files.items():
                    await sb.write_file(target, data)
                result = await sb.exec(
                    item.check.command,
                    timeout=float(item.check.timeout_s),
                    workdir=SUBMISSION_PATH,
                    env={CHECK_FILES_ENV: json.dumps(sorted(item.files))},
                    output_limit=OUTPUT_LIMIT_BYTES,
                )
        except SandboxError as exc:
            return _grade(item, started=started, error=_one_line(exc))
        return _grade(item, started=started, result=result)


async def run_checks(
    leaves: Sequence[tuple[NodePath, TaskNode]],
    *,
    rubric_dir: Path,
    executed: Path,
    sandbox: SandboxConfig,
    image: str | None = None,
    concurrency: int = 2,
    limits: SandboxLimits = CHECK_LIMITS,
    labels: Mapping[str, str] | None = None,
) -> list[LeafGrade]:
    """Grade the check leaves ``leaves`` of one executed submission, in their order.

    The executed submission is extracted once; every check gets its own fresh sandbox, at
    most ``concurrency`` at a time. ``image`` overrides the reproducer image (Docker) or the
    host (local); ``labels`` are added to every sandbox (e.g. the run it belongs to).

    Raises:
        InputError: a leaf without ``check``, a check file outside ``rubric_dir`` or a
            relative sandbox path, or ``executed`` not found (nothing has run then).
        UnsafeArchiveError: the executed archive has members that escape its folder.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    items: list[_Prepared] = []
    for path, leaf in leaves:
        if leaf.check is None:
            raise InputError(
                "this leaf has no check: grade it with the judge instead",
                file=rubric_dir,
                path=json_path([x for i in path for x in ("sub_tasks", i)]),
            )
        files, unusable = _hidden_files(leaf, path, rubric_dir)
        items.append(_Prepared(path, leaf, leaf.check, files, unusable))
    if not items:
        return []
    source, missing = _executed_source(Path(executed))
    if source is None:
        started = time.monotonic()
        return [_grade(item, started=started, error=item.unusable or missing) for item in items]
    started = time.monotonic()
    try:
        backend = await sandbox.build()
        resolved_image = await resolve_image(backend, image)
    except SandboxError as exc:
        line = _one_line(exc)
        return [_grade(item, started=started, error=item.unusable or line) for item in items]
    spec = SandboxSpec(
        image=resolved_image,
        limits=limits,
        network=NetworkPolicy.NONE,
        workdir=SUBMISSION_PATH,
        user=CHECK_USER,
        labels={**(labels or {}), **CHECK_STAGE_LABEL},
        writable_dirs=tuple(
            sorted({posixpath.dirname(posixpath.normpath(t)) for i in items for t in i.files})
        ),
    )
    gate = asyncio.Semaphore(concurrency)
    with tempfile.TemporaryDirectory(prefix="paperbench-checks-") as tmp:
        staged = Path(tmp) / ARCHIVE_TOP
        await asyncio.to_thread(safe_extract, source, staged, strict=True)
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(_run_one(item, backend, spec, staged, gate)) for item in items
            ]
    return [task.result() for task in tasks]


async def run_check(
    leaf: TaskNode,
    path: NodePath,
    *,
    rubric_dir: Path,
    executed: Path,
    sandbox: SandboxConfig,
    image: str | None = None,
    limits: SandboxLimits = CHECK_LIMITS,
    labels: Mapping[str, str] | None = None,
) -> LeafGrade:
    """Grade one check leaf (see the module docstring); :data:`CheckRunner` once bound.

    Raises:
        InputError: the leaf has no check, a check file is outside ``rubric_dir`` or a
            sandbox path is relative, or ``executed`` does not exist.
    """
    grades = await run_checks(
        [(path, leaf)],
        rubric_dir=rubric_dir,
        executed=executed,
        sandbox=sandbox,
        image=image,
        limits=limits,
        labels=labels,
    )
    return grades[0]
