"""The asyncio client: :class:`AsyncClient` and :class:`AsyncSession`, the
same calls as :mod:`wsfs.client` as coroutines; the streams (grep, watch,
byte streams) are async iterators.

    async with wsfs.AsyncClient("127.0.0.1:50051") as client:
        async with client.create_session() as session:
            await session.write("a.txt", "hello\\n")
            async for match in session.grep("hello"):
                print(match.path, match.line_number)
"""

from __future__ import annotations

import asyncio
import os
from typing import (
    IO,
    Any,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Generator,
    Iterable,
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
import grpc.aio

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

__all__ = ["AsyncClient", "AsyncSession", "AsyncByteStream", "AsyncGrepStream", "AsyncWatch"]

T = TypeVar("T")

#: What a stream call's read() returns at the end.
_EOF = grpc.aio.EOF  # type: ignore[attr-defined]


async def _call(awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


class AsyncClient:
    """A connection to a wsfs server for asyncio code; see
    :class:`wsfs.Client` for the arguments. Create it inside a running
    event loop; ``async with`` closes it."""

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
            self._channel = grpc.aio.secure_channel(target, creds, options=channel_options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=channel_options)
        self.url = url
        self._metadata = c.credentials(token, caller)
        self._sessions = sessions_grpc.SessionsStub(self._channel)
        self._filesystem = fs_grpc.FilesystemStub(self._channel)

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.url!r})"

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
    ) -> "_Creating":
        """Creates a session: ``session = await client.create_session()``,
        or ``async with client.create_session() as session:`` to delete it
        when the block ends."""
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
        return _Creating(self, request)

    async def _create(self, request: sessions_pb2.CreateSessionRequest) -> "AsyncSession":
        response = await _call(self._sessions.CreateSession(
                request, metadata=c.routed(self._metadata, request.session_id)
            ))
        info = SessionInfo._from_proto(response)
        session = self.session(info.id, token=info.token)
        session.info = info
        session._owned = True
        return session

    def session(
        self, session_id: str, *, token: Optional[str] = None, caller: Optional[str] = None
    ) -> "AsyncSession":
        metadata = c.credentials(token, caller) if (token or caller) else self._metadata
        return AsyncSession(self, session_id, metadata)

    async def get_session(self, session_id: str) -> SessionInfo:
        request = sessions_pb2.GetSessionRequest(session_id=session_id)
        return SessionInfo._from_proto(
            await _call(
                self._sessions.GetSession(request, metadata=c.routed(self._metadata, session_id))
            )
        )

    async def token_session(self) -> SessionInfo:
        """The session this client's token opens (a GetSession naming
        none): how a holder of nothing but a session's token finds its
        session. Through a proxy the call is routed by the session the
        token names."""
        return await self.get_session("")

    async def list_sessions(
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
            response = await _call(
                self._sessions.ListSessions(request, metadata=self._metadata)
            )
            found.extend(SessionInfo._from_proto(s) for s in response.sessions)
            if not response.next_page_token:
                return found
            token = response.next_page_token

    async def delete_session(self, session_id: str) -> int:
        request = sessions_pb2.DeleteSessionRequest(session_id=session_id)
        metadata = c.routed(self._metadata, session_id)
        response = await _call(self._sessions.DeleteSession(request, metadata=metadata))
        return response.files_deleted

    async def recover_session(
        self, session_id: str, *, snapshot_id: str = "", force: bool = False
    ) -> SessionInfo:
        """See ``Client.recover_session``."""
        request = sessions_pb2.RecoverSessionRequest(
            session_id=session_id, snapshot_id=snapshot_id, force=force
        )
        metadata = c.routed(self._metadata, session_id)
        response = await _call(self._sessions.RecoverSession(request, metadata=metadata))
        return SessionInfo._from_proto(response)

    async def issue_token(self, session_id: str, caller: str) -> IssuedToken:
        request = sessions_pb2.IssueTokenRequest(session_id=session_id, caller=caller)
        metadata = c.routed(self._metadata, session_id)
        response = await _call(self._sessions.IssueToken(request, metadata=metadata))
        return IssuedToken(response.token, response.caller)

    async def snapshot(self, session_id: str, tag: str = "") -> SnapshotInfo:
        return await self.session(session_id).snapshot(tag)

    async def restore(self, session_id: str, snapshot_id: str, *, path: str = "") -> Restored:
        return await self.session(session_id).restore(snapshot_id, path=path)

    async def list_snapshots(self, session_id: str) -> list[SnapshotInfo]:
        return await self.session(session_id).list_snapshots()

    async def diff_snapshot(self, session_id: str, snapshot_id: str) -> SnapshotDiff:
        return await self.session(session_id).diff_snapshot(snapshot_id)

    async def delete_snapshot(self, session_id: str, snapshot_id: str) -> None:
        await self.session(session_id).delete_snapshot(snapshot_id)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel


class _Creating:
    """``await`` it for the session, or ``async with`` it to delete the
    session at the end of the block."""

    def __init__(self, client: AsyncClient, request: sessions_pb2.CreateSessionRequest) -> None:
        self._client = client
        self._request = request
        self._session: Optional[AsyncSession] = None

    def __await__(self) -> Generator[Any, None, "AsyncSession"]:
        return self._client._create(self._request).__await__()

    async def __aenter__(self) -> "AsyncSession":
        self._session = await self._client._create(self._request)
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.delete_session(missing_ok=True)


class AsyncByteStream:
    """A ReadBytes stream: header fields, then ``async for chunk in it``."""

    def __init__(self, call: Any, empty: bool) -> None:
        self._call = call
        self._empty = empty
        self._received = 0
        self._done = False
        self.path = ""
        self.size = 0
        self.version = 0
        self.offset = 0
        self.length = 0

    async def _start(self) -> "AsyncByteStream":
        try:
            first = await self._call.read()
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        if first is _EOF:
            self._done = True
            raise Internal("the ReadBytes stream ended before its header")
        if first.WhichOneof("payload") != "header":
            self.close()
            raise Internal("the ReadBytes stream began with data instead of its header")
        h = first.header
        self.path, self.size, self.version = h.path, h.size_bytes, h.version
        self.offset, self.length = h.offset, 0 if self._empty else h.length
        if self._empty:
            self.close()
        return self

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        if self._done:
            raise StopAsyncIteration
        try:
            message = await self._call.read()
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        if message is _EOF:
            self._done = True
            if self._received != self.length:
                raise Internal(
                    f"the ReadBytes stream ended after {self._received} of the "
                    f"{self.length} bytes its header announced"
                )
            raise StopAsyncIteration
        if message.WhichOneof("payload") != "data":
            self.close()
            raise Internal("the ReadBytes stream sent a second header")
        self._received += len(message.data)
        if self._received > self.length:
            self.close()
            raise Internal("the ReadBytes stream carried more bytes than its header announced")
        return message.data

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self])

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    async def __aenter__(self) -> "AsyncByteStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncGrepStream:
    """Grep matches as an async iterator; :attr:`summary` is set at the end."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._done = False
        self.summary: Optional[GrepSummary] = None

    def __aiter__(self) -> AsyncIterator[GrepMatch]:
        return self

    async def __anext__(self) -> GrepMatch:
        if self._done:
            raise StopAsyncIteration
        try:
            message = await self._call.read()
        except grpc.RpcError as e:
            self._done = True
            raise from_rpc_error(e) from None
        if message is _EOF:
            self._done = True
            raise Internal("the Grep stream ended without its summary")
        if message.WhichOneof("payload") == "summary":
            s = message.summary
            self.summary = GrepSummary(s.files_searched, s.matches, s.truncated)
            self.close()
            raise StopAsyncIteration
        return GrepMatch._from_proto(message.match)

    async def collect(self) -> tuple[list[GrepMatch], GrepSummary]:
        matches = [m async for m in self]
        assert self.summary is not None
        return matches, self.summary

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    async def __aenter__(self) -> "AsyncGrepStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class AsyncWatch:
    """Change events as an async iterator; ends at ``timeout`` or
    :meth:`close` (``async with`` closes it)."""

    def __init__(self, call: Any, keepalives: bool, timeout: Optional[float]) -> None:
        self._call = call
        self._keepalives = keepalives
        self._timeout = timeout
        self._done = False
        self.last_seq = 0

    def __aiter__(self) -> AsyncIterator[ChangeEvent]:
        return self

    async def __anext__(self) -> ChangeEvent:
        while not self._done:
            try:
                message = await self._call.read()
            except asyncio.CancelledError:
                if self._done:  # closed by close() while waiting
                    break
                raise
            except grpc.RpcError as e:
                stopped = self._done or (
                    self._timeout is not None and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                )
                self._done = True
                if stopped:
                    break
                raise from_rpc_error(e) from None
            if message is _EOF:
                self._done = True
                break
            event = ChangeEvent._from_proto(message)
            if event.kind is ChangeKind.KEEPALIVE and not self._keepalives:
                continue
            if event.seq:
                self.last_seq = max(self.last_seq, event.seq)
            return event
        raise StopAsyncIteration

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._call.cancel()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


async def _aiter_chunks(data: Any) -> AsyncIterator[bytes]:
    if hasattr(data, "__aiter__"):
        async for chunk in data:
            for piece in c.split(bytes(chunk)):
                yield piece
        return
    source = c.file_chunks(data) if c.is_file(data) else c.bytes_chunks(data)
    for chunk in source:
        yield chunk


class AsyncSession:
    """One session's workspace, for asyncio code; the calls of
    :class:`wsfs.Session` as coroutines."""

    def __init__(self, client: AsyncClient, session_id: str, metadata: tuple[tuple[str, str], ...]):
        self.client = client
        self.id = session_id
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
        return f"AsyncSession({self.id!r})"

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._owned:
            await self.delete_session(missing_ok=True)

    async def get_info(self) -> SessionInfo:
        return await self.client.get_session(self.id)

    async def delete_session(self, *, missing_ok: bool = False) -> int:
        """Deletes this session and its files (with the client's
        credentials: on a server with tokens, the admin token); returns how
        many files went."""
        try:
            return await self.client.delete_session(self.id)
        except WsfsError as e:
            if missing_ok and e.reason == "SESSION_NOT_FOUND":
                return 0
            raise

    async def read(self, path: str, offset: int = 0, limit: Optional[int] = None) -> TextPage:
        request = fs_pb2.ReadRequest(
            session_id=self.id, path=c.check_path_type(path), offset=offset
        )
        if limit is not None:
            request.limit = limit
        return TextPage._from_proto(await _call(self._fs.Read(request, metadata=self._metadata)))

    async def read_text(self, path: str) -> str:
        last: Optional[WsfsError] = None
        for _ in range(c.READ_ATTEMPTS):
            first = await self.read(path, 0, c.PAGE_LINES)
            parts = [first.content]
            page = first
            while page.truncated:
                page = await self.read(path, page.offset + page.lines, c.PAGE_LINES)
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

    async def stream_bytes(
        self,
        path: str,
        offset: int = 0,
        limit: Optional[int] = None,
        *,
        chunk_size: Optional[int] = None,
    ) -> AsyncByteStream:
        request, empty = c.read_bytes_request(
            self.id, c.check_path_type(path), offset, limit, chunk_size
        )
        call = self._fs.ReadBytes(request, metadata=self._metadata)
        return await AsyncByteStream(call, empty)._start()

    async def read_bytes(self, path: str, offset: int = 0, limit: Optional[int] = None) -> bytes:
        async with await self.stream_bytes(path, offset, limit) as stream:
            return await stream.read()

    async def download(self, path: str, destination: Union[c.PathLike, IO[bytes]]) -> int:
        async with await self.stream_bytes(path) as stream:
            return await _write_local(destination, stream)

    async def write(
        self,
        path: str,
        data: Union[
            str, bytes, bytearray, memoryview, IO[Any], Iterable[bytes], AsyncIterable[bytes]
        ],
        *,
        mode: Union[WriteMode, str] = WriteMode.OVERWRITE,
        create_parents: bool = True,
        if_version: Optional[int] = None,
        permissions: Optional[int] = None,
    ) -> WriteResult:
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
            return WriteResult._from_proto(
                await _call(self._fs.Write(request, metadata=self._metadata))
            )
        header = c.write_bytes_header(
            self.id, path, mode, create_parents, if_version, permissions
        )
        failure: list[BaseException] = []

        async def requests() -> AsyncIterator[fs_pb2.WriteBytesRequest]:
            yield header
            try:
                async for chunk in _aiter_chunks(data):
                    if chunk:
                        yield fs_pb2.WriteBytesRequest(data=chunk)
            except Exception as e:
                failure.append(e)  # grpc cancels the call: nothing is written
                raise

        response = await _upload(self._fs.WriteBytes(requests(), metadata=self._metadata), failure)
        return WriteResult._from_proto(response)

    async def upload(
        self,
        path: str,
        source: Union[c.PathLike, IO[bytes]],
        *,
        mode: Union[WriteMode, str] = WriteMode.OVERWRITE,
        create_parents: bool = True,
        if_version: Optional[int] = None,
    ) -> WriteResult:
        if c.is_file(source):
            return await self.write(
                path,
                cast(IO[bytes], source),
                mode=mode,
                create_parents=create_parents,
                if_version=if_version,
            )
        with open(os.fspath(source), "rb") as f:  # type: ignore[arg-type]
            return await self.write(
                path, f, mode=mode, create_parents=create_parents, if_version=if_version
            )

    async def edit(
        self,
        path: str,
        old_text: str,
        new_text: str,
        *,
        replace_all: bool = False,
        if_version: Optional[int] = None,
        dry_run: bool = False,
    ) -> EditResult:
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
        return EditResult._from_proto(await _call(self._fs.Edit(request, metadata=self._metadata)))

    async def delete(
        self,
        path: str,
        *,
        recursive: bool = False,
        allow_missing: bool = False,
        if_version: Optional[int] = None,
    ) -> int:
        request = fs_pb2.DeleteRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            recursive=recursive,
            allow_missing=allow_missing,
        )
        if if_version is not None:
            request.if_version = if_version
        return (await _call(self._fs.Delete(request, metadata=self._metadata))).deleted

    async def delete_many(
        self,
        paths: Sequence[str],
        *,
        recursive: bool = False,
        allow_missing: bool = False,
    ) -> List[Union[int, WsfsError]]:
        request = c.delete_many_request(
            self.id, paths, recursive=recursive, allow_missing=allow_missing
        )
        return c.delete_many_results(
            await _call(self._fs.DeleteMany(request, metadata=self._metadata))
        )

    async def mkdir(
        self,
        path: str,
        *,
        parents: bool = True,
        exist_ok: bool = True,
        permissions: Optional[int] = None,
    ) -> bool:
        request = fs_pb2.MkdirRequest(
            session_id=self.id, path=c.check_path_type(path), parents=parents, exist_ok=exist_ok
        )
        if permissions is not None:
            request.permissions = permissions
        return (await _call(self._fs.Mkdir(request, metadata=self._metadata))).created

    async def set_attributes(
        self,
        path: str,
        *,
        permissions: Optional[int] = None,
        modified_at: Optional[datetime] = None,
        if_version: Optional[int] = None,
    ) -> AttributesResult:
        request = c.set_attributes_request(self.id, path, permissions, modified_at, if_version)
        return AttributesResult._from_proto(
            await _call(self._fs.SetAttributes(request, metadata=self._metadata))
        )

    async def move(
        self,
        source: str,
        destination: str,
        *,
        overwrite: bool = False,
        create_parents: bool = True,
        if_version: Optional[int] = None,
    ) -> int:
        request = fs_pb2.TransferRequest(
            session_id=self.id,
            source=c.check_path_type(source, "source"),
            destination=c.check_path_type(destination, "destination"),
            overwrite=overwrite,
            create_parents=create_parents,
        )
        if if_version is not None:
            request.if_version = if_version
        return (await _call(self._fs.Move(request, metadata=self._metadata))).entries

    async def copy(
        self, source: str, destination: str, *, overwrite: bool = False, create_parents: bool = True
    ) -> int:
        request = fs_pb2.TransferRequest(
            session_id=self.id,
            source=c.check_path_type(source, "source"),
            destination=c.check_path_type(destination, "destination"),
            overwrite=overwrite,
            create_parents=create_parents,
        )
        return (await _call(self._fs.Copy(request, metadata=self._metadata))).entries

    async def list(self, path: str = "", depth: int = 1, *, start_after: str = "") -> Listing:
        request = fs_pb2.ListRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            depth=depth,
            start_after=c.check_path_type(start_after, "start_after"),
        )
        response = await _call(self._fs.List(request, metadata=self._metadata))
        return Listing(
            response.path, [Entry._from_proto(e) for e in response.entries], response.truncated
        )

    async def glob(self, pattern: str, path: str = "", *, max_results: int = 0) -> GlobResult:
        request = fs_pb2.GlobRequest(
            session_id=self.id,
            pattern=pattern,
            path=c.check_path_type(path),
            max_results=max_results,
        )
        response = await _call(self._fs.Glob(request, metadata=self._metadata))
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
    ) -> AsyncGrepStream:
        """An async iterator of matches (no ``await`` needed to start it)."""
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
        return AsyncGrepStream(self._fs.Grep(request, metadata=self._metadata))

    async def stat(self, path: str) -> FileInfo:
        request = fs_pb2.StatRequest(session_id=self.id, path=c.check_path_type(path))
        return FileInfo._from_proto(await _call(self._fs.Stat(request, metadata=self._metadata)))

    async def exists(self, path: str) -> bool:
        request = fs_pb2.ExistsRequest(session_id=self.id, path=c.check_path_type(path))
        return (await _call(self._fs.Exists(request, metadata=self._metadata))).exists

    def watch(
        self,
        path: str = "",
        *,
        recursive: bool = True,
        glob: Optional[str] = None,
        since_seq: int = 0,
        timeout: Optional[float] = None,
        keepalives: bool = False,
    ) -> AsyncWatch:
        """An async iterator of change events (no ``await`` needed to start it)."""
        request = fs_pb2.WatchRequest(
            session_id=self.id,
            path=c.check_path_type(path),
            recursive=recursive,
            glob=glob or "",
            since_seq=since_seq,
        )
        call = self._fs.Watch(request, metadata=self._metadata, timeout=timeout)
        return AsyncWatch(call, keepalives, timeout)

    async def changes(self, since_seq: int = 0, max: int = 0) -> Changes:
        request = fs_pb2.ChangesRequest(session_id=self.id, since_seq=since_seq, max=max)
        return Changes._from_proto(await _call(self._fs.Changes(request, metadata=self._metadata)))

    async def snapshot(self, tag: str = "") -> SnapshotInfo:
        request = sessions_pb2.SnapshotRequest(session_id=self.id, tag=tag)
        return SnapshotInfo._from_proto(
            await _call(self._sessions.Snapshot(request, metadata=self._admin_metadata))
        )

    async def diff_snapshot(self, snapshot: Union[str, SnapshotInfo]) -> SnapshotDiff:
        """What changed in the workspace since the snapshot."""
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.DiffSnapshotRequest(session_id=self.id, snapshot_id=snapshot_id)
        response = await _call(
            self._sessions.DiffSnapshot(request, metadata=self._admin_metadata)
        )
        return SnapshotDiff._from_proto(response)

    async def restore(self, snapshot: Union[str, SnapshotInfo], *, path: str = "") -> Restored:
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.RestoreRequest(session_id=self.id, snapshot_id=snapshot_id, path=path)
        response = await _call(self._sessions.Restore(request, metadata=self._admin_metadata))
        return Restored(response.file_count, response.total_bytes)

    async def list_snapshots(self) -> List[SnapshotInfo]:
        request = sessions_pb2.ListSnapshotsRequest(session_id=self.id)
        response = await _call(self._sessions.ListSnapshots(request, metadata=self._admin_metadata))
        return [SnapshotInfo._from_proto(s) for s in response.snapshots]

    async def delete_snapshot(self, snapshot: Union[str, SnapshotInfo]) -> None:
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else snapshot
        request = sessions_pb2.DeleteSnapshotRequest(session_id=self.id, snapshot_id=snapshot_id)
        await _call(self._sessions.DeleteSnapshot(request, metadata=self._admin_metadata))

    async def export_archive(
        self,
        destination: Union[c.PathLike, IO[bytes], None] = None,
        *,
        snapshot: Union[str, SnapshotInfo, None] = None,
    ) -> Any:
        snapshot_id = snapshot.id if isinstance(snapshot, SnapshotInfo) else (snapshot or "")
        request = sessions_pb2.ExportArchiveRequest(session_id=self.id, snapshot_id=snapshot_id)
        call = self._sessions.ExportArchive(request, metadata=self._admin_metadata)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                while True:
                    message = await call.read()
                    if message is _EOF:
                        return
                    yield message.data
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            finally:
                call.cancel()

        if destination is None:
            return b"".join([chunk async for chunk in chunks()])
        return await _write_local(destination, chunks())

    async def import_archive(
        self, source: Union[bytes, c.PathLike, IO[bytes], Iterable[bytes], AsyncIterable[bytes]]
    ) -> Restored:
        """Replaces the workspace with a ZIP archive: ``bytes``, a local
        path, a binary file object or an (async) iterable of chunks."""
        if isinstance(source, (str, os.PathLike)):
            with open(os.fspath(source), "rb") as f:
                return await self._import(f)
        return await self._import(source)

    async def _import(self, source: Any) -> Restored:
        failure: list[BaseException] = []

        async def requests() -> AsyncIterator[sessions_pb2.ImportArchiveRequest]:
            yield sessions_pb2.ImportArchiveRequest(session_id=self.id)
            try:
                async for chunk in _aiter_chunks(source):
                    yield sessions_pb2.ImportArchiveRequest(data=chunk)
            except Exception as e:
                failure.append(e)
                raise

        response = await _upload(
            self._sessions.ImportArchive(requests(), metadata=self._admin_metadata), failure
        )
        return Restored(response.file_count, response.total_bytes)

    async def upload_dir(self, local_dir: c.PathLike, remote_dir: str = "") -> Transferred:
        files = total = 0
        for local, relative, is_dir in c.local_files(local_dir):
            target = c.join(remote_dir, relative)
            if is_dir:
                await self.mkdir(target)
                continue
            with open(local, "rb") as f:
                result = await self.write(target, f)
            files += 1
            total += result.bytes_written
        return Transferred(files, total)

    async def download_dir(self, remote_dir: str, local_dir: c.PathLike) -> Transferred:
        listing = await self.list(remote_dir, depth=c.ALL_LEVELS)
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
                total += await self.download(entry.path, target)
                files += 1
        return Transferred(files, total)


async def _upload(call: Any, failure: list[BaseException]) -> Any:
    """Awaits a client-streaming call; when its request iterator failed
    (and grpc cancelled the call), raises that failure instead."""
    try:
        return await call
    except (grpc.RpcError, asyncio.CancelledError) as e:
        if failure:
            raise failure[0] from None
        if isinstance(e, grpc.RpcError):
            raise from_rpc_error(e) from None
        raise


async def _write_local(destination: Any, chunks: AsyncIterator[bytes]) -> int:
    written = 0
    if hasattr(destination, "write"):
        async for chunk in chunks:
            destination.write(chunk)
            written += len(chunk)
        return written
    path = os.fspath(destination)
    partial = path + ".partial"
    try:
        with open(partial, "wb") as f:
            async for chunk in chunks:
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
