"""Run the submission's code in a child process and bring back what it returned.

The helper of check scripts (check leaves: ``paperbench.judge._checks``). A check's own process
(the *parent*, ``python3 /paperbench_checks/check_x.py``) passes or fails by its exit code, so
it never imports the submission: code running in the parent's process could end it with exit
code 0 (``os._exit(0)``) whatever it computed. Instead :func:`observe` runs a snippet of Python
in a child process, in ``/submission``, that calls the submission's functions on inputs the
parent sends, and the parent judges the values that come back::

    from _child import fail, observe

    CHILD = '''
    from calib.metrics import expected_calibration_error
    for label, case in inputs.items():
        report(label, expected_calibration_error, case["p"], case["y"], n_bins=case["n_bins"])
    '''
    seen = observe(CHILD, {"case 1": {"p": p, "y": y, "n_bins": 15}}, timeout=40)
    got = seen.number("case 1")  # a FAIL line and exit 1 unless the child reported a number
    if abs(got - want) > 1e-6:
        fail(f"case 1: ECE {got}, expected {want}")

In the child, ``inputs`` is the parent's ``inputs`` (numpy arrays come back as numpy arrays)
and ``report(label, fn, *args, **kwargs)`` calls ``fn`` and sends its value, or the exception it
raised, under ``label``. Values travel as JSON lines on a pipe of their own (numbers, strings,
lists, dicts, and numeric numpy arrays and scalars; anything else arrives as its ``repr``), so
the parent gets plain data, never an object of the submission's.

What holds, whatever the submission does in the child: nothing it does can make the parent exit
0 with a wrong value. Its exit code is never a verdict (exiting early only leaves labels
unreported, which fails them); what it prints goes to the child's own stdout and stderr, quoted
after a FAIL line and nowhere else; garbage, a label sent twice or more than ``limit`` bytes on
the result pipe fail every label; when the child has exited (or ``timeout`` passed) its process
group is killed and the pipes are closed, so a grandchild that writes later reaches nothing.
Before the first child starts, the parent (:func:`_seal`):

- makes itself not dumpable: the child cannot ptrace it or open its ``/proc`` files (memory,
  file descriptors, environment), so it cannot read the expected values or change the verdict;
- takes SIGINT back to its default action (no ``KeyboardInterrupt`` raised inside its checks:
  a signal from the child only ends it, with a non-zero code);
- removes the check's own folder and ``/submission`` from ``sys.path`` (the child can write
  there);
- inside a check's sandbox (``PAPERBENCH_CHECK_FILES``, set by the check runner, lists the
  check's files): deletes those files, so the child cannot read the reference implementation
  or the hidden cases from disk, and refuses to run (exit 126, ``check_error``) when its own
  exit code passes through a process the child could take over (a shell left waiting by a
  command such as ``python3 check.py; exit $?``: write the command as one ``python3 FILE``).

Limits: the child sees the inputs it is given (hidden inputs are hidden from the agent, not
from the code being tested); it can kill the parent (the check then ends with a signal's exit
code: 0 or ``check_error``, never 1) or make it wait until the check's timeout; output files
under ``/submission`` are the child's to change, so read them before calling :func:`observe`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

ROOT = "/submission"
"""Where the executed submission is inside a check's sandbox (the child's working folder)."""
FILES_ENV = "PAPERBENCH_CHECK_FILES"
"""Set by the check runner: a JSON list of the check's files in the sandbox, deleted before the
first child starts."""
LIMIT_BYTES = 8 << 20
"""Default cap on what the child may send on the result pipe."""
TAIL_BYTES = 4096
"""Bytes kept of the end of each of the child's stdout and stderr."""
QUOTE_CHARS = 1200
"""Characters of the child's stderr quoted after a FAIL line."""
SETUP_ERROR_EXIT = 126
"""The parent's exit code when the check is set up so that it cannot judge (``check_error``)."""
_DRAIN_S = 1.0
_PR_SET_DUMPABLE = 4
_NUMERIC_KINDS = "biufc"
_MAX_DEPTH = 64
_SOURCE = Path(__file__).read_text(encoding="utf-8") if "__file__" in globals() else ""
"""This module's text: what the child runs (``python3 -c``), read before the file is deleted."""
_sealed = False


def fail(msg: str) -> NoReturn:
    """Print ``FAIL: msg`` and exit 1 (the check scores 0)."""
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


# --------------------------------------------------------------------------- values on the wire


def _encode(value: Any, depth: int = 0) -> Any:
    """A JSON-ready form of ``value``: numpy arrays as ``{"__ndarray__": list, "dtype": str}``,
    anything that is not plain data as ``{"__repr__": str}``."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"nested more than {_MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v, depth + 1) for k, v in value.items()}
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(value, np.generic):
            return _encode(value.item(), depth + 1)
        with contextlib.suppress(Exception):
            array = np.asarray(value)
            if array.dtype.kind in _NUMERIC_KINDS:
                return {"__ndarray__": array.tolist(), "dtype": array.dtype.str}
    return {"__repr__": repr(value)[:200]}


def _decode(value: Any) -> Any:
    """The inverse of :func:`_encode` (arrays need numpy; without it they stay dicts)."""
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__ndarray__", "dtype"}:
        try:
            import numpy as np

            dtype = np.dtype(value["dtype"])
            if dtype.kind in _NUMERIC_KINDS and dtype.itemsize <= 16:
                return np.array(value["__ndarray__"], dtype=dtype)
        except (ImportError, TypeError, ValueError, OverflowError):
            pass
        return value
    return {k: _decode(v) for k, v in value.items()}


def as_array(value: Any, what: str) -> Any:
    """``value`` as a float numpy array, or a FAIL line naming ``what``."""
    import numpy as np

    if isinstance(value, dict) and "__repr__" in value:
        fail(f"{what} is not numbers: {value['__repr__']}")
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError) as exc:
        fail(f"{what} is not an array of numbers ({type(exc).__name__}: {exc})"[:500])


# --------------------------------------------------------------------------- what came back


@dataclass
class Observation:
    """What one child reported, and how it ended. Every accessor fails the check (a FAIL line,
    exit 1) when the value is not there."""

    values: dict[str, Any] = field(default_factory=dict)
    raised: dict[str, str] = field(default_factory=dict)
    setup_error: str | None = None
    problem: str | None = None
    """Why nothing the child sent can be used (garbage, a label twice, too much), else None."""
    ended: str = ""
    """How the child ended, in words."""
    stdout: str = ""
    stderr: str = ""

    def _fail(self, msg: str) -> NoReturn:
        tail = self.stderr.rstrip()[-QUOTE_CHARS:]
        if tail:
            msg += f"\n--- the submission's stderr (end) ---\n{tail}"
        fail(msg)

    def value(self, label: str) -> Any:
        """The value reported under ``label`` (plain data; numpy arrays as arrays)."""
        if self.problem is not None:
            self._fail(f"{label}: {self.problem}; {self.ended}")
        if label in self.raised:
            self._fail(f"{label}: the submission's code raised {self.raised[label]}")
        if label in self.values:
            return self.values[label]
        if self.setup_error is not None:
            self._fail(f"the submission's code could not run: {self.setup_error}")
        self._fail(f"{label}: the submission's process reported nothing for it; {self.ended}")

    def number(self, label: str) -> float:
        """The value under ``label`` as a float (a number, or an array of one element)."""
        got = as_array(self.value(label), label)
        if got.size != 1:
            self._fail(f"{label}: expected one number, got an array of shape {got.shape}")
        return float(got.reshape(-1)[0])

    def array(self, label: str) -> Any:
        """The value under ``label`` as a float numpy array."""
        return as_array(self.value(label), label)


def _parse(channel: bytes, out: Observation) -> None:
    """Fill ``out`` from the result pipe's bytes (an unfinished last line is dropped)."""
    lines = channel.split(b"\n")[:-1]
    for number, line in enumerate(lines, 1):
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            msg = None
        if not isinstance(msg, dict):
            out.problem = f"line {number} of the result pipe is not a result"
            return
        keys = set(msg)
        if keys == {"setup"} and isinstance(msg["setup"], str):
            out.setup_error = msg["setup"]
            continue
        label = msg.get("label")
        if not isinstance(label, str) or keys not in ({"label", "value"}, {"label", "raised"}):
            out.problem = f"line {number} of the result pipe is not a result"
            return
        if label in out.values or label in out.raised:
            out.problem = f"the result pipe carried {label!r} twice"
            return
        if "raised" in msg:
            out.raised[label] = str(msg["raised"])[:500]
            continue
        try:
            out.values[label] = _decode(msg["value"])
        except RecursionError:
            out.problem = f"line {number} of the result pipe is nested too deep"
            return


# --------------------------------------------------------------------------- the parent


def _setup_error(msg: str) -> NoReturn:
    """The check cannot judge as it is set up: say so and exit 126 (``check_error``)."""
    print(f"check setup error: {msg}", flush=True)
    sys.exit(SETUP_ERROR_EXIT)


def _remove_check_files(listed: str) -> None:
    """Delete the files the check runner listed (a JSON list) and the bytecode beside them."""
    try:
        paths = [Path(name) for name in json.loads(listed)]
    except (ValueError, TypeError):
        _setup_error(f"{FILES_ENV} is not a JSON list of paths")
    for path in paths:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            _setup_error(f"cannot delete the check file {path} ({exc.strerror})")
        shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)


def _exit_status_is_exposed() -> bool:
    """Whether this process's parent is one the child could take over (ptrace it, write its
    memory): a shell of the same user left waiting, through which our exit code passes."""
    parent = os.getppid()
    if parent <= 0:  # outside this pid namespace (docker exec)
        return False
    try:
        fd = os.open(f"/proc/{parent}/mem", os.O_RDONLY)
    except OSError:
        return False
    os.close(fd)
    return True


def _seal() -> None:
    """What the parent does once, before the first child (see the module docstring)."""
    global _sealed
    if _sealed:
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
    listed = os.environ.pop(FILES_ENV, None)
    if listed is not None:  # in a check's sandbox
        _remove_check_files(listed)
        if _exit_status_is_exposed():
            _setup_error(
                "the check's exit code passes through a process the submission could take "
                "over (a shell waiting for it); make the command one `python3 /path/check.py`"
            )
    here = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    unsafe = {"", ".", here, os.path.dirname(os.path.abspath(__file__)), os.getcwd(), ROOT}
    sys.path[:] = [p for p in sys.path if p not in unsafe and not p.startswith(ROOT + "/")]
    _sealed = True


class _Tail:
    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        del self.data[:-TAIL_BYTES]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _read(fd: int) -> bytes | None:
    """Bytes waiting on ``fd``; b"" at its end; None when nothing waits."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None
    except OSError as exc:
        if exc.errno == errno.EAGAIN:
            return None
        return b""


def _collect(
    proc: subprocess.Popen[bytes], channel: int, payload: bytes, timeout: float, limit: int
) -> tuple[bytes, _Tail, _Tail, str]:
    """Feed ``payload`` to the child and read its pipes until it ends (or ``timeout``); then
    kill its process group. Returns the result pipe's bytes, stdout and stderr tails, and how
    the child ended."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    tails = {proc.stdout.fileno(): _Tail(), proc.stderr.fileno(): _Tail()}
    results = bytearray()
    sel = selectors.DefaultSelector()
    for fd in (*tails, channel, proc.stdin.fileno()):
        os.set_blocking(fd, False)
    for fd in (*tails, channel):
        sel.register(fd, selectors.EVENT_READ)
    stdin: IO[bytes] | None = proc.stdin
    sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
    view = memoryview(payload)
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    ended = ""
    while True:
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        now = time.monotonic()
        if exited_at is None and now >= deadline:
            ended = f"it did not finish within {timeout:g} s and was killed"
            break
        if exited_at is not None and now >= min(deadline, exited_at + _DRAIN_S):
            break
        wait = 0.0 if exited_at is not None else min(0.05, deadline - now)
        got_any = False
        for key, _ in sel.select(wait):
            fd = int(key.fd)
            if stdin is not None and fd == stdin.fileno():
                try:
                    view = view[os.write(fd, view[: 1 << 16]) :]
                except BlockingIOError:
                    continue
                except OSError:
                    view = view[:0]
                if not view:
                    sel.unregister(fd)
                    stdin.close()
                    stdin = None
                continue
            chunk = _read(fd)
            if chunk is None:
                continue
            if not chunk:
                sel.unregister(fd)
                continue
            got_any = True
            if fd == channel:
                results += chunk
                if len(results) > limit:
                    ended = f"it sent more than {limit} bytes of results and was killed"
                    break
            else:
                tails[fd].add(chunk)
        if ended or (exited_at is not None and (not got_any or not sel.get_map())):
            break
    sel.close()
    _kill(proc)
    if stdin is not None:
        with contextlib.suppress(OSError):
            stdin.close()
    if not ended:
        code = proc.returncode
        ended = (
            f"it was killed by signal {-code}"
            if code < 0
            else f"its process exited with code {code}"
        )
    out, err = tails.values()
    return bytes(results), out, err, ended


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (and the child, should it have left it); reap it."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


def observe(
    code: str,
    inputs: Mapping[str, Any],
    *,
    timeout: float = 30.0,
    root: str | None = None,
    limit: int = LIMIT_BYTES,
) -> Observation:
    """Run ``code`` in a child process in ``root`` (``/submission``, else the working folder)
    with ``inputs`` and ``report``; return what it reported. See the module docstring."""
    _seal()
    where = root or (ROOT if os.path.isdir(ROOT) else os.getcwd())
    payload = json.dumps({"code": code, "inputs": _encode(dict(inputs))}).encode()
    read_end, write_end = os.pipe()
    flags = ["-P"] if sys.version_info >= (3, 11) else []
    try:
        proc = subprocess.Popen(
            [sys.executable, *flags, "-c", _SOURCE, "--child", str(write_end), where],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_end,),
            cwd=where,
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    try:
        results, out, err, ended = _collect(proc, read_end, payload, timeout, limit)
    finally:
        os.close(read_end)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    seen = Observation(ended=ended, stdout=out.text(), stderr=err.text())
    if len(results) > limit:
        seen.problem = f"more than {limit} bytes came back on the result pipe"
    else:
        _parse(results, seen)
    return seen


# --------------------------------------------------------------------------- the child


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _child_main(channel_fd: int, root: str) -> None:
    """The child: read the code and inputs from stdin, run the code with ``report``."""
    # the memory cap's OOM killer takes the child before the parent (a nicety: the child may
    # set it back to 0; a killed parent is check_error, never a pass)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
    channel = os.fdopen(channel_fd, "w", encoding="utf-8")

    def emit(msg: dict[str, Any]) -> None:
        channel.write(json.dumps(msg) + "\n")
        channel.flush()

    def report(label: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # SystemExit too: the submission's, not ours
            emit({"label": label, "raised": _describe(exc)})
            return None
        try:
            encoded = _encode(value)
        except Exception as exc:
            emit({"label": label, "raised": f"its value cannot be sent: {_describe(exc)}"})
            return None
        emit({"label": label, "value": encoded})
        return value

    payload = json.loads(sys.stdin.buffer.read())
    sys.path.insert(0, root)
    namespace = {"__name__": "__check_child__", "report": report}
    try:
        namespace["inputs"] = _decode(payload["inputs"])
        exec(compile(payload["code"], "<check child>", "exec"), namespace)
    except BaseException as exc:
        emit({"setup": _describe(exc)})
        import traceback

        traceback.print_exc()


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    _child_main(int(sys.argv[2]), sys.argv[3])
