//! Every translation between the generated [`proto`] messages and the
//! crate's Rust types, so that the server and the client never translate
//! on their own.
//!
//! This module holds the scalars both directions share (times, counts,
//! permission bits, file kinds, paths); [`filesystem`] holds the
//! `wsfs.v1.Filesystem` service's messages, [`events`] the change events of
//! Watch and Changes, [`sessions`] the `wsfs.v1.Sessions` service's
//! messages (the types are in [`crate::session`]), and [`crate::error`]
//! the one error table.
//!
//! Which gRPC code a value the wire cannot carry gets depends on who sent
//! it: a request the server cannot read, or a value a caller asks a client
//! to send that the wire cannot hold, is the caller's `INVALID_ARGUMENT`;
//! an answer the client cannot read is the server's fault, `INTERNAL`,
//! never a panic.

pub mod events;
pub mod filesystem;
pub mod sessions;

use crate::{proto, ContextLine, Error, GrepEvent, GrepMatch, GrepSummary, Result};
use crate::{CanonicalPath, FileKind, PathLimits, Permissions};
use std::time::{SystemTime, UNIX_EPOCH};

pub use filesystem::Request;

/// A time as the wire carries it.
pub fn timestamp(t: SystemTime) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(t))
}

/// An unset timestamp is the epoch: "unknown", and earlier than any real one.
pub fn system_time(ts: Option<prost_types::Timestamp>) -> SystemTime {
    ts.and_then(|ts| SystemTime::try_from(ts).ok())
        .unwrap_or(UNIX_EPOCH)
}

/// A time a request names; one the system cannot hold is refused.
pub fn request_time(field: &str, ts: Option<prost_types::Timestamp>) -> Result<Option<SystemTime>> {
    ts.map(|ts| {
        // protobuf's Timestamp keeps nanos in 0..1e9; prost would fold
        // anything else into the seconds, silently moving the time.
        if !(0..1_000_000_000).contains(&ts.nanos) {
            return Err(Error::invalid_argument(format!(
                "{field} is not a valid point in time: nanos must be 0 to 999999999 (got {})",
                ts.nanos
            )));
        }
        SystemTime::try_from(ts).map_err(|e| {
            Error::invalid_argument(format!("{field} is not a valid point in time: {e}"))
        })
    })
    .transpose()
}

/// A size or count the server sent as `int64`; negative: `INTERNAL`.
pub fn server_count(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value)
        .map_err(|_| Error::internal(format!("the server sent a negative {field} ({value})")))
}

/// A size or count a request sent as `int64`; negative: `INVALID_ARGUMENT`.
pub fn request_count(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value)
        .map_err(|_| Error::invalid_argument(format!("{field} must not be negative (got {value})")))
}

/// A count for an `int64` field of an answer; no workspace holds more than
/// `i64::MAX`.
pub(crate) fn wire_count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A caller's `u64` for an `int64` field of a request; larger than the wire
/// carries: `INVALID_ARGUMENT`.
pub fn caller_i64(field: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::invalid_argument(format!(
            "{field} {value} is larger than the protocol allows ({})",
            i64::MAX
        ))
    })
}

/// A caller's `u64` for a `uint32` field where larger means "as many as the
/// server allows": saturates.
pub(crate) fn saturate_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Bits a request names, refused above `0o777`.
pub fn request_permissions(bits: Option<u32>) -> Result<Option<Permissions>> {
    bits.map(Permissions::new).transpose()
}

/// Permission bits the server sent; above `0o777`: `INTERNAL`.
pub fn server_permissions(bits: u32) -> Result<Permissions> {
    Permissions::new(bits).map_err(|_| {
        Error::internal(format!(
            "the server sent permissions {bits:#o}, above 0o777"
        ))
    })
}

impl From<FileKind> for proto::FileKind {
    fn from(kind: FileKind) -> Self {
        match kind {
            FileKind::File => proto::FileKind::File,
            FileKind::Directory => proto::FileKind::Directory,
            FileKind::Symlink => proto::FileKind::Symlink,
        }
    }
}

/// The kind the server sent; UNSPECIFIED or unknown: `INTERNAL`.
pub fn server_kind(value: i32) -> Result<FileKind> {
    match proto::FileKind::try_from(value) {
        Ok(proto::FileKind::File) => Ok(FileKind::File),
        Ok(proto::FileKind::Directory) => Ok(FileKind::Directory),
        Ok(proto::FileKind::Symlink) => Ok(FileKind::Symlink),
        Ok(proto::FileKind::Unspecified) | Err(_) => Err(Error::internal(format!(
            "the server sent an unknown file kind ({value})"
        ))),
    }
}

/// A local path as the protocol's UTF-8 string; `INVALID_ARGUMENT` naming
/// `what` when it is not UTF-8.
pub fn utf8_path(what: &str, path: &std::path::Path) -> Result<String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        Error::invalid_argument(format!(
            "{what} '{}' is not valid UTF-8, which the protocol requires",
            path.display()
        ))
    })
}

/// A path the server sent. Parsed rather than trusted, so a server bug
/// surfaces as an error instead of a debug assertion.
pub fn server_path(raw: &str) -> Result<CanonicalPath> {
    CanonicalPath::parse(raw, &PathLimits::UNLIMITED)
        .map_err(|e| Error::internal(format!("the server sent an invalid path '{raw}': {e}")))
}

/// A path as the wire carries it.
pub(crate) fn wire_path(path: &CanonicalPath) -> String {
    path.as_str().to_string()
}

impl From<ContextLine> for proto::ContextLine {
    fn from(c: ContextLine) -> Self {
        proto::ContextLine {
            line_number: c.line_number,
            line: c.line,
        }
    }
}

impl From<proto::ContextLine> for ContextLine {
    fn from(c: proto::ContextLine) -> Self {
        ContextLine {
            line_number: c.line_number,
            line: c.line,
        }
    }
}

impl From<GrepEvent> for proto::GrepResponse {
    fn from(e: GrepEvent) -> Self {
        use proto::grep_response::Payload;
        let payload = match e {
            GrepEvent::Match(m) => Payload::Match(proto::GrepMatch {
                path: wire_path(&m.path),
                line_number: m.line_number,
                line: m.line,
                match_start: m.match_start,
                match_end: m.match_end,
                before: m.before.into_iter().map(Into::into).collect(),
                after: m.after.into_iter().map(Into::into).collect(),
            }),
            GrepEvent::Summary(sum) => Payload::Summary(proto::GrepSummary {
                files_searched: sum.files_searched,
                matches: sum.matches,
                truncated: sum.truncated,
            }),
        };
        proto::GrepResponse {
            payload: Some(payload),
        }
    }
}

/// A message with neither a match nor a summary, or an invalid path, is
/// the server's fault: `INTERNAL`.
impl TryFrom<proto::GrepResponse> for GrepEvent {
    type Error = Error;

    fn try_from(r: proto::GrepResponse) -> Result<Self> {
        use proto::grep_response::Payload;
        match r.payload {
            Some(Payload::Match(m)) => Ok(GrepEvent::Match(GrepMatch {
                path: server_path(&m.path)?,
                line_number: m.line_number,
                line: m.line,
                match_start: m.match_start,
                match_end: m.match_end,
                before: m.before.into_iter().map(Into::into).collect(),
                after: m.after.into_iter().map(Into::into).collect(),
            })),
            Some(Payload::Summary(s)) => Ok(GrepEvent::Summary(GrepSummary {
                files_searched: s.files_searched,
                matches: s.matches,
                truncated: s.truncated,
            })),
            None => Err(Error::internal(
                "the server sent a Grep message with neither a match nor a summary",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tonic::Code;

    #[test]
    fn every_file_kind_round_trips_and_unspecified_is_internal() {
        for kind in [FileKind::File, FileKind::Directory, FileKind::Symlink] {
            assert_eq!(
                server_kind(proto::FileKind::from(kind) as i32).unwrap(),
                kind
            );
        }
        let err = server_kind(proto::FileKind::Unspecified as i32).unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        assert!(server_kind(99).is_err());
    }

    #[test]
    fn times_round_trip_and_a_missing_one_is_the_epoch() {
        let at = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        assert_eq!(system_time(timestamp(at)), at);
        assert_eq!(request_time("t", timestamp(at)).unwrap(), Some(at));
        assert_eq!(system_time(None), UNIX_EPOCH);
        assert_eq!(request_time("t", None).unwrap(), None);
    }

    #[test]
    fn a_requested_time_with_nanos_out_of_range_is_invalid_argument() {
        let ts = prost_types::Timestamp {
            seconds: 1,
            nanos: 1_000_000_000,
        };
        let err = request_time("modified_at", Some(ts)).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.to_string().contains("modified_at"), "{err}");
    }

    #[test]
    fn counts_round_trip_and_negative_ones_are_refused_by_side() {
        assert_eq!(server_count("n", wire_count(7)).unwrap(), 7);
        assert_eq!(request_count("n", caller_i64("n", 7).unwrap()).unwrap(), 7);
        assert_eq!(server_count("n", -1).unwrap_err().code(), Code::Internal);
        assert_eq!(
            request_count("n", -1).unwrap_err().code(),
            Code::InvalidArgument
        );
        assert_eq!(
            caller_i64("n", u64::MAX).unwrap_err().code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn permissions_round_trip_and_out_of_range_bits_are_refused_by_side() {
        let bits = Permissions::new(0o640).unwrap();
        assert_eq!(server_permissions(bits.bits()).unwrap(), bits);
        assert_eq!(request_permissions(Some(bits.bits())).unwrap(), Some(bits));
        assert_eq!(
            server_permissions(0o4755).unwrap_err().code(),
            Code::Internal
        );
        assert_eq!(
            request_permissions(Some(0o4755)).unwrap_err().code(),
            Code::InvalidArgument
        );
    }

    #[test]
    fn grep_events_round_trip() {
        let path = CanonicalPath::parse("src/a.rs", &PathLimits::UNLIMITED).unwrap();
        let events = [
            GrepEvent::Match(GrepMatch {
                path,
                line_number: 2,
                line: "fn main() {}".into(),
                match_start: 3,
                match_end: 7,
                before: vec![ContextLine {
                    line_number: 1,
                    line: "// hi".into(),
                }],
                after: vec![ContextLine {
                    line_number: 3,
                    line: String::new(),
                }],
            }),
            GrepEvent::Summary(GrepSummary {
                files_searched: 4,
                matches: 1,
                truncated: true,
            }),
        ];
        for event in events {
            let wire = proto::GrepResponse::from(event.clone());
            assert_eq!(GrepEvent::try_from(wire).unwrap(), event);
        }
    }
}
