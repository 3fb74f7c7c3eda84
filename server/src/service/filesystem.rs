//! `wsfs.v1.Filesystem`.

use super::{to_the_end, traced, LoggedStream};
use crate::auth::Auth;
use crate::events::{Scope, Since};
use crate::metrics::{Gauge, ACTIVE_WATCHES};
use crate::registry::{Session, SessionRegistry, StreamPermit};
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};
use wsfs::proto::{self, filesystem_server};
use wsfs::wire::events::marker;
use wsfs::wire::filesystem::{self as call, Upload, UploadPart};
use wsfs::wire::Request as _;
use wsfs::{CanonicalPath, Error, Filesystem, PatchChunk, PathLimits, Result};

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
    async fn session(&self, metadata: &MetadataMap, id: &str) -> Result<Opened> {
        super::check_route(metadata, id)?;
        open(&self.registry, &self.auth, metadata, id).await
    }
}

/// Opens session `id` for one call as the caller `metadata` names: the
/// caller is settled (and refused) before the session is looked up, except
/// that a token this server does not know may fail the session over here
/// first ([`super::authorized`]). A session not served here is failed over
/// when its holder is gone ([`SessionRegistry::get`]). Every face that
/// works on files opens its sessions here.
pub(crate) async fn open(
    registry: &Arc<SessionRegistry>,
    auth: &Auth,
    metadata: &MetadataMap,
    id: &str,
) -> Result<Opened> {
    let caller = super::authorized(registry, auth, metadata, id, || {
        auth.filesystem_caller(metadata, id)
    })
    .await?;
    tracing::Span::current().record("caller", caller.name());
    let session = registry.get(id).await?;
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

    /// The limits this session's requests are parsed under.
    pub(crate) fn limits(&self) -> &PathLimits {
        &self.session.record.limits.path
    }
}

type RpcStream<T> = BoxStream<'static, std::result::Result<T, Status>>;

/// A request's session id and path as sent, for the call's log line
/// (the request itself goes to its parse).
fn shown(session_id: &str, path: &str) -> (String, String) {
    (session_id.to_string(), path.to_string())
}

#[tonic::async_trait]
impl filesystem_server::Filesystem for FilesystemService {
    async fn read(
        &self,
        request: Request<proto::ReadRequest>,
    ) -> std::result::Result<Response<proto::ReadResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Read", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Read::parse(r, s.limits())?;
            Ok(s.fs.read(&c.path, c.range).await?.into())
        })
        .await
    }

    type ReadBytesStream = RpcStream<proto::ReadBytesResponse>;

    async fn read_bytes(
        &self,
        request: Request<proto::ReadBytesRequest>,
    ) -> std::result::Result<Response<Self::ReadBytesStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("ReadBytes", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let permit = s.session.open_stream()?;
            let c = call::ReadBytes::parse(r, s.limits())?;
            let stream = s.fs.read_bytes(&c.path, c.range, c.chunk_size).await?;
            let header = proto::ReadBytesResponse {
                payload: Some(proto::read_bytes_response::Payload::Header(
                    (&stream).into(),
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
            Ok(LoggedStream::new(messages, "ReadBytes", &id, &raw, data_len).boxed())
        })
        .await
    }

    async fn write(
        &self,
        request: Request<proto::WriteRequest>,
    ) -> std::result::Result<Response<proto::WriteResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Write", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Write::parse(r, s.limits())?;
            to_the_end(async move { Ok(s.fs.write(&c.path, &c.content, c.options).await?.into()) })
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
        let (id, raw) = shown(&header.session_id, &header.path);
        traced("WriteBytes", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let permit = s.session.open_stream()?;
            match Upload::parse(header, s.limits())? {
                Upload::Patch { path, options, .. } => {
                    let chunks = patch_chunks(incoming);
                    to_the_end(async move {
                        let _permit = permit;
                        Ok(s.fs.patch_bytes(&path, options, chunks).await?.into())
                    })
                    .await
                }
                Upload::Write { path, options, .. } => {
                    let chunks = incoming
                        .map(|m| match upload_part(m)? {
                            UploadPart::Data(d) => Ok::<_, Error>(d),
                            UploadPart::Offset(_) => Err(Error::invalid_argument(
                                "offset messages belong to mode PATCH; this upload replaces or appends",
                            )),
                        })
                        .boxed();
                    to_the_end(async move {
                        let _permit = permit;
                        Ok(s.fs.write_bytes(&path, options, chunks).await?.into())
                    })
                    .await
                }
            }
        })
        .await
    }

    async fn edit(
        &self,
        request: Request<proto::EditRequest>,
    ) -> std::result::Result<Response<proto::EditResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Edit", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Edit::parse(r, s.limits())?;
            to_the_end(async move { Ok(s.fs.edit(&c.path, c.edit).await?.into()) }).await
        })
        .await
    }

    async fn delete(
        &self,
        request: Request<proto::DeleteRequest>,
    ) -> std::result::Result<Response<proto::DeleteResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Delete", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Delete::parse(r, s.limits())?;
            to_the_end(async move {
                let deleted = s.fs.delete(&c.path, c.options).await?;
                Ok(call::Delete::response(deleted))
            })
            .await
        })
        .await
    }

    async fn delete_many(
        &self,
        request: Request<proto::DeleteManyRequest>,
    ) -> std::result::Result<Response<proto::DeleteManyResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        // The log line names the first path and how many entries follow.
        let first = match r.entries.as_slice() {
            [] => String::new(),
            [only] => only.path.clone(),
            [first, rest @ ..] => format!("{} (+{} more)", first.path, rest.len()),
        };
        let (id, raw) = shown(&r.session_id, &first);
        traced("DeleteMany", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::DeleteMany::parse(r, s.limits())?;
            to_the_end(async move {
                let results = s.fs.delete_many(c.entries).await?;
                Ok(call::DeleteMany::response(results))
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
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Mkdir", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Mkdir::parse(r, s.limits())?;
            to_the_end(async move {
                let created = s.fs.mkdir(&c.path, c.options).await?;
                Ok(c.response(created))
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
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("List", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::List::parse(r, s.limits())?;
            Ok(s.fs
                .list_after(&c.path, c.depth, c.after.as_ref())
                .await?
                .into())
        })
        .await
    }

    async fn glob(
        &self,
        request: Request<proto::GlobRequest>,
    ) -> std::result::Result<Response<proto::GlobResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Glob", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Glob::parse(r, s.limits())?;
            Ok(s.fs.glob(c.query).await?.into())
        })
        .await
    }

    type GrepStream = RpcStream<proto::GrepResponse>;

    async fn grep(
        &self,
        request: Request<proto::GrepRequest>,
    ) -> std::result::Result<Response<Self::GrepStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Grep", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let permit = s.session.open_stream()?;
            let c = call::Grep::parse(r, s.limits())?;
            let events = s.fs.grep(c.query).await?;
            let events = events
                .map(move |e| {
                    let _held = &permit;
                    e.map(proto::GrepResponse::from).map_err(|e| e.to_status())
                })
                .boxed();
            Ok(LoggedStream::new(events, "Grep", &id, &raw, |_| 0).boxed())
        })
        .await
    }

    async fn stat(
        &self,
        request: Request<proto::StatRequest>,
    ) -> std::result::Result<Response<proto::StatResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Stat", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Stat::parse(r, s.limits())?;
            Ok(s.fs.stat(&c.path).await?.into())
        })
        .await
    }

    async fn symlink(
        &self,
        request: Request<proto::SymlinkRequest>,
    ) -> std::result::Result<Response<proto::SymlinkResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Symlink", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Symlink::parse(r, s.limits())?;
            to_the_end(async move { Ok(s.fs.symlink(&c.path, &c.target, c.options).await?.into()) })
                .await
        })
        .await
    }

    async fn set_attributes(
        &self,
        request: Request<proto::SetAttributesRequest>,
    ) -> std::result::Result<Response<proto::SetAttributesResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("SetAttributes", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::SetAttributes::parse(r, s.limits())?;
            to_the_end(async move {
                let outcome = s.fs.set_attributes(&c.path, c.attributes).await?;
                Ok(c.response(outcome))
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
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Exists", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let c = call::Exists::parse(r, s.limits())?;
            Ok(s.fs.exists(&c.path).await?.into())
        })
        .await
    }

    type WatchStream = RpcStream<proto::ChangeEvent>;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> std::result::Result<Response<Self::WatchStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        let (id, raw) = shown(&r.session_id, &r.path);
        traced("Watch", &id, &raw, async {
            let s = self.session(&metadata, &id).await?;
            let permit = s.session.open_watch()?;
            let c = call::Watch::parse(r, s.limits())?;
            let scope = Scope::new(c.path, c.recursive, &c.glob)?;
            let keepalive =
                std::time::Duration::from_millis(self.registry.config().watch_keepalive_ms.max(1));
            let stopping = self.registry.stopping();
            let events = watch_stream(s.session, scope, c.since_seq, keepalive, permit, stopping);
            Ok(LoggedStream::new(events, "Watch", &id, &raw, |_| 0).boxed())
        })
        .await
    }

    async fn changes(
        &self,
        request: Request<proto::ChangesRequest>,
    ) -> std::result::Result<Response<proto::ChangesResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("Changes", &r.session_id, "", async {
            let s = self.session(&metadata, &r.session_id).await?;
            let max = if r.max == 0 { 1000 } else { r.max as usize };
            // Since 0 is since the log began: with nothing after it, the
            // seq to pass next time is that beginning.
            let from = s.session.events.resolve(r.since_seq);
            Ok(match s.session.events.since(r.since_seq, max) {
                Since::Events(events) => proto::ChangesResponse {
                    next_seq: events.last().map_or(from, |e| e.seq),
                    events: events.into_iter().map(Into::into).collect(),
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
                        if scope.matches(&e) && tx.send(Ok(e.into())).await.is_err() {
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
        let (id, raw) = shown(&r.session_id, &r.source);
        traced(method, &id, &raw, async {
            let s = self.session(metadata, &id).await?;
            let c = call::Transfer::parse(r, s.limits())?;
            if method == "Copy" && c.options.if_version.is_some() {
                return Err(Error::invalid_argument(
                    "if_version applies to Move, not Copy",
                ));
            }
            to_the_end(async move {
                let done = if method == "Move" {
                    s.fs.rename(&c.source, &c.destination, c.options).await?
                } else {
                    s.fs.copy(&c.source, &c.destination, c.options).await?
                };
                Ok(c.response(done))
            })
            .await
        })
        .await
    }
}

/// The next message of an upload, or why the upload failed.
fn upload_part(m: std::result::Result<proto::WriteBytesRequest, Status>) -> Result<UploadPart> {
    match m {
        Ok(message) => UploadPart::try_from(message),
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
                let item = match upload_part(incoming.next().await?) {
                    Ok(UploadPart::Offset(offset)) => {
                        position = offset;
                        continue;
                    }
                    Ok(UploadPart::Data(data)) => {
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
