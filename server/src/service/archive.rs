//! ExportArchive and ImportArchive at the gRPC edge; the archive logic is
//! in [`crate::archive`].

use crate::archive::export::{zip_stream, ExportSource, LiveWorkspace, SnapshotSource};
use crate::archive::import;
use crate::registry::SessionRegistry;
use futures::stream::{BoxStream, StreamExt};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tonic::{Status, Streaming};
use wsfs::proto::{self, import_archive_request::Payload};
use wsfs::{Error, Result};

/// The spool an import may fill beyond the session's byte limit: room for
/// ZIP headers and data that does not compress.
const SPOOL_SLACK_BYTES: u64 = 64 * 1024 * 1024;

/// The ZIP stream of a session's live workspace, or of one of its
/// snapshots.
pub(crate) async fn export(
    registry: &Arc<SessionRegistry>,
    r: &proto::ExportArchiveRequest,
) -> Result<BoxStream<'static, std::result::Result<proto::ArchiveChunk, Status>>> {
    let session = registry.get(&r.session_id).await?;
    let source: Box<dyn ExportSource> = if r.snapshot_id.is_empty() {
        Box::new(LiveWorkspace::new(session.fs.clone()))
    } else {
        let info = session
            .snapshots
            .list()
            .await?
            .into_iter()
            .find(|s| s.id == r.snapshot_id)
            .ok_or_else(|| Error::SnapshotNotFound {
                snapshot_id: r.snapshot_id.clone(),
            })?;
        let files = session.snapshots.files(&info.id).await?;
        Box::new(SnapshotSource::new(files, info.created_at))
    };
    Ok(zip_stream(source)
        .map(|chunk| {
            chunk
                .map(|data| proto::ArchiveChunk { data })
                .map_err(|e| e.to_status())
        })
        .boxed())
}

/// Spools the archive, checks all of it, then replaces the workspace.
pub(crate) async fn import(
    registry: &Arc<SessionRegistry>,
    mut stream: Streaming<proto::ImportArchiveRequest>,
    metadata: &tonic::metadata::MetadataMap,
    session_id: &mut String,
) -> Result<proto::ImportArchiveResponse> {
    let broke = |e: Status| Error::InvalidArgument {
        message: format!("the archive stream broke off: {}", e.message()),
    };
    let first = stream.message().await.map_err(broke)?;
    let Some(proto::ImportArchiveRequest {
        payload: Some(Payload::SessionId(id)),
    }) = first
    else {
        return Err(Error::invalid_argument(
            "the first ImportArchive message must carry session_id; data follows in later messages",
        ));
    };
    *session_id = wsfs::path::quote(&id).into_owned();
    super::check_route(metadata, &id)?;
    let session = registry.get(super::session_id(&id)?).await?;
    session.archive.importable()?;
    // An import replaces the whole workspace: its expanded size is held to
    // the session's byte limit, or the server's default budget.
    let limits = crate::quota::with_budget(
        &session.record.limits,
        registry.config().default_max_total_bytes,
    );

    let spool_dir = import::spool_dir(&registry.config().data_dir);
    let internal = |e: std::io::Error| Error::io_while(e, "spooling the archive");
    tokio::fs::create_dir_all(&spool_dir)
        .await
        .map_err(internal)?;
    let spool = tempfile::Builder::new()
        .prefix("import-")
        .suffix(".zip")
        .tempfile_in(&spool_dir)
        .map_err(internal)?;
    let mut out = tokio::fs::File::from_std(spool.reopen().map_err(internal)?);
    let cap = match limits.max_total_bytes {
        0 => u64::MAX,
        n => n.saturating_mul(2).saturating_add(SPOOL_SLACK_BYTES),
    };
    let mut received = 0u64;
    while let Some(message) = stream.message().await.map_err(broke)? {
        match message.payload {
            Some(Payload::Data(data)) => {
                received += data.len() as u64;
                if received > cap {
                    return Err(Error::QuotaExceeded {
                        message: format!(
                            "the archive is larger than {cap} bytes, more than this session's byte limit can hold"
                        ),
                    });
                }
                out.write_all(&data).await.map_err(internal)?;
            }
            Some(Payload::SessionId(_)) => {
                return Err(Error::invalid_argument(
                    "session_id may only be sent in the first ImportArchive message",
                ))
            }
            None => {}
        }
    }
    out.flush().await.map_err(internal)?;
    drop(out);

    let path = spool.path().to_path_buf();
    let plan = tokio::task::spawn_blocking(move || import::check(&path, &limits))
        .await
        .map_err(|e| Error::internal(format!("checking the archive failed: {e}")))??;
    let (file_count, total_bytes) = (plan.file_count, plan.total_bytes);
    // The import owns the spool from here: it outlives this call if the
    // client goes away, and is removed when the import is done.
    let spool = spool.into_temp_path();
    super::to_the_end(async move {
        let own = session.events.own_change(None);
        session.archive.import_checked(spool, plan).await?;
        drop(own);
        // The whole workspace was replaced: every watcher re-reads it.
        session.events.barrier();
        Ok(())
    })
    .await?;
    tracing::info!(session = %id, file_count, total_bytes, "archive imported");
    Ok(wsfs::Restored {
        file_count,
        total_bytes,
    }
    .into())
}
