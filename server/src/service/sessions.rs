//! `wsfs.v1.Sessions`.

use super::{to_the_end, traced};
use crate::auth::{Auth, Caller, Layout};
use crate::directory::record::PersistedSession;
use crate::objstore::listing::RecordedSession;
use crate::registry::{
    BackendKind, Session, SessionRecord, SessionRegistry, SessionSpec, Unavailable,
};
use futures::stream::BoxStream;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status, Streaming};
use wsfs::proto::{self, sessions_server};
use wsfs::{Error, FileOwner, SessionInfo, SessionUsage, MAX_SESSION_PAGE, MAX_USAGE_PAGE};

/// Every RPC here needs the admin token when tokens are on; IssueToken
/// also takes the session's own system token.
pub struct SessionsService {
    registry: Arc<SessionRegistry>,
    auth: Arc<Auth>,
}

impl SessionsService {
    pub fn new(registry: Arc<SessionRegistry>, auth: Arc<Auth>) -> Self {
        SessionsService { registry, auth }
    }

    /// Admits a call on `session_id`: routed to that session, by the admin.
    fn admit(&self, metadata: &tonic::metadata::MetadataMap, session_id: &str) -> wsfs::Result<()> {
        super::check_route(metadata, session_id)?;
        self.auth.require_admin(metadata)
    }
}

impl SessionsService {
    /// One page of ListSessions: this server's sessions and, with an
    /// object store (unless `local_only`), every other session it records,
    /// in session-id order. At most [`MAX_SESSION_PAGE`] sessions are
    /// looked at per answer then, so that one costs one listing of the
    /// bucket's session ids and at most that many reads of records and
    /// leases; `next_page_token` names the last one looked at.
    async fn list_page(
        &self,
        r: &proto::ListSessionsRequest,
    ) -> wsfs::Result<proto::ListSessionsResponse> {
        let wanted = |labels: &BTreeMap<String, String>| {
            r.labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        let after = |id: &str| r.page_token.is_empty() || id > r.page_token.as_str();
        let bucket = self.registry.bucket().filter(|_| !r.local_only);
        let live = self.registry.list();
        // Each id after the page token: this server's own, shown as they
        // are (None: filtered out by label), or another replica's (read
        // from the bucket when its turn comes).
        let mut candidates: BTreeMap<String, Candidate> = BTreeMap::new();
        for shown in live
            .iter()
            .map(|s| self.served_here(session_info(s)))
            .chain(
                self.registry
                    .list_unavailable()
                    .iter()
                    .map(|u| self.served_here(unavailable_info(u))),
            )
            .filter(|s| after(&s.id))
        {
            let id = shown.id.clone();
            let kept = wanted(&shown.labels).then_some(shown);
            candidates.insert(id, Candidate::Here(kept.map(Box::new)));
        }
        let mut looked_at_most = usize::MAX;
        if let Some(bucket) = bucket {
            let ids = bucket.session_ids().await.map_err(|e| Error::Unavailable {
                message: format!(
                    "cannot list the other replicas' sessions: {e}; local_only lists this \
                     server's own (`wsfs session list --local`)"
                ),
            })?;
            for id in ids.into_iter().filter(|id| after(id)) {
                candidates.entry(id).or_insert(Candidate::Elsewhere);
            }
            looked_at_most = MAX_SESSION_PAGE as usize;
        }
        let page = match r.page_size {
            0 => usize::MAX,
            n => n as usize,
        }
        .min(looked_at_most);
        let mut all = Vec::new();
        let mut looked_at = 0;
        let mut last_looked_at = String::new();
        let mut rest = candidates.into_iter().peekable();
        while all.len() < page && looked_at < looked_at_most {
            let batch: Vec<(String, Candidate)> = rest
                .by_ref()
                .take((page - all.len()).min(looked_at_most - looked_at))
                .collect();
            let Some((last, _)) = batch.last() else { break };
            last_looked_at = last.clone();
            looked_at += batch.len();
            let elsewhere: Vec<String> = batch
                .iter()
                .filter(|(_, c)| matches!(c, Candidate::Elsewhere))
                .map(|(id, _)| id.clone())
                .collect();
            let mut recorded: HashMap<String, RecordedSession> =
                match (bucket, elsewhere.is_empty()) {
                    (Some(bucket), false) => bucket
                        .recorded_sessions(&elsewhere)
                        .await?
                        .into_iter()
                        .map(|s| (s.id.clone(), s))
                        .collect(),
                    _ => HashMap::new(),
                };
            for (id, candidate) in batch {
                let shown = match candidate {
                    Candidate::Here(kept) => kept.map(|s| *s),
                    Candidate::Elsewhere => recorded
                        .remove(&id)
                        .map(|s| self.recorded_info(s))
                        .filter(|s| wanted(&s.labels)),
                };
                all.extend(shown);
            }
        }
        let next_page_token = match rest.peek() {
            Some(_) => last_looked_at,
            None => String::new(),
        };
        if r.include_usage {
            for shown in &mut all {
                if let Some(s) = live.iter().find(|s| s.record.id == shown.id) {
                    *shown = self.served_here(session_with_usage(s).await?);
                }
            }
        }
        Ok(proto::ListSessionsResponse {
            sessions: all.into_iter().map(Into::into).collect(),
            next_page_token,
        })
    }

    /// `shown`, a session this server holds, named as served here when
    /// replicas share an object store.
    fn served_here(&self, shown: SessionInfo) -> SessionInfo {
        SessionInfo {
            served_by: self.registry.bucket().map(|b| b.replica().to_string()),
            ..shown
        }
    }

    /// A session another replica serves (or none does now), as the
    /// bucket records it.
    fn recorded_info(&self, recorded: RecordedSession) -> SessionInfo {
        let max_write = self.registry.config().max_write_bytes;
        let parsed = recorded.record.and_then(|record| {
            serde_json::from_value::<PersistedSession>(record)
                .map_err(|e| e.to_string())
                .and_then(|p| match p.id == recorded.id {
                    true => Ok(p),
                    false => Err(format!("it names session '{}'", p.id)),
                })
        });
        let mut shown = match parsed {
            Ok(persisted) => record_info(&persisted.into_record(max_write)),
            Err(why) => SessionInfo {
                labels: [(
                    UNAVAILABLE_LABEL.to_string(),
                    format!("its record in the object store cannot be read: {why}"),
                )]
                .into(),
                ..SessionInfo::named(recorded.id.clone())
            },
        };
        shown.served_by = recorded
            .lease
            .filter(|lease| lease.is_live())
            .map(|lease| lease.holder);
        shown.served_elsewhere = true;
        shown
    }
}

/// A session ListSessions may show: one of this server's (`None` when its
/// labels do not match), or one the bucket records for another replica.
enum Candidate {
    Here(Option<Box<SessionInfo>>),
    Elsewhere,
}

/// A live session: its record with its activity.
fn session_info(s: &Session) -> SessionInfo {
    SessionInfo {
        last_active_at: Some(s.last_active()),
        open_streams: u32::try_from(s.open_streams()).unwrap_or(u32::MAX),
        ..record_info(&s.record)
    }
}

/// [`session_info`] with the workspace's files and bytes counted.
async fn session_with_usage(s: &Session) -> wsfs::Result<SessionInfo> {
    let usage = s.archive.usage().await?;
    Ok(SessionInfo {
        usage: usage.map(|u| SessionUsage {
            files: u.files,
            bytes: u.bytes,
        }),
        ..session_info(s)
    })
}

/// The label that marks, in GetSession and ListSessions, a recorded session
/// the server would not reopen; its value says why.
pub const UNAVAILABLE_LABEL: &str = "wsfs.unavailable";

fn unavailable_info(u: &Unavailable) -> SessionInfo {
    let mut shown = record_info(&u.record);
    shown
        .labels
        .insert(UNAVAILABLE_LABEL.to_string(), u.why.clone());
    shown
}

/// What a session's record says; the token, activity and usage are the
/// live session's to add.
fn record_info(r: &SessionRecord) -> SessionInfo {
    SessionInfo {
        id: r.id.clone(),
        backend: r.backend,
        root_path: r.root_path.clone(),
        created_at: r.created_at,
        read_only: r.read_only,
        limits: r.limits.as_requested(),
        layout: r.layout,
        labels: r
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        idle_ttl: (r.idle_ttl_seconds > 0).then(|| Duration::from_secs(r.idle_ttl_seconds)),
        token: None,
        last_active_at: None,
        open_streams: 0,
        usage: None,
        container: r
            .container
            .as_ref()
            .map(crate::container::ContainerTarget::to_spec),
        forked_from: r.forked_from.clone(),
        owner: r.owner.map(|o| FileOwner {
            uid: o.uid,
            gid: o.gid,
            file_permissions: Some(o.file_permissions),
            directory_permissions: Some(o.directory_permissions),
        }),
        served_by: None,
        served_elsewhere: false,
    }
}

/// The id a client chose for its new session: a UUID written as servers
/// write them (lowercase, hyphenated), because a proxy routes by the exact
/// text and every later call names the id the server returns.
fn chosen_id(raw: &str) -> wsfs::Result<Option<String>> {
    match raw {
        "" => Ok(None),
        id if wsfs::token::is_session_id(id) => Ok(Some(id.to_string())),
        _ => Err(Error::invalid_argument(format!(
            "session_id '{}' is not a UUID in lowercase hyphenated form (like 67e55044-10b1-426f-9247-bb680e5fe0c8)",
            wsfs::path::quote(raw)
        ))),
    }
}

fn spec_from_proto(r: proto::CreateSessionRequest) -> wsfs::Result<SessionSpec> {
    crate::registry::check_labels(r.labels.iter())?;
    let backend = BackendKind::from_wire(r.backend)
        .ok_or_else(|| Error::invalid_argument(format!("unknown backend {}", r.backend)))?;
    let layout = Layout::from_wire(r.layout)
        .ok_or_else(|| Error::invalid_argument(format!("unknown layout {}", r.layout)))?;
    let container = match (backend, &r.container) {
        (BackendKind::Container, Some(c)) => Some(crate::container::ContainerTarget::parse(c)?),
        (BackendKind::Container, None) => {
            return Err(Error::invalid_argument(
                "a CONTAINER session needs container {runtime, name, workdir}",
            ))
        }
        (_, Some(_)) => {
            return Err(Error::invalid_argument(
                "container applies only to CONTAINER sessions",
            ))
        }
        (_, None) => None,
    };
    let owner = match (backend, &r.owner) {
        (_, None) => None,
        (BackendKind::Directory, Some(_)) if r.from_snapshot.is_some() => {
            return Err(Error::invalid_argument(
                "owner is not combined with from_snapshot: a fork keeps its snapshot's files",
            ))
        }
        (BackendKind::Directory, Some(o)) => Some(crate::directory::Owner::new(
            o.uid,
            o.gid,
            o.file_permissions,
            o.directory_permissions,
        )?),
        (_, Some(_)) => {
            return Err(Error::invalid_argument(
                "owner applies only to DIRECTORY sessions",
            ))
        }
    };
    let mut seed_files: Vec<_> = r.seed_files.into_iter().collect();
    seed_files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(SessionSpec {
        id: chosen_id(&r.session_id)?,
        backend: Some(backend),
        root: Some(r.root).filter(|s| !s.is_empty()).map(Into::into),
        mounts: r.mounts.into_iter().map(wsfs::HostMount::from).collect(),
        seed_files,
        read_only: r.read_only,
        limits: r.limits.map(Into::into).unwrap_or_default(),
        labels: r.labels.into_iter().collect(),
        idle_ttl_seconds: r.idle_ttl_seconds,
        layout,
        container,
        owner,
        from_snapshot: r.from_snapshot.map(wsfs::SnapshotRef::from),
    })
}

type RpcStream<T> = BoxStream<'static, std::result::Result<T, Status>>;

#[tonic::async_trait]
impl sessions_server::Sessions for SessionsService {
    async fn create_session(
        &self,
        request: Request<proto::CreateSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("CreateSession", "", &r.root.clone(), async {
            admitted?;
            let session = self.registry.create(spec_from_proto(r)?).await?;
            tracing::info!(session = %session.record.id, backend = ?session.record.backend, "session created");
            let mut created = session_info(&session);
            if self.auth.tokens_on() {
                created.token = Some(
                    self.registry
                        .issue_token(&self.auth, &session, Caller::System)
                        .await?,
                );
            }
            Ok(proto::Session::from(created))
        })
        .await
    }

    async fn get_session(
        &self,
        request: Request<proto::GetSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("GetSession", &r.session_id, "", async {
            // A token-only call names its session by its token (and the
            // metadata, sent from the token), not by its body: the session
            // answered is what the route is checked against.
            let named = match r.session_id.as_str() {
                "" => self.auth.bearer_session(&metadata).unwrap_or_default(),
                id => id.to_string(),
            };
            let id = super::authorized(&self.registry, &self.auth, &metadata, &named, || {
                self.auth.session_to_get(&metadata, &r.session_id)
            })
            .await?;
            super::check_route(&metadata, &id)?;
            // (A copy superseded by a failover is not shown: the session
            // is asked for, as every call on it does.)
            if let Some(u) = self
                .registry
                .unavailable(&id)
                .filter(|_| !self.registry.superseded(&id))
            {
                return Ok(self.served_here(unavailable_info(&u)).into());
            }
            let live = session_with_usage(&*self.registry.get(&id).await?).await?;
            Ok(proto::Session::from(self.served_here(live)))
        })
        .await
    }

    async fn list_sessions(
        &self,
        request: Request<proto::ListSessionsRequest>,
    ) -> Result<Response<proto::ListSessionsResponse>, Status> {
        let admitted = self.auth.require_admin(request.metadata());
        let r = request.into_inner();
        traced("ListSessions", "", "", async {
            admitted?;
            crate::registry::check_labels(r.labels.iter())?;
            if r.include_usage && !(1..=MAX_USAGE_PAGE).contains(&r.page_size) {
                return Err(Error::invalid_argument(format!(
                    "include_usage walks every listed workspace: ask for a page_size of 1 to \
                     {MAX_USAGE_PAGE} (got {})",
                    r.page_size
                )));
            }
            self.list_page(&r).await
        })
        .await
    }

    async fn delete_session(
        &self,
        request: Request<proto::DeleteSessionRequest>,
    ) -> Result<Response<proto::DeleteSessionResponse>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("DeleteSession", &r.session_id, "", async {
            admitted?;
            // A session the bucket has and no replica holds is failed over
            // first, so that deleting it removes it from the bucket too
            // rather than leaving it to come back at its next call.
            if self.registry.unavailable(&r.session_id).is_none() {
                match self.registry.get(&r.session_id).await {
                    Ok(_) | Err(Error::SessionNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let files = self.registry.delete(&r.session_id).await?;
            self.auth.tokens().forget_session(&r.session_id);
            Ok(proto::DeleteSessionResponse {
                files_deleted: files as i64,
            })
        })
        .await
    }

    async fn recover_session(
        &self,
        request: Request<proto::RecoverSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("RecoverSession", &r.session_id, "", async {
            admitted?;
            let id = chosen_id(&r.session_id)?
                .ok_or_else(|| Error::invalid_argument("session_id is required"))?;
            let registry = self.registry.clone();
            // Downloaded and restored to the end, or removed again, even
            // when the caller goes away.
            let session =
                to_the_end(async move { registry.recover(&id, &r.snapshot_id, r.force).await })
                    .await?;
            tracing::info!(session = %session.record.id, "session recovered from the object store");
            let mut recovered = session_info(&session);
            if self.auth.tokens_on() {
                recovered.token = Some(
                    self.registry
                        .issue_token(&self.auth, &session, Caller::System)
                        .await?,
                );
            }
            Ok(proto::Session::from(recovered))
        })
        .await
    }

    async fn snapshot(
        &self,
        request: Request<proto::SnapshotRequest>,
    ) -> Result<Response<proto::SnapshotInfo>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("Snapshot", &r.session_id, "", async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            let info = session.snapshots.snapshot(&r.tag).await?;
            Ok(proto::SnapshotInfo::from(&info))
        })
        .await
    }

    async fn restore(
        &self,
        request: Request<proto::RestoreRequest>,
    ) -> Result<Response<proto::RestoreResponse>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("Restore", &r.session_id, &r.path, async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            let id = r.snapshot_id;
            let at = session.path(&r.path)?;
            let path = at.as_str().to_string();
            let restored = to_the_end(async move {
                let own = session.events.own_change(None);
                let restored = session.snapshots.restore(&id, &at).await?;
                drop(own);
                // The whole workspace was replaced: every watcher re-reads it.
                session.events.barrier();
                Ok(restored)
            })
            .await?;
            Ok(proto::RestoreResponse {
                path,
                ..proto::RestoreResponse::from(restored)
            })
        })
        .await
    }

    async fn list_snapshots(
        &self,
        request: Request<proto::ListSnapshotsRequest>,
    ) -> Result<Response<proto::ListSnapshotsResponse>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("ListSnapshots", &r.session_id, "", async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            let snapshots = session.snapshots.list().await?;
            Ok(proto::ListSnapshotsResponse {
                snapshots: snapshots.iter().map(proto::SnapshotInfo::from).collect(),
            })
        })
        .await
    }

    async fn diff_snapshot(
        &self,
        request: Request<proto::DiffSnapshotRequest>,
    ) -> Result<Response<proto::DiffSnapshotResponse>, Status> {
        use crate::snapshots::diff::{diff, DiffKind};
        use proto::snapshot_change::Kind;
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("DiffSnapshot", &r.session_id, "", async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            let (changes, truncated) =
                diff(&session.snapshots, &session.fs, &r.snapshot_id).await?;
            Ok(proto::DiffSnapshotResponse {
                changes: changes
                    .into_iter()
                    .map(|c| proto::SnapshotChange {
                        kind: match c.kind {
                            DiffKind::Added => Kind::Added,
                            DiffKind::Deleted => Kind::Deleted,
                            DiffKind::Modified => Kind::Modified,
                        } as i32,
                        path: c.path.as_str().to_string(),
                        directory: c.directory,
                    })
                    .collect(),
                truncated,
            })
        })
        .await
    }

    type ReadSnapshotFileStream = RpcStream<proto::SnapshotFileChunk>;

    async fn read_snapshot_file(
        &self,
        request: Request<proto::ReadSnapshotFileRequest>,
    ) -> Result<Response<Self::ReadSnapshotFileStream>, Status> {
        use futures::StreamExt;
        use proto::snapshot_file_chunk::Payload;
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("ReadSnapshotFile", &r.session_id, &r.path, async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            let permit = session.open_stream()?;
            let path = session.path(&r.path)?;
            let (size, chunks) =
                crate::snapshots::diff::read_file(&session.snapshots, &r.snapshot_id, &path)
                    .await?;
            let first = proto::SnapshotFileChunk {
                payload: Some(Payload::SizeBytes(size as i64)),
            };
            let data = chunks.map(|c| {
                c.map(|bytes| proto::SnapshotFileChunk {
                    payload: Some(Payload::Data(bytes)),
                })
                .map_err(|e| e.to_status())
            });
            let messages = futures::stream::once(async { Ok(first) })
                .chain(data)
                .map(move |m| {
                    let _held = &permit;
                    m
                })
                .boxed();
            Ok(super::LoggedStream::new(
                messages,
                "ReadSnapshotFile",
                &r.session_id,
                &r.path,
                |c: &proto::SnapshotFileChunk| match &c.payload {
                    Some(Payload::Data(d)) => d.len(),
                    _ => 0,
                },
            )
            .boxed())
        })
        .await
    }

    async fn delete_snapshot(
        &self,
        request: Request<proto::DeleteSnapshotRequest>,
    ) -> Result<Response<proto::DeleteSnapshotResponse>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        traced("DeleteSnapshot", &r.session_id, "", async {
            admitted?;
            let session = self.registry.get(&r.session_id).await?;
            session.snapshots.delete(&r.snapshot_id).await?;
            Ok(proto::DeleteSnapshotResponse {})
        })
        .await
    }

    type ExportArchiveStream = RpcStream<proto::ArchiveChunk>;

    async fn export_archive(
        &self,
        request: Request<proto::ExportArchiveRequest>,
    ) -> Result<Response<Self::ExportArchiveStream>, Status> {
        let admitted = self.admit(request.metadata(), &request.get_ref().session_id);
        let r = request.into_inner();
        let session_id = r.session_id.clone();
        traced("ExportArchive", &r.session_id, "", async {
            admitted?;
            let permit = self.registry.get(&r.session_id).await?.open_stream()?;
            let chunks = super::archive::export(&self.registry, &r).await?;
            let chunks = futures::StreamExt::boxed(futures::StreamExt::map(chunks, move |c| {
                let _held = &permit;
                c
            }));
            Ok(Box::pin(super::LoggedStream::new(
                chunks,
                "ExportArchive",
                &session_id,
                "",
                |c: &proto::ArchiveChunk| c.data.len(),
            )) as Self::ExportArchiveStream)
        })
        .await
    }

    async fn import_archive(
        &self,
        request: Request<Streaming<proto::ImportArchiveRequest>>,
    ) -> Result<Response<proto::ImportArchiveResponse>, Status> {
        let (metadata, _, stream) = request.into_parts();
        let admitted = self.auth.require_admin(&metadata);
        // The session id arrives in the stream; the log line names it then.
        let mut session_id = String::new();
        let result = traced("ImportArchive", "", "", async {
            admitted?;
            super::archive::import(&self.registry, stream, &metadata, &mut session_id).await
        })
        .await;
        tracing::debug!(session = %session_id, ok = result.is_ok(), "ImportArchive done");
        result
    }

    async fn issue_token(
        &self,
        request: Request<proto::IssueTokenRequest>,
    ) -> Result<Response<proto::IssueTokenResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        traced("IssueToken", &r.session_id, "", async {
            super::check_route(&metadata, &r.session_id)?;
            super::authorized(&self.registry, &self.auth, &metadata, &r.session_id, || {
                self.auth.require_admin_or_system(&metadata, &r.session_id)
            })
            .await?;
            let caller = Caller::named(&r.caller)?;
            if !self.auth.tokens_on() {
                return Err(Error::invalid_argument(
                    "this server has tokens off (no --admin-token): name the caller with x-wsfs-caller instead",
                ));
            }
            let session = self.registry.get(&r.session_id).await?;
            let token = self
                .registry
                .issue_token(&self.auth, &session, caller)
                .await?;
            Ok(proto::IssueTokenResponse {
                token,
                caller: r.caller,
            })
        })
        .await
    }
}
