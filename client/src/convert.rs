//! Every translation between the generated `wsfs::proto` messages and the
//! Rust types of `wsfs` and this crate, in one place.
//!
//! Requests are built from values the caller controls, so a number the wire
//! cannot carry is `INVALID_ARGUMENT`. Responses come from the server, so a
//! value that breaks the protocol (a negative size, an unknown kind, a path
//! that climbs out of the root) is `INTERNAL`, never a panic.

use crate::sessions::{
    Backend, ContainerSpec, FileOwner, Layout, SessionInfo, SessionLimits, SessionOptions,
    SessionUsage, SnapshotRef,
};
use bytes::Bytes;
use std::path::PathBuf;
use std::time::Duration;
use wsfs::proto;
pub(crate) use wsfs::wire::{server_count, server_path, system_time, utf8_path};
use wsfs::{
    Attributes, AttributesOutcome, ByteRange, ByteStream, CanonicalPath, DeleteOptions,
    EditOutcome, EditSpec, Error, FileKind, GlobOutcome, GlobQuery, GrepQuery, LineRange, Listing,
    Metadata, MkdirOptions, PatchOptions, Permissions, Result, SymlinkOptions, TextPage,
    TransferOptions, WriteMode, WriteOptions, WriteOutcome,
};

// ---------------------------------------------------------------- scalars

/// A caller's `u64` for an `int64` field.
pub(crate) fn wire_i64(field: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::invalid_argument(format!(
            "{field} {value} is larger than the protocol allows ({})",
            i64::MAX
        ))
    })
}

/// A caller's `u64` for a `uint32` field where larger means "as many as the
/// server allows": saturates.
fn saturate_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Permission bits the server sent.
pub(crate) fn server_permissions(bits: u32) -> Result<Permissions> {
    Permissions::new(bits).map_err(|_| {
        Error::internal(format!(
            "the server sent permissions {bits:#o}, above 0o777"
        ))
    })
}

pub(crate) fn file_kind(value: i32) -> Result<FileKind> {
    match proto::FileKind::try_from(value) {
        Ok(proto::FileKind::File) => Ok(FileKind::File),
        Ok(proto::FileKind::Directory) => Ok(FileKind::Directory),
        Ok(proto::FileKind::Symlink) => Ok(FileKind::Symlink),
        Ok(proto::FileKind::Unspecified) | Err(_) => Err(Error::internal(format!(
            "the server sent an unknown file kind ({value})"
        ))),
    }
}

pub(crate) fn write_mode(mode: WriteMode) -> proto::WriteMode {
    match mode {
        WriteMode::Overwrite => proto::WriteMode::Overwrite,
        WriteMode::Create => proto::WriteMode::Create,
        WriteMode::Append => proto::WriteMode::Append,
    }
}

// ------------------------------------------------------- filesystem requests

/// `limit: None` (the whole file) is `-1` on the wire; unset would mean 2000.
pub(crate) fn read_request(
    session_id: &str,
    path: &CanonicalPath,
    range: LineRange,
) -> Result<proto::ReadRequest> {
    Ok(proto::ReadRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        offset: wire_i64("line offset", range.offset)?,
        limit: Some(match range.limit {
            None => -1,
            Some(limit) => wire_i64("line limit", limit)?,
        }),
    })
}

/// `limit: None` is 0 on the wire ("to the end"). The wire cannot say "zero
/// bytes", so `Some(0)` is sent as a one-byte read and the caller discards
/// the data (see `Session::read_bytes`).
pub(crate) fn read_bytes_request(
    session_id: &str,
    path: &CanonicalPath,
    range: ByteRange,
    chunk_size: usize,
) -> Result<proto::ReadBytesRequest> {
    Ok(proto::ReadBytesRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        offset: wire_i64("byte offset", range.offset)?,
        limit: match range.limit {
            None => 0,
            Some(0) => 1,
            Some(limit) => wire_i64("byte limit", limit)?,
        },
        chunk_size: u32::try_from(chunk_size).unwrap_or(u32::MAX),
    })
}

pub(crate) fn write_request(
    session_id: &str,
    path: &CanonicalPath,
    content: &str,
    options: WriteOptions,
) -> proto::WriteRequest {
    proto::WriteRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        content: content.to_string(),
        mode: write_mode(options.mode).into(),
        create_parents: Some(options.create_parents),
        if_version: options.if_version,
        permissions: options.permissions.map(Permissions::bits),
    }
}

pub(crate) fn write_bytes_header(
    session_id: &str,
    path: &CanonicalPath,
    options: WriteOptions,
) -> proto::WriteBytesRequest {
    upload_header(proto::WriteBytesHeader {
        mode: write_mode(options.mode).into(),
        create_parents: Some(options.create_parents),
        if_version: options.if_version,
        permissions: options.permissions.map(Permissions::bits),
        modified_at: options.modified.map(prost_types::Timestamp::from),
        ..upload_target(session_id, path)
    })
}

/// The header of a PATCH upload.
pub(crate) fn patch_header(
    session_id: &str,
    path: &CanonicalPath,
    options: PatchOptions,
) -> proto::WriteBytesRequest {
    upload_header(proto::WriteBytesHeader {
        mode: proto::WriteMode::Patch.into(),
        create_parents: Some(options.create_parents),
        if_version: options.if_version,
        permissions: options.permissions.map(Permissions::bits),
        modified_at: options.modified.map(prost_types::Timestamp::from),
        truncate_to: options.truncate_to,
        create_missing: options.create_missing,
        ..upload_target(session_id, path)
    })
}

/// A header naming only the session and the file.
fn upload_target(session_id: &str, path: &CanonicalPath) -> proto::WriteBytesHeader {
    proto::WriteBytesHeader {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        ..Default::default()
    }
}

fn upload_header(header: proto::WriteBytesHeader) -> proto::WriteBytesRequest {
    proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Header(header)),
    }
}

/// A PATCH upload's message that moves the write position.
pub(crate) fn write_bytes_offset(offset: u64) -> proto::WriteBytesRequest {
    proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Offset(offset)),
    }
}

pub(crate) fn symlink_request(
    session_id: &str,
    path: &CanonicalPath,
    target: &str,
    options: SymlinkOptions,
) -> proto::SymlinkRequest {
    proto::SymlinkRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        target: target.to_string(),
        create_parents: Some(options.create_parents),
    }
}

/// The new link's entry; an answer without one is the server's fault.
pub(crate) fn symlink_metadata(r: proto::SymlinkResponse) -> Result<Metadata> {
    let entry = r
        .entry
        .ok_or_else(|| Error::internal("the server answered Symlink without the link's entry"))?;
    entry_metadata(entry)
}

pub(crate) fn write_bytes_data(data: Bytes) -> proto::WriteBytesRequest {
    proto::WriteBytesRequest {
        payload: Some(proto::write_bytes_request::Payload::Data(data)),
    }
}

pub(crate) fn edit_request(
    session_id: &str,
    path: &CanonicalPath,
    edit: EditSpec,
) -> proto::EditRequest {
    proto::EditRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        old_text: edit.old_text,
        new_text: edit.new_text,
        replace_all: edit.replace_all,
        if_version: edit.if_version,
        dry_run: edit.dry_run,
    }
}

pub(crate) fn delete_request(
    session_id: &str,
    path: &CanonicalPath,
    options: DeleteOptions,
) -> proto::DeleteRequest {
    proto::DeleteRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        recursive: options.recursive,
        allow_missing: options.allow_missing,
        if_version: options.if_version,
    }
}

pub(crate) fn mkdir_request(
    session_id: &str,
    path: &CanonicalPath,
    options: MkdirOptions,
) -> proto::MkdirRequest {
    proto::MkdirRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        parents: Some(options.parents),
        exist_ok: Some(options.exist_ok),
        permissions: options.permissions.map(Permissions::bits),
    }
}

pub(crate) fn set_attributes_request(
    session_id: &str,
    path: &CanonicalPath,
    attributes: Attributes,
) -> proto::SetAttributesRequest {
    proto::SetAttributesRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        permissions: attributes.permissions.map(Permissions::bits),
        modified_at: attributes.modified.map(prost_types::Timestamp::from),
        if_version: attributes.if_version,
    }
}

pub(crate) fn set_attributes_outcome(r: proto::SetAttributesResponse) -> Result<AttributesOutcome> {
    Ok(AttributesOutcome {
        permissions: server_permissions(r.permissions)?,
        modified: system_time(r.modified_at),
        version: r.version,
    })
}

pub(crate) fn transfer_request(
    session_id: &str,
    source: &CanonicalPath,
    destination: &CanonicalPath,
    options: TransferOptions,
) -> proto::TransferRequest {
    proto::TransferRequest {
        session_id: session_id.to_string(),
        source: source.as_str().to_string(),
        destination: destination.as_str().to_string(),
        overwrite: options.overwrite,
        create_parents: Some(options.create_parents),
        if_version: options.if_version,
    }
}

pub(crate) fn list_request(
    session_id: &str,
    path: &CanonicalPath,
    depth: u32,
) -> proto::ListRequest {
    proto::ListRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
        depth,
    }
}

pub(crate) fn glob_request(session_id: &str, query: GlobQuery) -> proto::GlobRequest {
    proto::GlobRequest {
        session_id: session_id.to_string(),
        pattern: query.pattern,
        path: query.base.as_str().to_string(),
        max_results: saturate_u32(query.max_results),
    }
}

pub(crate) fn grep_request(session_id: &str, query: GrepQuery) -> proto::GrepRequest {
    proto::GrepRequest {
        session_id: session_id.to_string(),
        pattern: query.pattern,
        path: query.base.as_str().to_string(),
        glob: query.glob.unwrap_or_default(),
        case_insensitive: query.case_insensitive,
        fixed_string: query.fixed_string,
        max_matches: saturate_u32(query.max_matches),
        context_lines: query.context_lines,
    }
}

pub(crate) fn stat_request(session_id: &str, path: &CanonicalPath) -> proto::StatRequest {
    proto::StatRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
    }
}

pub(crate) fn exists_request(session_id: &str, path: &CanonicalPath) -> proto::ExistsRequest {
    proto::ExistsRequest {
        session_id: session_id.to_string(),
        path: path.as_str().to_string(),
    }
}

// ------------------------------------------------------ filesystem responses

pub(crate) fn text_page(r: proto::ReadResponse) -> Result<TextPage> {
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

/// The stream's header, with the data chunks that follow it.
pub(crate) fn byte_stream(
    header: proto::ReadBytesHeader,
    chunks: wsfs::ByteChunks,
) -> Result<ByteStream> {
    Ok(ByteStream {
        path: server_path(&header.path)?,
        size: server_count("size_bytes", header.size_bytes)?,
        version: header.version,
        offset: server_count("offset", header.offset)?,
        length: server_count("length", header.length)?,
        chunks,
    })
}

pub(crate) fn write_outcome(r: proto::WriteResponse) -> Result<WriteOutcome> {
    Ok(WriteOutcome {
        path: server_path(&r.path)?,
        bytes_written: server_count("bytes_written", r.bytes_written)?,
        size: server_count("size_bytes", r.size_bytes)?,
        version: r.version,
        created: r.created,
    })
}

pub(crate) fn edit_outcome(r: proto::EditResponse) -> Result<EditOutcome> {
    Ok(EditOutcome {
        path: server_path(&r.path)?,
        replacements: server_count("replacements", r.replacements)?,
        version: r.version,
        diff: r.diff,
        dry_run: r.dry_run,
        size: server_count("size_bytes", r.size_bytes)?,
    })
}

/// A listing entry carries no creation time on the wire; `created` is the
/// epoch ("unknown"). Stat has it.
pub(crate) fn entry_metadata(e: proto::Entry) -> Result<Metadata> {
    Ok(Metadata {
        path: server_path(&e.path)?,
        kind: file_kind(e.kind)?,
        size: server_count("size_bytes", e.size_bytes)?,
        created: system_time(e.created_at),
        modified: system_time(e.modified_at),
        version: e.version,
        permissions: server_permissions(e.permissions)?,
        symlink_target: link_target(e.symlink_target),
    })
}

/// A link's target as the wire carries it: empty for everything else.
fn link_target(target: String) -> Option<String> {
    Some(target).filter(|t| !t.is_empty())
}

pub(crate) fn listing(r: proto::ListResponse) -> Result<Listing> {
    Ok(Listing {
        path: server_path(&r.path)?,
        entries: r
            .entries
            .into_iter()
            .map(entry_metadata)
            .collect::<Result<_>>()?,
        truncated: r.truncated,
    })
}

pub(crate) fn glob_outcome(r: proto::GlobResponse) -> Result<GlobOutcome> {
    Ok(GlobOutcome {
        paths: r
            .paths
            .iter()
            .map(|p| server_path(p))
            .collect::<Result<_>>()?,
        truncated: r.truncated,
    })
}

pub(crate) fn stat_metadata(r: proto::StatResponse) -> Result<Metadata> {
    Ok(Metadata {
        path: server_path(&r.path)?,
        kind: file_kind(r.kind)?,
        size: server_count("size_bytes", r.size_bytes)?,
        created: system_time(r.created_at),
        modified: system_time(r.modified_at),
        version: r.version,
        permissions: server_permissions(r.permissions)?,
        symlink_target: link_target(r.symlink_target),
    })
}

pub(crate) fn exists_kind(r: proto::ExistsResponse) -> Result<Option<FileKind>> {
    if r.exists {
        file_kind(r.kind).map(Some)
    } else {
        Ok(None)
    }
}

// ------------------------------------------------------------------ sessions

fn limits_to_proto(l: SessionLimits) -> proto::SessionLimits {
    proto::SessionLimits {
        max_write_bytes: l.max_write_bytes,
        max_path_depth: l.max_path_depth,
        max_segment_length: l.max_segment_length,
        max_files: l.max_files,
        max_total_bytes: l.max_total_bytes,
    }
}

fn limits_from_proto(l: proto::SessionLimits) -> SessionLimits {
    SessionLimits {
        max_write_bytes: l.max_write_bytes,
        max_path_depth: l.max_path_depth,
        max_segment_length: l.max_segment_length,
        max_files: l.max_files,
        max_total_bytes: l.max_total_bytes,
    }
}

/// Whole seconds, rounded up so a sub-second TTL is not "none".
fn ttl_seconds(ttl: Duration) -> u64 {
    ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)
}

pub(crate) fn create_session_request(o: SessionOptions) -> Result<proto::CreateSessionRequest> {
    Ok(proto::CreateSessionRequest {
        backend: proto::session::Backend::from(o.backend).into(),
        root: match &o.root {
            Some(root) => utf8_path("root", root)?,
            None => String::new(),
        },
        mounts: o
            .mounts
            .into_iter()
            .map(proto::HostMount::try_from)
            .collect::<Result<_>>()?,
        seed_files: o.seed_files.into_iter().collect(),
        read_only: o.read_only,
        limits: Some(limits_to_proto(o.limits)),
        layout: proto::session::Layout::from(o.layout).into(),
        labels: o.labels.into_iter().collect(),
        idle_ttl_seconds: o.idle_ttl.map(ttl_seconds).unwrap_or(0),
        container: o.container.map(|c| proto::ContainerSpec {
            runtime: c.runtime,
            name: c.name,
            workdir: c.workdir,
        }),
        // Chosen here, not by the server, so that the creation carries the
        // id a proxy routes every later call of the session by.
        session_id: o.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        from_snapshot: o.from_snapshot.map(proto::SnapshotRef::from),
        owner: o.owner.map(|o| proto::FileOwner {
            uid: o.uid,
            gid: o.gid,
            file_permissions: o.file_permissions.map_or(0, Permissions::bits),
            directory_permissions: o.directory_permissions.map_or(0, Permissions::bits),
        }),
    })
}

pub(crate) fn session_info(s: proto::Session) -> Result<SessionInfo> {
    let backend = Backend::from_wire(s.backend).ok_or_else(|| {
        Error::internal(format!(
            "the server sent an unknown session backend ({})",
            s.backend
        ))
    })?;
    let layout = Layout::from_wire(s.layout).ok_or_else(|| {
        Error::internal(format!(
            "the server sent an unknown session layout ({})",
            s.layout
        ))
    })?;
    Ok(SessionInfo {
        id: s.session_id,
        backend,
        root_path: (!s.root_path.is_empty()).then(|| PathBuf::from(s.root_path)),
        created_at: system_time(s.created_at),
        read_only: s.read_only,
        limits: s.limits.map(limits_from_proto).unwrap_or_default(),
        layout,
        labels: s.labels.into_iter().collect(),
        idle_ttl: (s.idle_ttl_seconds > 0).then(|| Duration::from_secs(s.idle_ttl_seconds)),
        token: (!s.token.is_empty()).then_some(s.token),
        last_active_at: s.last_active_at.map(|t| system_time(Some(t))),
        open_streams: s.open_streams,
        usage: s.usage.map(|u| SessionUsage {
            files: u.files,
            bytes: u.bytes,
        }),
        container: s.container.map(|c| ContainerSpec {
            runtime: c.runtime,
            name: c.name,
            workdir: c.workdir,
        }),
        forked_from: s.forked_from.map(SnapshotRef::from),
        owner: match s.owner {
            Some(o) => Some(FileOwner {
                uid: o.uid,
                gid: o.gid,
                file_permissions: Some(server_permissions(o.file_permissions)?),
                directory_permissions: Some(server_permissions(o.directory_permissions)?),
            }),
            None => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};
    use tonic::Code;
    use wsfs::{GrepEvent, GrepSummary, HostMount, PathLimits};

    fn path(s: &str) -> CanonicalPath {
        CanonicalPath::parse(s, &PathLimits::UNLIMITED).unwrap()
    }

    #[test]
    fn whole_file_read_sends_limit_minus_one() {
        let r = read_request("s", &path("a.txt"), LineRange::all()).unwrap();
        assert_eq!(r.limit, Some(-1));
        assert_eq!(r.offset, 0);
        assert_eq!(r.path, "a.txt");
        assert_eq!(r.session_id, "s");
    }

    #[test]
    fn default_read_sends_the_contract_page_size() {
        let r = read_request("s", &path("a"), LineRange::default()).unwrap();
        assert_eq!(r.limit, Some(2000));
    }

    #[test]
    fn read_offset_beyond_int64_is_invalid_argument() {
        let range = LineRange {
            offset: u64::MAX,
            limit: None,
        };
        let err = read_request("s", &path("a"), range).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[test]
    fn byte_range_to_the_end_sends_limit_zero() {
        let r = read_bytes_request("s", &path("a"), ByteRange::default(), 0).unwrap();
        assert_eq!((r.offset, r.limit, r.chunk_size), (0, 0, 0));
        let r = read_bytes_request(
            "s",
            &path("a"),
            ByteRange {
                offset: 10,
                limit: Some(5),
            },
            4096,
        )
        .unwrap();
        assert_eq!((r.offset, r.limit, r.chunk_size), (10, 5, 4096));
    }

    #[test]
    fn zero_byte_range_is_sent_as_one_byte() {
        let range = ByteRange {
            offset: 3,
            limit: Some(0),
        };
        let r = read_bytes_request("s", &path("a"), range, 0).unwrap();
        assert_eq!(r.limit, 1);
    }

    #[test]
    fn write_options_become_explicit_optionals() {
        let options = WriteOptions {
            mode: WriteMode::Append,
            create_parents: false,
            if_version: Some(0),
            ..Default::default()
        };
        let r = write_request("s", &path("/x//y.txt"), "hi", options);
        assert_eq!(r.path, "x/y.txt");
        assert_eq!(r.mode, proto::WriteMode::Append as i32);
        assert_eq!(r.create_parents, Some(false));
        assert_eq!(r.if_version, Some(0));
        assert_eq!(r.content, "hi");
    }

    #[test]
    fn write_bytes_header_carries_session_and_options() {
        let header = write_bytes_header("s", &path("b"), WriteOptions::default());
        let Some(proto::write_bytes_request::Payload::Header(h)) = header.payload else {
            panic!("not a header: {header:?}");
        };
        assert_eq!(h.session_id, "s");
        assert_eq!(h.mode, proto::WriteMode::Overwrite as i32);
        assert_eq!(h.create_parents, Some(true));
        assert_eq!(h.if_version, None);
    }

    #[test]
    fn mkdir_and_transfer_defaults_are_sent_explicitly() {
        let m = mkdir_request("s", &path("d"), MkdirOptions::default());
        assert_eq!((m.parents, m.exist_ok), (Some(true), Some(true)));
        let t = transfer_request("s", &path("a"), &path("b"), TransferOptions::default());
        assert_eq!((t.source.as_str(), t.destination.as_str()), ("a", "b"));
        assert!(!t.overwrite);
        assert_eq!(t.create_parents, Some(true));
    }

    #[test]
    fn grep_query_maps_every_option() {
        let mut q = GrepQuery::new("fn main");
        q.base = path("src");
        q.glob = Some("*.rs".into());
        q.case_insensitive = true;
        q.fixed_string = true;
        q.max_matches = u64::MAX;
        q.context_lines = 2;
        let r = grep_request("s", q);
        assert_eq!(r.pattern, "fn main");
        assert_eq!(r.path, "src");
        assert_eq!(r.glob, "*.rs");
        assert!(r.case_insensitive && r.fixed_string);
        assert_eq!(r.max_matches, u32::MAX);
        assert_eq!(r.context_lines, 2);
    }

    #[test]
    fn grep_without_glob_sends_empty_glob() {
        assert_eq!(grep_request("s", GrepQuery::new("x")).glob, "");
    }

    #[test]
    fn text_page_maps_every_field() {
        let page = text_page(proto::ReadResponse {
            path: "a.txt".into(),
            content: "b\n".into(),
            total_lines: 3,
            offset: 1,
            limit: 1,
            truncated: true,
            version: 7,
            size_bytes: 6,
        })
        .unwrap();
        assert_eq!(page.path, path("a.txt"));
        assert_eq!(page.content, "b\n");
        assert_eq!((page.total_lines, page.offset, page.lines), (3, 1, 1));
        assert!(page.truncated);
        assert_eq!((page.version, page.size), (7, 6));
    }

    #[test]
    fn negative_size_from_server_is_internal() {
        let err = write_outcome(proto::WriteResponse {
            path: "a".into(),
            size_bytes: -1,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.code(), Code::Internal);
    }

    #[test]
    fn escaping_path_from_server_is_internal() {
        let err = server_path("../etc/passwd").unwrap_err();
        assert_eq!(err.code(), Code::Internal);
    }

    #[test]
    fn entry_maps_kind_and_times() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let m = entry_metadata(proto::Entry {
            name: "lib.rs".into(),
            path: "src/lib.rs".into(),
            kind: proto::FileKind::File as i32,
            size_bytes: 42,
            modified_at: Some(at.into()),
            created_at: Some(at.into()),
            version: 3,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(m.name(), "lib.rs");
        assert_eq!(m.kind, FileKind::File);
        assert_eq!(m.size, 42);
        assert_eq!(m.modified, at);
        assert_eq!(m.created, at);
        assert_eq!(m.version, 3);
    }

    #[test]
    fn unspecified_kind_is_internal() {
        let err = file_kind(proto::FileKind::Unspecified as i32).unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        assert!(file_kind(99).is_err());
        assert_eq!(
            file_kind(proto::FileKind::Symlink as i32).unwrap(),
            FileKind::Symlink
        );
    }

    #[test]
    fn missing_timestamp_is_the_epoch() {
        assert_eq!(system_time(None), UNIX_EPOCH);
    }

    #[test]
    fn stat_keeps_creation_time() {
        let created = UNIX_EPOCH + Duration::from_secs(100);
        let modified = UNIX_EPOCH + Duration::from_secs(200);
        let m = stat_metadata(proto::StatResponse {
            path: "d".into(),
            kind: proto::FileKind::Directory as i32,
            size_bytes: 0,
            created_at: Some(created.into()),
            modified_at: Some(modified.into()),
            version: 1,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (m.kind, m.created, m.modified),
            (FileKind::Directory, created, modified)
        );
    }

    #[test]
    fn missing_path_exists_as_none() {
        let r = proto::ExistsResponse {
            exists: false,
            kind: 0,
        };
        assert_eq!(exists_kind(r).unwrap(), None);
        let r = proto::ExistsResponse {
            exists: true,
            kind: proto::FileKind::File as i32,
        };
        assert_eq!(exists_kind(r).unwrap(), Some(FileKind::File));
    }

    #[test]
    fn listing_of_root_has_root_path() {
        let l = listing(proto::ListResponse {
            path: String::new(),
            entries: vec![],
            truncated: false,
        })
        .unwrap();
        assert!(l.path.is_root());
    }

    #[test]
    fn glob_paths_are_canonical() {
        let g = glob_outcome(proto::GlobResponse {
            paths: vec!["a.rs".into(), "x/y/a.rs".into()],
            truncated: true,
        })
        .unwrap();
        assert_eq!(g.paths, vec![path("a.rs"), path("x/y/a.rs")]);
        assert!(g.truncated);
    }

    #[test]
    fn grep_match_and_summary_map_to_events() {
        let m = GrepEvent::try_from(proto::GrepResponse {
            payload: Some(proto::grep_response::Payload::Match(proto::GrepMatch {
                path: "a.rs".into(),
                line_number: 2,
                line: "fn main() {}".into(),
                match_start: 3,
                match_end: 7,
                before: vec![proto::ContextLine {
                    line_number: 1,
                    line: "// hi".into(),
                }],
                after: vec![],
            })),
        })
        .unwrap();
        let GrepEvent::Match(m) = m else {
            panic!("not a match: {m:?}")
        };
        assert_eq!((m.line_number, m.match_start, m.match_end), (2, 3, 7));
        assert_eq!(m.before[0].line, "// hi");

        let s = GrepEvent::try_from(proto::GrepResponse {
            payload: Some(proto::grep_response::Payload::Summary(proto::GrepSummary {
                files_searched: 4,
                matches: 1,
                truncated: false,
            })),
        })
        .unwrap();
        assert_eq!(
            s,
            GrepEvent::Summary(GrepSummary {
                files_searched: 4,
                matches: 1,
                truncated: false
            })
        );
    }

    #[test]
    fn empty_grep_message_is_internal() {
        let err = GrepEvent::try_from(proto::GrepResponse { payload: None }).unwrap_err();
        assert_eq!(err.code(), Code::Internal);
    }

    #[test]
    fn session_options_map_to_create_request() {
        let options = SessionOptions::directory()
            .root("/srv/ws")
            .read_only(true)
            .seed_file("a.txt", "hello")
            .max_write_bytes(1024)
            .label("team", "infra")
            .layout(Layout::Swarm)
            .mount(HostMount::new("/data/src", "src").include("**/*.rs"))
            .idle_ttl(Duration::from_millis(1500));
        let r = create_session_request(options).unwrap();
        assert_eq!(r.backend, proto::session::Backend::Directory as i32);
        assert_eq!(r.root, "/srv/ws");
        assert!(r.read_only);
        assert_eq!(r.seed_files["a.txt"], Bytes::from("hello"));
        assert_eq!(r.limits.unwrap().max_write_bytes, 1024);
        assert_eq!(r.labels["team"], "infra");
        assert_eq!(r.layout, proto::session::Layout::Swarm as i32);
        assert_eq!(r.mounts[0].host_path, "/data/src");
        assert_eq!(r.mounts[0].include_glob, vec!["**/*.rs".to_string()]);
        assert_eq!(r.idle_ttl_seconds, 2, "sub-second TTLs round up");
    }

    #[test]
    fn default_session_options_are_a_memory_session() {
        let r = create_session_request(SessionOptions::memory()).unwrap();
        assert_eq!(r.backend, proto::session::Backend::Memory as i32);
        assert_eq!(r.root, "");
        assert_eq!(r.idle_ttl_seconds, 0);
    }

    #[test]
    fn every_creation_chooses_a_fresh_uuid_v4_for_its_session() {
        let a = create_session_request(SessionOptions::memory()).unwrap();
        let b = create_session_request(SessionOptions::memory()).unwrap();
        assert_ne!(a.session_id, b.session_id);
        let parsed = uuid::Uuid::try_parse(&a.session_id).unwrap();
        assert_eq!(parsed.get_version_num(), 4);
        assert_eq!(parsed.hyphenated().to_string(), a.session_id);
    }

    #[test]
    fn a_chosen_session_id_is_sent_as_given() {
        let id = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let r = create_session_request(SessionOptions::memory().id(id)).unwrap();
        assert_eq!(r.session_id, id);
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_root_is_invalid_argument() {
        use std::os::unix::ffi::OsStrExt;
        let root = std::ffi::OsStr::from_bytes(b"/srv/\xff");
        let err = create_session_request(SessionOptions::directory().root(root)).unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }

    #[test]
    fn session_maps_to_info() {
        let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let info = session_info(proto::Session {
            session_id: "0f0e".into(),
            backend: proto::session::Backend::Directory as i32,
            root_path: "/var/lib/wsfs/0f0e".into(),
            created_at: Some(created.into()),
            limits: Some(proto::SessionLimits {
                max_write_bytes: 10,
                ..Default::default()
            }),
            read_only: true,
            layout: proto::session::Layout::Flat as i32,
            labels: [("k".to_string(), "v".to_string())].into(),
            idle_ttl_seconds: 60,
            token: "tok".into(),
            last_active_at: Some((created + Duration::from_secs(5)).into()),
            open_streams: 2,
            usage: Some(proto::SessionUsage {
                files: 3,
                bytes: 40,
            }),
            container: None,
            forked_from: Some(proto::SnapshotRef {
                session_id: "a1".into(),
                snapshot_id: "b2".into(),
            }),
            owner: Some(proto::FileOwner {
                uid: 1000,
                gid: 1001,
                file_permissions: 0o640,
                directory_permissions: 0o750,
            }),
        })
        .unwrap();
        assert_eq!(info.id, "0f0e");
        assert_eq!(
            info.usage,
            Some(crate::SessionUsage {
                files: 3,
                bytes: 40
            })
        );
        assert_eq!(info.last_active_at, Some(created + Duration::from_secs(5)));
        assert_eq!(info.open_streams, 2);
        let origin = info.forked_from.as_ref().unwrap();
        assert_eq!((&*origin.session_id, &*origin.snapshot_id), ("a1", "b2"));
        assert_eq!(info.backend, Backend::Directory);
        assert_eq!(info.root_path, Some(PathBuf::from("/var/lib/wsfs/0f0e")));
        assert_eq!(info.created_at, created);
        assert_eq!(info.limits.max_write_bytes, 10);
        assert!(info.read_only);
        assert_eq!(info.labels["k"], "v");
        assert_eq!(info.idle_ttl, Some(Duration::from_secs(60)));
        assert_eq!(info.token.as_deref(), Some("tok"));
        let owner = info.owner.unwrap();
        assert_eq!((owner.uid, owner.gid), (1000, 1001));
        assert_eq!(owner.file_permissions.map(Permissions::bits), Some(0o640));
        assert_eq!(
            owner.directory_permissions.map(Permissions::bits),
            Some(0o750)
        );
    }

    #[test]
    fn memory_session_has_no_root_ttl_or_token() {
        let info = session_info(proto::Session {
            session_id: "id".into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(info.backend, Backend::Memory);
        assert_eq!(info.root_path, None);
        assert_eq!(info.idle_ttl, None);
        assert_eq!(info.token, None);
        assert_eq!(info.usage, None);
        assert_eq!(info.limits, SessionLimits::default());
        assert_eq!(info.container, None);
    }

    #[test]
    fn container_sessions_carry_their_container_both_ways() {
        let request =
            create_session_request(SessionOptions::container("podman", "web", "/srv")).unwrap();
        assert_eq!(request.backend, proto::session::Backend::Container as i32);
        let spec = request.container.clone().unwrap();
        assert_eq!(
            (spec.runtime.as_str(), spec.name.as_str()),
            ("podman", "web")
        );
        let info = session_info(proto::Session {
            backend: proto::session::Backend::Container as i32,
            container: Some(spec),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(info.backend, Backend::Container);
        let container = info.container.unwrap();
        assert_eq!(container.workdir, "/srv");
    }
}
