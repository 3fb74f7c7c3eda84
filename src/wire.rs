//! Conversions between the crate's types and the generated [`proto`]
//! types that both sides use: times, counts, paths and Grep's events.

use crate::{proto, ContextLine, Error, GrepEvent, GrepMatch, GrepSummary, Result};
use crate::{CanonicalPath, PathLimits};
use std::time::{SystemTime, UNIX_EPOCH};

/// A time as the wire carries it.
pub fn timestamp(t: SystemTime) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp::from(t))
}

/// An unset timestamp is the epoch: "unknown", and earlier than any real one.
pub fn system_time(ts: Option<prost_types::Timestamp>) -> SystemTime {
    ts.and_then(|ts| SystemTime::try_from(ts).ok())
        .unwrap_or(UNIX_EPOCH)
}

/// A size or count the server sent as `int64`; negative: `INTERNAL`.
pub fn server_count(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value)
        .map_err(|_| Error::internal(format!("the server sent a negative {field} ({value})")))
}

/// A count for an `int64` field; no workspace holds more than `i64::MAX`.
pub(crate) fn wire_count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
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
                path: m.path.as_str().to_string(),
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
