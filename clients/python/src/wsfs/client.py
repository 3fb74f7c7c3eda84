"""The synchronous client: :class:`Client` and :class:`Session`."""

from __future__ import annotations

import logging
import os
from typing import (
    IO,
    Any,
    Callable,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    TypeVar,
    Union,
    cast,
)

from datetime import datetime

import grpc

from . import _common as c
from .errors import Internal, VersionMismatch, WsfsError, from_rpc_error
from .types import (
    AttributesResult,
    Backend,
    ChangeEvent,
    ChangeKind,
    Changes,
    EditResult,
    Entry,
    FileInfo,
    FileKind,
    FileOwner,
    GlobResult,
    GrepMatch,
    GrepSummary,
    HostMount,
    IssuedToken,
    Layout,
    Listing,
    Restored,
    SessionInfo,
    SessionLimits,
    SnapshotDiff,
    SnapshotInfo,
    TextPage,
    Transferred,
    WriteMode,
    WriteResult,
)
from .v1 import filesystem_pb2 as fs_pb2
from .v1 import filesystem_pb2_grpc as fs_grpc
from .v1 import sessions_pb2
from .v1 import sessions_pb2_grpc as sessions_grpc

__all__ = ["Client", "Session", "ByteStream", "GrepStream", "Watch"]

T = TypeVar("T")


class _SourceFailed(Exception):
    """Raised into grpc by an upload's request iterator when its source
    failed: grpc then cancels the call (the server keeps the old file)."""


class _QuietAborts(logging.Filter):
    """grpc logs every exception of a request iterator with its traceback;
    a deliberate abort is the caller's own error, raised to the caller."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _SourceFailed))


logging.getLogger("grpc._channel").addFilter(_QuietAborts())


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


class Client:
    """A connection to a wsfs server (one HTTP/2 channel).

    ``url`` is ``"host:port"``, ``"http://host:port"`` or
    ``"https://host:port"`` (TLS; ``ca_pem`` is the PEM of the certificate
    to trust, else the system's roots). ``token`` travels as
    ``authorization: Bearer <token>`` with every call; ``caller`` names
    the caller on a server with tokens off. Use it as a context manager, or
    call :meth:`close`.
    """

    def __init__(
        self,
        url: str = "127.0.0.1:50051",
        *,
        token: Optional[str] = None,
        caller: Optional[str] = None,
        ca_pem: Optional[bytes] = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        target, secure = c.parse_url(url)
        channel_options = c.CHANNEL_OPTIONS + list(options)
        if secure or ca_pem is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=ca_pem)
            self._channel = grpc.secure_channel(target, creds, options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options)
        self.url = url
        self._metadata = c.credentials(token, caller)
        self._sessions = sessions_grpc.SessionsStub(self._channel)
        self._filesystem = fs_grpc.FilesystemStub(self._channel)

    # -- lifetime -------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- sessions -------------------------------------------------------

    def create_session(
        self,
        *,
        backend: Union[Backend, str] = Backend.MEMORY,
        root: Optional[c.PathLike] = None,
        mounts: Optional[Sequence[HostMount]] = None,
        seed_files: Optional[Mapping[str, Union[str, bytes]]] = None,
        read_only: bool = False,
        limits: Optional[SessionLimits] = None,
        layout: Union[Layout, str] = Layout.FLAT,
        labels: Optional[Mapping[str, str]] = None,
        idle_ttl: Any = None,
        from_snapshot: Optional[tuple[str, str]] = None,
        session_id: Optional[str] = None,
        owner: Optional[FileOwner] = None,
    ) -> "Session":
        """Creates a session and returns its handle (``session.info`` says
        what the server made). Used as a context manager, the session is
        deleted when the block ends. ``idle_ttl`` is seconds or a
        ``timedelta``; ``seed_files`` maps paths to text or bytes.
        ``from_snapshot=(session_id, snapshot_id)`` makes a fork: the
        workspace is exactly that snapshot of another session.

        ``session_id`` chooses the new session's id (a lowercase UUID);
        by default the client picks a random one."""
        request = c.create_session_request(
            backend=backend,
            root=root,
            mounts=mounts,
            seed_files=seed_files,
            read_only=read_only,
            limits=limits,
            layout=layout,
            labels=labels,
            idle_ttl=idle_ttl,
            from_snapshot=from_snapshot,
            session_id=session_id,
            owner=owner,
        )
        response = _call(
            self._sessions.CreateSession,
            request,
            metadata=c.routed(self._metadata, request.session_id),
        )
        info = SessionInfo._from_proto(response)
        session = self.session(info.id, token=info.token)
        session.info = info
        session._owned = True
        return session

    def session(
        self, session_id: str, *, token: Optional[str] = None, caller: Optional[str] = None
    ) -> "Session":
        """A handle on an existing session; nothing is sent until it is
        used. ``token`` or ``caller`` replace the client's own credentials
        for this handle."""
        metadata = c.credentials(token, caller) if (token or caller) else self._metadata
        return Session(self, session_id, metadata)

    def get_session(self, session_id: str) -> SessionInfo:
        request = sessions_pb2.GetSessionRequest(session_id=session_id)
        return SessionInfo._from_proto(
            _call(
                self._sessions.GetSession, request, metadata=c.routed(self._metadata, session_id)
            )
        )

    def token_session(self) -> SessionInfo:
        """The session this client's token opens (a GetSession naming
        none): how a holder of nothing but a session's token finds its
        session. Through a proxy the call is routed by the session the
        token names."""
        return self.get_session("")

    def list_sessions(
        self, labels: Optional[Mapping[str, str]] = None, include_usage: bool = False
    ) -> list[SessionInfo]:
        """The sessions carrying every one of ``labels`` (all of them when
        None), in session-id order, fetched a page at a time. With
        ``include_usage`` each one's files and bytes are counted too (the
        server walks every listed workspace)."""
        found: list[SessionInfo] = []
        token = ""
        while True:
            request = sessions_pb2.ListSessionsRequest(
                labels=dict(labels or {}),
                page_size=c.MAX_USAGE_PAGE if include_usage else c.LIST_PAGE,
                page_token=token,
                include_usage=include_usage,
            )
            response = _call(self._sessions.ListSessions, request, metadata=self._metadata)
            found.extend(SessionInfo._from_proto(s) for s in response.sessions)
            if not response.next_page_token:
                return found
            token = response.next_page_token

    def delete_session(self, session_id: str) -> int:
        """Removes the session and everything it owns; returns how many
        files went with it."""
        request = sessions_pb2.DeleteSessionRequest(session_id=session_id)
        metadata = c.routed(self._metadata, session_id)
        return _call(self._sessions.DeleteSession, request, metadata=metadata).files_deleted

    def recover_session(
        self, session_id: str, *, snapshot_id: str = "", force: bool = False
    ) -> SessionInfo:
        """Recreates on the server this client reaches a DIRECTORY session
        from the server's object store, as its snapshot ``snapshot_id``
        holds it (empty: its latest there). Raises ``SessionLeased`` while
        another server's lease on it is live, unless ``force``."""
        request = sessions_pb2.RecoverSessionRequest(
            session_id=session_id, snapshot_id=snapshot_id, force=force
        )
        metadata = c.routed(self._metadata, session_id)
        return SessionInfo._from_proto(
            _call(self._sessions.RecoverSession, request, metadata=metadata)
        )

    def issue_token(self, session_id: str, caller: str) -> IssuedToken:
        """A bearer token for ``caller`` in the session (tokens on; this
        client must hold the admin token or the session's system token)."""
        request = sessions_pb2.IssueTokenRequest(session_id=session_id, caller=caller)
        metadata = c.routed(self._metadata, session_id)
        response = _call(self._sessions.IssueToken, request, metadata=metadata)
        return IssuedToken(response.token, response.caller)

    # -- snapshots (by session id; the Session has the same calls) --------

    def snapshot(self, session_id: str, tag: str = "") -> SnapshotInfo:
        return self.session(session_id).snapshot(tag)

    def restore(self, session_id: str, snapshot_id: str, *, path: str = "") -> Restored:
        return self.session(session_id).restore(snapshot_id, path=path)

    def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        return self.session(session_id).list_snapshots()

    def diff_snapshot(self, session_id: str, snapshot_id: str) -> SnapshotDiff:
        return self.session(session_id).diff_snapshot(snapshot_id)

    def delete_snapshot(self, session_id: str, snapshot_id: str) -> None:
        self.session(session_id).delete_snapshot(snapshot_id)

    @property
    def channel(self) -> grpc.Channel:
        """The underlying channel, for the generated stubs in ``wsfs.v1``."""
        return self._channel


class ByteStream:
    """A ReadBytes stream: the header's fields, then the data as an
    iterator of ``bytes`` chunks. Close it (or use ``with``) to stop early."""

    def __init__(self, call: Any, empty: bool) -> None:
        self._call = call
        self._iter = iter(call)
        try:
            first = next(self._iter)
        except StopIteration:
            raise Internal("the ReadBytes stream ended before its header") from None
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        if first.WhichOneof("payload") != "header":
            call.cancel()
            raise Internal("the ReadBytes stream began with data instead of its header")
        h = first.header
        self.path: str = h.path
        #: Size of the whole file.
        self.size: int = h.size_bytes
        self.version: int = h.version
        #: First byte this stream carries, and how many follow.
        self.offset: int = h.offset
        self.length: int = 0 if empty else h.length
        self._received = 0
        self._done = False
        if empty:
            self.close()

    def __iter__(self) -> Iterator[bytes]:
        while not self._done:
            try:
                message = next(self._iter)
            except StopIteration:
                self._done = True
                if self._received != self.length:
                    raise Internal(
                        f"the ReadBytes stream ended after {self._received} of the "
                        f"{self.length} bytes its header announced"
                    ) from None
                return
            except grpc.RpcError as e:
                self._done = True
                raise from_rpc_error(e) from None
            if message.WhichOneof("payload") != "data":
                self.close()
                raise Internal("the ReadBytes stream sent a second header")
            self._received += len(message.data)
            if self._received > self.length:
                self.close()
                raise Internal("the ReadBytes stream carried more bytes than its header announced")
            yield message.data

    def read(self) -> bytes:
        """Everything that remains, as one ``bytes``."""
        return b"".join(self)

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    def __enter__(self) -> "ByteStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class GrepStream:
    """Grep matches in (path, line_number) order. After the last match,
    :attr:`summary` holds the search's summary. Close it (or use ``with``,
    or ``break``) to stop the search on the server."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._iter = iter(call)
        self._done = False
        self.summary: Optional[GrepSummary] = None

    def __iter__(self) -> Iterator[GrepMatch]:
        return self

    def __next__(self) -> GrepMatch:
        if self._done:
            raise StopIteration
        try:
            message = next(self._iter)
        except StopIteration:
            self._done = True
            raise Internal("the Grep stream ended without its summary") from None
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        if message.WhichOneof("payload") == "summary":
            s = message.summary
            self.summary = GrepSummary(s.files_searched, s.matches, s.truncated)
            self.close()
            raise StopIteration
        return GrepMatch._from_proto(message.match)

    def collect(self) -> tuple[list[GrepMatch], GrepSummary]:
        """Every match, and the summary."""
        matches = list(self)
        assert self.summary is not None
        return matches, self.summary

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    def __enter__(self) -> "GrepStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Watch:
    """A live stream of change events. The first is READY (its ``seq`` is
    the current one); KEEPALIVE events are swallowed unless asked for.
    Iteration ends when ``timeout`` runs out or :meth:`close` is called
    (``with`` and ``break`` close it too). :attr:`last_seq` is the seq to
    resume from with ``since_seq``."""

    def __init__(self, call: Any, keepalives: bool, timeout: Optional[float]) -> None:
        self._call = call
        self._timeout = timeout
        self._iter = iter(call)
        self._keepalives = keepalives
        self._done = False
        self.last_seq: int = 0

    def __iter__(self) -> Iterator[ChangeEvent]:
        return self

    def __next__(self) -> ChangeEvent:
        while not self._done:
            try:
                message = next(self._iter)
            except StopIteration:
                self._done = True
                break
            except grpc.RpcError as e:
                stopped = self._done or (
                    self._timeout is not None and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                )
                self._done = True
                if stopped:
                    break
                raise from_rpc_error(e) from None
            event = ChangeEvent._from_proto(message)
            if event.kind is ChangeKind.KEEPALIVE and not self._keepalives:
                continue
            if event.seq:
                self.last_seq = max(self.last_seq, event.seq)
            return event
        raise StopIteration

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Session:
    """A handle on one session's workspace. Paths are workspace-relative
    POSIX paths (``"src/a.py"``, ``"/src/a.py"`` is the same file).

    Used as a context manager, a session made by
    :meth:`Client.create_session` is deleted when the block ends."""

    def __init__(self, client: Client, session_id: str, metadata: tuple[tuple[str, str], ...]):
        self.client = client
        self.id = session_id
        #: What the server said at creation; None for a handle made by
        #: :meth:`Client.session` (see :meth:`get_info`).
        self.info: Optional[SessionInfo] = None
        # Every call names its session for the proxy (see c.SESSION_HEADER).
        self._metadata = c.routed(metadata, session_id)
        # The Sessions service (snapshots, archives) wants the client's own
        # credentials: on a server with tokens, the admin token.
        self._admin_metadata = c.routed(client._metadata, session_id)
        self._fs = client._filesystem
        self._sessions = client._sessions
        self._owned = False

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._owned:
            self.delete_session(missing_ok=True)

    def get_info(self) -> SessionInfo:
        return self.client.get_session(self.id)

    def delete_session(self, *, missing_ok: bool = False) -> int:
        """Deletes this session and its files (with the client's
        credentials: on a server with tokens, the admin token); returns how
        many files went."""
        try:
            return self.client.delete_session(self.id)
        except WsfsError as e:
            if missing_ok and e.reason == "SESSION_NOT_FOUND":
                return 0
            raise

    # -- reading ----------------------------------------------------------

    def read(self, path: str, offset: int = 0, limit: Optional[int] = None) -> TextPage:
        """One page of a text file: ``limit`` lines (default 2000, ``-1``
        for all) from the 0-based line ``offset``."""
        request = fs_pb2.ReadRequest(
            session_id=self.id, path=c.check_path_type(path), offset=offset
        )
        if limit is not None:
            request.limit = limit
        return TextPage._from_proto(_call(self._fs.Read, request, metadata=self._metadata))

    def read_text(self, path: str) -> str:
        """The whole text file. Reads page by page; if the file changes
        between pages it starts over, and after a few tries raises
        :class:`~wsfs.VersionMismatch` rather than mix two versions."""
        last: Optional[WsfsError] = None
        for _ in range(c.READ_ATTEMPTS):
            first = self.read(path, 0, c.PAGE_LINES)
            parts = [first.content]
            page = first
            while page.truncated:
                page = self.read(path, page.offset + page.lines, c.PAGE_LINES)
                if page.version != first.version:
                    last = VersionMismatch(
                        f"'{first.path}' changed while it was read",
                        path=first.path,
                        metadata={
                            "path": first.path,
                            "expected_version": str(first.version),
                            "current_version": str(page.version),
                        },
                    )
                    break
                if page.lines == 0:
                    raise Internal(f"the server said '{path}' has more lines but returned none")
                parts.append(page.content)
            else:
                return "".join(parts)
        assert last is not None
        raise last

    def stream_bytes(
        self,
        path: str,
        offset: int = 0,
        limit: Optional[int] = None,
        *,
        chunk_size: Optional[int] = None,
    ) -> ByteStream:
        """Streams bytes ``[offset, offset + limit)`` (``limit`` None: to
        the end) in chunks; the stream reads one consistent version."""
        request, empty = c.read_bytes_request(
            self.id, c.check_path_type(path), offset, limit, chunk_size
        )
        call = _call(self._fs.ReadBytes, request, metadata=self._metadata)
        return ByteStream(call, empty)

    def read_bytes(self, path: str, offset: int = 0, limit: Optional[int] = None) -> bytes:
        """Bytes ``[offset, offset + limit)`` of a file of any size, streamed."""
        with self.stream_bytes(path, offset, limit) as stream:
            return stream.read()

    def download(self, path: str, destination: Union[c.PathLike, IO[bytes]]) -> int:
        """Streams a file into a local path or a binary file object; returns
        its size. A local path is written under a temporary name and renamed
        into place."""
        with self.stream_bytes(path) as stream:
            return _write_local(destination, stream)

    # -- writing ----------------------------------------------------------

    def write(
        self,
        path: str,
        data: Union[str, bytes, bytearray, memoryview, IO[Any], Iterable[bytes]],
        *,
        mode: Union[WriteMode, str] = WriteMode.OVERWRITE,
        create_parents: bool = True,
        if_version: Optional[int] = None,
        permissions: Optional[int] = None,
    ) -> WriteResult:
        """Writes text (``str``: one Write call), bytes, a readable file
        object, or an iterable of ``bytes`` chunks (streamed with
        WriteBytes; the file appears whole or not at all). ``if_version=0``
        means the path must not exist yet. ``permissions`` (0 to 0o777) are
        the file's bits; unset, a new file gets 0o644 and an existing one
        keeps its own."""
        c.check_path_type(path)
        if isinstance(data, str):
            request = fs_pb2.WriteRequest(
                session_id=self.id,
                path=path,
                content=data,
                mode=c.write_mode(mode),
                create_parents=create_parents,
            )
            if if_version is not None:
                request.if_version = if_version
            if permissions is not None:
                request.permissions = permissions
            return WriteResult._from_proto(_call(self._fs.Write, request, metadata=self._metadata))
        chunks = c.file_chunks(data) if c.is_file(data) else c.bytes_chunks(data)
        header = c.write_bytes_header(
            self.id, path, mode, create_parents, if_version, permissions
        )
        return self._write_bytes(header, chunks)

    def _write_bytes(
        self, header: fs_pb2.WriteBytesRequest, chunks: Iterator[bytes]
    ) -> WriteResult:
        failure: list[BaseException] = []

        def requests() -> Iterator[fs_pb2.WriteBytesRequest]:
            yield header
            try:
                for chunk in chunks:
                    if chunk:
                        yield fs_pb2.WriteBytesRequest(data=chunk)
            except Exception as e:
                # Raising here makes grpc cancel the call, so the server sees
                # a broken upload, never a shorter complete file.
                failure.append(e)
                raise _SourceFailed() from e

        try:
            response = self._fs.WriteBytes(requests(), metadata=self._metadata)
        except grpc.RpcError as e:
            if failure:
                raise failure[0] from None
            raise from_rpc_error(e) from None
        return WriteResult._from_proto(response)

    def upload(
        self,
        path: str,
        source: Union[c.PathLike, IO[bytes]],
        *,
        mode: Union[WriteMode, str] = WriteMode.OVERWRITE,
        create_parents: bool = True,
        if_version: Optional[int] = None,
    ) -> WriteResult:
        """Streams a local file (a path or a binary file object) into ``path``."""
        if c.is_file(source):
            return self.write(
                path,
                cast(IO[bytes], source),
                mode=mode,
                create_parents=create_parents,
                if_version=if_version,
            )
        with open(os.fspath(source), "rb") as f:  # type: ignore[arg-type]
            return self.write(
                path, f, mode=mode, create_parents=create_parents, if_version=if_version
            )

    def edit(
        self,
        path: str,
        old_text: str,
        new_text: str,
        *,
        replace_all: bool = False,
        if_version: Optional[int] = None,
        dry_run: bool = False,
    ) -> EditResult:
        """Replaces the one occurrence of ``old_text`` (every one with
        ``replace_all``); the result carries a unified diff."""
        request = fs_pb2.EditRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            old_text=old_text,
            new_text=new_text,
            replace_all=replace_all,
            dry_run=dry_run,
        )
        if if_version is not None:
            request.if_version = if_version
        return EditResult._from_proto(_call(self._fs.Edit, request, metadata=self._metadata))

    def delete(
        self,
        path: str,
        *,
        recursive: bool = False,
        allow_missing: bool = False,
        if_version: Optional[int] = None,
    ) -> int:
        """Deletes a file, or a directory with ``recursive``; returns how
        many files and directories went."""
        request = fs_pb2.DeleteRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            recursive=recursive,
            allow_missing=allow_missing,
        )
        if if_version is not None:
            request.if_version = if_version
        return _call(self._fs.Delete, request, metadata=self._metadata).deleted

    def delete_many(
        self,
        paths: Sequence[str],
        *,
        recursive: bool = False,
        allow_missing: bool = False,
    ) -> List[Union[int, WsfsError]]:
        """Deletes each of ``paths`` in one call, in order, each as
        :meth:`delete` would: one failing does not stop the others. Returns
        one item per path: how many files and directories went, or the
        :class:`WsfsError` that path met (returned, not raised). At most
        1,024 paths a call."""
        request = c.delete_many_request(
            self.id, paths, recursive=recursive, allow_missing=allow_missing
        )
        return c.delete_many_results(
            _call(self._fs.DeleteMany, request, metadata=self._metadata)
        )

    def mkdir(
        self,
        path: str,
        *,
        parents: bool = True,
        exist_ok: bool = True,
        permissions: Optional[int] = None,
    ) -> bool:
        """Creates a directory (with ``permissions``, default 0o755);
        returns False when it already existed."""
        request = fs_pb2.MkdirRequest(
            session_id=self.id, path=c.check_path_type(path), parents=parents, exist_ok=exist_ok
        )
        if permissions is not None:
            request.permissions = permissions
        return _call(self._fs.Mkdir, request, metadata=self._metadata).created

    def set_attributes(
        self,
        path: str,
        *,
        permissions: Optional[int] = None,
        modified_at: Optional[datetime] = None,
        if_version: Optional[int] = None,
    ) -> AttributesResult:
        """Sets the permission bits (0 to 0o777) and/or the modification
        time (a timezone-aware ``datetime``) of a file or directory."""
        request = c.set_attributes_request(self.id, path, permissions, modified_at, if_version)
        return AttributesResult._from_proto(
            _call(self._fs.SetAttributes, request, metadata=self._metadata)
        )

    def move(
        self,
        source: str,
        destination: str,
        *,
        overwrite: bool = False,
        create_parents: bool = True,
        if_version: Optional[int] = None,
    ) -> int:
        """Moves a file or a whole directory; returns the entries moved."""
        request = fs_pb2.TransferRequest(
            session_id=self.id,
            source=c.check_path_type(source, "source"),
            destination=c.check_path_type(destination, "destination"),
            overwrite=overwrite,
            create_parents=create_parents,
        )
        if if_version is not None:
            request.if_version = if_version
        return _call(self._fs.Move, request, metadata=self._metadata).entries

    def copy(
        self, source: str, destination: str, *, overwrite: bool = False, create_parents: bool = True
    ) -> int:
        """Copies a file or a whole directory; returns the entries copied."""
        request = fs_pb2.TransferRequest(
            session_id=self.id,
            source=c.check_path_type(source, "source"),
            destination=c.check_path_type(destination, "destination"),
            overwrite=overwrite,
            create_parents=create_parents,
        )
        return _call(self._fs.Copy, request, metadata=self._metadata).entries

    # -- looking around ---------------------------------------------------

    def list(self, path: str = "", depth: int = 1, *, start_after: str = "") -> Listing:
        """The entries under a directory, sorted by path (bytewise);
        ``depth`` > 1 descends. At most one page (100,000 entries, then
        ``truncated``): the next page is asked with ``start_after`` set to
        the last entry's path."""
        request = fs_pb2.ListRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            depth=depth,
            start_after=c.check_path_type(start_after, "start_after"),
        )
        response = _call(self._fs.List, request, metadata=self._metadata)
        return Listing(
            response.path, [Entry._from_proto(e) for e in response.entries], response.truncated
        )

    def glob(self, pattern: str, path: str = "", *, max_results: int = 0) -> GlobResult:
        """Files whose path relative to ``path`` matches (``**/*.py``,
        ``{a,b}``, ``[ab]``), sorted."""
        request = fs_pb2.GlobRequest(
            session_id=self.id,
            pattern=pattern,
            path=c.check_path_type(path),
            max_results=max_results,
        )
        response = _call(self._fs.Glob, request, metadata=self._metadata)
        return GlobResult(list(response.paths), response.truncated)

    def grep(
        self,
        pattern: str,
        path: str = "",
        *,
        glob: Optional[str] = None,
        case_insensitive: bool = False,
        fixed_string: bool = False,
        max_matches: int = 0,
        context_lines: int = 0,
    ) -> GrepStream:
        """Searches file contents (Rust regex syntax, or ``fixed_string``);
        an iterator of :class:`~wsfs.GrepMatch` whose ``summary`` is set
        at the end."""
        request = fs_pb2.GrepRequest(
            session_id=self.id,
            pattern=pattern,
            path=c.check_path_type(path),
            glob=glob or "",
            case_insensitive=case_insensitive,
            fixed_string=fixed_string,
            max_matches=max_matches,
            context_lines=context_lines,
        )
        return GrepStream(_call(self._fs.Grep, request, metadata=self._metadata))

    def stat(self, path: str) -> FileInfo:
        request = fs_pb2.StatRequest(session_id=self.id, path=c.check_path_type(path))
        return FileInfo._from_proto(_call(self._fs.Stat, request, metadata=self._metadata))

    def exists(self, path: str) -> bool:
        """False for a missing path (an invalid one still raises)."""
        request = fs_pb2.ExistsRequest(session_id=self.id, path=c.check_path_type(path))
        return _call(self._fs.Exists, request, metadata=self._metadata).exists

    # -- changes ----------------------------------------------------------

    def watch(
        self,
        path: str = "",
        *,
        recursive: bool = True,
        glob: Optional[str] = None,
        since_seq: int = 0,
        timeout: Optional[float] = None,
        keepalives: bool = False,
    ) -> Watch:
        """Change events under ``path`` as they happen (the whole subtree
        unless ``recursive=False``). ``since_seq`` resumes after that seq;
        ``timeout`` (seconds) ends the iteration then."""
        request = fs_pb2.WatchRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            recursive=recursive,
            glob=glob or "",
            since_seq=since_seq,
        )
        call = _call(self._fs.Watch, request, metadata=self._metadata, timeout=timeout)
        return Watch(call, keepalives, timeout)

    def changes(self, since_seq: int = 0, max: int = 0) -> Changes:
        """Up to ``max`` events after ``since_seq`` (0: the server's cap)."""
        request = fs_pb2.ChangesRequest(session_id=self.id, since_seq=since_seq, max=max)
        return Changes._from_proto(_call(self._fs.Changes, request, metadata=self._metadata))

    # -- snapshots and archives -------------------------------------------

    def snapshot(self, tag: str = "") -> SnapshotInfo:
        request = sessions_pb2.SnapshotRequest(session_id=self.id, tag=tag)
        return SnapshotInfo._from_proto(
            _call(self._sessions.Snapshot, request, metadata=self._admin_metadata)
        )

    def diff_snapshot(self, snapshot: Union[str, SnapshotInfo]) -> SnapshotDiff:
        """What changed in the workspace since the snapshot."""
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.DiffSnapshotRequest(session_id=self.id, snapshot_id=snapshot_id)
        response = _call(self._sessions.DiffSnapshot, request, metadata=self._admin_metadata)
        return SnapshotDiff._from_proto(response)

    def restore(self, snapshot: Union[str, SnapshotInfo], *, path: str = "") -> Restored:
        """Puts the workspace back exactly as the snapshot holds it; with
        ``path``, only that file or directory (entries beneath it that the
        snapshot lacks go, nothing outside it changes). ``Restored`` counts
        the files restored."""
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.RestoreRequest(session_id=self.id, snapshot_id=snapshot_id, path=path)
        response = _call(self._sessions.Restore, request, metadata=self._admin_metadata)
        return Restored(response.file_count, response.total_bytes)

    def list_snapshots(self) -> List[SnapshotInfo]:
        request = sessions_pb2.ListSnapshotsRequest(session_id=self.id)
        response = _call(self._sessions.ListSnapshots, request, metadata=self._admin_metadata)
        return [SnapshotInfo._from_proto(s) for s in response.snapshots]

    def delete_snapshot(self, snapshot: Union[str, SnapshotInfo]) -> None:
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.DeleteSnapshotRequest(session_id=self.id, snapshot_id=snapshot_id)
        _call(self._sessions.DeleteSnapshot, request, metadata=self._admin_metadata)

    def export_archive(
        self,
        destination: Union[c.PathLike, IO[bytes], None] = None,
        *,
        snapshot: Union[str, SnapshotInfo, None] = None,
    ) -> Any:
        """The workspace (or a snapshot) as a ZIP: written to a local path or
        a binary file object (returns its size), or returned as ``bytes``
        when ``destination`` is None."""
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else (snapshot or "")
        request = sessions_pb2.ExportArchiveRequest(session_id=self.id, snapshot_id=snapshot_id)
        call = _call(self._sessions.ExportArchive, request, metadata=self._admin_metadata)

        def chunks() -> Iterator[bytes]:
            try:
                for message in call:
                    yield message.data
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            finally:
                call.cancel()

        if destination is None:
            return b"".join(chunks())
        return _write_local(destination, chunks())

    def import_archive(
        self, source: Union[bytes, c.PathLike, IO[bytes], Iterable[bytes]]
    ) -> Restored:
        """Replaces the workspace with a ZIP archive: ``bytes``, a local
        path, a binary file object or an iterable of ``bytes`` chunks. A
        refused archive, or a source that fails midway, changes nothing."""
        if isinstance(source, (str, os.PathLike)):
            with open(os.fspath(source), "rb") as f:
                return self._import(c.file_chunks(f))
        if c.is_file(source):
            return self._import(c.file_chunks(source))
        return self._import(c.bytes_chunks(cast(Iterable[bytes], source)))

    def _import(self, chunks: Iterator[bytes]) -> Restored:
        failure: list[BaseException] = []

        def requests() -> Iterator[sessions_pb2.ImportArchiveRequest]:
            yield sessions_pb2.ImportArchiveRequest(session_id=self.id)
            try:
                for chunk in chunks:
                    yield sessions_pb2.ImportArchiveRequest(data=chunk)
            except Exception as e:
                failure.append(e)
                raise _SourceFailed() from e

        try:
            response = self._sessions.ImportArchive(requests(), metadata=self._admin_metadata)
        except grpc.RpcError as e:
            if failure:
                raise failure[0] from None
            raise from_rpc_error(e) from None
        return Restored(response.file_count, response.total_bytes)

    # -- directories ------------------------------------------------------

    def upload_dir(self, local_dir: c.PathLike, remote_dir: str = "") -> Transferred:
        """Copies a local directory tree into ``remote_dir`` (files streamed,
        empty directories created, symbolic links skipped)."""
        files = total = 0
        for local, relative, is_dir in c.local_files(local_dir):
            target = c.join(remote_dir, relative)
            if is_dir:
                self.mkdir(target)
                continue
            with open(local, "rb") as f:
                result = self.write(target, f)
            files += 1
            total += result.bytes_written
        return Transferred(files, total)

    def download_dir(self, remote_dir: str, local_dir: c.PathLike) -> Transferred:
        """Copies the tree under ``remote_dir`` into a local directory
        (created if missing); existing local files are overwritten."""
        listing = self.list(remote_dir, depth=c.ALL_LEVELS)
        if listing.truncated:
            raise WsfsError(
                f"'{remote_dir}' holds more entries than one listing returns; download it in parts",
                code=grpc.StatusCode.OUT_OF_RANGE,
                reason="",
            )
        root = os.fspath(local_dir)
        os.makedirs(root, exist_ok=True)
        files = total = 0
        for entry in listing:
            target = c.local_target(root, c.relative_to(listing.path, entry.path))
            if entry.kind is FileKind.DIRECTORY:
                os.makedirs(target, exist_ok=True)
            elif entry.kind is FileKind.FILE:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                total += self.download(entry.path, target)
                files += 1
        return Transferred(files, total)


def _write_local(destination: Any, chunks: Iterable[bytes]) -> int:
    written = 0
    if hasattr(destination, "write"):
        for chunk in chunks:
            destination.write(chunk)
            written += len(chunk)
        return written
    path = os.fspath(destination)
    partial = path + ".partial"
    try:
        with open(partial, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
                written += len(chunk)
        os.replace(partial, path)
    except BaseException:
        try:
            os.remove(partial)
        except OSError:
            pass
        raise
    return written
