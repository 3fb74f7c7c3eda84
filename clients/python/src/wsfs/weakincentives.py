"""A wsfs session as a weakincentives ``Filesystem``.

weakincentives (``pip install 'wsfs[weakincentives]'``, Python 3.12+) gives
its tools one ``Filesystem`` protocol; :class:`WsfsFilesystem` implements
it, and ``SnapshotableFilesystem``, over one wsfs session, so that an agent's
workspace lives on a wsfs server (shared with other agents, the CLI, MCP,
a mount)::

    import wsfs
    from wsfs.weakincentives import WsfsFilesystem

    client = wsfs.Client("127.0.0.1:50051")
    fs = WsfsFilesystem(client.create_session())   # instead of HostFilesystem(...)

Every member behaves as weakincentives' ``HostFilesystem`` does: the same
results (paths relative to the root, ``read`` without its last newline),
the same exceptions and messages (``FileNotFoundError(path)``,
``PermissionError("Path escapes root directory: ...")``, ...), the same
limits (32 MB convenience writes, 16 segments of 80 characters, 1,000 grep
matches). Where wsfs itself answers differently it is said here:

- ``glob`` and ``grep``'s ``glob`` use weakincentives' own ``fnmatch``
  matching; ``grep`` patterns run on the server (Rust regex syntax, which
  covers Python's common syntax; a pattern either refuses is a
  ``ValueError``), and match offsets are Python string offsets.
- ``open_read`` streams one consistent version of the file (ReadBytes);
  ``open_write`` streams WriteBytes: the file appears whole at ``close()``
  or, on an exception in the ``with`` block, not at all (append included).
- ``snapshot`` and ``restore`` are the session's own snapshots (Snapshot,
  Restore: the Sessions service, so on a server with tokens the client's
  token must be the admin token); ``commit_ref`` is the snapshot id.
"""

from __future__ import annotations

import queue
import re
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Optional

try:
    from weakincentives.errors import SnapshotRestoreError
    from weakincentives.filesystem import (
        DEFAULT_CHUNK_SIZE,
        DEFAULT_READ_LIMIT,
        MAX_GREP_MATCHES,
        MAX_WRITE_BYTES,
        MAX_WRITE_LENGTH,
        READ_ENTIRE_FILE,
        DefaultTextReader,
        FileEntry,
        FileStat,
        FilesystemSnapshot,
        GlobMatch,
        GrepMatch,
        ReadBytesResult,
        ReadResult,
        TextReader,
        WriteResult,
        glob_match,
        normalize_path,
        validate_path,
    )
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "wsfs.weakincentives needs the weakincentives package (Python 3.12 or newer): "
        "pip install 'wsfs[weakincentives]'"
    ) from e

from . import _common as c
from .client import ByteStream, Session
from .errors import (
    AlreadyExists,
    DirectoryNotEmpty,
    FileNotFound,
    InvalidArgument,
    InvalidPath,
    InvalidPattern,
    IsADirectory,
    NotADirectory,
    NotText,
    PathEscapesRoot,
    PermissionDenied,
    ReadOnly,
    TooLarge,
    Unauthenticated,
    WsfsError,
)
from .types import FileKind

__all__ = ["WsfsFilesystem", "WsfsByteReader", "WsfsByteWriter"]

WriteModeName = Literal["create", "overwrite", "append"]

#: The most matches one server Grep is asked for when a ``glob`` filter
#: (applied here) may drop some of them: the server's own cap.
_GREP_SERVER_CAP = 100_000

_READ_ONLY = "Filesystem is read-only"


def _shown(path: str) -> str:
    """A path as results show it: relative to the root, the root as ``/``."""
    return normalize_path(path) or "/"


def _parent_of(path: str) -> str:
    return "/" + normalize_path(path).rpartition("/")[0]


def _translate(e: WsfsError, path: str) -> Exception:
    """The exception weakincentives' spec names for wsfs error ``e``."""
    if isinstance(e, FileNotFound):
        return FileNotFoundError(path)
    if isinstance(e, IsADirectory):
        return IsADirectoryError(f"Is a directory: {path}")
    if isinstance(e, NotADirectory):
        return NotADirectoryError(f"Not a directory: {path}")
    if isinstance(e, DirectoryNotEmpty):
        return IsADirectoryError(f"Directory not empty: {path}")
    if isinstance(e, AlreadyExists):
        return FileExistsError(f"File already exists: {path}")
    if isinstance(e, PathEscapesRoot):
        return PermissionError(f"Path escapes root directory: {path}")
    if isinstance(e, ReadOnly):
        return PermissionError(_READ_ONLY)
    if isinstance(e, (PermissionDenied, Unauthenticated)):
        return PermissionError(e.message)
    if isinstance(e, NotText):
        return ValueError(
            f"Cannot read '{path}' as text: file contains binary content that "
            "cannot be decoded as utf-8. Use read_bytes() for binary files."
        )
    if isinstance(e, (InvalidPath, InvalidArgument, TooLarge, InvalidPattern)):
        return ValueError(e.message)
    return RuntimeError(f"wsfs: {e.message}")


@contextmanager
def _mapped(path: str, **overrides: Any) -> Iterator[None]:
    """Raises wsfs errors as the spec's exceptions; ``overrides`` maps a
    wsfs error class name to a replacement exception."""
    try:
        yield
    except WsfsError as e:
        replacement = overrides.get(type(e).__name__)
        raise (replacement if replacement is not None else _translate(e, path)) from e


def _grep_match(m: Any, regex: "re.Pattern[str]") -> GrepMatch:
    """A server match with Python's offsets: where the pattern matches the
    line in Python too, else the server's byte offsets as characters."""
    found = regex.search(m.line)
    if found is not None:
        start, end = found.start(), found.end()
    else:
        raw = m.line.encode("utf-8")
        start = len(raw[: m.match_start].decode("utf-8", errors="replace"))
        end = start + len(raw[m.match_start : m.match_end].decode("utf-8", errors="replace"))
    return GrepMatch(
        path=m.path,
        line_number=m.line_number,
        line_content=m.line,
        match_start=start,
        match_end=end,
    )


class WsfsByteReader:
    """A ``ByteReader`` over one file of a session: streamed from the
    current position (one ReadBytes stream, reopened after a ``seek``),
    holding at most one chunk beyond what was asked for."""

    def __init__(self, session: Session, path: str, shown: str, size: int) -> None:
        self._session = session
        self._raw = path
        self._path = shown
        self._size = size
        self._position = 0
        self._stream: Optional[ByteStream] = None
        self._chunks: Optional[Iterator[bytes]] = None
        self._buffer = b""
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    @property
    def size(self) -> int:
        return self._size

    @property
    def position(self) -> int:
        self._check_closed()
        return self._position

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_closed(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on closed file")

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = self._chunks = None
        self._buffer = b""

    def _next_chunk(self) -> bytes:
        if self._chunks is None:
            if self._position >= self._size:
                return b""
            with _mapped(self._path):
                self._stream = self._session.stream_bytes(self._raw, self._position)
            self._chunks = iter(self._stream)
        with _mapped(self._path):
            return next(self._chunks, b"")

    def read(self, size: int = -1) -> bytes:
        self._check_closed()
        parts = [self._buffer]
        have = len(self._buffer)
        while size < 0 or have < size:
            chunk = self._next_chunk()
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        if size >= 0:
            data, self._buffer = data[:size], data[size:]
        else:
            self._buffer = b""
        self._position += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self._check_closed()
        if whence not in {0, 1, 2}:
            raise ValueError(f"Invalid whence value: {whence}")
        base = {0: 0, 1: self._position, 2: self._size}[whence]
        target = base + offset
        if target < 0:
            raise OSError(22, "Invalid argument")
        if target != self._position:
            self._drop_stream()
            self._position = target
        return target

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks(DEFAULT_CHUNK_SIZE)

    def chunks(self, size: int = DEFAULT_CHUNK_SIZE) -> Iterator[bytes]:
        self._check_closed()
        while True:
            chunk = self.read(size)
            if not chunk:
                break
            yield chunk

    def __enter__(self) -> "WsfsByteReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._drop_stream()
            self._closed = True


class _Aborted(Exception):
    """Ends an upload so that the server discards it."""


class WsfsByteWriter:
    """A ``ByteWriter`` streaming into one file (WriteBytes): chunks go to
    the server as they are written, at most a few held in between; the
    file appears whole at :meth:`close`, or not at all when the ``with``
    block raises."""

    #: Chunks queued for the upload before ``write`` waits.
    _QUEUED_CHUNKS = 4

    def __init__(
        self,
        session: Session,
        path: str,
        shown: str,
        *,
        mode: WriteModeName,
        create_parents: bool,
    ) -> None:
        self._path = shown
        self._raw = path
        self._bytes_written = 0
        self._closed = False
        self._queue: "queue.Queue[Any]" = queue.Queue(self._QUEUED_CHUNKS)
        self._failure: list[BaseException] = []
        self._upload = threading.Thread(
            target=self._run,
            args=(session, path, mode, create_parents),
            name=f"wsfs-upload {shown}",
            daemon=True,
        )
        self._upload.start()

    def _chunks(self) -> Iterator[bytes]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, _Aborted):
                raise item
            yield item

    def _run(self, session: Session, path: str, mode: str, create_parents: bool) -> None:
        try:
            session.write(path, self._chunks(), mode=mode, create_parents=create_parents)
        except BaseException as e:  # reported by close()
            self._failure.append(e)
            # Unblock a writer waiting on a full queue.
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    @property
    def path(self) -> str:
        return self._path

    @property
    def bytes_written(self) -> int:
        return self._bytes_written

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_closed(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on closed file")

    def _put(self, item: Any) -> None:
        while self._upload.is_alive():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure:
            failure = self._failure[0]
            if isinstance(failure, WsfsError):
                raise _translate(failure, self._path) from failure
            raise failure

    def write(self, data: bytes) -> int:
        self._check_closed()
        for chunk in c.split(bytes(data)):
            self._put(chunk)
        self._bytes_written += len(data)
        return len(data)

    def write_all(self, chunks: Iterable[bytes]) -> int:
        self._check_closed()
        total = 0
        for chunk in chunks:
            total += self.write(chunk)
        return total

    def __enter__(self) -> "WsfsByteWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._abort()
        else:
            self.close()

    def _abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._put(_Aborted())
        self._upload.join()

    def close(self) -> None:
        """Commits the file: it appears whole now, or the upload's error
        is raised and nothing changed."""
        if self._closed:
            return
        self._closed = True
        self._put(None)
        self._upload.join()
        self._raise_failure()


class WsfsFilesystem:
    """weakincentives' ``Filesystem`` and ``SnapshotableFilesystem`` over
    one wsfs session (a :class:`wsfs.Session`). ``read_only=True`` makes a
    read-only view of a writable session; by default it is read-only when
    the session is. Like the spec's backends it is not thread-safe: one per
    agent session."""

    def __init__(self, session: Session, *, read_only: Optional[bool] = None) -> None:
        self._session = session
        if read_only is None:
            info = session.info if session.info is not None else session.get_info()
            read_only = info.read_only
        self._read_only = bool(read_only)

    @classmethod
    def connect(cls, url: str, session_id: str, *, token: Optional[str] = None) -> "WsfsFilesystem":
        """The filesystem of session ``session_id`` on the server at ``url``."""
        from .client import Client

        return cls(Client(url, token=token).session(session_id))

    @property
    def session(self) -> Session:
        return self._session

    # --- Metadata ---

    @property
    def root(self) -> str:
        return "/"

    @property
    def read_only(self) -> bool:
        return self._read_only

    # --- Reading ---

    def read(
        self,
        path: str,
        *,
        offset: int = 0,
        limit: Optional[int] = None,
        encoding: str = "utf-8",
    ) -> ReadResult:
        if encoding != "utf-8":
            raise ValueError(f"Only 'utf-8' encoding is supported, got: {encoding}")
        want = (
            None if limit == READ_ENTIRE_FILE else (DEFAULT_READ_LIMIT if limit is None else limit)
        )
        with _mapped(path):
            first = page = self._session.read(path, offset, -1 if want is None else want)
            parts, got = [page.content], page.lines
            while page.truncated and (want is None or got < want):
                page = self._session.read(
                    path, page.offset + page.lines, -1 if want is None else want - got
                )
                if page.version != first.version:
                    raise RuntimeError(f"'{path}' changed while it was read; read it again")
                if page.lines == 0:
                    break
                parts.append(page.content)
                got += page.lines
        content = "".join(parts)
        if content.endswith("\n"):
            content = content[:-1]
        return ReadResult(
            content=content,
            path=_shown(path),
            total_lines=first.total_lines,
            offset=first.offset,
            limit=got,
            truncated=first.offset + got < first.total_lines,
        )

    def _file_size(self, path: str) -> int:
        """The size of the file at ``path``; the spec's error otherwise."""
        with _mapped(path):
            info = self._session.stat(path)
        if info.kind is FileKind.DIRECTORY:
            raise IsADirectoryError(f"Is a directory: {path}")
        return info.size

    def read_bytes(
        self,
        path: str,
        *,
        offset: int = 0,
        limit: Optional[int] = None,
    ) -> ReadBytesResult:
        if offset < 0:
            raise ValueError(f"offset must be non-negative, got {offset}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be non-negative, got {limit}")
        size = self._file_size(path)
        start = min(offset, size)
        if start >= size or limit == 0:
            data = b""
        else:
            with _mapped(path):
                data = self._session.read_bytes(path, start, limit)
        return ReadBytesResult(
            content=data,
            path=_shown(path),
            size_bytes=size,
            offset=start,
            limit=len(data),
            truncated=start + len(data) < size,
        )

    def exists(self, path: str) -> bool:
        try:
            return self._session.exists(path)
        except (PathEscapesRoot, InvalidPath):
            return False

    def stat(self, path: str) -> FileStat:
        with _mapped(path):
            info = self._session.stat(path)
        is_dir = info.kind is FileKind.DIRECTORY
        return FileStat(
            path=_shown(path),
            is_file=info.kind is FileKind.FILE,
            is_directory=is_dir,
            size_bytes=0 if is_dir else info.size,
            created_at=info.created_at,
            modified_at=info.modified_at,
        )

    def list(self, path: str = ".") -> Sequence[FileEntry]:
        with _mapped(path):
            listing = self._session.list(path)
        entries = [
            FileEntry(
                name=e.name,
                path=e.path,
                is_file=e.kind is not FileKind.DIRECTORY,
                is_directory=e.kind is FileKind.DIRECTORY,
            )
            for e in listing
        ]
        entries.sort(key=lambda e: e.name)
        return entries

    def _files_under(self, path: str) -> tuple[str, list[str]]:
        """The base's canonical path and every file beneath it (none when
        the base is missing or a file, as the spec's backends answer)."""
        try:
            with _mapped(path):
                listing = self._session.list(path, depth=c.ALL_LEVELS)
        except (FileNotFoundError, NotADirectoryError):
            return "", []
        files = [e.path for e in listing if e.kind is FileKind.FILE]
        return listing.path, files

    @staticmethod
    def _relative(path: str, base: str) -> str:
        return path[len(base) + 1 :] if base else path

    def glob(self, pattern: str, *, path: str = ".") -> Sequence[GlobMatch]:
        base, files = self._files_under(path)
        matches = [
            GlobMatch(path=f, is_file=True)
            for f in files
            if glob_match(self._relative(f, base), pattern, "")
        ]
        matches.sort(key=lambda m: m.path)
        return matches

    def grep(
        self,
        pattern: str,
        *,
        path: str = ".",
        glob: Optional[str] = None,
        max_matches: Optional[int] = None,
    ) -> Sequence[GrepMatch]:
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise ValueError(f"Invalid regex pattern: {err}") from err
        wanted = max_matches if max_matches is not None else MAX_GREP_MATCHES
        matches: list[GrepMatch] = []
        if wanted <= 0:
            return matches
        try:
            base = self._session.stat(path).path
        except (FileNotFound, NotADirectory):
            return matches
        except WsfsError as e:
            raise _translate(e, path) from e
        stream = self._session.grep(pattern, path, max_matches=_GREP_SERVER_CAP if glob else wanted)
        try:
            with stream:
                for m in stream:
                    if glob is not None and not glob_match(self._relative(m.path, base), glob, ""):
                        continue
                    matches.append(_grep_match(m, regex))
                    if len(matches) >= wanted:
                        break
        except InvalidPattern as e:
            raise ValueError(f"Invalid regex pattern: {e.message}") from e
        except (FileNotFound, NotADirectory):
            return []
        except WsfsError as e:
            raise _translate(e, path) from e
        return matches

    # --- Writing ---

    def _writable(self, path: str) -> str:
        """The normalized path of a write, or the spec's refusal."""
        if self._read_only:
            raise PermissionError(_READ_ONLY)
        normalized = normalize_path(path)
        if not normalized:
            raise ValueError("Cannot write to root directory")
        validate_path(normalized)
        return normalized

    def _write(self, path: str, data: Any, mode: WriteModeName, create_parents: bool) -> None:
        missing_parent = FileNotFoundError(f"Parent directory does not exist: {_parent_of(path)}")
        with _mapped(path, FileNotFound=missing_parent):
            self._session.write(path, data, mode=mode, create_parents=create_parents)

    def write(
        self,
        path: str,
        content: str,
        *,
        mode: WriteModeName = "overwrite",
        create_parents: bool = True,
    ) -> WriteResult:
        normalized = self._writable(path)
        if len(content) > MAX_WRITE_LENGTH:
            raise ValueError(f"Content exceeds maximum length of {MAX_WRITE_LENGTH} characters.")
        self._write(path, content, mode, create_parents)
        return WriteResult(path=normalized, bytes_written=len(content.encode("utf-8")), mode=mode)

    def write_bytes(
        self,
        path: str,
        content: bytes,
        *,
        mode: WriteModeName = "overwrite",
        create_parents: bool = True,
    ) -> WriteResult:
        normalized = self._writable(path)
        if len(content) > MAX_WRITE_BYTES:
            raise ValueError(f"Content exceeds maximum size of {MAX_WRITE_BYTES} bytes.")
        # As bytes (WriteBytes), never as text: content need not be UTF-8.
        self._write(path, [bytes(content)] if content else iter(()), mode, create_parents)
        return WriteResult(path=normalized, bytes_written=len(content), mode=mode)

    def delete(self, path: str, *, recursive: bool = False) -> None:
        if self._read_only:
            raise PermissionError(_READ_ONLY)
        if not normalize_path(path):
            raise PermissionError("Cannot delete root directory")
        with _mapped(path):
            self._session.delete(path, recursive=recursive)

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        if self._read_only:
            raise PermissionError(_READ_ONLY)
        normalized = normalize_path(path)
        if not normalized:
            return
        validate_path(normalized)
        missing_parent = FileNotFoundError(f"Parent directory does not exist: {_parent_of(path)}")
        try:
            with _mapped(path, FileNotFound=missing_parent):
                self._session.mkdir(path, parents=parents, exist_ok=exist_ok)
        except (FileExistsError, NotADirectoryError) as err:
            # What is there decides the message, as on the host.
            if self._kind(path) is FileKind.FILE:
                raise FileExistsError(f"A file exists at path: {path}") from err
            if isinstance(err, FileExistsError):
                raise FileExistsError(f"Directory already exists: {path}") from err
            raise

    def _kind(self, path: str) -> Optional[FileKind]:
        try:
            return self._session.stat(path).kind
        except WsfsError:
            return None

    # --- Streaming ---

    def open_read(self, path: str) -> WsfsByteReader:
        size = self._file_size(path)
        return WsfsByteReader(self._session, path, _shown(path), size)

    def open_write(
        self,
        path: str,
        *,
        mode: WriteModeName = "overwrite",
        create_parents: bool = True,
    ) -> WsfsByteWriter:
        normalized = self._writable(path)
        # Refused now, as the host refuses at open, rather than at close.
        if mode == "create" and self.exists(path):
            raise FileExistsError(f"File already exists: {path}")
        parent = normalized.rpartition("/")[0]
        if not create_parents and parent and self._kind(parent) is not FileKind.DIRECTORY:
            raise FileNotFoundError(f"Parent directory does not exist: /{parent}")
        return WsfsByteWriter(
            self._session, path, normalized, mode=mode, create_parents=create_parents
        )

    def open_text(self, path: str, *, encoding: str = "utf-8") -> TextReader:
        if encoding != "utf-8":
            raise ValueError(f"Only 'utf-8' encoding is supported, got: {encoding}")
        return DefaultTextReader.wrap(self.open_read(path), encoding=encoding)

    # --- Snapshots ---

    def snapshot(self, *, tag: Optional[str] = None) -> FilesystemSnapshot:
        with _mapped("/"):
            info = self._session.snapshot(tag or "")
        return FilesystemSnapshot(
            snapshot_id=uuid.UUID(info.id),
            created_at=info.created_at,
            commit_ref=info.id,
            root_path="/",
            git_dir=None,
            tag=tag,
        )

    def restore(self, snapshot: FilesystemSnapshot) -> None:
        if self._read_only:
            raise PermissionError(_READ_ONLY)
        try:
            self._session.restore(snapshot.commit_ref)
        except WsfsError as e:
            raise SnapshotRestoreError(
                f"Cannot restore snapshot {snapshot.commit_ref}: {e.message}"
            ) from e
