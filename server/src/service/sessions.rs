//! `wsfs.v1.Sessions`.

use super::{timestamp, traced, unimplemented};
use crate::sessions::{BackendKind, Session, SessionRegistry, SessionSpec};
use crate::snapshots::SnapshotInfo;
use futures::stream::BoxStream;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};
use wsfs::proto::{self, sessions_server};
use wsfs::Error;

pub struct SessionsService {
    registry: Arc<SessionRegistry>,
}

impl SessionsService {
    pub fn new(registry: Arc<SessionRegistry>) -> Self {
        SessionsService { registry }
    }
}

fn session_to_proto(s: &Session) -> proto::Session {
    let r = &s.record;
    proto::Session {
        session_id: r.id.clone(),
        backend: match r.backend {
            BackendKind::Memory => proto::session::Backend::Memory,
            BackendKind::Directory => proto::session::Backend::Directory,
        } as i32,
        root_path: r
            .root_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        created_at: timestamp(r.created_at),
        limits: Some(r.limits.to_proto()),
        read_only: r.read_only,
        layout: proto::session::Layout::Flat as i32,
        labels: r
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        idle_ttl_seconds: r.idle_ttl_seconds,
        token: String::new(),
    }
}

fn snapshot_to_proto(i: &SnapshotInfo) -> proto::SnapshotInfo {
    proto::SnapshotInfo {
        snapshot_id: i.id.clone(),
        tag: i.tag.clone(),
        created_at: timestamp(i.created_at),
        file_count: i.file_count as i64,
        total_bytes: i.total_bytes as i64,
    }
}

fn spec_from_proto(r: proto::CreateSessionRequest) -> wsfs::Result<SessionSpec> {
    let backend = match proto::session::Backend::try_from(r.backend) {
        Ok(proto::session::Backend::Memory) => BackendKind::Memory,
        Ok(proto::session::Backend::Directory) => BackendKind::Directory,
        Err(_) => {
            return Err(Error::invalid_argument(format!(
                "unknown backend {}",
                r.backend
            )))
        }
    };
    if !r.mounts.is_empty() {
        return Err(unimplemented(
            "host mounts",
            "they arrive with snapshots and archives",
        ));
    }
    if r.layout != proto::session::Layout::Flat as i32 {
        return Err(unimplemented(
            "the SWARM layout",
            "it arrives with swarm coordination",
        ));
    }
    let mut seed_files: Vec<_> = r.seed_files.into_iter().collect();
    seed_files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(SessionSpec {
        backend: Some(backend),
        root: Some(r.root).filter(|s| !s.is_empty()).map(Into::into),
        seed_files,
        read_only: r.read_only,
        limits: r.limits,
        labels: r.labels.into_iter().collect(),
        idle_ttl_seconds: r.idle_ttl_seconds,
    })
}

type RpcStream<T> = BoxStream<'static, std::result::Result<T, Status>>;

#[tonic::async_trait]
impl sessions_server::Sessions for SessionsService {
    async fn create_session(
        &self,
        request: Request<proto::CreateSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        let r = request.into_inner();
        traced("CreateSession", "", &r.root.clone(), async {
            let session = self.registry.create(spec_from_proto(r)?).await?;
            tracing::info!(session = %session.record.id, backend = ?session.record.backend, "session created");
            Ok(session_to_proto(&session))
        })
        .await
    }

    async fn get_session(
        &self,
        request: Request<proto::GetSessionRequest>,
    ) -> Result<Response<proto::Session>, Status> {
        let r = request.into_inner();
        traced("GetSession", &r.session_id, "", async {
            Ok(session_to_proto(&*self.registry.get(&r.session_id)?))
        })
        .await
    }

    async fn list_sessions(
        &self,
        _request: Request<proto::ListSessionsRequest>,
    ) -> Result<Response<proto::ListSessionsResponse>, Status> {
        traced("ListSessions", "", "", async {
            Ok(proto::ListSessionsResponse {
                sessions: self
                    .registry
                    .list()
                    .iter()
                    .map(|s| session_to_proto(s))
                    .collect(),
            })
        })
        .await
    }

    async fn delete_session(
        &self,
        request: Request<proto::DeleteSessionRequest>,
    ) -> Result<Response<proto::DeleteSessionResponse>, Status> {
        let r = request.into_inner();
        traced("DeleteSession", &r.session_id, "", async {
            let files = self.registry.delete(&r.session_id).await?;
            Ok(proto::DeleteSessionResponse {
                files_deleted: files as i64,
            })
        })
        .await
    }

    async fn snapshot(
        &self,
        request: Request<proto::SnapshotRequest>,
    ) -> Result<Response<proto::SnapshotInfo>, Status> {
        let r = request.into_inner();
        traced("Snapshot", &r.session_id, "", async {
            let session = self.registry.get(&r.session_id)?;
            let info = session.snapshots.snapshot(&r.tag).await?;
            Ok(snapshot_to_proto(&info))
        })
        .await
    }

    async fn restore(
        &self,
        request: Request<proto::RestoreRequest>,
    ) -> Result<Response<proto::RestoreResponse>, Status> {
        let r = request.into_inner();
        traced("Restore", &r.session_id, "", async {
            let session = self.registry.get(&r.session_id)?;
            let restored = session.snapshots.restore(&r.snapshot_id).await?;
            Ok(proto::RestoreResponse {
                file_count: restored.file_count as i64,
                total_bytes: restored.total_bytes as i64,
            })
        })
        .await
    }

    async fn list_snapshots(
        &self,
        request: Request<proto::ListSnapshotsRequest>,
    ) -> Result<Response<proto::ListSnapshotsResponse>, Status> {
        let r = request.into_inner();
        traced("ListSnapshots", &r.session_id, "", async {
            let session = self.registry.get(&r.session_id)?;
            let snapshots = session.snapshots.list().await?;
            Ok(proto::ListSnapshotsResponse {
                snapshots: snapshots.iter().map(snapshot_to_proto).collect(),
            })
        })
        .await
    }

    async fn delete_snapshot(
        &self,
        request: Request<proto::DeleteSnapshotRequest>,
    ) -> Result<Response<proto::DeleteSnapshotResponse>, Status> {
        let r = request.into_inner();
        traced("DeleteSnapshot", &r.session_id, "", async {
            let session = self.registry.get(&r.session_id)?;
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
        let r = request.into_inner();
        traced("ExportArchive", &r.session_id, "", async {
            Err(unimplemented(
                "ExportArchive",
                "archives arrive with snapshots",
            ))
        })
        .await
    }

    async fn import_archive(
        &self,
        _request: Request<Streaming<proto::ImportArchiveRequest>>,
    ) -> Result<Response<proto::ImportArchiveResponse>, Status> {
        traced("ImportArchive", "", "", async {
            Err(unimplemented(
                "ImportArchive",
                "archives arrive with snapshots",
            ))
        })
        .await
    }

    async fn issue_token(
        &self,
        request: Request<proto::IssueTokenRequest>,
    ) -> Result<Response<proto::IssueTokenResponse>, Status> {
        let r = request.into_inner();
        traced("IssueToken", &r.session_id, "", async {
            Err(unimplemented(
                "IssueToken",
                "tokens arrive with swarm coordination",
            ))
        })
        .await
    }
}
