"""What wsfs calls return: small dataclasses and enums, never raw protobuf
messages. Times are timezone-aware ``datetime`` values in UTC."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator, Optional

from google.protobuf import timestamp_pb2

from .v1 import filesystem_pb2 as fs_pb2
from .v1 import sessions_pb2

__all__ = [
    "FileKind",
    "WriteMode",
    "ChangeKind",
    "Backend",
    "Layout",
    "SessionLimits",
    "FileOwner",
    "HostMount",
    "SessionInfo",
    "SessionUsage",
    "TextPage",
    "WriteResult",
    "EditResult",
    "Entry",
    "Listing",
    "FileInfo",
    "AttributesResult",
    "GlobResult",
    "ContextLine",
    "GrepMatch",
    "GrepSummary",
    "ChangeEvent",
    "Changes",
    "SnapshotInfo",
    "SnapshotChangeKind",
    "SnapshotChange",
    "SnapshotDiff",
    "Restored",
    "IssuedToken",
    "Transferred",
]


class _ProtoEnum(enum.Enum):
    """An enum whose members carry the proto enum's names; unknown wire
    values (a newer server) become ``UNKNOWN``."""

    @classmethod
    def _from_wire(cls, name: str):  # type: ignore[no-untyped-def]
        return cls.__members__.get(name, cls.__members__["UNKNOWN"])


class FileKind(_ProtoEnum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    UNKNOWN = "unknown"


class WriteMode(enum.Enum):
    """How ``write`` treats an existing file. Strings work too: ``"create"``."""

    #: Replace the content (create the file when missing). The default.
    OVERWRITE = "overwrite"
    #: Fail with :class:`~wsfs.AlreadyExists` when the path exists.
    CREATE = "create"
    #: Add to the end (create the file when missing).
    APPEND = "append"


class ChangeKind(_ProtoEnum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"
    MOVED = "moved"
    #: First event of a watch, carrying the current ``seq``.
    READY = "ready"
    #: Events since ``since_seq`` are gone: re-read the workspace.
    RESYNC = "resync"
    KEEPALIVE = "keepalive"
    UNKNOWN = "unknown"


class Backend(_ProtoEnum):
    #: In the server's memory.
    MEMORY = "memory"
    #: A directory on the server's disk (bind-mountable; survives restarts).
    DIRECTORY = "directory"
    #: A running container's own filesystem, through a server-side runtime.
    CONTAINER = "container"
    UNKNOWN = "unknown"


class Layout(_ProtoEnum):
    FLAT = "flat"
    #: Zones of a multi-agent swarm: ``shared/``, ``home/<caller>/``, ``sys/``.
    SWARM = "swarm"
    UNKNOWN = "unknown"


def _time(ts: timestamp_pb2.Timestamp) -> datetime:
    return datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=timezone.utc)


def _opt_time(msg, name: str) -> Optional[datetime]:  # type: ignore[no-untyped-def]
    return _time(getattr(msg, name)) if msg.HasField(name) else None


def _enum_name(enum_type, value: int) -> str:  # type: ignore[no-untyped-def]
    try:
        return enum_type.Name(value)
    except ValueError:
        return "UNKNOWN"


@dataclass(frozen=True)
class FileOwner:
    """DIRECTORY sessions: who owns everything the service creates, and
    the bits new files and directories get when a call names none (0: 0o644
    and 0o755). The server must run as root or with CAP_CHOWN."""

    uid: int
    gid: int
    file_permissions: int = 0
    directory_permissions: int = 0

    def _to_proto(self) -> sessions_pb2.FileOwner:
        return sessions_pb2.FileOwner(
            uid=self.uid,
            gid=self.gid,
            file_permissions=self.file_permissions,
            directory_permissions=self.directory_permissions,
        )

    @classmethod
    def _from_proto(cls, p: sessions_pb2.FileOwner) -> "FileOwner":
        return cls(p.uid, p.gid, p.file_permissions, p.directory_permissions)


@dataclass(frozen=True)
class SessionLimits:
    """Per-session limits; 0 means the server's default (no limit for
    ``max_files`` and ``max_total_bytes``)."""

    max_write_bytes: int = 0
    max_path_depth: int = 0
    max_segment_length: int = 0
    max_files: int = 0
    max_total_bytes: int = 0

    def _to_proto(self) -> sessions_pb2.SessionLimits:
        return sessions_pb2.SessionLimits(
            max_write_bytes=self.max_write_bytes,
            max_path_depth=self.max_path_depth,
            max_segment_length=self.max_segment_length,
            max_files=self.max_files,
            max_total_bytes=self.max_total_bytes,
        )

    @classmethod
    def _from_proto(cls, p: sessions_pb2.SessionLimits) -> "SessionLimits":
        return cls(
            p.max_write_bytes,
            p.max_path_depth,
            p.max_segment_length,
            p.max_files,
            p.max_total_bytes,
        )


@dataclass(frozen=True)
class HostMount:
    """A server-side directory copied into the workspace at creation.
    ``host_path`` must lie inside one of the server's ``--allow-root``s."""

    host_path: str
    mount_path: str = ""
    include_glob: tuple[str, ...] = ()
    exclude_glob: tuple[str, ...] = ()
    max_bytes: int = 0
    follow_symlinks: bool = False

    def _to_proto(self) -> sessions_pb2.HostMount:
        return sessions_pb2.HostMount(
            host_path=str(self.host_path),
            mount_path=self.mount_path,
            include_glob=list(self.include_glob),
            exclude_glob=list(self.exclude_glob),
            max_bytes=self.max_bytes,
            follow_symlinks=self.follow_symlinks,
        )


@dataclass(frozen=True)
class SessionUsage:
    """A workspace's regular files and their bytes, as its quotas count them."""

    files: int
    bytes: int


@dataclass(frozen=True)
class SessionInfo:
    id: str
    backend: Backend
    #: DIRECTORY sessions: the absolute directory on the server.
    root_path: Optional[str]
    created_at: datetime
    read_only: bool
    limits: SessionLimits
    layout: Layout
    labels: dict[str, str]
    #: Seconds; None when the session never expires.
    idle_ttl_seconds: Optional[int]
    #: The system caller's token: only from ``create_session``, and only
    #: when the server has tokens on.
    token: Optional[str] = field(default=None, repr=False)
    #: When a call last named the session (what its idle TTL counts from);
    #: None for a session the server lists as unavailable.
    last_active_at: Optional[datetime] = None
    #: Streams open on the session when it was listed, Watch included.
    open_streams: int = 0
    #: What the workspace held when counted: always from ``get_session``,
    #: from ``list_sessions`` only with ``include_usage``.
    usage: Optional[SessionUsage] = None
    #: A fork: the (session_id, snapshot_id) it was made from.
    forked_from: Optional[tuple[str, str]] = None
    #: DIRECTORY sessions made with an owner: it, with the bits applied.
    owner: Optional[FileOwner] = None
    #: With replicas sharing an object store: the replica that serves the
    #: session (None without one, or when no replica's lease holds it).
    served_by: Optional[str] = None
    #: Listed from the object store's record: another replica serves it.
    served_elsewhere: bool = False

    @classmethod
    def _from_proto(cls, p: sessions_pb2.Session) -> "SessionInfo":
        return cls(
            id=p.session_id,
            backend=Backend._from_wire(_enum_name(sessions_pb2.Session.Backend, p.backend)),
            root_path=p.root_path or None,
            created_at=_time(p.created_at),
            read_only=p.read_only,
            limits=SessionLimits._from_proto(p.limits),
            layout=Layout._from_wire(_enum_name(sessions_pb2.Session.Layout, p.layout)),
            labels=dict(p.labels),
            idle_ttl_seconds=p.idle_ttl_seconds or None,
            token=p.token or None,
            last_active_at=_time(p.last_active_at) if p.HasField("last_active_at") else None,
            open_streams=p.open_streams,
            usage=SessionUsage(p.usage.files, p.usage.bytes) if p.HasField("usage") else None,
            forked_from=(
                (p.forked_from.session_id, p.forked_from.snapshot_id)
                if p.HasField("forked_from")
                else None
            ),
            owner=FileOwner._from_proto(p.owner) if p.HasField("owner") else None,
            served_by=p.served_by or None,
            served_elsewhere=p.served_elsewhere,
        )


@dataclass(frozen=True)
class TextPage:
    """One page of a text file, as ``read`` returns it."""

    path: str
    #: The exact text of the selected lines, line endings as stored.
    content: str
    total_lines: int
    #: The first line returned (0-based, clamped to ``total_lines``).
    offset: int
    #: Lines returned.
    lines: int
    #: More lines follow this page.
    truncated: bool
    version: int
    size: int

    @classmethod
    def _from_proto(cls, p: fs_pb2.ReadResponse) -> "TextPage":
        return cls(
            p.path,
            p.content,
            p.total_lines,
            p.offset,
            p.limit,
            p.truncated,
            p.version,
            p.size_bytes,
        )


@dataclass(frozen=True)
class WriteResult:
    path: str
    #: Bytes this call wrote.
    bytes_written: int
    #: Size of the file afterwards.
    size: int
    version: int
    #: The path did not exist before.
    created: bool

    @classmethod
    def _from_proto(cls, p: fs_pb2.WriteResponse) -> "WriteResult":
        return cls(p.path, p.bytes_written, p.size_bytes, p.version, p.created)


@dataclass(frozen=True)
class EditResult:
    path: str
    replacements: int
    #: The version after the edit (unchanged by a dry run).
    version: int
    #: A unified diff of the change.
    diff: str
    dry_run: bool
    size: int

    @classmethod
    def _from_proto(cls, p: fs_pb2.EditResponse) -> "EditResult":
        return cls(p.path, p.replacements, p.version, p.diff, p.dry_run, p.size_bytes)


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    kind: FileKind
    size: int
    modified_at: Optional[datetime]
    version: int
    created_at: Optional[datetime]
    #: Permission bits, 0 to 0o777.
    permissions: int = 0

    @classmethod
    def _from_proto(cls, p: fs_pb2.Entry) -> "Entry":
        return cls(
            name=p.name,
            path=p.path,
            kind=FileKind._from_wire(_enum_name(fs_pb2.FileKind, p.kind)),
            size=p.size_bytes,
            modified_at=_opt_time(p, "modified_at"),
            version=p.version,
            created_at=_opt_time(p, "created_at"),
            permissions=p.permissions,
        )


@dataclass(frozen=True)
class Listing:
    """A directory's entries, sorted by name. Iterating yields the entries."""

    path: str
    entries: list[Entry]
    #: Cut at the server's entry limit.
    truncated: bool

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True)
class FileInfo:
    """What ``stat`` says about a file or directory."""

    path: str
    kind: FileKind
    size: int
    created_at: Optional[datetime]
    modified_at: Optional[datetime]
    version: int
    #: Permission bits, 0 to 0o777.
    permissions: int = 0

    @classmethod
    def _from_proto(cls, p: fs_pb2.StatResponse) -> "FileInfo":
        return cls(
            path=p.path,
            kind=FileKind._from_wire(_enum_name(fs_pb2.FileKind, p.kind)),
            size=p.size_bytes,
            created_at=_opt_time(p, "created_at"),
            modified_at=_opt_time(p, "modified_at"),
            version=p.version,
            permissions=p.permissions,
        )


@dataclass(frozen=True)
class AttributesResult:
    """What ``set_attributes`` left: the bits, the time and the new version."""

    path: str
    permissions: int
    modified_at: Optional[datetime]
    version: int

    @classmethod
    def _from_proto(cls, p: fs_pb2.SetAttributesResponse) -> "AttributesResult":
        return cls(p.path, p.permissions, _opt_time(p, "modified_at"), p.version)


@dataclass(frozen=True)
class GlobResult:
    """Matching file paths, sorted. Iterating yields the paths."""

    paths: list[str]
    truncated: bool

    def __iter__(self) -> Iterator[str]:
        return iter(self.paths)

    def __len__(self) -> int:
        return len(self.paths)


@dataclass(frozen=True)
class ContextLine:
    line_number: int
    line: str


@dataclass(frozen=True)
class GrepMatch:
    path: str
    #: 1-based.
    line_number: int
    line: str
    #: Byte offsets of the first match within ``line`` (UTF-8).
    match_start: int
    match_end: int
    before: list[ContextLine]
    after: list[ContextLine]

    @property
    def match(self) -> str:
        """The matched text."""
        raw = self.line.encode("utf-8")
        return raw[self.match_start : self.match_end].decode("utf-8", errors="replace")

    @classmethod
    def _from_proto(cls, p: fs_pb2.GrepMatch) -> "GrepMatch":
        return cls(
            p.path,
            p.line_number,
            p.line,
            p.match_start,
            p.match_end,
            [ContextLine(c.line_number, c.line) for c in p.before],
            [ContextLine(c.line_number, c.line) for c in p.after],
        )


@dataclass(frozen=True)
class GrepSummary:
    files_searched: int
    matches: int
    #: ``max_matches`` cut the search short.
    truncated: bool


@dataclass(frozen=True)
class ChangeEvent:
    seq: int
    kind: ChangeKind
    path: str
    #: MOVED: the destination.
    to_path: Optional[str]
    version: int
    #: Who made the change (``external`` for changes made outside wsfs).
    caller: str
    at: Optional[datetime]

    @classmethod
    def _from_proto(cls, p: fs_pb2.ChangeEvent) -> "ChangeEvent":
        return cls(
            seq=p.seq,
            kind=ChangeKind._from_wire(_enum_name(fs_pb2.ChangeKind, p.kind)),
            path=p.path,
            to_path=p.to_path or None,
            version=p.version,
            caller=p.caller,
            at=_opt_time(p, "at"),
        )


@dataclass(frozen=True)
class Changes:
    """A page of change events, as ``changes`` returns it."""

    events: list[ChangeEvent]
    #: Pass as ``since_seq`` to continue.
    next_seq: int
    #: Events since ``since_seq`` are gone: re-read the workspace.
    resync: bool

    def __iter__(self) -> Iterator[ChangeEvent]:
        return iter(self.events)

    @classmethod
    def _from_proto(cls, p: fs_pb2.ChangesResponse) -> "Changes":
        return cls([ChangeEvent._from_proto(e) for e in p.events], p.next_seq, p.resync)


@dataclass(frozen=True)
class SnapshotInfo:
    id: str
    tag: str
    created_at: datetime
    #: Regular files held.
    file_count: int
    total_bytes: int

    @classmethod
    def _from_proto(cls, p: sessions_pb2.SnapshotInfo) -> "SnapshotInfo":
        return cls(p.snapshot_id, p.tag, _time(p.created_at), p.file_count, p.total_bytes)


class SnapshotChangeKind(_ProtoEnum):
    #: In the live workspace, not in the snapshot.
    ADDED = "added"
    #: In the snapshot, not in the live workspace.
    DELETED = "deleted"
    #: A file on both sides with other contents.
    MODIFIED = "modified"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class SnapshotChange:
    kind: SnapshotChangeKind
    path: str
    directory: bool


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed in the workspace since a snapshot, in path order."""

    changes: list[SnapshotChange]
    #: More changes than one answer holds (10,000).
    truncated: bool

    @classmethod
    def _from_proto(cls, p: sessions_pb2.DiffSnapshotResponse) -> "SnapshotDiff":
        return cls(
            changes=[
                SnapshotChange(
                    kind=SnapshotChangeKind._from_wire(
                        _enum_name(sessions_pb2.SnapshotChange.Kind, c.kind)
                    ),
                    path=c.path,
                    directory=c.directory,
                )
                for c in p.changes
            ],
            truncated=p.truncated,
        )


@dataclass(frozen=True)
class Restored:
    """What a restore or an archive import left in the workspace."""

    file_count: int
    total_bytes: int


@dataclass(frozen=True)
class IssuedToken:
    """A caller's bearer token (``Client(url, token=...)``)."""

    token: str = field(repr=False)
    caller: str


@dataclass(frozen=True)
class Transferred:
    """What ``upload_dir`` or ``download_dir`` moved."""

    #: Files transferred (empty directories are created, not counted).
    files: int
    bytes: int
