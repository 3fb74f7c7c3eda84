"""Every failed wsfs call raises one exception class hierarchy.

The server attaches a ``google.rpc.ErrorInfo`` to each error; its ``reason``
(a stable UPPER_SNAKE word from the contract) picks the class, and its
metadata fills the attributes. A status without a wsfs reason (a transport
failure, a deadline) raises :class:`WsfsError` itself, with its gRPC code.

    try:
        session.write("a.txt", "new", if_version=3)
    except wsfs.VersionMismatch as e:
        print(e.path, e.current_version)
    except wsfs.WsfsError as e:
        print(e.code, e.reason, e.message)
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import grpc
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

__all__ = [
    "WsfsError",
    "FileNotFound",
    "SessionNotFound",
    "SnapshotNotFound",
    "AlreadyExists",
    "NotADirectory",
    "IsADirectory",
    "DirectoryNotEmpty",
    "NotText",
    "NoMatch",
    "AmbiguousMatch",
    "VersionMismatch",
    "InvalidPath",
    "PathEscapesRoot",
    "InvalidPattern",
    "InvalidArgument",
    "TooLarge",
    "OutOfRange",
    "ReadOnly",
    "PermissionDenied",
    "Unauthenticated",
    "QuotaExceeded",
    "Unimplemented",
    "FailedPrecondition",
    "SessionLeased",
    "Cancelled",
    "Unavailable",
    "Internal",
    "error_class",
    "from_entry_error",
]

_DETAILS_KEY = "grpc-status-details-bin"


class WsfsError(Exception):
    """A wsfs call failed.

    Attributes:
        code: the gRPC status code.
        reason: the contract reason (``"FILE_NOT_FOUND"``...), or ``""`` when
            the status carried none.
        message: the server's sentence.
        path: the workspace path the error is about, if any.
        metadata: every ``ErrorInfo`` metadata entry, as strings.
    """

    #: The reason this class stands for; ``""`` for the base class.
    REASON: ClassVar[str] = ""
    #: The gRPC code the server sends with :attr:`REASON`.
    CODE: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str | None = None,
        path: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code: grpc.StatusCode = code if code is not None else self.CODE
        self.reason: str = reason if reason is not None else self.REASON
        self.message: str = message
        self.metadata: dict[str, str] = dict(metadata or {})
        if path is None:
            path = self.metadata.get("path")
        self.path: str | None = path

    def __str__(self) -> str:
        if self.reason:
            return f"{self.reason}: {self.message}"
        return f"{self.code.name}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code.name}, reason={self.reason!r}, "
            f"message={self.message!r}, path={self.path!r})"
        )

    def _int(self, key: str) -> int:
        try:
            return int(self.metadata.get(key, "0"))
        except ValueError:
            return 0


class FileNotFound(WsfsError):
    """No such file or directory."""

    REASON = "FILE_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND


class SessionNotFound(WsfsError):
    """No such session (or it expired). ``session_id`` names it."""

    REASON = "SESSION_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND

    @property
    def session_id(self) -> str:
        return self.metadata.get("session_id", "")


class SnapshotNotFound(WsfsError):
    """No such snapshot. ``snapshot_id`` names it."""

    REASON = "SNAPSHOT_NOT_FOUND"
    CODE = grpc.StatusCode.NOT_FOUND

    @property
    def snapshot_id(self) -> str:
        return self.metadata.get("snapshot_id", "")


class AlreadyExists(WsfsError):
    """A create (``mode=CREATE``, ``if_version=0``, a copy without
    ``overwrite``) found the path taken."""

    REASON = "ALREADY_EXISTS"
    CODE = grpc.StatusCode.ALREADY_EXISTS


class NotADirectory(WsfsError):
    REASON = "NOT_A_DIRECTORY"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class IsADirectory(WsfsError):
    REASON = "IS_A_DIRECTORY"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class DirectoryNotEmpty(WsfsError):
    """Pass ``recursive=True`` to delete a directory with its contents."""

    REASON = "DIRECTORY_NOT_EMPTY"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class NotText(WsfsError):
    """A text read of bytes that are not UTF-8: use ``read_bytes``."""

    REASON = "NOT_TEXT"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class NoMatch(WsfsError):
    """``edit``'s ``old_text`` does not occur in the file."""

    REASON = "NO_MATCH"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class AmbiguousMatch(WsfsError):
    """``edit``'s ``old_text`` occurs ``count`` times and ``replace_all`` was
    not set."""

    REASON = "AMBIGUOUS_MATCH"
    CODE = grpc.StatusCode.FAILED_PRECONDITION

    @property
    def count(self) -> int:
        return self._int("count")


class VersionMismatch(WsfsError):
    """The file is at ``current_version`` (0: it does not exist), not the
    ``expected_version`` the call's ``if_version`` named."""

    REASON = "VERSION_MISMATCH"
    CODE = grpc.StatusCode.ABORTED

    @property
    def current_version(self) -> int:
        return self._int("current_version")

    @property
    def expected_version(self) -> int:
        return self._int("expected_version")


class InvalidPath(WsfsError):
    """A path the session's rules refuse (NUL byte, too deep, segment too
    long, the root where a file is needed)."""

    REASON = "INVALID_PATH"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class PathEscapesRoot(WsfsError):
    """A path that climbs above the workspace root with ``..``."""

    REASON = "PATH_ESCAPES_ROOT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class InvalidPattern(WsfsError):
    """A glob or regex that does not parse; ``pattern`` is the culprit."""

    REASON = "INVALID_PATTERN"
    CODE = grpc.StatusCode.INVALID_ARGUMENT

    @property
    def pattern(self) -> str:
        return self.metadata.get("pattern", "")


class InvalidArgument(WsfsError):
    REASON = "INVALID_ARGUMENT"
    CODE = grpc.StatusCode.INVALID_ARGUMENT


class TooLarge(WsfsError):
    """A write of ``size`` bytes over the session's per-write ``limit``."""

    REASON = "TOO_LARGE"
    CODE = grpc.StatusCode.INVALID_ARGUMENT

    @property
    def size(self) -> int:
        return self._int("size")

    @property
    def limit(self) -> int:
        return self._int("limit")


class OutOfRange(WsfsError):
    """An offset past the end of the file."""

    REASON = "OUT_OF_RANGE"
    CODE = grpc.StatusCode.OUT_OF_RANGE


class ReadOnly(WsfsError):
    """A write to a read-only session, zone or symlink."""

    REASON = "READ_ONLY"
    CODE = grpc.StatusCode.PERMISSION_DENIED


class PermissionDenied(WsfsError):
    REASON = "PERMISSION_DENIED"
    CODE = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(WsfsError):
    """A missing or unknown token."""

    REASON = "UNAUTHENTICATED"
    CODE = grpc.StatusCode.UNAUTHENTICATED


class QuotaExceeded(WsfsError):
    """A session quota (files, bytes, streams) or the server's capacity."""

    REASON = "QUOTA_EXCEEDED"
    CODE = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unimplemented(WsfsError):
    """The server does not support this call (an older server)."""

    REASON = "UNIMPLEMENTED"
    CODE = grpc.StatusCode.UNIMPLEMENTED


class FailedPrecondition(WsfsError):
    """The server is not set up for this (a CONTAINER session on a server
    with no container runtime)."""

    REASON = "FAILED_PRECONDITION"
    CODE = grpc.StatusCode.FAILED_PRECONDITION


class SessionLeased(WsfsError):
    """Another server serves this session (its lease in the object store is
    live), or took it over from this one. ``holder`` names that server."""

    REASON = "SESSION_LEASED"
    CODE = grpc.StatusCode.FAILED_PRECONDITION

    @property
    def session_id(self) -> str:
        return self.metadata.get("session_id", "")

    @property
    def holder(self) -> str:
        return self.metadata.get("holder", "")


class Cancelled(WsfsError):
    REASON = "CANCELLED"
    CODE = grpc.StatusCode.CANCELLED


class Unavailable(WsfsError):
    """The server cannot be reached or is shutting down."""

    REASON = "UNAVAILABLE"
    CODE = grpc.StatusCode.UNAVAILABLE


class Internal(WsfsError):
    REASON = "INTERNAL"
    CODE = grpc.StatusCode.INTERNAL


_BY_REASON: dict[str, type[WsfsError]] = {
    cls.REASON: cls
    for cls in (
        FileNotFound,
        SessionNotFound,
        SnapshotNotFound,
        AlreadyExists,
        NotADirectory,
        IsADirectory,
        DirectoryNotEmpty,
        NotText,
        NoMatch,
        AmbiguousMatch,
        VersionMismatch,
        InvalidPath,
        PathEscapesRoot,
        InvalidPattern,
        InvalidArgument,
        TooLarge,
        OutOfRange,
        ReadOnly,
        PermissionDenied,
        Unauthenticated,
        QuotaExceeded,
        Unimplemented,
        FailedPrecondition,
        SessionLeased,
        Cancelled,
        Unavailable,
        Internal,
    )
}


_BY_CODE: dict[grpc.StatusCode, type[WsfsError]] = {
    cls.CODE: cls for cls in (Unauthenticated, Unimplemented, Cancelled, Unavailable, Internal)
}


def error_class(reason: str) -> type[WsfsError]:
    """The class raised for a contract reason; :class:`WsfsError` for a
    reason this package does not know."""
    return _BY_REASON.get(reason, WsfsError)


def _error_info(trailing_metadata: Any) -> error_details_pb2.ErrorInfo | None:
    for key, value in trailing_metadata or ():
        if key != _DETAILS_KEY:
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except Exception:  # a malformed trailer is no reason to lose the error
            return None
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return None


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def from_entry_error(error: Any) -> WsfsError:
    """The wsfs exception for one failed entry of a batch (a DeleteMany
    result's ``error``), built as :func:`from_rpc_error` builds a call's."""
    code = _CODES.get(error.code, grpc.StatusCode.UNKNOWN)
    cls = error_class(error.reason)
    return cls(error.message, code=code, reason=error.reason, metadata=dict(error.metadata))


def from_rpc_error(error: grpc.RpcError) -> WsfsError:
    """The wsfs exception for a failed call (sync or asyncio)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else None) or str(error)
    trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    info = _error_info(trailers)
    if info is None:
        # No wsfs reason: a transport failure, a deadline, a proxy. The
        # classes that stand for a bare code still apply.
        return _BY_CODE.get(code, WsfsError)(message, code=code, reason="")
    cls = error_class(info.reason)
    return cls(message, code=code, reason=info.reason, metadata=dict(info.metadata))
