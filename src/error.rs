//! The one error enum of the protocol and its gRPC mapping.
//!
//! Each variant is one contract reason. [`Error::to_status`] and
//! [`Error::from_status`] are the only places that translate between the
//! enum and a gRPC `Status` with a `google.rpc.ErrorInfo` detail; server and
//! client both go through them, so a reason means the same on both sides.

use std::collections::HashMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How every refusal for a full disk ([`Error::out_of_space`]) begins.
pub const OUT_OF_SPACE: &str =
    "the server's disk is full (no space, no inodes or its disk quota left)";

/// Every failure a wsfs call can report. The `Display` text is the status
/// message: one sentence a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("'{path}' does not exist")]
    FileNotFound { path: String },
    #[error("session '{session_id}' does not exist")]
    SessionNotFound { session_id: String },
    #[error("snapshot '{snapshot_id}' does not exist")]
    SnapshotNotFound { snapshot_id: String },
    #[error("'{path}' already exists")]
    AlreadyExists { path: String },
    #[error("'{path}' is not a directory")]
    NotADirectory { path: String },
    #[error("'{path}' is a directory")]
    IsADirectory { path: String },
    #[error("directory '{path}' is not empty; pass recursive to remove it with its contents")]
    DirectoryNotEmpty { path: String },
    #[error("'{path}' is not UTF-8 text; use ReadBytes to read it")]
    NotText { path: String },
    #[error("old_text was not found in '{path}'")]
    NoMatch { path: String },
    #[error("old_text occurs {count} times in '{path}'; make it unique or pass replace_all")]
    AmbiguousMatch { path: String, count: u64 },
    #[error("'{path}' is at version {current}, not the expected {expected}")]
    VersionMismatch {
        path: String,
        expected: u64,
        /// 0 when the path does not exist.
        current: u64,
    },
    #[error("{message}")]
    InvalidPath { path: String, message: String },
    #[error("path '{path}' climbs above the workspace root")]
    PathEscapesRoot { path: String },
    #[error("invalid pattern '{pattern}': {message}")]
    InvalidPattern { pattern: String, message: String },
    #[error("{message}")]
    InvalidArgument { message: String },
    #[error(
        "writing {size} bytes to '{path}' exceeds this session's per-write limit of {limit} bytes"
    )]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{message}")]
    OutOfRange { path: String, message: String },
    #[error("{message}")]
    ReadOnly { path: String, message: String },
    #[error("{message}")]
    PermissionDenied { path: String, message: String },
    #[error("{message}")]
    Unauthenticated { message: String },
    #[error("{message}")]
    QuotaExceeded { message: String },
    #[error("{message}")]
    Unimplemented { message: String },
    /// The server is not set up for what was asked (a CONTAINER session on
    /// a server with no container runtime).
    #[error("{message}")]
    FailedPrecondition { message: String },
    /// Another replica serves the session (its lease in the object store
    /// is live), or took it over from this one.
    #[error("{message}")]
    SessionLeased {
        session_id: String,
        holder: String,
        message: String,
    },
    #[error("{message}")]
    Cancelled { message: String },
    #[error("{message}")]
    Unavailable { message: String },
    #[error("{message}")]
    Internal { message: String },
}

impl Error {
    /// The stable `ErrorInfo.reason` word.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::FileNotFound { .. } => "FILE_NOT_FOUND",
            Error::SessionNotFound { .. } => "SESSION_NOT_FOUND",
            Error::SnapshotNotFound { .. } => "SNAPSHOT_NOT_FOUND",
            Error::AlreadyExists { .. } => "ALREADY_EXISTS",
            Error::NotADirectory { .. } => "NOT_A_DIRECTORY",
            Error::IsADirectory { .. } => "IS_A_DIRECTORY",
            Error::DirectoryNotEmpty { .. } => "DIRECTORY_NOT_EMPTY",
            Error::NotText { .. } => "NOT_TEXT",
            Error::NoMatch { .. } => "NO_MATCH",
            Error::AmbiguousMatch { .. } => "AMBIGUOUS_MATCH",
            Error::VersionMismatch { .. } => "VERSION_MISMATCH",
            Error::InvalidPath { .. } => "INVALID_PATH",
            Error::PathEscapesRoot { .. } => "PATH_ESCAPES_ROOT",
            Error::InvalidPattern { .. } => "INVALID_PATTERN",
            Error::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Error::TooLarge { .. } => "TOO_LARGE",
            Error::OutOfRange { .. } => "OUT_OF_RANGE",
            Error::ReadOnly { .. } => "READ_ONLY",
            Error::PermissionDenied { .. } => "PERMISSION_DENIED",
            Error::Unauthenticated { .. } => "UNAUTHENTICATED",
            Error::QuotaExceeded { .. } => "QUOTA_EXCEEDED",
            Error::Unimplemented { .. } => "UNIMPLEMENTED",
            Error::FailedPrecondition { .. } => "FAILED_PRECONDITION",
            Error::SessionLeased { .. } => "SESSION_LEASED",
            Error::Cancelled { .. } => "CANCELLED",
            Error::Unavailable { .. } => "UNAVAILABLE",
            Error::Internal { .. } => "INTERNAL",
        }
    }

    /// The gRPC status code: the single table from reason to code.
    pub fn code(&self) -> Code {
        match self {
            Error::FileNotFound { .. }
            | Error::SessionNotFound { .. }
            | Error::SnapshotNotFound { .. } => Code::NotFound,
            Error::AlreadyExists { .. } => Code::AlreadyExists,
            Error::NotADirectory { .. }
            | Error::IsADirectory { .. }
            | Error::DirectoryNotEmpty { .. }
            | Error::NotText { .. }
            | Error::NoMatch { .. }
            | Error::AmbiguousMatch { .. }
            | Error::FailedPrecondition { .. }
            | Error::SessionLeased { .. } => Code::FailedPrecondition,
            Error::VersionMismatch { .. } => Code::Aborted,
            Error::InvalidPath { .. }
            | Error::PathEscapesRoot { .. }
            | Error::InvalidPattern { .. }
            | Error::InvalidArgument { .. }
            | Error::TooLarge { .. } => Code::InvalidArgument,
            Error::OutOfRange { .. } => Code::OutOfRange,
            Error::ReadOnly { .. } | Error::PermissionDenied { .. } => Code::PermissionDenied,
            Error::Unauthenticated { .. } => Code::Unauthenticated,
            Error::QuotaExceeded { .. } => Code::ResourceExhausted,
            Error::Unimplemented { .. } => Code::Unimplemented,
            Error::Cancelled { .. } => Code::Cancelled,
            Error::Unavailable { .. } => Code::Unavailable,
            Error::Internal { .. } => Code::Internal,
        }
    }

    /// The path the error is about, if any.
    pub fn path(&self) -> Option<&str> {
        match self {
            Error::FileNotFound { path }
            | Error::AlreadyExists { path }
            | Error::NotADirectory { path }
            | Error::IsADirectory { path }
            | Error::DirectoryNotEmpty { path }
            | Error::NotText { path }
            | Error::NoMatch { path }
            | Error::AmbiguousMatch { path, .. }
            | Error::VersionMismatch { path, .. }
            | Error::InvalidPath { path, .. }
            | Error::PathEscapesRoot { path }
            | Error::TooLarge { path, .. }
            | Error::OutOfRange { path, .. }
            | Error::ReadOnly { path, .. }
            | Error::PermissionDenied { path, .. } => Some(path),
            _ => None,
        }
    }

    fn metadata(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        if let Some(path) = self.path() {
            m.insert("path".to_string(), path.to_string());
        }
        match self {
            Error::SessionNotFound { session_id } => {
                m.insert("session_id".into(), session_id.clone());
            }
            Error::SessionLeased {
                session_id, holder, ..
            } => {
                m.insert("session_id".into(), session_id.clone());
                m.insert("holder".into(), holder.clone());
            }
            Error::SnapshotNotFound { snapshot_id } => {
                m.insert("snapshot_id".into(), snapshot_id.clone());
            }
            Error::AmbiguousMatch { count, .. } => {
                m.insert("count".into(), count.to_string());
            }
            Error::VersionMismatch {
                expected, current, ..
            } => {
                m.insert("current_version".into(), current.to_string());
                m.insert("expected_version".into(), expected.to_string());
            }
            Error::InvalidPattern { pattern, .. } => {
                m.insert("pattern".into(), pattern.clone());
            }
            Error::TooLarge { size, limit, .. } => {
                m.insert("size".into(), size.to_string());
                m.insert("limit".into(), limit.to_string());
            }
            _ => {}
        }
        m
    }

    /// The gRPC status for this error, with an `ErrorInfo` detail.
    pub fn to_status(&self) -> Status {
        let details =
            ErrorDetails::with_error_info(self.reason(), crate::ERROR_DOMAIN, self.metadata());
        Status::with_error_details(self.code(), self.to_string(), details)
    }

    /// This error as one entry of a batch answers it (DeleteMany): the
    /// status's code, message and `ErrorInfo`, without the status.
    pub fn to_entry_error(&self) -> crate::proto::EntryError {
        crate::proto::EntryError {
            code: self.code() as i32,
            message: self.to_string(),
            reason: self.reason().to_string(),
            metadata: self.metadata(),
        }
    }

    /// Rebuilds the error of one entry of a batch ([`Self::to_entry_error`]).
    pub fn from_entry_error(e: crate::proto::EntryError) -> Error {
        let details = ErrorDetails::with_error_info(e.reason, crate::ERROR_DOMAIN, e.metadata);
        Error::from_status(&Status::with_error_details(
            Code::from(e.code),
            e.message,
            details,
        ))
    }

    /// Rebuilds the error from a status received over the wire. A status
    /// without a wsfs `ErrorInfo` (a transport failure, say) maps by code.
    pub fn from_status(status: &Status) -> Error {
        let message = status.message().to_string();
        let info = status.get_details_error_info();
        let (reason, meta) = match &info {
            Some(info) => (info.reason.as_str(), info.metadata.clone()),
            None => ("", HashMap::new()),
        };
        let get = |k: &str| meta.get(k).cloned().unwrap_or_default();
        let num = |k: &str| meta.get(k).and_then(|v| v.parse().ok()).unwrap_or(0u64);
        let path = get("path");
        match reason {
            "FILE_NOT_FOUND" => Error::FileNotFound { path },
            "SESSION_NOT_FOUND" => Error::SessionNotFound {
                session_id: get("session_id"),
            },
            "SNAPSHOT_NOT_FOUND" => Error::SnapshotNotFound {
                snapshot_id: get("snapshot_id"),
            },
            "ALREADY_EXISTS" => Error::AlreadyExists { path },
            "NOT_A_DIRECTORY" => Error::NotADirectory { path },
            "IS_A_DIRECTORY" => Error::IsADirectory { path },
            "DIRECTORY_NOT_EMPTY" => Error::DirectoryNotEmpty { path },
            "NOT_TEXT" => Error::NotText { path },
            "NO_MATCH" => Error::NoMatch { path },
            "AMBIGUOUS_MATCH" => Error::AmbiguousMatch {
                path,
                count: num("count"),
            },
            "VERSION_MISMATCH" => Error::VersionMismatch {
                path,
                expected: num("expected_version"),
                current: num("current_version"),
            },
            "INVALID_PATH" => Error::InvalidPath { path, message },
            "PATH_ESCAPES_ROOT" => Error::PathEscapesRoot { path },
            "INVALID_PATTERN" => {
                let pattern = get("pattern");
                let prefix = format!("invalid pattern '{pattern}': ");
                Error::InvalidPattern {
                    message: message
                        .strip_prefix(&prefix)
                        .unwrap_or(&message)
                        .to_string(),
                    pattern,
                }
            }
            "INVALID_ARGUMENT" => Error::InvalidArgument { message },
            "TOO_LARGE" => Error::TooLarge {
                path,
                size: num("size"),
                limit: num("limit"),
            },
            "OUT_OF_RANGE" => Error::OutOfRange { path, message },
            "READ_ONLY" => Error::ReadOnly { path, message },
            "PERMISSION_DENIED" => Error::PermissionDenied { path, message },
            "UNAUTHENTICATED" => Error::Unauthenticated { message },
            "QUOTA_EXCEEDED" => Error::QuotaExceeded { message },
            "UNIMPLEMENTED" => Error::Unimplemented { message },
            "FAILED_PRECONDITION" => Error::FailedPrecondition { message },
            "SESSION_LEASED" => Error::SessionLeased {
                session_id: get("session_id"),
                holder: get("holder"),
                message,
            },
            "CANCELLED" => Error::Cancelled { message },
            "UNAVAILABLE" => Error::Unavailable { message },
            "INTERNAL" => Error::Internal { message },
            _ if info.is_none() && http_answer(&message).is_some() => {
                let (code, text) = http_answer(&message).unwrap_or_default();
                from_http_answer(code, text)
            }
            _ => match status.code() {
                Code::InvalidArgument => Error::InvalidArgument { message },
                Code::Unauthenticated => Error::Unauthenticated { message },
                Code::PermissionDenied => Error::PermissionDenied {
                    path: String::new(),
                    message,
                },
                Code::ResourceExhausted => Error::QuotaExceeded { message },
                Code::Unimplemented => Error::Unimplemented { message },
                Code::Cancelled => Error::Cancelled { message },
                Code::Unavailable | Code::DeadlineExceeded => Error::Unavailable { message },
                Code::Internal => Error::Internal { message },
                // Codes wsfs never sends itself: keep the code in the text.
                _ => Error::Internal {
                    message: format!("{:?}: {message}", status.code()),
                },
            },
        }
    }

    /// Maps an I/O error met while working on `path`. The explicit table
    /// from `io::ErrorKind` to contract reason lives here.
    pub fn from_io(err: std::io::Error, path: &crate::CanonicalPath) -> Error {
        use std::io::ErrorKind as K;
        let path_s = path.as_str().to_string();
        match err.kind() {
            K::NotFound => Error::FileNotFound { path: path_s },
            K::AlreadyExists => Error::AlreadyExists { path: path_s },
            K::NotADirectory => Error::NotADirectory { path: path_s },
            K::IsADirectory => Error::IsADirectory { path: path_s },
            K::DirectoryNotEmpty => Error::DirectoryNotEmpty { path: path_s },
            K::PermissionDenied => Error::PermissionDenied {
                message: format!("the server may not access '{path}': {err}"),
                path: path_s,
            },
            K::StorageFull | K::QuotaExceeded => Error::out_of_space(format!("writing '{path}'")),
            _ => match err.raw_os_error() {
                // ELOOP: a symlink met where none may be followed.
                #[cfg(unix)]
                Some(libc::ELOOP) => Error::PermissionDenied {
                    message: format!(
                        "'{path}' goes through a symbolic link, which wsfs never follows"
                    ),
                    path: path_s,
                },
                _ => Error::Internal {
                    message: format!("I/O error on '{path}': {err}"),
                },
            },
        }
    }

    /// Whether `err` says the disk is full: no blocks or no inodes left
    /// (`ENOSPC`), or the disk quota of the server's user used up
    /// (`EDQUOT`).
    pub fn is_out_of_space(err: &std::io::Error) -> bool {
        use std::io::ErrorKind as K;
        matches!(err.kind(), K::StorageFull | K::QuotaExceeded)
    }

    /// The one answer to a full disk met while `doing` (a gerund phrase:
    /// "storing the snapshot"), whatever the call: RESOURCE_EXHAUSTED
    /// `QUOTA_EXCEEDED` (the contract's "server capacity reached") with a
    /// sentence that says what to do.
    pub fn out_of_space(doing: impl std::fmt::Display) -> Error {
        Error::QuotaExceeded {
            message: format!(
                "{OUT_OF_SPACE} while {doing}: free space on the server (or delete files, \
                 snapshots or sessions) and try again"
            ),
        }
    }

    /// An I/O error met while `doing`: a full disk as [`Error::out_of_space`],
    /// anything else INTERNAL, naming `doing` and the system's words.
    pub fn io_while(err: std::io::Error, doing: impl std::fmt::Display) -> Error {
        if Error::is_out_of_space(&err) {
            return Error::out_of_space(doing);
        }
        Error::Internal {
            message: format!("{doing} failed: {err}"),
        }
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error::Internal {
            message: message.into(),
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            message: message.into(),
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        e.to_status()
    }
}

/// How the message of every error made from a proxy's HTTP answer begins
/// (see [`Error::from_status`]).
pub const PROXY_ANSWERED: &str = "a proxy or gateway in front of the server answered HTTP ";

/// The HTTP status (and its text, possibly empty) a call was answered with
/// instead of gRPC, as tonic reports it: `... response with status: 403
/// Forbidden` for a page with a body, `... HTTP status code 502` for one
/// without. Such an answer comes from something between client and
/// server (a proxy, a gateway, a load balancer), never from a wsfs server.
fn http_answer(message: &str) -> Option<(u16, &str)> {
    ["response with status: ", "HTTP status code "]
        .iter()
        .find_map(|mark| message.split_once(mark).map(|(_, rest)| rest))
        .and_then(|rest| {
            let (code, text) = rest.split_once(' ').unwrap_or((rest, ""));
            let code: u16 = code
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()?;
            let text = text
                .split([')', ',', ';'])
                .next()
                .unwrap_or_default()
                .trim();
            (100..600).contains(&code).then_some((code, text))
        })
}

/// The error an HTTP answer stands for, with gRPC's own mapping of HTTP
/// statuses to codes (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404
/// UNIMPLEMENTED, 429 and 502-504 UNAVAILABLE, others INTERNAL; 405
/// refuses as 403 does), said in one sentence that names the proxy.
fn from_http_answer(code: u16, text: &str) -> Error {
    let answered = match text {
        "" => format!("{PROXY_ANSWERED}{code} instead of gRPC"),
        text => format!("{PROXY_ANSWERED}{code} {text} instead of gRPC"),
    };
    let message = |what: &str| format!("{answered}: {what}");
    match code {
        401 => Error::Unauthenticated {
            message: message("it wants credentials of its own before it lets this call through"),
        },
        403 | 405 => Error::PermissionDenied {
            path: String::new(),
            message: message("it does not let this call through to the server"),
        },
        404 => Error::Unimplemented {
            message: message("it does not pass this call on to a server"),
        },
        429 | 502..=504 => Error::Unavailable {
            message: message("no server behind it answered this call"),
        },
        _ => Error::Internal { message: answered },
    }
}

impl From<Status> for Error {
    fn from(s: Status) -> Error {
        Error::from_status(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_round_trips_through_a_status() {
        let samples = vec![
            Error::FileNotFound { path: "a/b".into() },
            Error::SessionNotFound {
                session_id: "s".into(),
            },
            Error::SnapshotNotFound {
                snapshot_id: "x".into(),
            },
            Error::AlreadyExists { path: "a".into() },
            Error::NotADirectory { path: "a".into() },
            Error::IsADirectory { path: "a".into() },
            Error::DirectoryNotEmpty { path: "a".into() },
            Error::NotText { path: "a".into() },
            Error::NoMatch { path: "a".into() },
            Error::AmbiguousMatch {
                path: "a".into(),
                count: 3,
            },
            Error::VersionMismatch {
                path: "a".into(),
                expected: 2,
                current: 5,
            },
            Error::InvalidPath {
                path: "a".into(),
                message: "bad".into(),
            },
            Error::PathEscapesRoot {
                path: "../a".into(),
            },
            Error::InvalidPattern {
                pattern: "(".into(),
                message: "unclosed".into(),
            },
            Error::InvalidArgument {
                message: "no".into(),
            },
            Error::TooLarge {
                path: "a".into(),
                size: 10,
                limit: 5,
            },
            Error::OutOfRange {
                path: "a".into(),
                message: "past end".into(),
            },
            Error::ReadOnly {
                path: "a".into(),
                message: "ro".into(),
            },
            Error::PermissionDenied {
                path: "a".into(),
                message: "no".into(),
            },
            Error::Unauthenticated {
                message: "who".into(),
            },
            Error::QuotaExceeded {
                message: "full".into(),
            },
            Error::Unimplemented {
                message: "not here".into(),
            },
            Error::FailedPrecondition {
                message: "not set up".into(),
            },
            Error::SessionLeased {
                session_id: "s".into(),
                holder: "replica-1".into(),
                message: "served elsewhere".into(),
            },
            Error::Cancelled {
                message: "gone".into(),
            },
            Error::Unavailable {
                message: "later".into(),
            },
            Error::Internal {
                message: "broke".into(),
            },
        ];
        // Every variant, so a new one cannot be left out of the table.
        let reasons: std::collections::BTreeSet<_> = samples.iter().map(Error::reason).collect();
        assert_eq!(reasons.len(), samples.len());
        assert_eq!(samples.len(), 27, "add the new variant to this list");
        for e in samples {
            let status = e.to_status();
            assert_eq!(status.code(), e.code());
            assert_eq!(Error::from_status(&status), e, "{}", e.reason());
        }
    }

    #[test]
    fn an_http_answer_in_place_of_grpc_is_named_as_the_proxys() {
        let page = Status::internal(
            "protocol error: received message with invalid compression flag: 60 (valid flags \
             are 0 and 1) while receiving response with status: 403 Forbidden",
        );
        let cases = [
            (
                page,
                Code::PermissionDenied,
                "HTTP 403 Forbidden instead of gRPC: it does not let this call through",
            ),
            (
                Status::unauthenticated(
                    "grpc-status header missing, mapped from HTTP status code 401",
                ),
                Code::Unauthenticated,
                "HTTP 401 instead of gRPC: it wants credentials",
            ),
            (
                Status::unimplemented(
                    "grpc-status header missing, mapped from HTTP status code 404",
                ),
                Code::Unimplemented,
                "HTTP 404 instead of gRPC",
            ),
            (
                Status::unavailable("grpc-status header missing, mapped from HTTP status code 502"),
                Code::Unavailable,
                "HTTP 502 instead of gRPC: no server behind it answered",
            ),
        ];
        for (status, code, said) in cases {
            let e = Error::from_status(&status);
            assert_eq!(e.code(), code, "{e}");
            assert!(e.to_string().starts_with(PROXY_ANSWERED), "{e}");
            assert!(e.to_string().contains(said), "{e}");
        }
        // A server's own refusal that mentions a status is left alone.
        let own = Error::PermissionDenied {
            path: String::new(),
            message: "the response with status: 403 is the server's".into(),
        };
        assert_eq!(Error::from_status(&own.to_status()), own);
    }

    #[test]
    fn statuses_without_a_reason_map_by_code_without_decoration() {
        let e = Error::from_status(&Status::internal("boom"));
        assert_eq!(
            e,
            Error::Internal {
                message: "boom".into()
            }
        );
        let e = Error::from_status(&Status::unknown("odd"));
        assert_eq!(
            e,
            Error::Internal {
                message: "Unknown: odd".into()
            }
        );
    }

    #[test]
    fn version_mismatch_carries_current_version_metadata() {
        let s = Error::VersionMismatch {
            path: "f".into(),
            expected: 1,
            current: 7,
        }
        .to_status();
        let info = s.get_details_error_info().unwrap();
        assert_eq!(info.reason, "VERSION_MISMATCH");
        assert_eq!(info.domain, crate::ERROR_DOMAIN);
        assert_eq!(info.metadata["current_version"], "7");
        assert_eq!(info.metadata["path"], "f");
    }
}
