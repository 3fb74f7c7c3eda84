"""What the sync and asyncio clients share: addresses, channel options,
credentials and request construction."""

from __future__ import annotations

import os
import re
import uuid
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union
from urllib.parse import urlsplit

from .errors import from_entry_error
from .types import Backend, FileOwner, HostMount, Layout, SessionLimits, WriteMode
from .v1 import filesystem_pb2 as fs_pb2
from .v1 import sessions_pb2

#: Largest message sent or accepted: the protocol's one value (64 MiB +
#: 64 KiB, as the server and the Rust client use), so that whatever the
#: server may send, this client accepts.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024 + 64 * 1024

#: Most entries one DeleteMany carries (the protocol's limit).
MAX_DELETE_ENTRIES = 1024

#: Sessions asked for per ListSessions call when listing them all.
LIST_PAGE = 1000

#: Sessions per ListSessions call when their usage is counted: the most the
#: server counts in one answer (each costs a walk of its workspace).
MAX_USAGE_PAGE = 100

#: Bytes per ReadBytes message asked of the server, and per WriteBytes
#: message sent: the protocol's default chunk.
CHUNK_SIZE = 64 * 1024

#: Lines per Read when ``read_text`` pages through a file.
PAGE_LINES = 10_000
#: Times ``read_text`` starts over when the file changes between its pages.
READ_ATTEMPTS = 3

#: ``list`` depth that reaches every level (``download_dir``).
ALL_LEVELS = 65_535

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES + 64 * 1024),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES + 64 * 1024),
]

PathLike = Union[str, "os.PathLike[str]"]
Data = Union[str, bytes, bytearray, memoryview, Any]


def parse_url(url: str) -> tuple[str, bool]:
    """``"http://host:port"``, ``"https://host:port"`` or ``"host:port"``
    to a gRPC target and whether it needs TLS."""
    if "://" not in url:
        return url, False
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"'{url}' is not a server address (http://HOST:PORT or https://HOST:PORT)")
    if parts.path not in ("", "/"):
        raise ValueError(f"'{url}' has a path; a server address is http(s)://HOST:PORT")
    return parts.netloc, parts.scheme == "https"


#: The metadata naming the session a call is about: a proxy in front of
#: several servers routes each call by it, and a server refuses a call
#: whose metadata names another session than its body.
SESSION_HEADER = "x-wsfs-session"


#: A session's token as servers issue it: ``wsfs_<session id>_<64 hex>``.
#: The session id in it is not a secret (it is the routing key every call
#: about the session carries); the 256 random bits after it authenticate.
_SESSION_TOKEN = re.compile(
    r"wsfs_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})_[0-9a-f]{64}"
)


def token_session(token: str) -> Optional[str]:
    """The session ``token`` names, for routing; None for a token of the
    older shape (``wsfs_<64 hex>``) or an admin token. Says nothing about
    whether the token is valid: only the server knows."""
    match = _SESSION_TOKEN.fullmatch(token)
    return match.group(1) if match else None


def routed(metadata: tuple[tuple[str, str], ...], session_id: str) -> tuple[tuple[str, str], ...]:
    """``metadata`` plus the session a call is about, for the proxy; with
    no ``session_id`` (asking which session the token opens), the session
    the bearer token in ``metadata`` names, if any."""
    if not session_id:
        bearer = [v[len("Bearer ") :] for k, v in metadata if k == "authorization"]
        session_id = (bearer and token_session(bearer[0])) or ""
    if not session_id:
        return metadata
    return metadata + ((SESSION_HEADER, session_id),)


def credentials(token: Optional[str], caller: Optional[str]) -> tuple[tuple[str, str], ...]:
    if token and caller:
        raise ValueError("pass a token or a caller name, not both: the token names its caller")
    if token:
        return (("authorization", f"Bearer {token}"),)
    if caller:
        return (("x-wsfs-caller", caller),)
    return ()


_MODES = {
    WriteMode.OVERWRITE: fs_pb2.OVERWRITE,
    WriteMode.CREATE: fs_pb2.CREATE,
    WriteMode.APPEND: fs_pb2.APPEND,
}


def write_mode(mode: Union[WriteMode, str]) -> Any:
    if isinstance(mode, str):
        try:
            mode = WriteMode(mode.lower())
        except ValueError:
            raise ValueError(
                f"unknown write mode {mode!r}: 'overwrite', 'create' or 'append'"
            ) from None
    return _MODES[mode]


def _backend(backend: Union[Backend, str]) -> Any:
    if isinstance(backend, str):
        backend = Backend(backend.lower())
    if backend is Backend.UNKNOWN:
        raise ValueError("Backend.UNKNOWN cannot be requested")
    return sessions_pb2.Session.Backend.Value(backend.name)


def _layout(layout: Union[Layout, str]) -> Any:
    if isinstance(layout, str):
        layout = Layout(layout.lower())
    if layout is Layout.UNKNOWN:
        raise ValueError("Layout.UNKNOWN cannot be requested")
    return sessions_pb2.Session.Layout.Value(layout.name)


def _seconds(value: Any) -> int:
    if value is None:
        return 0
    if hasattr(value, "total_seconds"):
        value = value.total_seconds()
    if value <= 0:
        raise ValueError("idle_ttl must be positive")
    whole = int(value)
    return whole if whole == value else whole + 1


def create_session_request(
    *,
    backend: Union[Backend, str],
    root: Optional[PathLike],
    mounts: Optional[Sequence[HostMount]],
    seed_files: Optional[Mapping[str, Union[str, bytes]]],
    read_only: bool,
    limits: Optional[SessionLimits],
    layout: Union[Layout, str],
    labels: Optional[Mapping[str, str]],
    idle_ttl: Any,
    from_snapshot: Optional[tuple[str, str]] = None,
    session_id: Optional[str] = None,
    owner: Optional[FileOwner] = None,
) -> sessions_pb2.CreateSessionRequest:
    """The request, with the new session's id chosen here (a random UUID
    unless ``session_id`` names one), so that the creation carries the id a
    proxy routes every later call of the session by."""
    seeds = {
        path: (content.encode("utf-8") if isinstance(content, str) else bytes(content))
        for path, content in (seed_files or {}).items()
    }
    request = sessions_pb2.CreateSessionRequest(
        backend=_backend(backend),
        root=os.fspath(root) if root is not None else "",
        mounts=[m._to_proto() for m in mounts or ()],
        seed_files=seeds,
        read_only=read_only,
        layout=_layout(layout),
        labels=dict(labels or {}),
        idle_ttl_seconds=_seconds(idle_ttl),
        session_id=session_id if session_id is not None else str(uuid.uuid4()),
    )
    if limits is not None:
        request.limits.CopyFrom(limits._to_proto())
    if from_snapshot is not None:
        origin, snapshot_id = from_snapshot
        request.from_snapshot.session_id = origin
        request.from_snapshot.snapshot_id = snapshot_id
    if owner is not None:
        request.owner.CopyFrom(owner._to_proto())
    return request


def read_bytes_request(
    session_id: str, path: str, offset: int, limit: Optional[int], chunk_size: Optional[int]
) -> tuple[fs_pb2.ReadBytesRequest, bool]:
    """The request, and whether the caller asked for zero bytes (sent as a
    one-byte read, since 0 on the wire means "to the end")."""
    empty = limit == 0
    request = fs_pb2.ReadBytesRequest(
        session_id=session_id,
        path=path,
        offset=offset,
        limit=1 if empty else (limit or 0),
        chunk_size=chunk_size or CHUNK_SIZE,
    )
    return request, empty


def write_bytes_header(
    session_id: str,
    path: str,
    mode: Union[WriteMode, str],
    create_parents: bool,
    if_version: Optional[int],
    permissions: Optional[int] = None,
) -> fs_pb2.WriteBytesRequest:
    header = fs_pb2.WriteBytesHeader(
        session_id=session_id, path=path, mode=write_mode(mode), create_parents=create_parents
    )
    if if_version is not None:
        header.if_version = if_version
    if permissions is not None:
        header.permissions = permissions
    return fs_pb2.WriteBytesRequest(header=header)


def set_attributes_request(
    session_id: str,
    path: str,
    permissions: Optional[int],
    modified_at: Optional[Any],
    if_version: Optional[int],
) -> fs_pb2.SetAttributesRequest:
    """``modified_at`` is a timezone-aware ``datetime``."""
    request = fs_pb2.SetAttributesRequest(session_id=session_id, path=check_path_type(path))
    if permissions is not None:
        request.permissions = permissions
    if modified_at is not None:
        request.modified_at.FromDatetime(modified_at)
    if if_version is not None:
        request.if_version = if_version
    return request


def split(data: bytes, size: int = CHUNK_SIZE) -> Iterator[bytes]:
    view = memoryview(data)
    for start in range(0, len(view), size):
        yield bytes(view[start : start + size])


def file_chunks(source: Any) -> Iterator[bytes]:
    """A readable file object (binary, or text: encoded as UTF-8), in chunks."""
    while True:
        chunk = source.read(CHUNK_SIZE)
        if not chunk:
            return
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        yield from split(bytes(chunk))


def bytes_chunks(data: Union[bytes, bytearray, memoryview, Iterable[bytes]]) -> Iterator[bytes]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield from split(bytes(data))
        return
    for chunk in data:
        yield from split(bytes(chunk))


def is_file(obj: Any) -> bool:
    return hasattr(obj, "read") and callable(obj.read)


def check_path_type(path: Any, what: str = "path") -> str:
    if not isinstance(path, str):
        raise TypeError(f"{what} must be a workspace path (str), not {type(path).__name__}")
    return path


def relative_to(listed: str, path: str) -> str:
    """``path`` (canonical) relative to the listed directory (canonical)."""
    if not listed:
        return path
    if path.startswith(listed + "/"):
        return path[len(listed) + 1 :]
    raise ValueError(f"'{path}' is not under '{listed}'")


def local_target(local_root: str, relative: str) -> str:
    """Where a workspace file lands under ``local_root``; refuses anything
    that would leave it (canonical paths never climb, but say so loudly)."""
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts) or os.path.isabs(relative):
        raise ValueError(f"refusing to write '{relative}' outside '{local_root}'")
    return os.path.join(local_root, *parts)


def local_files(local_dir: PathLike) -> Iterator[tuple[str, str, bool]]:
    """(absolute path, path relative to ``local_dir`` with '/', is_dir) for
    every regular file and every empty directory; symbolic links are skipped."""
    root = os.fspath(local_dir)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"'{root}' is not a directory")
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(current, d)))
        rel_dir = os.path.relpath(current, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        regular = sorted(
            f
            for f in files
            if not os.path.islink(os.path.join(current, f))
            and os.path.isfile(os.path.join(current, f))
        )
        if not regular and not dirs and rel_dir:
            yield current, rel_dir, True
        for f in regular:
            yield os.path.join(current, f), f"{rel_dir}/{f}" if rel_dir else f, False


def join(remote_dir: str, relative: str) -> str:
    remote_dir = remote_dir.rstrip("/")
    return f"{remote_dir}/{relative}" if remote_dir else relative


def delete_many_request(
    session_id: str, paths: Sequence[str], *, recursive: bool, allow_missing: bool
) -> fs_pb2.DeleteManyRequest:
    """One DeleteMany of ``paths``, each with the same options."""
    if isinstance(paths, str):
        raise TypeError("delete_many takes a list of paths, not one path")
    if len(paths) > MAX_DELETE_ENTRIES:
        raise ValueError(
            f"delete_many takes at most {MAX_DELETE_ENTRIES} paths a call; got {len(paths)}"
        )
    return fs_pb2.DeleteManyRequest(
        session_id=session_id,
        entries=[
            fs_pb2.DeleteEntry(
                path=check_path_type(path), recursive=recursive, allow_missing=allow_missing
            )
            for path in paths
        ],
    )


def delete_many_results(response: fs_pb2.DeleteManyResponse) -> list:
    """Each entry's count of what went, or its error (not raised)."""
    return [
        from_entry_error(r.error) if r.HasField("error") else r.deleted
        for r in response.results
    ]
