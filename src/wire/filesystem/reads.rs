//! The calls that read: Read, ReadBytes, List, Stat, Exists, Glob, Grep,
//! Watch.

use super::{link_target, request_path, Request};
use crate::wire::{
    caller_i64, request_count, saturate_u32, server_count, server_kind, server_path,
    server_permissions, system_time, timestamp, wire_count, wire_path,
};
use crate::{
    proto, ByteChunks, ByteRange, ByteStream, CanonicalPath, Error, FileKind, GlobOutcome,
    GlobQuery, GrepQuery, LineRange, Listing, Metadata, PathLimits, Result, TextPage,
};

// ------------------------------------------------------------------- Read

/// Read: lines of a text file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub session_id: String,
    pub path: CanonicalPath,
    pub range: LineRange,
}

/// `limit: None` (the whole file) is `-1` on the wire; unset means the
/// contract's page ([`LineRange::DEFAULT_LIMIT`]).
impl Request for Read {
    type Message = proto::ReadRequest;

    fn parse(r: proto::ReadRequest, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&r.path, limits)?;
        let limit = match r.limit {
            None => Some(LineRange::DEFAULT_LIMIT),
            Some(-1) => None,
            Some(n) => Some(u64::try_from(n).map_err(|_| {
                Error::invalid_argument(format!(
                    "limit must be -1 (whole file) or at least 0 (got {n})"
                ))
            })?),
        };
        let offset = request_count("offset", r.offset)?;
        Ok(Read {
            session_id: r.session_id,
            path,
            range: LineRange { offset, limit },
        })
    }

    fn message(self) -> Result<proto::ReadRequest> {
        Ok(proto::ReadRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            offset: caller_i64("line offset", self.range.offset)?,
            limit: Some(match self.range.limit {
                None => -1,
                Some(limit) => caller_i64("line limit", limit)?,
            }),
        })
    }
}

impl From<TextPage> for proto::ReadResponse {
    fn from(page: TextPage) -> Self {
        proto::ReadResponse {
            path: wire_path(&page.path),
            content: page.content,
            total_lines: wire_count(page.total_lines),
            offset: wire_count(page.offset),
            limit: wire_count(page.lines),
            truncated: page.truncated,
            version: page.version,
            size_bytes: wire_count(page.size),
        }
    }
}

impl TryFrom<proto::ReadResponse> for TextPage {
    type Error = Error;

    fn try_from(r: proto::ReadResponse) -> Result<Self> {
        Ok(TextPage {
            path: server_path(&r.path)?,
            content: r.content,
            total_lines: server_count("total_lines", r.total_lines)?,
            offset: server_count("offset", r.offset)?,
            lines: server_count("limit", r.limit)?,
            truncated: r.truncated,
            version: r.version,
            size: server_count("size_bytes", r.size_bytes)?,
        })
    }
}

// -------------------------------------------------------------- ReadBytes

/// ReadBytes: a byte range of one version of a file, streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBytes {
    pub session_id: String,
    pub path: CanonicalPath,
    pub range: ByteRange,
    /// 0: the server's default.
    pub chunk_size: usize,
}

/// `limit: None` is 0 on the wire ("to the end"). The wire cannot say "zero
/// bytes", so `Some(0)` is sent as a one-byte read whose data the client
/// discards.
impl Request for ReadBytes {
    type Message = proto::ReadBytesRequest;

    fn parse(r: proto::ReadBytesRequest, limits: &PathLimits) -> Result<Self> {
        let path = request_path(&r.path, limits)?;
        let offset = request_count("offset", r.offset)?;
        let limit = match request_count("limit", r.limit)? {
            0 => None,
            n => Some(n),
        };
        Ok(ReadBytes {
            session_id: r.session_id,
            path,
            range: ByteRange { offset, limit },
            chunk_size: r.chunk_size as usize,
        })
    }

    fn message(self) -> Result<proto::ReadBytesRequest> {
        Ok(proto::ReadBytesRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            offset: caller_i64("byte offset", self.range.offset)?,
            limit: match self.range.limit {
                None => 0,
                Some(0) => 1,
                Some(limit) => caller_i64("byte limit", limit)?,
            },
            chunk_size: saturate_u32(self.chunk_size as u64),
        })
    }
}

/// The header a ReadBytes stream opens with; the data follows it.
impl From<&ByteStream> for proto::ReadBytesHeader {
    fn from(s: &ByteStream) -> Self {
        proto::ReadBytesHeader {
            path: wire_path(&s.path),
            size_bytes: wire_count(s.size),
            version: s.version,
            offset: wire_count(s.offset),
            length: wire_count(s.length),
        }
    }
}

/// The stream a ReadBytes header announces, with the data `chunks` that
/// follow it.
pub fn byte_stream(header: proto::ReadBytesHeader, chunks: ByteChunks) -> Result<ByteStream> {
    Ok(ByteStream {
        path: server_path(&header.path)?,
        size: server_count("size_bytes", header.size_bytes)?,
        version: header.version,
        offset: server_count("offset", header.offset)?,
        length: server_count("length", header.length)?,
        chunks,
    })
}

// ------------------------------------------------------------ List, Stat

/// List: a directory's entries, `depth` levels down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List {
    pub session_id: String,
    pub path: CanonicalPath,
    pub depth: u32,
    /// The page after this entry (`start_after`); `None`: the first.
    pub after: Option<CanonicalPath>,
}

impl Request for List {
    type Message = proto::ListRequest;

    fn parse(r: proto::ListRequest, limits: &PathLimits) -> Result<Self> {
        let after = match r.start_after.is_empty() {
            true => None,
            false => Some(request_path(&r.start_after, limits)?),
        };
        Ok(List {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
            depth: r.depth,
            after,
        })
    }

    fn message(self) -> Result<proto::ListRequest> {
        Ok(proto::ListRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            depth: self.depth,
            start_after: self.after.as_ref().map(wire_path).unwrap_or_default(),
        })
    }
}

impl From<Metadata> for proto::Entry {
    fn from(m: Metadata) -> Self {
        proto::Entry {
            name: m.name().to_string(),
            path: wire_path(&m.path),
            kind: proto::FileKind::from(m.kind).into(),
            size_bytes: wire_count(m.size),
            modified_at: timestamp(m.modified),
            version: m.version,
            created_at: timestamp(m.created),
            permissions: m.permissions.bits(),
            symlink_target: m.symlink_target.unwrap_or_default(),
        }
    }
}

impl TryFrom<proto::Entry> for Metadata {
    type Error = Error;

    fn try_from(e: proto::Entry) -> Result<Self> {
        Ok(Metadata {
            path: server_path(&e.path)?,
            kind: server_kind(e.kind)?,
            size: server_count("size_bytes", e.size_bytes)?,
            created: system_time(e.created_at),
            modified: system_time(e.modified_at),
            version: e.version,
            permissions: server_permissions(e.permissions)?,
            symlink_target: link_target(e.symlink_target),
        })
    }
}

impl From<Listing> for proto::ListResponse {
    fn from(l: Listing) -> Self {
        proto::ListResponse {
            path: wire_path(&l.path),
            entries: l.entries.into_iter().map(Into::into).collect(),
            truncated: l.truncated,
        }
    }
}

impl TryFrom<proto::ListResponse> for Listing {
    type Error = Error;

    fn try_from(r: proto::ListResponse) -> Result<Self> {
        Ok(Listing {
            path: server_path(&r.path)?,
            entries: r
                .entries
                .into_iter()
                .map(Metadata::try_from)
                .collect::<Result<_>>()?,
            truncated: r.truncated,
        })
    }
}

/// Stat: what a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub session_id: String,
    pub path: CanonicalPath,
}

impl Request for Stat {
    type Message = proto::StatRequest;

    fn parse(r: proto::StatRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Stat {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
        })
    }

    fn message(self) -> Result<proto::StatRequest> {
        Ok(proto::StatRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
        })
    }
}

/// Stat's answer is a listing entry without the name: one translation
/// of [`Metadata`] serves both.
impl From<Metadata> for proto::StatResponse {
    fn from(m: Metadata) -> Self {
        let e = proto::Entry::from(m);
        proto::StatResponse {
            path: e.path,
            kind: e.kind,
            size_bytes: e.size_bytes,
            created_at: e.created_at,
            modified_at: e.modified_at,
            version: e.version,
            permissions: e.permissions,
            symlink_target: e.symlink_target,
        }
    }
}

impl TryFrom<proto::StatResponse> for Metadata {
    type Error = Error;

    fn try_from(r: proto::StatResponse) -> Result<Self> {
        Metadata::try_from(proto::Entry {
            name: String::new(),
            path: r.path,
            kind: r.kind,
            size_bytes: r.size_bytes,
            created_at: r.created_at,
            modified_at: r.modified_at,
            version: r.version,
            permissions: r.permissions,
            symlink_target: r.symlink_target,
        })
    }
}

/// Exists: whether a path names anything, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exists {
    pub session_id: String,
    pub path: CanonicalPath,
}

impl Request for Exists {
    type Message = proto::ExistsRequest;

    fn parse(r: proto::ExistsRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Exists {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
        })
    }

    fn message(self) -> Result<proto::ExistsRequest> {
        Ok(proto::ExistsRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
        })
    }
}

impl From<Option<FileKind>> for proto::ExistsResponse {
    fn from(kind: Option<FileKind>) -> Self {
        proto::ExistsResponse {
            exists: kind.is_some(),
            kind: kind.map_or(proto::FileKind::Unspecified, Into::into).into(),
        }
    }
}

impl TryFrom<proto::ExistsResponse> for Option<FileKind> {
    type Error = Error;

    fn try_from(r: proto::ExistsResponse) -> Result<Self> {
        if r.exists {
            server_kind(r.kind).map(Some)
        } else {
            Ok(None)
        }
    }
}

// ------------------------------------------------------------ Glob, Grep

/// Glob: paths matching a pattern under a base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pub session_id: String,
    pub query: GlobQuery,
}

/// More results than `uint32` holds saturate: "as many as the server
/// allows".
impl Request for Glob {
    type Message = proto::GlobRequest;

    fn parse(r: proto::GlobRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Glob {
            query: GlobQuery {
                base: request_path(&r.path, limits)?,
                pattern: r.pattern,
                max_results: u64::from(r.max_results),
            },
            session_id: r.session_id,
        })
    }

    fn message(self) -> Result<proto::GlobRequest> {
        Ok(proto::GlobRequest {
            session_id: self.session_id,
            pattern: self.query.pattern,
            path: wire_path(&self.query.base),
            max_results: saturate_u32(self.query.max_results),
        })
    }
}

impl From<GlobOutcome> for proto::GlobResponse {
    fn from(g: GlobOutcome) -> Self {
        proto::GlobResponse {
            paths: g.paths.iter().map(wire_path).collect(),
            truncated: g.truncated,
        }
    }
}

impl TryFrom<proto::GlobResponse> for GlobOutcome {
    type Error = Error;

    fn try_from(r: proto::GlobResponse) -> Result<Self> {
        Ok(GlobOutcome {
            paths: r
                .paths
                .iter()
                .map(|p| server_path(p))
                .collect::<Result<_>>()?,
            truncated: r.truncated,
        })
    }
}

/// Grep: matching lines under a base, streamed (see
/// [`crate::GrepEvent`]'s conversions for the answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grep {
    pub session_id: String,
    pub query: GrepQuery,
}

/// No glob is an empty one on the wire; more matches than `uint32` holds
/// saturate.
impl Request for Grep {
    type Message = proto::GrepRequest;

    fn parse(r: proto::GrepRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Grep {
            query: GrepQuery {
                base: request_path(&r.path, limits)?,
                pattern: r.pattern,
                glob: Some(r.glob).filter(|g| !g.is_empty()),
                case_insensitive: r.case_insensitive,
                fixed_string: r.fixed_string,
                max_matches: u64::from(r.max_matches),
                context_lines: r.context_lines,
            },
            session_id: r.session_id,
        })
    }

    fn message(self) -> Result<proto::GrepRequest> {
        let q = self.query;
        Ok(proto::GrepRequest {
            session_id: self.session_id,
            pattern: q.pattern,
            path: wire_path(&q.base),
            glob: q.glob.unwrap_or_default(),
            case_insensitive: q.case_insensitive,
            fixed_string: q.fixed_string,
            max_matches: saturate_u32(q.max_matches),
            context_lines: q.context_lines,
        })
    }
}

// ------------------------------------------------------------------ Watch

/// Watch: the changes under a path, live. The glob is compiled by the
/// server, which alone knows its glob syntax's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub session_id: String,
    pub path: CanonicalPath,
    /// The whole subtree, not only the path and its direct children.
    pub recursive: bool,
    /// Only paths (relative to `path`) matching it; empty: all.
    pub glob: String,
    /// Resume after this seq; 0: from now.
    pub since_seq: u64,
}

impl Request for Watch {
    type Message = proto::WatchRequest;

    fn parse(r: proto::WatchRequest, limits: &PathLimits) -> Result<Self> {
        Ok(Watch {
            path: request_path(&r.path, limits)?,
            session_id: r.session_id,
            recursive: r.recursive,
            glob: r.glob,
            since_seq: r.since_seq,
        })
    }

    fn message(self) -> Result<proto::WatchRequest> {
        Ok(proto::WatchRequest {
            session_id: self.session_id,
            path: wire_path(&self.path),
            recursive: self.recursive,
            glob: self.glob,
            since_seq: self.since_seq,
        })
    }
}
