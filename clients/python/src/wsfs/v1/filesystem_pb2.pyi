from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_KIND_UNSPECIFIED: _ClassVar[FileKind]
    FILE: _ClassVar[FileKind]
    DIRECTORY: _ClassVar[FileKind]
    SYMLINK: _ClassVar[FileKind]

class WriteMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERWRITE: _ClassVar[WriteMode]
    CREATE: _ClassVar[WriteMode]
    APPEND: _ClassVar[WriteMode]
    PATCH: _ClassVar[WriteMode]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CREATED: _ClassVar[ChangeKind]
    MODIFIED: _ClassVar[ChangeKind]
    DELETED: _ClassVar[ChangeKind]
    MOVED: _ClassVar[ChangeKind]
    READY: _ClassVar[ChangeKind]
    RESYNC: _ClassVar[ChangeKind]
    KEEPALIVE: _ClassVar[ChangeKind]
FILE_KIND_UNSPECIFIED: FileKind
FILE: FileKind
DIRECTORY: FileKind
SYMLINK: FileKind
OVERWRITE: WriteMode
CREATE: WriteMode
APPEND: WriteMode
PATCH: WriteMode
CHANGE_KIND_UNSPECIFIED: ChangeKind
CREATED: ChangeKind
MODIFIED: ChangeKind
DELETED: ChangeKind
MOVED: ChangeKind
READY: ChangeKind
RESYNC: ChangeKind
KEEPALIVE: ChangeKind

class ReadRequest(_message.Message):
    __slots__ = ("session_id", "path", "offset", "limit")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    offset: int
    limit: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadResponse(_message.Message):
    __slots__ = ("path", "content", "total_lines", "offset", "limit", "truncated", "version", "size_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: str
    total_lines: int
    offset: int
    limit: int
    truncated: bool
    version: int
    size_bytes: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[str] = ..., total_lines: _Optional[int] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ..., truncated: bool = ..., version: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ReadBytesRequest(_message.Message):
    __slots__ = ("session_id", "path", "offset", "limit", "chunk_size")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    offset: int
    limit: int
    chunk_size: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ..., chunk_size: _Optional[int] = ...) -> None: ...

class ReadBytesResponse(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: ReadBytesHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[ReadBytesHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ReadBytesHeader(_message.Message):
    __slots__ = ("path", "size_bytes", "version", "offset", "length")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    path: str
    size_bytes: int
    version: int
    offset: int
    length: int
    def __init__(self, path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., version: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class WriteRequest(_message.Message):
    __slots__ = ("session_id", "path", "content", "mode", "create_parents", "if_version", "permissions")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    content: str
    mode: WriteMode
    create_parents: bool
    if_version: int
    permissions: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[str] = ..., mode: _Optional[_Union[WriteMode, str]] = ..., create_parents: bool = ..., if_version: _Optional[int] = ..., permissions: _Optional[int] = ...) -> None: ...

class WriteBytesRequest(_message.Message):
    __slots__ = ("header", "data", "offset")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    header: WriteBytesHeader
    data: bytes
    offset: int
    def __init__(self, header: _Optional[_Union[WriteBytesHeader, _Mapping]] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class WriteBytesHeader(_message.Message):
    __slots__ = ("session_id", "path", "mode", "create_parents", "if_version", "permissions", "modified_at", "truncate_to", "create_missing")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    CREATE_MISSING_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    mode: WriteMode
    create_parents: bool
    if_version: int
    permissions: int
    modified_at: _timestamp_pb2.Timestamp
    truncate_to: int
    create_missing: bool
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., mode: _Optional[_Union[WriteMode, str]] = ..., create_parents: bool = ..., if_version: _Optional[int] = ..., permissions: _Optional[int] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., truncate_to: _Optional[int] = ..., create_missing: bool = ...) -> None: ...

class WriteResponse(_message.Message):
    __slots__ = ("path", "bytes_written", "size_bytes", "version", "created")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    bytes_written: int
    size_bytes: int
    version: int
    created: bool
    def __init__(self, path: _Optional[str] = ..., bytes_written: _Optional[int] = ..., size_bytes: _Optional[int] = ..., version: _Optional[int] = ..., created: bool = ...) -> None: ...

class EditRequest(_message.Message):
    __slots__ = ("session_id", "path", "old_text", "new_text", "replace_all", "if_version", "dry_run")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OLD_TEXT_FIELD_NUMBER: _ClassVar[int]
    NEW_TEXT_FIELD_NUMBER: _ClassVar[int]
    REPLACE_ALL_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    old_text: str
    new_text: str
    replace_all: bool
    if_version: int
    dry_run: bool
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., old_text: _Optional[str] = ..., new_text: _Optional[str] = ..., replace_all: bool = ..., if_version: _Optional[int] = ..., dry_run: bool = ...) -> None: ...

class EditResponse(_message.Message):
    __slots__ = ("path", "replacements", "version", "diff", "dry_run", "size_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    replacements: int
    version: int
    diff: str
    dry_run: bool
    size_bytes: int
    def __init__(self, path: _Optional[str] = ..., replacements: _Optional[int] = ..., version: _Optional[int] = ..., diff: _Optional[str] = ..., dry_run: bool = ..., size_bytes: _Optional[int] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("session_id", "path", "recursive", "allow_missing", "if_version")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    recursive: bool
    allow_missing: bool
    if_version: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ..., allow_missing: bool = ..., if_version: _Optional[int] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class DeleteManyRequest(_message.Message):
    __slots__ = ("session_id", "entries")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    entries: _containers.RepeatedCompositeFieldContainer[DeleteEntry]
    def __init__(self, session_id: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[DeleteEntry, _Mapping]]] = ...) -> None: ...

class DeleteEntry(_message.Message):
    __slots__ = ("path", "recursive", "allow_missing", "if_version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    allow_missing: bool
    if_version: int
    def __init__(self, path: _Optional[str] = ..., recursive: bool = ..., allow_missing: bool = ..., if_version: _Optional[int] = ...) -> None: ...

class DeleteManyResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteResult, _Mapping]]] = ...) -> None: ...

class DeleteResult(_message.Message):
    __slots__ = ("deleted", "error")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    error: EntryError
    def __init__(self, deleted: _Optional[int] = ..., error: _Optional[_Union[EntryError, _Mapping]] = ...) -> None: ...

class EntryError(_message.Message):
    __slots__ = ("code", "message", "reason", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    reason: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class MkdirRequest(_message.Message):
    __slots__ = ("session_id", "path", "parents", "exist_ok", "permissions")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    EXIST_OK_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    parents: bool
    exist_ok: bool
    permissions: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., parents: bool = ..., exist_ok: bool = ..., permissions: _Optional[int] = ...) -> None: ...

class MkdirResponse(_message.Message):
    __slots__ = ("path", "created")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    created: bool
    def __init__(self, path: _Optional[str] = ..., created: bool = ...) -> None: ...

class TransferRequest(_message.Message):
    __slots__ = ("session_id", "source", "destination", "overwrite", "create_parents", "if_version")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    source: str
    destination: str
    overwrite: bool
    create_parents: bool
    if_version: int
    def __init__(self, session_id: _Optional[str] = ..., source: _Optional[str] = ..., destination: _Optional[str] = ..., overwrite: bool = ..., create_parents: bool = ..., if_version: _Optional[int] = ...) -> None: ...

class TransferResponse(_message.Message):
    __slots__ = ("source", "destination", "entries", "version")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    source: str
    destination: str
    entries: int
    version: int
    def __init__(self, source: _Optional[str] = ..., destination: _Optional[str] = ..., entries: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("session_id", "path", "depth", "start_after")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    depth: int
    start_after: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., depth: _Optional[int] = ..., start_after: _Optional[str] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("name", "path", "kind", "size_bytes", "modified_at", "version", "created_at", "permissions", "symlink_target")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    name: str
    path: str
    kind: FileKind
    size_bytes: int
    modified_at: _timestamp_pb2.Timestamp
    version: int
    created_at: _timestamp_pb2.Timestamp
    permissions: int
    symlink_target: str
    def __init__(self, name: _Optional[str] = ..., path: _Optional[str] = ..., kind: _Optional[_Union[FileKind, str]] = ..., size_bytes: _Optional[int] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., permissions: _Optional[int] = ..., symlink_target: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("path", "entries", "truncated")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    truncated: bool
    def __init__(self, path: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class GlobRequest(_message.Message):
    __slots__ = ("session_id", "pattern", "path", "max_results")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    pattern: str
    path: str
    max_results: int
    def __init__(self, session_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., max_results: _Optional[int] = ...) -> None: ...

class GlobResponse(_message.Message):
    __slots__ = ("paths", "truncated")
    PATHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, paths: _Optional[_Iterable[str]] = ..., truncated: bool = ...) -> None: ...

class GrepRequest(_message.Message):
    __slots__ = ("session_id", "pattern", "path", "glob", "case_insensitive", "fixed_string", "max_matches", "context_lines")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    CASE_INSENSITIVE_FIELD_NUMBER: _ClassVar[int]
    FIXED_STRING_FIELD_NUMBER: _ClassVar[int]
    MAX_MATCHES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LINES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    pattern: str
    path: str
    glob: str
    case_insensitive: bool
    fixed_string: bool
    max_matches: int
    context_lines: int
    def __init__(self, session_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., case_insensitive: bool = ..., fixed_string: bool = ..., max_matches: _Optional[int] = ..., context_lines: _Optional[int] = ...) -> None: ...

class GrepMatch(_message.Message):
    __slots__ = ("path", "line_number", "line", "match_start", "match_end", "before", "after")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    MATCH_START_FIELD_NUMBER: _ClassVar[int]
    MATCH_END_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    path: str
    line_number: int
    line: str
    match_start: int
    match_end: int
    before: _containers.RepeatedCompositeFieldContainer[ContextLine]
    after: _containers.RepeatedCompositeFieldContainer[ContextLine]
    def __init__(self, path: _Optional[str] = ..., line_number: _Optional[int] = ..., line: _Optional[str] = ..., match_start: _Optional[int] = ..., match_end: _Optional[int] = ..., before: _Optional[_Iterable[_Union[ContextLine, _Mapping]]] = ..., after: _Optional[_Iterable[_Union[ContextLine, _Mapping]]] = ...) -> None: ...

class ContextLine(_message.Message):
    __slots__ = ("line_number", "line")
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    line_number: int
    line: str
    def __init__(self, line_number: _Optional[int] = ..., line: _Optional[str] = ...) -> None: ...

class GrepSummary(_message.Message):
    __slots__ = ("files_searched", "matches", "truncated")
    FILES_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    files_searched: int
    matches: int
    truncated: bool
    def __init__(self, files_searched: _Optional[int] = ..., matches: _Optional[int] = ..., truncated: bool = ...) -> None: ...

class GrepResponse(_message.Message):
    __slots__ = ("match", "summary")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    match: GrepMatch
    summary: GrepSummary
    def __init__(self, match: _Optional[_Union[GrepMatch, _Mapping]] = ..., summary: _Optional[_Union[GrepSummary, _Mapping]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("path", "kind", "size_bytes", "created_at", "modified_at", "version", "permissions", "symlink_target")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: FileKind
    size_bytes: int
    created_at: _timestamp_pb2.Timestamp
    modified_at: _timestamp_pb2.Timestamp
    version: int
    permissions: int
    symlink_target: str
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[FileKind, str]] = ..., size_bytes: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., permissions: _Optional[int] = ..., symlink_target: _Optional[str] = ...) -> None: ...

class ExistsRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ExistsResponse(_message.Message):
    __slots__ = ("exists", "kind")
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    exists: bool
    kind: FileKind
    def __init__(self, exists: bool = ..., kind: _Optional[_Union[FileKind, str]] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("session_id", "path", "recursive", "glob", "since_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    recursive: bool
    glob: str
    since_seq: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., recursive: bool = ..., glob: _Optional[str] = ..., since_seq: _Optional[int] = ...) -> None: ...

class ChangeEvent(_message.Message):
    __slots__ = ("seq", "kind", "path", "to_path", "version", "caller", "at")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TO_PATH_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: ChangeKind
    path: str
    to_path: str
    version: int
    caller: str
    at: _timestamp_pb2.Timestamp
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., path: _Optional[str] = ..., to_path: _Optional[str] = ..., version: _Optional[int] = ..., caller: _Optional[str] = ..., at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ChangesRequest(_message.Message):
    __slots__ = ("session_id", "since_seq", "max")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    since_seq: int
    max: int
    def __init__(self, session_id: _Optional[str] = ..., since_seq: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class ChangesResponse(_message.Message):
    __slots__ = ("events", "next_seq", "resync")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[ChangeEvent]
    next_seq: int
    resync: bool
    def __init__(self, events: _Optional[_Iterable[_Union[ChangeEvent, _Mapping]]] = ..., next_seq: _Optional[int] = ..., resync: bool = ...) -> None: ...

class SetAttributesRequest(_message.Message):
    __slots__ = ("session_id", "path", "permissions", "modified_at", "if_version")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    IF_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    permissions: int
    modified_at: _timestamp_pb2.Timestamp
    if_version: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., permissions: _Optional[int] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., if_version: _Optional[int] = ...) -> None: ...

class SetAttributesResponse(_message.Message):
    __slots__ = ("path", "permissions", "modified_at", "version")
    PATH_FIELD_NUMBER: _ClassVar[int]
    PERMISSIONS_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    path: str
    permissions: int
    modified_at: _timestamp_pb2.Timestamp
    version: int
    def __init__(self, path: _Optional[str] = ..., permissions: _Optional[int] = ..., modified_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class SymlinkRequest(_message.Message):
    __slots__ = ("session_id", "path", "target", "create_parents")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    CREATE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    target: str
    create_parents: bool
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., target: _Optional[str] = ..., create_parents: bool = ...) -> None: ...

class SymlinkResponse(_message.Message):
    __slots__ = ("entry",)
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    entry: Entry
    def __init__(self, entry: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...
