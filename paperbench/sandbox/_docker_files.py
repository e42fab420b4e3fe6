"""File transfer helpers of the Docker backend: tar streams in and out of containers."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import posixpath
import queue
import shutil
import socket
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from paperbench._console import plural
from paperbench._io import atomic_open
from paperbench.errors import SandboxError
from paperbench.sandbox._base import DEFAULT_OUTPUT_LIMIT, read_ca_bundle
from paperbench.sandbox._tree import (
    DEFAULT_LIMITS,
    ExtractReport,
    TreeLimits,
    safe_extract,
)
from paperbench.sandbox._tree_tar import (
    repack,
)

CA_PATH = "/etc/ssl/certs/ca-certificates.crt"


def docker_error(exc: Exception, what: str) -> SandboxError:
    explanation = getattr(exc, "explanation", None) or str(exc)
    return SandboxError(f"{what}: {explanation}".replace("\n", " "))


class DockerFiles:
    """upload, download, read_file, write_file, snapshot: tar streams through the engine."""

    api: Any
    id: str

    read_only_root = False
    """The root filesystem is read-only: archives go into a writable folder (a volume)."""
    writable_dirs: tuple[str, ...] = ()
    """The folders that stay writable under a read-only root."""
    owner: tuple[int, int] = (0, 0)
    """The uid and gid of what is uploaded or written (root, or the user commands run as)."""

    def _put_at(self, target: str) -> tuple[str, str]:
        """Where to extract an archive holding ``target``, and the member name in it."""
        if self.read_only_root:
            for top in sorted(self.writable_dirs, key=len, reverse=True):
                if target == top:
                    return top, "."  # a folder's contents into the writable folder itself
                if target.startswith(top.rstrip("/") + "/"):
                    return top, target[len(top.rstrip("/")) + 1 :]
        return "/", target.lstrip("/")

    def _cid(self) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ files

    async def upload(self, src: Path, dest: str) -> None:
        cid = self._cid()
        src = Path(src)
        target = sandbox_path(dest)
        at, arcname = self._put_at(target)
        if not src.exists():
            raise SandboxError(f"upload: {src} does not exist")

        def put() -> None:
            with tempfile.TemporaryFile() as buf:
                with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    tar.add(str(src), arcname=arcname, filter=owned_by(*self.owner))
                buf.seek(0)
                self.api.put_archive(cid, at, buf)

        try:
            await asyncio.to_thread(put)
        except Exception as exc:
            raise docker_error(exc, f"upload to {dest} in sandbox {self.id}") from exc

    async def write_file(self, path: str, data: bytes) -> None:
        cid = self._cid()
        target = sandbox_path(path)
        at, arcname = self._put_at(target)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(time.time())
            tar.addfile(owned_by(*self.owner)(info), io.BytesIO(data))
        try:
            await asyncio.to_thread(self.api.put_archive, cid, at, buf.getvalue())
        except Exception as exc:
            raise docker_error(exc, f"write {path} in sandbox {self.id}") from exc

    async def read_file(self, path: str, *, max_bytes: int = DEFAULT_OUTPUT_LIMIT) -> bytes:
        cid = self._cid()
        target = sandbox_path(path)

        def read(p: str, hops: int) -> bytes:
            with self._archive(cid, p) as (stream, stat):
                return checked(p, hops, stream, stat)

        def checked(p: str, hops: int, stream: Iterator[bytes], stat: dict[str, Any]) -> bytes:
            mode = int(stat.get("mode", 0))
            if mode & (1 << 31):
                raise SandboxError(f"{path} in sandbox {self.id} is a folder, not a file")
            if stat.get("linkTarget") and hops < 8:
                link = str(stat["linkTarget"])
                return read(
                    posixpath.normpath(posixpath.join(posixpath.dirname(p), link)), hops + 1
                )
            if int(stat.get("size", 0)) > max_bytes:
                raise SandboxError(
                    f"{path} in sandbox {self.id} is {plural(int(stat['size']), 'byte')}, over "
                    f"the limit of {max_bytes}"
                )
            raw = bytearray()
            for chunk in stream:  # the file may have grown since its stat: read a capped part
                raw += chunk
                if len(raw) > max_bytes + (1 << 20):
                    break
            with tarfile.open(fileobj=io.BytesIO(bytes(raw))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member is not None else None
                if handle is None:
                    raise SandboxError(f"{path} in sandbox {self.id} is not a regular file")
                return handle.read(max_bytes + 1)[: max_bytes + 1]

        return await asyncio.to_thread(read, target, 0)

    @contextlib.contextmanager
    def _archive(self, cid: str, path: str) -> Iterator[tuple[Iterator[bytes], dict[str, Any]]]:
        """GET the tar of ``path``: its chunks and its stat; the connection closes after.

        On a unix-socket engine the response is read straight from the socket: the SDK's HTTP
        stack reads Docker's small chunks at ~45 MB/s, this at the speed of ``docker cp``.
        """
        from docker.utils import utils as docker_utils

        sock_path = getattr(getattr(self.api, "_custom_adapter", None), "socket_path", None)
        if sock_path and self.api.base_url == "http+docker://localhost":
            target = f"/v{self.api._version}/containers/{cid}/archive?" + urlencode({"path": path})
            try:
                status, headers, body = unix_get(sock_path, target)
            except OSError as exc:
                raise docker_error(exc, f"read {path} in sandbox {self.id}") from exc
            try:
                if status == 404:
                    raise SandboxError(f"{path} does not exist in sandbox {self.id}")
                if status != 200:
                    text = b"".join(body)[:2000].decode("utf-8", errors="replace")
                    with contextlib.suppress(ValueError, AttributeError):
                        text = json.loads(text).get("message", text)
                    raise SandboxError(f"read {path} in sandbox {self.id}: {text.strip()}")
                stat = docker_utils.decode_json_header(
                    headers.get("x-docker-container-path-stat") or "e30="
                )
                yield iter(body), stat
            finally:
                body.close()
            return
        yield from self._archive_sdk(cid, path)

    def _archive_sdk(self, cid: str, path: str) -> Iterator[tuple[Iterator[bytes], dict[str, Any]]]:
        from docker.errors import NotFound
        from docker.utils import utils as docker_utils

        try:
            res = self.api._get(
                self.api._url("/containers/{0}/archive", cid), params={"path": path}, stream=True
            )
        except Exception as exc:
            raise docker_error(exc, f"read {path} in sandbox {self.id}") from exc
        try:
            try:
                self.api._raise_for_status(res)
            except NotFound as exc:
                raise SandboxError(f"{path} does not exist in sandbox {self.id}") from exc
            except Exception as exc:
                raise docker_error(exc, f"read {path} in sandbox {self.id}") from exc
            stat = docker_utils.decode_json_header(
                res.headers.get("x-docker-container-path-stat") or "e30="
            )
            yield res.iter_content(chunk_size=1 << 20), stat
        finally:
            res.close()

    async def download(
        self, src: str, dest: Path, *, limits: TreeLimits = DEFAULT_LIMITS
    ) -> ExtractReport:
        cid = self._cid()
        source = sandbox_path(src)
        dest = Path(dest)

        def fetch() -> ExtractReport:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pb-download-") as tmp:
                with self._archive(cid, source) as (stream, _):
                    reader = io.BufferedReader(StreamReader(stream), 1 << 20)
                    report = safe_extract(reader, tmp, strip_top=False, limits=limits)
                got = Path(tmp) / posixpath.basename(source.rstrip("/") or "root")
                if not got.exists() and not got.is_symlink():
                    raise SandboxError(f"download of {src} from sandbox {self.id} was empty")
                move_into_place(got, dest)
            report.dest = dest
            top = got.name + "/"  # notes named relative to the folder, as on every backend
            for note in report.skipped:
                note.name = note.name.removeprefix(top)
            return report

        return await asyncio.to_thread(fetch)

    async def snapshot(self, path: str, dest: Path) -> None:
        """The archive holds the folder's contents relative to it (no top folder), taken by the
        engine inside the container and written by the rule of :mod:`paperbench.sandbox._tree`
        (links checked against the whole tree, special files left out)."""
        cid = self._cid()
        source = sandbox_path(path)
        dest = Path(dest)

        def snap() -> None:
            with self._archive(cid, source) as (stream, stat):
                if not int(stat.get("mode", 0)) & (1 << 31):
                    raise SandboxError(f"snapshot: {path} in sandbox {self.id} is not a folder")
                with atomic_open(dest) as raw:
                    gz = GzipPipe(raw)
                    try:
                        reader = io.BufferedReader(StreamReader(stream), 1 << 20)
                        repack(reader, gz, drop_top=True, compress=False)  # type: ignore[arg-type]
                    finally:
                        gz.close()

        await asyncio.to_thread(snap)

    async def install_ca_bundle(self, bundle: Path) -> None:
        """Append the PEM certificates in host file ``bundle`` to the container's trust store."""
        extra = read_ca_bundle(bundle)
        try:
            current = await self.read_file(CA_PATH, max_bytes=64 * 1024 * 1024)
        except SandboxError:
            current = b""
        if extra not in current:
            await self.write_file(CA_PATH, current.rstrip(b"\n") + b"\n" + extra)


def sandbox_path(path: str) -> str:
    if not path.startswith("/"):
        raise SandboxError(f"sandbox paths are absolute POSIX paths, got {path!r}")
    norm = posixpath.normpath(path)
    if norm == "/":
        raise SandboxError("the sandbox root itself cannot be the target")
    return norm


def owned_by(uid: int, gid: int) -> Callable[[tarfile.TarInfo], tarfile.TarInfo]:
    """A tar filter giving each member to ``uid`` and ``gid`` (by number)."""

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid = uid, gid
        info.uname = info.gname = "root" if (uid, gid) == (0, 0) else ""
        return info

    return own


def move_into_place(got: Path, dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink() and got.is_dir():
        shutil.copytree(got, dest, symlinks=True, dirs_exist_ok=True)
        return
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    os.replace(got, dest)


class StreamReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (the SDK's archive stream)."""

    def __init__(self, chunks: Any) -> None:
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


class GzipPipe:
    """A gzip writer that compresses in its own thread (zlib releases the GIL), so reading and
    re-tarring overlap with compression. Writes are batched into 1 MB blocks."""

    def __init__(self, raw: Any, level: int = 1, block: int = 1 << 20) -> None:
        self.raw = raw
        self.block = block
        self.buf = bytearray()
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(level,), daemon=True)
        self.thread.start()

    def _run(self, level: int) -> None:
        comp = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: gzip header and trailer
        try:
            while (chunk := self.queue.get()) is not None:
                self.raw.write(comp.compress(chunk))
            self.raw.write(comp.flush())
        except BaseException as exc:  # surfaced by close()
            self.error = exc
            while self.queue.get() is not None:  # drain so the writer never blocks
                pass

    def write(self, data: bytes) -> int:
        self.buf += data
        if len(self.buf) >= self.block:
            self.queue.put(bytes(self.buf))
            self.buf.clear()
        return len(data)

    def close(self) -> None:
        if self.buf:
            self.queue.put(bytes(self.buf))
            self.buf.clear()
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


class Body:
    """The chunks of an HTTP body; ``close()`` closes the connection, read or not."""

    def __init__(self, chunks: Generator[bytes, None, None], sock: socket.socket) -> None:
        self.chunks = chunks
        self.sock = sock

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks

    def close(self) -> None:
        self.chunks.close()
        self.sock.close()


def unix_get(
    sock_path: str, target: str, *, bufsize: int = 1 << 20, timeout: float = 600.0
) -> tuple[int, dict[str, str], Body]:
    """A plain HTTP/1.1 GET over a unix socket: status, headers, and the body's chunks."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(sock_path)
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n".encode())
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("the engine closed the connection before its answer")
            buf += data
    except BaseException:
        sock.close()
        raise
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"

    def body(buf: bytearray) -> Generator[bytes, None, None]:
        try:
            if not chunked:
                if buf:
                    yield bytes(buf)
                while data := sock.recv(bufsize):
                    yield data
                return
            while True:
                while b"\r\n" not in buf[:32]:
                    data = sock.recv(bufsize)
                    if not data:
                        raise ConnectionError("the engine's answer was cut short")
                    buf += data
                end = buf.index(b"\r\n")
                size = int(bytes(buf[:end]).split(b";")[0], 16)
                del buf[: end + 2]
                if size == 0:
                    return
                while len(buf) < size + 2:
                    data = sock.recv(max(bufsize, size + 2 - len(buf)))
                    if not data:
                        raise ConnectionError("the engine's answer was cut short")
                    buf += data
                yield bytes(buf[:size])
                del buf[: size + 2]
        finally:
            sock.close()

    return status, headers, Body(body(bytearray(rest)), sock)
