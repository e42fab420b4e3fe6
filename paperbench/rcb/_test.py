"""Running a paper's test in a sandbox, and saying how it ended.

``await run_test(paper_folder, files, sandbox=...)`` starts a FRESH sandbox (the reproducer
image by default, or ``image``, e.g. the RCB image; the host's own system on the local
backend) with no network and capped CPUs, memory, processes and disk (:data:`RCB_LIMITS`),
as the unprivileged user, puts the paper folder at ``/home/rcb/<paper>`` with ``files`` (path
relative to the paper folder → full text: the filled annotated files) written over it and the
``hide`` paths left out (one upload of the job's own copy, made on the host from hard links),
runs ``python3 paper2code_test.py`` there with a timeout, and always stops and removes the
sandbox. :func:`run_tests` runs many such jobs, at most ``concurrency`` tests at once,
building the backend, resolving the image and staging each paper folder once. While tests
run it starts and fills the sandboxes of the next ``prepare_ahead`` jobs in line (each job's
own, used by no other), so a job whose slot frees up finds its sandbox ready; a sandbox is
removed after its job gives the slot back, while the next tests run, and every one is
removed before :func:`run_tests` returns or raises, also when it is cancelled. At most
``concurrency + prepare_ahead`` sandboxes are started or in use at once (besides those being
removed).

The result is a :class:`~paperbench.rcb._models.TestOutcome`; nothing that happens inside the
sandbox raises:

- **passed** is exit code 0, nothing else. RCB's harness also fails a run whose output holds
  ``Error:``, ``Exception:``, ``Traceback`` or ``failed``; we do not: a correct
  answer whose test (or a library it calls) prints such a word on a passing run, e.g. a
  warning or an expected exception that is logged, would count as failed, while a unittest
  run that fails already exits non-zero. On RCB's published results the two rules agree (no
  run has exit code 0 and ``passed: false``).
- **error_class** of a failure, from the output (stdout and stderr interleaved): a
  ``SyntaxError``/``IndentationError`` is ``syntax``, ``ImportError``/``ModuleNotFoundError``
  ``import``, ``NameError`` (and ``UnboundLocalError``) ``name``, ``AssertionError`` or a
  unittest ``FAIL:`` ``assertion``, a kill at the timeout ``timeout``, anything else
  ``runtime``. When the output holds several, the most basic wins, in that order, with any
  other exception before ``assertion``: a test that crashes says more about the code than one
  that compares numbers. An exception that only caused another (a chained traceback's "During
  handling of the above exception ...") does not count. A disk that filled (the sandbox's
  capped disk is full, or the output says ``No space left on device``) and a memory kill
  (SIGKILL, exit 137, or a ``MemoryError``) are ``runtime`` with ``detail`` saying so and
  naming the cap.
- **sandbox_error**: the sandbox could not be made or used (the backend does not answer, the
  image is missing, the copy failed, the sandbox died or stopped answering); ``detail`` is the
  one-line reason. It is not a failed test: the caller runs the problem again later.
- **seconds** is the test command's wall time; **overhead_s** everything else the job cost
  the run: the time it held its test slot outside the test command (waiting for its sandbox
  to be started and filled, or starting and filling it when it was not prepared ahead, and
  reading its disk usage), its share of building the backend, resolving the image and
  staging the paper folders, and its share of the removals :func:`run_tests` still waited for
  after the last test ended. Not counted: the wait for a free slot, and the sandbox work done
  for a job while other jobs' tests ran (preparing it ahead, removing it afterwards). With
  ``concurrency=1`` the outcomes' ``seconds`` and ``overhead_s`` add up to the call's wall
  time; for a single :func:`run_test` its start, copy in and removal all count.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import posixpath
import re
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, NamedTuple, TypeVar

from paperbench.errors import InputError, SandboxError
from paperbench.rcb._models import TEST_ENTRY, ErrorClass, TestOutcome
from paperbench.reproduce import resolve_image
from paperbench.sandbox import (
    ExecResult,
    NetworkPolicy,
    Sandbox,
    SandboxBackend,
    SandboxConfig,
    SandboxLimits,
    SandboxSpec,
)

log = logging.getLogger("paperbench.rcb")
T = TypeVar("T")

RCB_LIMITS = SandboxLimits(cpus=2, memory_mb=4096, pids=512, disk_mb=4096)
"""Resources of a test's sandbox unless the caller gives others: RCB's tests run on CPU in
seconds on small inputs."""
RCB_ROOT = "/home/rcb"
"""Where paper folders go in the sandbox: ``/home/rcb/<paper>``, the test's working folder."""
RCB_USER: Final = "sandbox"
"""Who runs the test (``SandboxSpec.user``): a test needs no root."""
RCB_STAGE_LABEL = {"paperbench.stage": "rcb-test"}
TEST_COMMAND = f"python3 {TEST_ENTRY} 2>&1"
"""Run in the paper's folder; stderr joins stdout so the output reads in order."""
TEST_ENV = {
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "MPLBACKEND": "Agg",
}
"""The test's environment (nothing from the host): CPU only, output unbuffered, no plots
shown."""
OUTPUT_LIMIT_BYTES = 256 * 1024
"""Bytes of the test's output kept for classifying it (head and tail)."""
TAIL_CHARS = 4000
"""Characters of the output's end kept in ``TestOutcome.output_tail``."""
SKIPPED_NAMES = frozenset({".git", "__pycache__"})
"""Never copied in: a clone's history and stale bytecode."""
EXEC_GRACE_S = 60.0
"""How long past the test's timeout the sandbox may take to report it before it counts as
no longer answering (``sandbox_error``)."""
PREPARE_AHEAD = 2
"""Sandboxes :func:`run_tests` prepares ahead at least (its default is ``concurrency`` when
that is more). Measured with bench/rcb.py on 2 cores, 1 test at once: 1 ahead left a job
waiting on about half its sandbox's start, 2 left it almost none, more only slowed the tests
running meanwhile."""
_DETAIL_CHARS = 300


class RcbJob(NamedTuple):
    """One test to run: the paper folder, the files written over it, the paths left out."""

    paper_folder: Path
    files: Mapping[str, str]
    """Path relative to the paper folder → the file's full text."""
    hide: Sequence[str] = ()
    """Paths relative to the paper folder (files or folders) never copied in."""


JobLike = RcbJob | tuple[Path, Mapping[str, str]]


# --------------------------------------------------------------------------- classification

_EXC_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*"
    r"(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure))(?::.*)?$"
)
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
_FAIL_LINE = re.compile(r"^FAIL: \S")
_CLASS_OF_NAME: dict[str, ErrorClass] = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "ImportError": "import",
    "ModuleNotFoundError": "import",
    "NameError": "name",
    "UnboundLocalError": "name",
    "AssertionError": "assertion",
}
_PRIORITY: tuple[ErrorClass, ...] = ("syntax", "import", "name", "runtime", "assertion")
_DISK_FULL = ("No space left on device", "Disk quota exceeded", "File too large")
_KILLED = (137, -9)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."


def _final_exceptions(output: str) -> list[tuple[str, str]]:
    """(exception name, its message) of every exception the output reports as raised,
    leaving out those that only led to another (a chained traceback's earlier parts). A
    message that goes on below its line (numpy's ``assert_allclose``) gets its next line."""
    lines = output.splitlines()
    found: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        match = _EXC_LINE.match(line)
        if match is None:
            continue
        following = next((x.strip() for x in lines[i + 1 :] if x.strip()), "")
        if following in _CHAIN_MARKERS:
            continue
        text = line.rstrip()
        if text.endswith(":") and i + 1 < len(lines) and lines[i + 1].strip():
            text = f"{text} {lines[i + 1].strip()}"
        found.append((match.group("name"), text))
    return found


def classify_failure(output: str) -> tuple[ErrorClass, str]:
    """The error class of a failed test's output and the line that says it (see the module
    docstring); ``runtime`` and the last line of output when nothing is recognised."""
    best: tuple[int, str] | None = None
    for name, line in _final_exceptions(output):
        rank = _PRIORITY.index(_CLASS_OF_NAME.get(name, "runtime"))
        if best is None or rank < best[0]:
            best = (rank, line)
    if best is None or _PRIORITY[best[0]] == "assertion":
        fail = next((x for x in output.splitlines() if _FAIL_LINE.match(x)), None)
        if best is None and fail is not None:
            best = (_PRIORITY.index("assertion"), fail)
    if best is not None:
        return _PRIORITY[best[0]], _one_line(best[1])
    last = next((x for x in reversed(output.splitlines()) if x.strip()), "")
    return "runtime", _one_line(last) if last else "no output"


async def _gone(sb: Sandbox, wait_s: float = 2.0) -> bool:
    """Whether a sandbox whose test was killed is gone: the exec's end can be seen before
    the engine says the container stopped, so it is asked for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while await sb.alive():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)
    return True


def _outcome_of(
    result: ExecResult, *, timeout_s: float, limits: SandboxLimits, disk_full: bool
) -> tuple[bool, ErrorClass | None, str | None]:
    """(passed, error class, detail) of a finished test command."""
    output = result.stdout + (f"\n{result.stderr}" if result.stderr.strip() else "")
    if result.timed_out or result.exit_code is None:
        return False, "timeout", f"the test ran past its {timeout_s:g} s timeout and was killed"
    if result.exit_code == 0:
        return True, None, None
    error_class, line = classify_failure(output)
    if disk_full or any(marker in output for marker in _DISK_FULL):
        cap = f"of {limits.disk_mb} MB " if limits.disk_mb is not None else ""
        return False, "runtime", _one_line(f"the sandbox's disk {cap}is full: {line}")
    names = {name for name, _ in _final_exceptions(output)}
    memory = f"{limits.memory_mb} MB" if limits.memory_mb is not None else "no cap"
    if "MemoryError" in names:
        return False, "runtime", _one_line(f"out of memory (the sandbox's cap: {memory}): {line}")
    if result.exit_code in _KILLED and not names:
        return (
            False,
            "runtime",
            f"the test was killed (exit {result.exit_code}: SIGKILL), most likely out of "
            f"memory (the sandbox's cap: {memory})",
        )
    if error_class == "runtime" and not names:
        line = _one_line(f"exit code {result.exit_code}: {line}")
    return False, error_class, line


# --------------------------------------------------------------------------- staging


def _relative(path: str, what: str) -> str:
    """``path`` normalised; it must stay inside the paper folder."""
    norm = posixpath.normpath(path.replace(os.sep, "/"))
    if posixpath.isabs(norm) or norm == "." or norm == ".." or norm.startswith("../"):
        raise ValueError(f"{what} {path!r} must be a path inside the paper folder")
    return norm


def _link_or_copy(src: str, dst: str) -> None:
    """A hard link when the folders share a file system (cheap), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _stage(folder: Path, hide: tuple[str, ...], dest: Path) -> None:
    """The paper folder as every sandbox of its jobs gets it, at ``dest``: ``hide`` and
    :data:`SKIPPED_NAMES` left out. Files are hard links where they can be (nothing writes
    to them: the filled files are written in the sandbox), else copies."""

    def ignore(here: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(here, folder).replace(os.sep, "/")
        out = set()
        for name in names:
            path = posixpath.normpath(posixpath.join(rel, name))
            if name in SKIPPED_NAMES or path in hide:
                out.add(name)
        return out

    shutil.copytree(folder, dest, symlinks=True, ignore=ignore, copy_function=_link_or_copy)


def _stage_key(job: RcbJob) -> tuple[Path, tuple[str, ...]]:
    return job.paper_folder, tuple(sorted({_relative(h, "a hidden path") for h in job.hide}))


def _job(job: JobLike) -> RcbJob:
    out = job if isinstance(job, RcbJob) else RcbJob(*job)
    folder = Path(out.paper_folder)
    if not (folder / TEST_ENTRY).is_file():
        raise InputError(f"not a paper folder: it has no {TEST_ENTRY}", file=folder)
    for rel in out.files:
        _relative(rel, "a file")
    for rel in out.hide:
        _relative(rel, "a hidden path")
    return out._replace(paper_folder=folder)


# --------------------------------------------------------------------------- running


def _reason(exc: BaseException, disk_mb: int | None = None) -> str:
    """One line saying why the sandbox failed; a paper folder too big for the disk cap is
    said as such."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    lowered = text.lower()
    if any(marker.lower() in lowered for marker in _DISK_FULL) or (
        isinstance(exc.__cause__, OSError) and exc.__cause__.errno == errno.ENOSPC
    ):
        cap = f" of {disk_mb} MB" if disk_mb is not None else ""
        line = f"the paper folder does not fit in the sandbox's disk cap{cap}: {line}"
    return _one_line(line)


def _sandbox_error(detail: str, overhead_s: float) -> TestOutcome:
    return TestOutcome(
        passed=False, error_class="sandbox_error", detail=detail, overhead_s=overhead_s
    )


async def _wait_out(task: asyncio.Future[T]) -> bool:
    """Wait until ``task`` is done, also when this task is cancelled meanwhile (``task`` is
    not cancelled by that); whether it was."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def _stop(sb: Sandbox) -> None:
    """Stop and remove ``sb`` to the end, even when cancelled meanwhile (the cancellation is
    raised once it is removed). A failure to stop is logged."""
    task = asyncio.ensure_future(sb.stop())
    cancelled = await _wait_out(task)
    if not task.cancelled():
        try:
            task.result()
        except SandboxError as exc:
            log.warning("stopping an RCB test sandbox failed: %s", exc)
    if cancelled:
        raise asyncio.CancelledError


def _job_tree(staged: Path, files: Mapping[str, str], dest: Path) -> list[tuple[str, bytes]]:
    """The job's own copy of its staged paper folder at ``dest`` (hard links where it can)
    with ``files`` written over it: a written file replaces its link, never writes through
    it. A file whose folder in the tree is a symlink (or that is a folder there) is left out
    and returned, to be written in the sandbox."""
    shutil.copytree(staged, dest, symlinks=True, copy_function=_link_or_copy)
    late = []
    for rel, text in files.items():
        norm = _relative(rel, "a file")
        data = text.encode("utf-8")
        parts = norm.split("/")
        here = dest
        through_link = False
        for part in parts[:-1]:
            here = here / part
            if here.is_symlink() or (here.exists() and not here.is_dir()):
                through_link = True
                break
        target = dest / norm
        if through_link or (target.is_dir() and not target.is_symlink()):
            late.append((norm, data))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_bytes(data)
    return late


async def _prepare(
    job: RcbJob, staged: Path, backend: SandboxBackend, spec: SandboxSpec, scratch: Path
) -> Sandbox:
    """A fresh sandbox holding the job's paper folder with its files written over it, put in
    by one upload; stopped again when anything fails (or this is cancelled).

    Raises:
        SandboxError: the sandbox could not be made or filled, or the job's copy could not
            be made on the host.
    """
    workdir = f"{RCB_ROOT}/{job.paper_folder.name}"
    tree = scratch / job.paper_folder.name
    try:
        late = await asyncio.to_thread(_job_tree, staged, job.files, tree)
    except OSError as exc:
        raise SandboxError(f"cannot stage the job's files on the host: {exc}") from exc
    try:
        sb = await backend.start(spec)
        try:
            await sb.upload(tree, workdir)
            for norm, data in late:
                await sb.write_file(posixpath.join(workdir, norm), data)
        except BaseException:
            await _stop(sb)
            raise
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, ignore_errors=True)
    return sb


class _Gates(NamedTuple):
    slots: asyncio.Semaphore
    """Tests running at once (``concurrency``)."""
    live: asyncio.Semaphore
    """Sandboxes prepared or running at once (``concurrency + prepare_ahead``)."""


async def _run_job(
    job: RcbJob,
    staged: Path | str,
    backend: SandboxBackend,
    spec: SandboxSpec,
    *,
    timeout_s: float,
    setup_s: float,
    gates: _Gates,
    scratch: Path,
    ended: list[float],
) -> TestOutcome:
    """One job: its sandbox prepared as soon as a live place frees up, its test run once a
    slot does, the sandbox removed after the slot is given back. Appends when it gave the
    slot back to ``ended``."""
    result: ExecResult | None = None
    disk_full = False
    error = staged if isinstance(staged, str) else None
    sb: Sandbox | None = None
    prep: asyncio.Task[Sandbox] | None = None
    held = 0.0
    try:
        async with gates.live:
            if isinstance(staged, Path):
                prep = asyncio.ensure_future(_prepare(job, staged, backend, spec, scratch))
            async with gates.slots:
                started = time.monotonic()
                try:
                    if prep is not None:
                        sb = await prep
                        result = await asyncio.wait_for(
                            sb.exec(
                                TEST_COMMAND,
                                timeout=timeout_s,
                                workdir=f"{RCB_ROOT}/{job.paper_folder.name}",
                                env=TEST_ENV,
                                output_limit=OUTPUT_LIMIT_BYTES,
                            ),
                            timeout_s + EXEC_GRACE_S,
                        )
                        usage = sb.disk_usage()
                        disk_full = usage is not None and usage.full
                        if result.exit_code in _KILLED and await _gone(sb):
                            error = "the sandbox stopped while the test ran (exit 137)"
                except SandboxError as exc:
                    error = _reason(exc, spec.limits.disk_mb)
                except TimeoutError:
                    error = f"the sandbox did not answer within {timeout_s + EXEC_GRACE_S:g} s"
                held = time.monotonic() - started
                ended.append(time.monotonic())
    finally:
        if prep is not None:
            if not prep.done():
                prep.cancel()
            cancelled = await _wait_out(prep)
            if sb is None and not prep.cancelled() and prep.exception() is None:
                sb = prep.result()
            if sb is not None:
                await _stop(sb)
            if cancelled:
                raise asyncio.CancelledError
    total = held + setup_s
    if error is not None or result is None:
        return _sandbox_error(error or "the sandbox failed", total)
    passed, error_class, detail = _outcome_of(
        result, timeout_s=timeout_s, limits=spec.limits, disk_full=disk_full
    )
    tail = result.stdout + (f"\n{result.stderr}" if result.stderr.strip() else "")
    return TestOutcome(
        passed=passed,
        error_class=error_class,
        exit_code=result.exit_code,
        seconds=result.duration_s,
        overhead_s=max(total - result.duration_s, 0.0),
        output_tail=tail[-TAIL_CHARS:],
        detail=detail,
    )


async def _told(
    index: int,
    job: Awaitable[TestOutcome],
    on_done: Callable[[int, TestOutcome], None] | None,
) -> TestOutcome:
    outcome = await job
    if on_done is not None:
        on_done(index, outcome)
    return outcome


async def run_tests(
    jobs: Sequence[JobLike],
    *,
    concurrency: int,
    sandbox: SandboxConfig,
    image: str | None = None,
    timeout_s: float = 60.0,
    limits: SandboxLimits | None = None,
    labels: Mapping[str, str] | None = None,
    prepare_ahead: int | None = None,
    on_done: Callable[[int, TestOutcome], None] | None = None,
) -> list[TestOutcome]:
    """Run every job's test (see the module docstring), each in a fresh sandbox, at most
    ``concurrency`` at once, with up to ``prepare_ahead`` more sandboxes (default:
    ``concurrency``, at least :data:`PREPARE_AHEAD`) started and filled meanwhile for the jobs
    next in line; the outcomes in the jobs' order. A job is an :class:`RcbJob` or a
    ``(paper_folder, files)`` pair. ``labels`` are added to every sandbox (e.g. the run it
    belongs to). ``on_done(index, outcome)`` is called as each job ends (for progress).
    Every sandbox is removed before this returns, also when a job fails or this is cancelled.

    Raises:
        InputError: a paper folder without its test (nothing has run then).
        ValueError: ``concurrency`` below 1, ``prepare_ahead`` below 0, or a file or hidden
            path outside its paper folder (a caller's mistake).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    ahead = max(PREPARE_AHEAD, concurrency) if prepare_ahead is None else prepare_ahead
    if ahead < 0:
        raise ValueError("prepare_ahead must be at least 0")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    todo = [_job(job) for job in jobs]
    if not todo:
        return []
    cap = limits or RCB_LIMITS
    started = time.monotonic()
    try:
        backend = await sandbox.build()
        resolved = await resolve_image(backend, image)
    except SandboxError as exc:
        share = (time.monotonic() - started) / len(todo)
        failed = [_sandbox_error(_reason(exc), share) for _ in todo]
        for i, outcome in enumerate(failed):
            if on_done is not None:
                on_done(i, outcome)
        return failed
    spec = SandboxSpec(
        image=resolved,
        limits=cap,
        network=NetworkPolicy.NONE,
        user=RCB_USER,
        workdir=RCB_ROOT,
        writable_dirs=(RCB_ROOT,),
        labels={**(labels or {}), **RCB_STAGE_LABEL},
    )
    gates = _Gates(asyncio.Semaphore(concurrency), asyncio.Semaphore(concurrency + ahead))
    ended: list[float] = []
    with tempfile.TemporaryDirectory(prefix="paperbench-rcb-") as tmp:
        staged: dict[tuple[Path, tuple[str, ...]], Path | str] = {}
        for key in dict.fromkeys(_stage_key(job) for job in todo):
            dest = Path(tmp) / "staged" / str(len(staged)) / key[0].name
            try:
                await asyncio.to_thread(_stage, key[0], key[1], dest)
                staged[key] = dest
            except OSError as exc:
                staged[key] = _one_line(f"cannot stage {key[0]} on the host: {exc}")
        setup_s = (time.monotonic() - started) / len(todo)
        async with asyncio.TaskGroup() as group:
            tasks = [
                group.create_task(
                    _told(
                        i,
                        _run_job(
                            job,
                            staged[_stage_key(job)],
                            backend,
                            spec,
                            timeout_s=timeout_s,
                            setup_s=setup_s,
                            gates=gates,
                            scratch=Path(tmp) / "jobs" / str(i),
                            ended=ended,
                        ),
                        on_done,
                    )
                )
                for i, job in enumerate(todo)
            ]
    # the removals still running after the last test gave its slot back, shared out
    tail = (time.monotonic() - max(ended)) / len(todo) if ended else 0.0
    return [
        outcome.model_copy(update={"overhead_s": outcome.overhead_s + tail})
        for outcome in (task.result() for task in tasks)
    ]


async def run_test(
    paper_folder: Path,
    files: Mapping[str, str],
    *,
    sandbox: SandboxConfig,
    image: str | None = None,
    timeout_s: float = 60.0,
    limits: SandboxLimits | None = None,
    hide: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> TestOutcome:
    """Run ``paper_folder``'s test with ``files`` written over it, ``hide`` left out, in a
    fresh sandbox (see the module docstring). Never raises for what happens in the sandbox.

    Raises:
        InputError: ``paper_folder`` has no test.
        ValueError: a file or hidden path outside the paper folder.
    """
    outcomes = await run_tests(
        [RcbJob(Path(paper_folder), files, hide)],
        concurrency=1,
        sandbox=sandbox,
        image=image,
        timeout_s=timeout_s,
        limits=limits,
        labels=labels,
    )
    return outcomes[0]
