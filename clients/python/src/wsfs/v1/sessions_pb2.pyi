from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionLimits(_message.Message):
    __slots__ = ("max_write_bytes", "max_path_depth", "max_segment_length", "max_files", "max_total_bytes")
    MAX_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PATH_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_SEGMENT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_FILES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_write_bytes: int
    max_path_depth: int
    max_segment_length: int
    max_files: int
    max_total_bytes: int
    def __init__(self, max_write_bytes: _Optional[int] = ..., max_path_depth: _Optional[int] = ..., max_segment_length: _Optional[int] = ..., max_files: _Optional[int] = ..., max_total_bytes: _Optional[int] = ...) -> None: ...

class HostMount(_message.Message):
    __slots__ = ("host_path", "mount_path", "include_glob", "exclude_glob", "max_bytes", "follow_symlinks")
    HOST_PATH_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_GLOB_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_GLOB_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    host_path: str
    mount_path: str
    include_glob: _containers.RepeatedScalarFieldContainer[str]
    exclude_glob: _containers.RepeatedScalarFieldContainer[str]
    max_bytes: int
    follow_symlinks: bool
    def __init__(self, host_path: _Optional[str] = ..., mount_path: _Optional[str] = ..., include_glob: _Optional[_Iterable[str]] = ..., exclude_glob: _Optional[_Iterable[str]] = ..., max_bytes: _Optional[int] = ..., follow_symlinks: bool = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("backend", "root", "mounts", "seed_files", "read_only", "limits", "layout", "labels", "idle_ttl_seconds", "session_id", "container", "from_snapshot", "owner")
    class SeedFilesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    SEED_FILES_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    FROM_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    backend: Session.Backend
    root: str
    mounts: _containers.RepeatedCompositeFieldContainer[HostMount]
    seed_files: _containers.ScalarMap[str, bytes]
    read_only: bool
    limits: SessionLimits
    layout: Session.Layout
    labels: _containers.ScalarMap[str, str]
    idle_ttl_seconds: int
    session_id: str
    container: ContainerSpec
    from_snapshot: SnapshotRef
    owner: FileOwner
    def __init__(self, backend: _Optional[_Union[Session.Backend, str]] = ..., root: _Optional[str] = ..., mounts: _Optional[_Iterable[_Union[HostMount, _Mapping]]] = ..., seed_files: _Optional[_Mapping[str, bytes]] = ..., read_only: bool = ..., limits: _Optional[_Union[SessionLimits, _Mapping]] = ..., layout: _Optional[_Union[Session.Layout, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle_ttl_seconds: _Optional[int] = ..., session_id: _Optional[str] = ..., container: _Optional[_Union[ContainerSpec, _Mapping]] = ..., from_snapshot: _Optional[_Union[SnapshotRef, _Mapping]] = ..., owner: _Optional[_Union[FileOwner, _Mapping]] = ...) -> None: ...

class FileOwner(_message.Message):
    __slots__ = ("uid", "gid", "file_permissions", "directory_permissions")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    FILE_PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    file_permissions: int
    directory_permissions: int
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ..., file_permissions: _Optional[int] = ..., directory_permissions: _Optional[int] = ...) -> None: ...

class SnapshotRef(_message.Message):
    __slots__ = ("session_id", "snapshot_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class ContainerSpec(_message.Message):
    __slots__ = ("runtime", "name", "workdir")
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    runtime: str
    name: str
    workdir: str
    def __init__(self, runtime: _Optional[str] = ..., name: _Optional[str] = ..., workdir: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "backend", "root_path", "created_at", "limits", "read_only", "layout", "labels", "idle_ttl_seconds", "token", "last_active_at", "open_streams", "container", "forked_from", "owner", "usage", "served_by", "served_elsewhere")
    class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MEMORY: _ClassVar[Session.Backend]
        DIRECTORY: _ClassVar[Session.Backend]
        CONTAINER: _ClassVar[Session.Backend]
    MEMORY: Session.Backend
    DIRECTORY: Session.Backend
    CONTAINER: Session.Backend
    class Layout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FLAT: _ClassVar[Session.Layout]
        SWARM: _ClassVar[Session.Layout]
    FLAT: Session.Layout
    SWARM: Session.Layout
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ROOT_PATH_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    IDLE_TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVE_AT_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SERVED_BY_FIELD_NUMBER: _ClassVar[int]
    SERVED_ELSEWHERE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    backend: Session.Backend
    root_path: str
    created_at: _timestamp_pb2.Timestamp
    limits: SessionLimits
    read_only: bool
    layout: Session.Layout
    labels: _containers.ScalarMap[str, str]
    idle_ttl_seconds: int
    token: str
    last_active_at: _timestamp_pb2.Timestamp
    open_streams: int
    container: ContainerSpec
    forked_from: SnapshotRef
    owner: FileOwner
    usage: SessionUsage
    served_by: str
    served_elsewhere: bool
    def __init__(self, session_id: _Optional[str] = ..., backend: _Optional[_Union[Session.Backend, str]] = ..., root_path: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., limits: _Optional[_Union[SessionLimits, _Mapping]] = ..., read_only: bool = ..., layout: _Optional[_Union[Session.Layout, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., idle_ttl_seconds: _Optional[int] = ..., token: _Optional[str] = ..., last_active_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., open_streams: _Optional[int] = ..., container: _Optional[_Union[ContainerSpec, _Mapping]] = ..., forked_from: _Optional[_Union[SnapshotRef, _Mapping]] = ..., owner: _Optional[_Union[FileOwner, _Mapping]] = ..., usage: _Optional[_Union[SessionUsage, _Mapping]] = ..., served_by: _Optional[str] = ..., served_elsewhere: bool = ...) -> None: ...

class SessionUsage(_message.Message):
    __slots__ = ("files", "bytes")
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    files: int
    bytes: int
    def __init__(self, files: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("labels", "page_size", "page_token", "include_usage", "local_only")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_USAGE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    include_usage: bool
    local_only: bool
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_usage: bool = ..., local_only: bool = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class RecoverSessionRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id", "force")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    force: bool
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., force: bool = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("files_deleted",)
    FILES_DELETED_FIELD_NUMBER: _ClassVar[int]
    files_deleted: int
    def __init__(self, files_deleted: _Optional[int] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("session_id", "tag")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tag: str
    def __init__(self, session_id: _Optional[str] = ..., tag: _Optional[str] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("snapshot_id", "tag", "created_at", "file_count", "total_bytes")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    TAG_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    tag: str
    created_at: _timestamp_pb2.Timestamp
    file_count: int
    total_bytes: int
    def __init__(self, snapshot_id: _Optional[str] = ..., tag: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., file_count: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class RestoreResponse(_message.Message):
    __slots__ = ("file_count", "total_bytes", "path")
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    file_count: int
    total_bytes: int
    path: str
    def __init__(self, file_count: _Optional[int] = ..., total_bytes: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ExportArchiveRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class ArchiveChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ImportArchiveRequest(_message.Message):
    __slots__ = ("session_id", "data")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    data: bytes
    def __init__(self, session_id: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class ImportArchiveResponse(_message.Message):
    __slots__ = ("file_count", "total_bytes")
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    file_count: int
    total_bytes: int
    def __init__(self, file_count: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class IssueTokenRequest(_message.Message):
    __slots__ = ("session_id", "caller")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    caller: str
    def __init__(self, session_id: _Optional[str] = ..., caller: _Optional[str] = ...) -> None: ...

class IssueTokenResponse(_message.Message):
    __slots__ = ("token", "caller")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    token: str
    caller: str
    def __init__(self, token: _Optional[str] = ..., caller: _Optional[str] = ...) -> None: ...

class DiffSnapshotRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class SnapshotChange(_message.Message):
    __slots__ = ("kind", "path", "directory")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ADDED: _ClassVar[SnapshotChange.Kind]
        DELETED: _ClassVar[SnapshotChange.Kind]
        MODIFIED: _ClassVar[SnapshotChange.Kind]
    ADDED: SnapshotChange.Kind
    DELETED: SnapshotChange.Kind
    MODIFIED: SnapshotChange.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    kind: SnapshotChange.Kind
    path: str
    directory: bool
    def __init__(self, kind: _Optional[_Union[SnapshotChange.Kind, str]] = ..., path: _Optional[str] = ..., directory: bool = ...) -> None: ...

class DiffSnapshotResponse(_message.Message):
    __slots__ = ("changes", "truncated")
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[SnapshotChange]
    truncated: bool
    def __init__(self, changes: _Optional[_Iterable[_Union[SnapshotChange, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class ReadSnapshotFileRequest(_message.Message):
    __slots__ = ("session_id", "snapshot_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    snapshot_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., snapshot_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class SnapshotFileChunk(_message.Message):
    __slots__ = ("size_bytes", "data")
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    size_bytes: int
    data: bytes
    def __init__(self, size_bytes: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
