"""The reproduction stage: run a submission's ``reproduce.sh`` in a fresh reproducer sandbox.

``await reproduce_submission(submission, out_dir, config)`` copies the submission (a folder or a
.tar/.tar.gz archive, possibly under one top folder) into a new sandbox at ``/submission``,
removes ``venv``/``.venv`` folders, runs ``bash reproduce.sh`` with a timeout and writes into
``out_dir`` (each file atomically, ``metadata.json`` last: it marks completion)::

    out_dir/
      reproduce.log      stdout and stderr interleaved, capped (head and tail kept)
      executed.tar.gz    the submission after the run under ``submission/``, as PaperBench lays
                         it out, with ``submission/reproduce.log`` and
                         ``submission/reproduce.log.creation_time`` (where PaperBench's judge
                         reads them); files over the size limit left out
      metadata.json      ReproductionMetadata: status, exit code, times, changed files, attempts,
                         the isolation used and why, the disk cap and how it was enforced

A run that fails fast (exit ≠ 0 within ``salvage_window_s``) is retried in a new sandbox up to
``salvage_retries`` times; every attempt is recorded. A run that fills the sandbox's capped disk
ends as ``disk_full`` (a line in the log says so); a write on the host that fails (e.g. its own
disk is full) ends as ``host_error``. A ``reproduce.sh`` with CRLF line endings that fails gets
a hint (log and metadata); it is never rewritten.
"""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from paperbench._io import atomic_write_text
from paperbench.errors import InputError, SandboxError, SandboxUnavailableError
from paperbench.reproduce._files import compare, manifest, remove_dirs
from paperbench.reproduce._models import (
    ARCHIVE_TOP,
    CREATION_TIME_NAME,
    CRLF_HINT,
    LOG_NAME,
    REPRODUCER_IMAGE,
    SUBMISSION_PATH,
    Attempt,
    ReproduceConfig,
    ReproductionMetadata,
)
from paperbench.sandbox import (
    ExtractReport,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    make_tar_gz,
    safe_extract,
    stage_image,
    write_file_beneath,
)

_LOG_TAIL_BYTES = 4096


def _host_disk_error(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT error behind ``exc`` (through its causes), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _now() -> datetime:
    return datetime.now(UTC)


async def resolve_image(backend: SandboxBackend, image: str | None = None) -> str:
    """The reproducer image for ``backend``: ``image`` when given, else paperbench's reproducer
    image on Docker (built when missing) or the host's own system on the local backend.

    Raises:
        SandboxError: the image cannot be found or built.
    """
    return await stage_image(backend, REPRODUCER_IMAGE, image)


class _Run:
    """One reproduction: state shared by the attempts, written out by :meth:`finish`."""

    def __init__(self, submission: Path, out_dir: Path, config: ReproduceConfig) -> None:
        self.submission = submission
        self.out_dir = out_dir
        self.config = config
        self.t0 = time.monotonic()
        self.meta = ReproductionMetadata(
            status="sandbox_error",
            submission=str(submission),
            started_at=_now(),
            config=config,
            disk_cap_mb=config.limits.disk_mb,
        )
        self.log_text = ""
        self.log_started: float | None = None
        """Epoch seconds when the final attempt's reproduce.sh started."""
        self.host_disk_full = False

    def remaining(self) -> float:
        return self.config.timeout_s - sum(a.duration_s for a in self.meta.attempts)

    async def attempt(
        self, backend: SandboxBackend, spec: SandboxSpec, staged: Path, host_out: Path
    ) -> tuple[Attempt, bool]:
        """One attempt in a new sandbox; returns it and whether it should be retried."""
        number = len(self.meta.attempts) + 1
        record = Attempt(attempt=number, started_at=_now())
        sb: Sandbox | None = None
        phase = "start"
        try:
            sb = await backend.start(spec)
            self.meta.disk_cap = sb.disk_cap
            if sb.disk_cap_note and sb.disk_cap_note not in self.meta.hints:
                self.meta.hints.append(sb.disk_cap_note)
            phase = "upload"
            await sb.upload(staged, SUBMISSION_PATH)
            phase = "run"
            started = time.time()
            result = await sb.exec(
                "bash reproduce.sh 2>&1",
                timeout=max(self.remaining(), 1.0),
                workdir=SUBMISSION_PATH,
                output_limit=self.config.log_limit_bytes,
            )
            record.exit_code = result.exit_code
            record.timed_out = result.timed_out
            record.duration_s = result.duration_s
            record.log_tail = result.stdout[-_LOG_TAIL_BYTES:]
            usage = sb.disk_usage()
            record.disk_full = result.exit_code != 0 and (
                (usage is not None and usage.full) or "No space left on device" in record.log_tail
            )
            fast_failure = (
                not result.timed_out
                and result.exit_code != 0
                and not record.disk_full
                and result.duration_s <= self.config.salvage_window_s
            )
            time_left = self.remaining() - result.duration_s > 1.0
            retry = fast_failure and number <= self.config.salvage_retries and time_left
            if not retry:
                self.log_text = result.stdout + (result.stderr and "\n" + result.stderr)
                self.log_started = started
                self.meta.log_truncated = result.stdout_truncated
                phase = "download"
                got = await sb.download(SUBMISSION_PATH, host_out)
                self.meta.output_skipped = got.skipped
                self.meta.output_skipped_more = got.skipped_more
            return record, retry
        except SandboxError as exc:
            record.error = str(exc)
            if _host_disk_error(exc) is not None or _says_disk_full(str(exc)):
                if phase == "download":
                    self.host_disk_full = True
                    record.error = f"the host's disk is full: {exc}"
                elif phase == "upload":
                    record.disk_full = True
                    record.error = (
                        f"the submission does not fit in the sandbox's disk cap of "
                        f"{self.config.limits.disk_mb} MB (raise it with --disk): {exc}"
                    )
            return record, False
        finally:
            self.meta.attempts.append(record)
            if sb is not None:
                await sb.stop()

    async def run(self) -> ReproductionMetadata:
        with tempfile.TemporaryDirectory(prefix="paperbench-reproduce-") as tmp:
            staged = Path(tmp) / "submission"
            report: ExtractReport = await asyncio.to_thread(
                safe_extract, self.submission, staged, strict=self.config.strict_archive
            )
            self.meta.skipped_members = report.skipped
            self.meta.removed_dirs = await asyncio.to_thread(
                remove_dirs, staged, self.config.remove_dirs
            )
            before = await asyncio.to_thread(manifest, staged, self.config.hash_limit_bytes)
            script = staged / "reproduce.sh"
            if not script.is_file():
                self.meta.status = "no_reproduce_script"
                self.meta.error = "the submission has no reproduce.sh at its top level"
                await self._archive(staged)
                return self.meta
            crlf = b"\r\n" in await asyncio.to_thread(script.read_bytes)
            backend = await self.config.sandbox.build()
            self.meta.sandbox_backend = backend.name
            self.meta.isolation = backend.isolation_kind
            self.meta.isolation_reason = backend.isolation_reason
            self.meta.user = self.config.user
            try:
                image = await resolve_image(backend, self.config.image)
            except SandboxError as exc:
                self.meta.error = str(exc)
                return self.meta
            self.meta.sandbox_image = image
            spec = SandboxSpec(
                image=image,
                limits=self.config.limits,
                network=self.config.network,
                allow_networks=self.config.allow_networks,
                gpu=self.config.gpu,
                user=self.config.user,
                env=self.config.env,
                workdir=SUBMISSION_PATH,
                labels={**self.config.labels, "paperbench.stage": "reproduce"},
            )
            host_out = Path(tmp) / "executed"
            while True:
                _, retry = await self.attempt(backend, spec, staged, host_out)
                if not retry:
                    break
            final = self.meta.attempts[-1]
            self.meta.exit_code = final.exit_code
            self.meta.timed_out = final.timed_out
            self.meta.wall_time_s = final.duration_s
            if final.error is not None:
                self.meta.status = (
                    "host_error"
                    if self.host_disk_full
                    else "disk_full"
                    if final.disk_full
                    else "sandbox_error"
                )
                self.meta.error = final.error
                return self.meta
            self.meta.status = (
                "timed_out"
                if final.timed_out
                else "success"
                if final.exit_code == 0
                else "disk_full"
                if final.disk_full
                else "failed"
            )
            if self.meta.status == "disk_full":
                self._note(
                    f"the sandbox's disk cap of {self.config.limits.disk_mb} MB is full: "
                    "reproduce.sh could not write more (raise it with --disk)"
                )
            if crlf and self.meta.status != "success":
                self.meta.hints.append(CRLF_HINT)
                self._note(CRLF_HINT)
            after = await asyncio.to_thread(manifest, host_out, self.config.hash_limit_bytes)
            self.meta.changed_files = compare(before, after)
            await self._place_log(host_out)
            await self._archive(host_out)
            return self.meta

    def _note(self, line: str) -> None:
        """A line of paperbench's own at the end of reproduce.log."""
        self.log_text += "" if self.log_text.endswith("\n") or not self.log_text else "\n"
        self.log_text += f"[paperbench: {line}]\n"

    async def _place_log(self, folder: Path) -> None:
        """reproduce.log and its start time inside the executed submission, where PaperBench's
        judge reads them."""

        def write() -> None:
            # The folder holds what the sandbox left: whatever is at these names (a link, a
            # file) is removed first, never written through.
            write_file_beneath(folder, LOG_NAME, self.log_text.encode())
            started = int(self.log_started if self.log_started is not None else time.time())
            write_file_beneath(folder, CREATION_TIME_NAME, f"{started}\n".encode())

        await asyncio.to_thread(write)

    async def _archive(self, folder: Path) -> None:
        self.meta.files_left_out = await asyncio.to_thread(
            make_tar_gz,
            folder,
            self.out_dir / "executed.tar.gz",
            self.config.max_file_bytes,
            exclude_dirs=frozenset(self.config.remove_dirs),
            arc_prefix=ARCHIVE_TOP,
        )

    def finish(self) -> ReproductionMetadata:
        """Write reproduce.log and metadata.json (last: it marks completion).

        Raises:
            SandboxError: the host cannot take them (e.g. its disk is full), said in one line.
        """
        self.meta.finished_at = _now()
        self.meta.total_time_s = time.monotonic() - self.t0
        try:
            atomic_write_text(self.out_dir / LOG_NAME, self.log_text)
            atomic_write_text(self.out_dir / "metadata.json", self.meta.model_dump_json(indent=2))
        except OSError as exc:
            raise SandboxError(
                f"{self.out_dir}: cannot write the reproduction's results on the host "
                f"({exc.strerror}); free some space or pass another --out"
            ) from exc
        return self.meta


def _says_disk_full(message: str) -> bool:
    return "No space left on device" in message or "Disk quota exceeded" in message


async def reproduce_submission(
    submission: Path, out_dir: Path, config: ReproduceConfig | None = None
) -> ReproductionMetadata:
    """Reproduce ``submission`` into ``out_dir``; see the module docstring.

    A failing, timed-out or script-less submission is a result (its ``status``), not an error.
    A cancellation is recorded (``status: cancelled``) and re-raised.

    Raises:
        InputError: ``submission`` is missing or not a readable folder or archive.
        UnsafeArchiveError: the archive has unsafe members (under ``strict_archive``).
        SandboxUnavailableError: the sandbox backend asked for does not answer.
    """
    cfg = config or ReproduceConfig()
    submission = Path(submission)
    if not submission.exists():
        raise InputError("not found: give a folder or a .tar/.tar.gz/.tgz file", file=submission)
    if submission.is_file() and not os.access(submission, os.R_OK):
        raise InputError("cannot read the file", file=submission)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the output folder ({exc.strerror})", file=out) from None
    run = _Run(submission, out, cfg)
    try:
        await run.run()
    except (InputError, SandboxUnavailableError):
        raise  # nothing ran: no results to record
    except OSError as exc:
        disk = _host_disk_error(exc)
        if disk is None:
            run.meta.status, run.meta.error = "sandbox_error", f"{type(exc).__name__}: {exc}"
            run.finish()
            raise
        run.meta.status = "host_error"
        run.meta.error = f"writing the executed submission on the host failed: {disk.strerror}" + (
            f" ({disk.filename})" if disk.filename else ""
        )
        return run.finish()
    except asyncio.CancelledError:
        run.meta.status, run.meta.error = "cancelled", "the reproduction was cancelled"
        run.finish()
        raise
    except Exception as exc:
        run.meta.status, run.meta.error = "sandbox_error", f"{type(exc).__name__}: {exc}"
        run.finish()
        raise
    return run.finish()
