//! The one table from a wsfs refusal to the errno a program expects
//! (docs/MOUNT.md shows it).

use fuser::Errno;
use wsfs::Error;

pub fn errno(error: &Error) -> Errno {
    match error {
        Error::FileNotFound { .. } => Errno::ENOENT,
        Error::AlreadyExists { .. } => Errno::EEXIST,
        Error::NotADirectory { .. } => Errno::ENOTDIR,
        Error::IsADirectory { .. } => Errno::EISDIR,
        Error::DirectoryNotEmpty { .. } => Errno::ENOTEMPTY,
        // Names and paths are checked against the session's limits.
        Error::InvalidPath { .. } => Errno::ENAMETOOLONG,
        Error::TooLarge { .. } => Errno::EFBIG,
        Error::ReadOnly { .. } => Errno::EROFS,
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => Errno::EACCES,
        Error::QuotaExceeded { .. } => Errno::ENOSPC,
        // Another writer changed the file first.
        Error::VersionMismatch { .. } => Errno::ESTALE,
        Error::Unimplemented { .. } => Errno::ENOTSUP,
        Error::Cancelled { .. } => Errno::EINTR,
        Error::PathEscapesRoot { .. }
        | Error::InvalidPattern { .. }
        | Error::InvalidArgument { .. }
        | Error::OutOfRange { .. }
        | Error::NotText { .. }
        | Error::NoMatch { .. }
        | Error::AmbiguousMatch { .. } => Errno::EINVAL,
        // The server unreachable (after the bounded wait), the session gone
        // or served elsewhere, or a failure of the server's own.
        Error::Unavailable { .. }
        | Error::SessionNotFound { .. }
        | Error::SnapshotNotFound { .. }
        | Error::SessionLeased { .. }
        | Error::FailedPrecondition { .. }
        | Error::Internal { .. } => Errno::EIO,
    }
}

/// A refusal of the commit that makes a file the mount created: the name
/// taken first by a file made elsewhere is `EEXIST`, as for `O_EXCL`.
pub fn create_errno(error: &Error) -> Errno {
    match error {
        Error::VersionMismatch { .. } | Error::AlreadyExists { .. } => Errno::EEXIST,
        other => errno(other),
    }
}

/// A local I/O failure (the staging directory) as an errno.
pub fn local(error: &std::io::Error) -> Errno {
    Errno::from_i32(error.raw_os_error().unwrap_or(libc::EIO))
}

/// An errno in words, for the mount's own reports.
pub fn describe(errno: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno.into())
}
