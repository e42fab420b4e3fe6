"""Small file helpers shared by every stage: atomic writes and JSON reads with clear errors."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from paperbench.errors import InputError


def json_path(loc: Sequence[str | int]) -> str:
    """Render a location such as ``("sub_tasks", 3, "weight")`` as ``$.sub_tasks[3].weight``;
    a key that is not a plain name is quoted: ``$.check.files["/x/c.py"]``."""
    out = "$"
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}"
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


@contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` only once it is completely written and synced
    (a temporary file in the same folder, renamed over ``path``); removed on any error."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    with atomic_open(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def read_text(path: str | Path) -> str:
    """Read a UTF-8 text file, turning a missing file or bad encoding into one-line errors."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", file=p) from None
    except IsADirectoryError:
        raise InputError("expected a file, found a directory", file=p) from None
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", file=p) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})", file=p
        ) from None


def parse_json(text: str, *, file: str | Path) -> Any:
    """Parse JSON text, reporting syntax errors and excessive nesting as one line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", file=file
        ) from None
    except RecursionError:
        raise InputError(
            "JSON nesting is too deep to parse (over ~490 levels of nested objects)", file=file
        ) from None


def read_json(path: str | Path) -> Any:
    return parse_json(read_text(path), file=path)
