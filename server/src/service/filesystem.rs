//! `wsfs.v1.Filesystem`.

use super::{timestamp, to_the_end, traced, LoggedStream};
use crate::auth::Auth;
use crate::events::{Change, ChangeKind, Scope, Since};
use crate::metrics::{Gauge, ACTIVE_WATCHES};
use crate::registry::{Session, SessionRegistry, StreamPermit};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use wsfs::proto::{self, filesystem_server};
use wsfs::{
    Attributes, ByteRange, CanonicalPath, DeleteOptions, EditSpec, Error, FileKind, Filesystem,
    GlobQuery, GrepQuery, LineRange, Metadata, MkdirOptions, PatchChunk, PatchOptions, Permissions,
    Result, SymlinkOptions, TransferOptions, WriteMode, WriteOptions, WriteOutcome,
};

pub struct FilesystemService {
    registry: Arc<SessionRegistry>,
    auth: Arc<Auth>,
}

impl FilesystemService {
    pub fn new(registry: Arc<SessionRegistry>, auth: Arc<Auth>) -> Self {
        FilesystemService { registry, auth }
    }

    /// Checks the call's route, authorizes it, then opens the session as
    /// its caller sees it.
    /// The caller is settled before the session is looked up, so a token
    /// of another session learns nothing about this one.
    fn session(&self, metadata: &MetadataMap, id: &str) -> Result<Opened> {
        super::check_route(metadata, id)?;
        open(&self.registry, &self.auth, metadata, id)
    }
}

/// Opens session `id` for one call as the caller `metadata` names: the
/// caller is settled (and refused) before the session is looked up. Every
/// face that works on files opens its sessions here.
pub(crate) fn open(
    registry: &SessionRegistry,
    auth: &Auth,
    metadata: &MetadataMap,
    id: &str,
) -> Result<Opened> {
    let caller = auth.filesystem_caller(metadata, id)?;
    tracing::Span::current().record("caller", caller.name());
    let session = registry.get(id)?;
    let fs = crate::layers::for_caller(
        session.fs.clone(),
        caller,
        session.record.layout,
        session.events.clone(),
    );
    Ok(Opened { session, fs })
}

/// A session opened for one call: its paths, and its workspace behind the
/// caller's zone check, recording the call's changes.
pub(crate) struct Opened {
    pub(crate) session: Arc<Session>,
    pub(crate) fs: Arc<dyn Filesystem>,
}

impl Opened {
    pub(crate) fn path(&self, raw: &str) -> Result<CanonicalPath> {
        self.session.path(raw)
    }
}

fn change_kind_to_proto(kind: ChangeKind) -> proto::ChangeKind {
    match kind {
        ChangeKind::Created => proto::ChangeKind::Created,
        ChangeKind::Modified => proto::ChangeKind::Modified,
        ChangeKind::Deleted => proto::ChangeKind::Deleted,
        ChangeKind::Moved => proto::ChangeKind::Moved,
    }
}

fn change_to_proto(c: Change) -> proto::ChangeEvent {
    proto::ChangeEvent {
        seq: c.seq,
        kind: change_kind_to_proto(c.kind) as i32,
        path: c.path,
        to_path: c.to_path,
        version: c.version,
        caller: c.caller,
        at: timestamp(c.at),
    }
}

/// An event with no path: READY, RESYNC and KEEPALIVE.
fn marker(kind: proto::ChangeKind, seq: u64) -> proto::ChangeEvent {
    proto::ChangeEvent {
        seq,
        kind: kind as i32,
        at: timestamp(std::time::SystemTime::now()),
        ..Default::default()
    }
}

type RpcStream<T> = BoxStream<'static, std::result::Result<T, Status>>;

pub(crate) fn kind_to_proto(kind: FileKind) -> proto::FileKind {
    match kind {
        FileKind::File => proto::FileKind::File,
        FileKind::Directory => proto::FileKind::Directory,
        FileKind::Symlink => proto::FileKind::Symlink,
    }
}

/// A Write's or WriteBytes' mode; PATCH, which only WriteBytes takes, is
/// `None`.
fn mode_from_proto(mode: i32) -> Result<Option<WriteMode>> {
    match proto::WriteMode::try_from(mode) {
        Ok(proto::WriteMode::Overwrite) => Ok(Some(WriteMode::Overwrite)),
        Ok(proto::WriteMode::Create) => Ok(Some(WriteMode::Create)),
        Ok(proto::WriteMode::Append) => Ok(Some(WriteMode::Append)),
        Ok(proto::WriteMode::Patch) => Ok(None),
        Err(_) => Err(Error::invalid_argument(format!(
            "unknown write mode {mode}"
        ))),
    }
}

fn entry(m: Metadata) -> proto::Entry {
    proto::Entry {
        name: m.name().to_string(),
        path: m.path.as_str().to_string(),
        kind: kind_to_proto(m.kind) as i32,
        size_bytes: m.size as i64,
        modified_at: timestamp(m.modified),
        version: m.version,
        created_at: timestamp(m.created),
        permissions: m.permissions.bits(),
        symlink_target: m.symlink_target.unwrap_or_default(),
    }
}

/// The fields only PATCH takes, refused in the other modes.
fn no_patch_fields(header: &proto::WriteBytesHeader) -> Result<()> {
    if header.truncate_to.is_some() || header.create_missing {
        return Err(Error::invalid_argument(
            "truncate_to and create_missing apply to mode PATCH only",
        ));
    }
    Ok(())
}

/// Bits a request names, refused above `0o777`.
fn permissions(bits: Option<u32>) -> Result<Option<Permissions>> {
    bits.map(Permissions::new).transpose()
}

/// A time a request names; one the system cannot hold is refused.
fn request_time(
    field: &str,
    ts: Option<prost_types::Timestamp>,
) -> Result<Option<std::time::SystemTime>> {
    ts.map(|ts| {
        // protobuf's Timestamp keeps nanos in 0..1e9; prost would fold
        // anything else into the seconds, silently moving the time.
        if !(0..1_000_000_000).contains(&ts.nanos) {
            return Err(Error::invalid_argument(format!(
                "{field} is not a valid point in time: nanos must be 0 to 999999999 (got {})",
                ts.nanos
            )));
        }
        std::time::SystemTime::try_from(ts).map_err(|e| {
            Error::invalid_argument(format!("{field} is not a valid point in time: {e}"))
        })
    })
    .transpose()
}

fn write_response(w: WriteOutcome) -> proto::WriteResponse {
    proto::WriteResponse {
        path: w.path.as_str().to_string(),
        bytes_written: w.bytes_written as i64,
        size_bytes: w.size as i64,
        version: w.version,
        created: w.created,
    }
}

fn non_negative(value: i64, field: &str) -> Result<u64> {
    u64::try_from(value)
        .map_err(|_| Error::invalid_argument(format!("{field} must not be negative (got {value})")))
}

#[tonic::async_trait]
impl filesystem_server::Filesystem for FilesystemService {
    async fn read(
        &self,
        request: Request<proto::ReadRequest>,
    ) -> std::result::Result<Response<proto::ReadResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Read", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let limit = match r.limit {
                None => Some(LineRange::DEFAULT_LIMIT),
                Some(-1) => None,
                Some(n) => Some(u64::try_from(n).map_err(|_| {
                    Error::invalid_argument(format!(
                        "limit must be -1 (whole file) or at least 0 (got {n})"
                    ))
                })?),
            };
            let offset = non_negative(r.offset, "offset")?;
            let page = s.fs.read(&path, LineRange { offset, limit }).await?;
            Ok(proto::ReadResponse {
                path: page.path.as_str().to_string(),
                content: page.content,
                total_lines: page.total_lines as i64,
                offset: page.offset as i64,
                limit: page.lines as i64,
                truncated: page.truncated,
                version: page.version,
                size_bytes: page.size as i64,
            })
        })
        .await
    }

    type ReadBytesStream = RpcStream<proto::ReadBytesResponse>;

    async fn read_bytes(
        &self,
        request: Request<proto::ReadBytesRequest>,
    ) -> std::result::Result<Response<Self::ReadBytesStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("ReadBytes", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let permit = s.session.open_stream()?;
            let path = s.path(&r.path)?;
            let offset = non_negative(r.offset, "offset")?;
            let limit = match non_negative(r.limit, "limit")? {
                0 => None,
                n => Some(n),
            };
            let stream =
                s.fs.read_bytes(&path, ByteRange { offset, limit }, r.chunk_size as usize)
                    .await?;
            let header = proto::ReadBytesResponse {
                payload: Some(proto::read_bytes_response::Payload::Header(
                    proto::ReadBytesHeader {
                        path: stream.path.as_str().to_string(),
                        size_bytes: stream.size as i64,
                        version: stream.version,
                        offset: stream.offset as i64,
                        length: stream.length as i64,
                    },
                )),
            };
            let data = stream.chunks.map(|c| {
                c.map(|bytes| proto::ReadBytesResponse {
                    payload: Some(proto::read_bytes_response::Payload::Data(bytes)),
                })
                .map_err(|e| e.to_status())
            });
            let messages = futures::stream::once(async { Ok(header) })
                .chain(data)
                .map(move |m| {
                    let _held = &permit;
                    m
                })
                .boxed();
            Ok(LoggedStream::new(messages, "ReadBytes", &r.session_id, &r.path, data_len).boxed())
        })
        .await
    }

    async fn write(
        &self,
        request: Request<proto::WriteRequest>,
    ) -> std::result::Result<Response<proto::WriteResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Write", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let mode = mode_from_proto(r.mode)?.ok_or_else(|| {
                Error::invalid_argument("mode PATCH is for WriteBytes; Write replaces or appends")
            })?;
            let options = WriteOptions {
                mode,
                create_parents: r.create_parents.unwrap_or(true),
                if_version: r.if_version,
                permissions: permissions(r.permissions)?,
                modified: None,
            };
            let content = r.content;
            to_the_end(async move {
                let w = s.fs.write(&path, &content, options).await?;
                Ok(write_response(w))
            })
            .await
        })
        .await
    }

    async fn write_bytes(
        &self,
        request: Request<Streaming<proto::WriteBytesRequest>>,
    ) -> std::result::Result<Response<proto::WriteResponse>, Status> {
        use proto::write_bytes_request::Payload;
        let metadata = request.metadata().clone();
        let mut incoming = request.into_inner();
        let header = match incoming.next().await {
            Some(Ok(proto::WriteBytesRequest {
                payload: Some(Payload::Header(h)),
            })) => h,
            Some(Err(status)) => return Err(status),
            _ => {
                return Err(Error::invalid_argument(
                    "the first WriteBytes message must be the header {session_id, path, ...}",
                )
                .to_status());
            }
        };
        traced("WriteBytes", &header.session_id, &header.path, async {
            let s = self.session(&metadata, &header.session_id)?;
            let permit = s.session.open_stream()?;
            let path = s.path(&header.path)?;
            let create_parents = header.create_parents.unwrap_or(true);
            let permissions = permissions(header.permissions)?;
            let modified = request_time("modified_at", header.modified_at)?;
            let Some(mode) = mode_from_proto(header.mode)? else {
                let options = PatchOptions {
                    truncate_to: header.truncate_to,
                    create_missing: header.create_missing,
                    create_parents,
                    if_version: header.if_version,
                    permissions,
                    modified,
                };
                let chunks = patch_chunks(incoming);
                return to_the_end(async move {
                    let _permit = permit;
                    let w = s.fs.patch_bytes(&path, options, chunks).await?;
                    Ok(write_response(w))
                })
                .await;
            };
            no_patch_fields(&header)?;
            let options = WriteOptions {
                mode,
                create_parents,
                if_version: header.if_version,
                permissions,
                modified,
            };
            let chunks = incoming
                .map(|m| match upload_message(m)? {
                    Upload::Data(d) => Ok::<Bytes, Error>(d),
                    Upload::Offset(_) => Err(Error::invalid_argument(
                        "offset messages belong to mode PATCH; this upload replaces or appends",
                    )),
                })
                .boxed();
            to_the_end(async move {
                let _permit = permit;
                let w = s.fs.write_bytes(&path, options, chunks).await?;
                Ok(write_response(w))
            })
            .await
        })
        .await
    }

    async fn edit(
        &self,
        request: Request<proto::EditRequest>,
    ) -> std::result::Result<Response<proto::EditResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Edit", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let spec = EditSpec {
                old_text: r.old_text,
                new_text: r.new_text,
                replace_all: r.replace_all,
                if_version: r.if_version,
                dry_run: r.dry_run,
            };
            to_the_end(async move {
                let e = s.fs.edit(&path, spec).await?;
                Ok(proto::EditResponse {
                    path: e.path.as_str().to_string(),
                    replacements: e.replacements as i64,
                    version: e.version,
                    diff: e.diff,
                    dry_run: e.dry_run,
                    size_bytes: e.size as i64,
                })
            })
            .await
        })
        .await
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> std::result::Result<Response<proto::DeleteResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Delete", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let options = DeleteOptions {
                recursive: r.recursive,
                allow_missing: r.allow_missing,
                if_version: r.if_version,
            };
            to_the_end(async move {
                let deleted = s.fs.delete(&path, options).await?;
                Ok(proto::DeleteResponse {
                    deleted: deleted as i64,
                })
            })
            .await
        })
        .await
    }

    async fn mkdir(
        &self,
        request: Request<proto::MkdirRequest>,
    ) -> std::result::Result<Response<proto::MkdirResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Mkdir", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let options = MkdirOptions {
                parents: r.parents.unwrap_or(true),
                exist_ok: r.exist_ok.unwrap_or(true),
                permissions: permissions(r.permissions)?,
            };
            to_the_end(async move {
                let created = s.fs.mkdir(&path, options).await?;
                Ok(proto::MkdirResponse {
                    path: path.as_str().to_string(),
                    created,
                })
            })
            .await
        })
        .await
    }

    async fn r#move(
        &self,
        request: Request<proto::TransferRequest>,
    ) -> std::result::Result<Response<proto::TransferResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        self.transfer("Move", &metadata, r).await
    }

    async fn copy(
        &self,
        request: Request<proto::TransferRequest>,
    ) -> std::result::Result<Response<proto::TransferResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        self.transfer("Copy", &metadata, r).await
    }

    async fn list(
        &self,
        request: Request<proto::ListRequest>,
    ) -> std::result::Result<Response<proto::ListResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("List", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let listing = s.fs.list(&path, r.depth).await?;
            Ok(proto::ListResponse {
                path: listing.path.as_str().to_string(),
                entries: listing.entries.into_iter().map(entry).collect(),
                truncated: listing.truncated,
            })
        })
        .await
    }

    async fn glob(
        &self,
        request: Request<proto::GlobRequest>,
    ) -> std::result::Result<Response<proto::GlobResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Glob", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let base = s.path(&r.path)?;
            let outcome =
                s.fs.glob(GlobQuery {
                    pattern: r.pattern,
                    base,
                    max_results: r.max_results as u64,
                })
                .await?;
            Ok(proto::GlobResponse {
                paths: outcome
                    .paths
                    .into_iter()
                    .map(|p| p.as_str().to_string())
                    .collect(),
                truncated: outcome.truncated,
            })
        })
        .await
    }

    type GrepStream = RpcStream<proto::GrepResponse>;

    async fn grep(
        &self,
        request: Request<proto::GrepRequest>,
    ) -> std::result::Result<Response<Self::GrepStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Grep", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let permit = s.session.open_stream()?;
            let base = s.path(&r.path)?;
            let query = GrepQuery {
                pattern: r.pattern.clone(),
                base,
                glob: Some(r.glob).filter(|g| !g.is_empty()),
                case_insensitive: r.case_insensitive,
                fixed_string: r.fixed_string,
                max_matches: r.max_matches as u64,
                context_lines: r.context_lines,
            };
            let events = s.fs.grep(query).await?;
            let events = events
                .map(move |e| {
                    let _held = &permit;
                    e.map(proto::GrepResponse::from).map_err(|e| e.to_status())
                })
                .boxed();
            Ok(LoggedStream::new(events, "Grep", &r.session_id, &r.path, |_| 0).boxed())
        })
        .await
    }

    async fn stat(
        &self,
        request: Request<proto::StatRequest>,
    ) -> std::result::Result<Response<proto::StatResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Stat", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let m = s.fs.stat(&path).await?;
            Ok(proto::StatResponse {
                path: m.path.as_str().to_string(),
                kind: kind_to_proto(m.kind) as i32,
                size_bytes: m.size as i64,
                created_at: timestamp(m.created),
                modified_at: timestamp(m.modified),
                version: m.version,
                permissions: m.permissions.bits(),
                symlink_target: m.symlink_target.unwrap_or_default(),
            })
        })
        .await
    }

    async fn symlink(
        &self,
        request: Request<proto::SymlinkRequest>,
    ) -> std::result::Result<Response<proto::SymlinkResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Symlink", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let options = SymlinkOptions {
                create_parents: r.create_parents.unwrap_or(true),
            };
            to_the_end(async move {
                let m = s.fs.symlink(&path, &r.target, options).await?;
                Ok(proto::SymlinkResponse {
                    entry: Some(entry(m)),
                })
            })
            .await
        })
        .await
    }

    async fn set_attributes(
        &self,
        request: Request<proto::SetAttributesRequest>,
    ) -> std::result::Result<Response<proto::SetAttributesResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("SetAttributes", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let attributes = Attributes {
                permissions: permissions(r.permissions)?,
                modified: request_time("modified_at", r.modified_at)?,
                if_version: r.if_version,
            };
            to_the_end(async move {
                let m = s.fs.set_attributes(&path, attributes).await?;
                Ok(proto::SetAttributesResponse {
                    path: path.as_str().to_string(),
                    permissions: m.permissions.bits(),
                    modified_at: timestamp(m.modified),
                    version: m.version,
                })
            })
            .await
        })
        .await
    }

    async fn exists(
        &self,
        request: Request<proto::ExistsRequest>,
    ) -> std::result::Result<Response<proto::ExistsResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Exists", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let path = s.path(&r.path)?;
            let kind = s.fs.exists(&path).await?;
            Ok(proto::ExistsResponse {
                exists: kind.is_some(),
                kind: kind.map_or(proto::FileKind::Unspecified, kind_to_proto) as i32,
            })
        })
        .await
    }

    type WatchStream = RpcStream<proto::ChangeEvent>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> std::result::Result<Response<Self::WatchStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Watch", &r.session_id, &r.path, async {
            let s = self.session(&metadata, &r.session_id)?;
            let permit = s.session.open_watch()?;
            let scope = Scope::new(s.path(&r.path)?, r.recursive, &r.glob)?;
            let keepalive =
                std::time::Duration::from_millis(self.registry.config().watch_keepalive_ms.max(1));
            let stopping = self.registry.stopping();
            let events = watch_stream(s.session, scope, r.since_seq, keepalive, permit, stopping);
            Ok(LoggedStream::new(events, "Watch", &r.session_id, &r.path, |_| 0).boxed())
        })
        .await
    }

    async fn changes(
        &self,
        request: Request<proto::ChangesRequest>,
    ) -> std::result::Result<Response<proto::ChangesResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Changes", &r.session_id, "", async {
            let s = self.session(&metadata, &r.session_id)?;
            let max = if r.max == 0 { 1000 } else { r.max as usize };
            Ok(match s.session.events.since(r.since_seq, max) {
                Since::Events(events) => proto::ChangesResponse {
                    next_seq: events.last().map_or(r.since_seq, |e| e.seq),
                    events: events.into_iter().map(change_to_proto).collect(),
                    resync: false,
                },
                Since::Resync { seq } => proto::ChangesResponse {
                    events: Vec::new(),
                    next_seq: seq,
                    resync: true,
                },
            })
        })
        .await
    }
}

/// READY, then the events after the cursor, then live events as they come,
/// with KEEPALIVE while idle. One producer task per stream; it ends when the
/// client goes away (the channel's send fails), with NOT_FOUND
/// `SESSION_NOT_FOUND` when the session is deleted or expires (releasing
/// it), and with UNAVAILABLE when the server shuts down (the client resumes
/// elsewhere or later with `since_seq`).
fn watch_stream(
    session: Arc<Session>,
    scope: Scope,
    since_seq: u64,
    keepalive: std::time::Duration,
    permit: StreamPermit,
    stopping: tokio_util::sync::CancellationToken,
) -> RpcStream<proto::ChangeEvent> {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    // Subscribed before READY's seq is read, so no change can slip between.
    let mut wake = session.events.subscribe();
    let ready = session.events.current_seq();
    let mut cursor = if since_seq == 0 { ready } else { since_seq };
    let gauge = Gauge::hold(&ACTIVE_WATCHES);
    crate::producer::spawn("Watch", tx.clone(), async move {
        let _gauge = gauge;
        let _held = permit;
        if tx
            .send(Ok(marker(proto::ChangeKind::Ready, ready)))
            .await
            .is_err()
        {
            return;
        }
        loop {
            wake.borrow_and_update();
            match session.events.since(cursor, 1024) {
                Since::Resync { seq } => {
                    cursor = seq;
                    if tx
                        .send(Ok(marker(proto::ChangeKind::Resync, seq)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                Since::Events(events) if !events.is_empty() => {
                    for e in events {
                        cursor = e.seq;
                        crate::faults::check_stream(&e.path);
                        if scope.matches(&e) && tx.send(Ok(change_to_proto(e))).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Since::Events(_) => {}
            }
            tokio::select! {
                changed = wake.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep(keepalive) => {
                    let seq = session.events.current_seq();
                    if tx.send(Ok(marker(proto::ChangeKind::Keepalive, seq))).await.is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
                _ = session.closed() => {
                    let gone = Error::SessionNotFound { session_id: session.record.id.clone() };
                    let _ = tx.send(Err(gone.to_status())).await;
                    return;
                }
                _ = stopping.cancelled() => {
                    let _ = tx.send(Err(shutting_down().to_status())).await;
                    return;
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
}

/// Why a Watch ends when the server stops.
fn shutting_down() -> Error {
    Error::Unavailable {
        message: "the server is shutting down: watch again with since_seq to resume without a gap"
            .to_string(),
    }
}

impl FilesystemService {
    async fn transfer(
        &self,
        method: &'static str,
        metadata: &MetadataMap,
        r: proto::TransferRequest,
    ) -> std::result::Result<Response<proto::TransferResponse>, Status> {
        traced(method, &r.session_id, &r.source, async {
            let s = self.session(metadata, &r.session_id)?;
            let source = s.path(&r.source)?;
            let destination = s.path(&r.destination)?;
            let options = TransferOptions {
                overwrite: r.overwrite,
                create_parents: r.create_parents.unwrap_or(true),
                if_version: r.if_version,
            };
            if method == "Copy" && options.if_version.is_some() {
                return Err(Error::invalid_argument(
                    "if_version applies to Move, not Copy",
                ));
            }
            to_the_end(async move {
                let entries = if method == "Move" {
                    s.fs.rename(&source, &destination, options).await?
                } else {
                    s.fs.copy(&source, &destination, options).await?
                };
                Ok(proto::TransferResponse {
                    source: source.as_str().to_string(),
                    destination: destination.as_str().to_string(),
                    entries: entries as i64,
                })
            })
            .await
        })
        .await
    }
}

/// A message of an upload after its header.
enum Upload {
    Data(Bytes),
    Offset(u64),
}

/// The next message of an upload, or why the upload failed.
fn upload_message(m: std::result::Result<proto::WriteBytesRequest, Status>) -> Result<Upload> {
    use proto::write_bytes_request::Payload;
    match m {
        Ok(proto::WriteBytesRequest {
            payload: Some(Payload::Data(data)),
        }) => Ok(Upload::Data(data)),
        Ok(proto::WriteBytesRequest {
            payload: Some(Payload::Offset(offset)),
        }) => Ok(Upload::Offset(offset)),
        Ok(_) => Err(Error::invalid_argument(
            "only the first WriteBytes message may be a header",
        )),
        Err(status) => {
            Err(
                super::resets::undecodable(&status).unwrap_or_else(|| Error::Cancelled {
                    message: format!(
                        "the upload broke off before it finished: {}",
                        wsfs::path::quote(status.message())
                    ),
                }),
            )
        }
    }
}

/// A PATCH upload's messages as chunks: each data message is written at
/// the current position, which an offset message sets and the data moves
/// on.
fn patch_chunks(incoming: Streaming<proto::WriteBytesRequest>) -> wsfs::PatchChunks {
    futures::stream::unfold(
        (incoming, 0u64, false),
        |(mut incoming, mut position, failed)| async move {
            if failed {
                return None;
            }
            loop {
                let item = match upload_message(incoming.next().await?) {
                    Ok(Upload::Offset(offset)) => {
                        position = offset;
                        continue;
                    }
                    Ok(Upload::Data(data)) => {
                        let chunk = PatchChunk {
                            offset: position,
                            data,
                        };
                        position = position.saturating_add(chunk.data.len() as u64);
                        Ok(chunk)
                    }
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                return Some((item, (incoming, position, failed)));
            }
        },
    )
    .boxed()
}

/// Payload bytes of a ReadBytes message, for the stream's closing log line.
fn data_len(m: &proto::ReadBytesResponse) -> usize {
    match &m.payload {
        Some(proto::read_bytes_response::Payload::Data(d)) => d.len(),
        _ => 0,
    }
}
