//! Calls the typed client does not wrap yet (snapshots, archives, tokens,
//! Watch), made on the generated stubs. Each is one small function with
//! plain Rust types in and out, so that switching to the typed client's
//! methods when they arrive touches this file only. A server that answers
//! UNIMPLEMENTED surfaces as `Error::Unimplemented`, which `main` prints as
//! "not supported by this server yet".

use super::{Ctx, Outcome};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use serde_json::{json, Value};
use std::time::SystemTime;
use wsfs_client::wsfs::proto;
use wsfs_client::Error;

#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    pub id: String,
    pub tag: String,
    pub created_at: Option<SystemTime>,
    pub file_count: i64,
    pub total_bytes: i64,
}

/// What a Restore or an ImportArchive leaves in the workspace.
#[derive(Debug, Clone, Copy)]
pub struct Contents {
    pub file_count: i64,
    pub total_bytes: i64,
}

fn status(status: tonic::Status) -> Error {
    Error::from_status(&status)
}

fn time(t: Option<prost_types::Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(t).ok())
}

fn snapshot_info(s: proto::SnapshotInfo) -> SnapshotInfo {
    SnapshotInfo {
        id: s.snapshot_id,
        tag: s.tag,
        created_at: time(s.created_at),
        file_count: s.file_count,
        total_bytes: s.total_bytes,
    }
}

pub async fn snapshot(ctx: &mut Ctx, tag: &str) -> Outcome<SnapshotInfo> {
    let request = ctx.request(proto::SnapshotRequest {
        session_id: ctx.session_id()?,
        tag: tag.to_string(),
    })?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .snapshot(request)
        .await
        .map_err(status)?;
    Ok(snapshot_info(response.into_inner()))
}

pub async fn list_snapshots(ctx: &mut Ctx) -> Outcome<Vec<SnapshotInfo>> {
    let request = ctx.request(proto::ListSnapshotsRequest {
        session_id: ctx.session_id()?,
    })?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .list_snapshots(request)
        .await
        .map_err(status)?;
    Ok(response
        .into_inner()
        .snapshots
        .into_iter()
        .map(snapshot_info)
        .collect())
}

pub async fn restore(ctx: &mut Ctx, snapshot_id: &str) -> Outcome<Contents> {
    let request = ctx.request(proto::RestoreRequest {
        session_id: ctx.session_id()?,
        snapshot_id: snapshot_id.to_string(),
    })?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .restore(request)
        .await
        .map_err(status)?
        .into_inner();
    Ok(Contents {
        file_count: response.file_count,
        total_bytes: response.total_bytes,
    })
}

pub async fn delete_snapshot(ctx: &mut Ctx, snapshot_id: &str) -> Outcome {
    let request = ctx.request(proto::DeleteSnapshotRequest {
        session_id: ctx.session_id()?,
        snapshot_id: snapshot_id.to_string(),
    })?;
    ctx.client()
        .await?
        .raw_sessions()
        .delete_snapshot(request)
        .await
        .map_err(status)?;
    Ok(())
}

/// The ZIP's bytes as they arrive.
pub async fn export_archive(
    ctx: &mut Ctx,
    snapshot_id: Option<&str>,
) -> Outcome<BoxStream<'static, Result<Bytes, Error>>> {
    let request = ctx.request(proto::ExportArchiveRequest {
        session_id: ctx.session_id()?,
        snapshot_id: snapshot_id.unwrap_or_default().to_string(),
    })?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .export_archive(request)
        .await
        .map_err(status)?;
    Ok(response
        .into_inner()
        .map(|chunk| chunk.map(|c| c.data).map_err(status))
        .boxed())
}

/// Sends the session id, then `data` as the ZIP's bytes.
pub async fn import_archive(ctx: &mut Ctx, data: BoxStream<'static, Bytes>) -> Outcome<Contents> {
    use proto::import_archive_request::Payload;
    let head = proto::ImportArchiveRequest {
        payload: Some(Payload::SessionId(ctx.session_id()?)),
    };
    let body = futures::stream::once(async move { head }).chain(data.map(|chunk| {
        proto::ImportArchiveRequest {
            payload: Some(Payload::Data(chunk)),
        }
    }));
    let request = ctx.request(body)?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .import_archive(request)
        .await
        .map_err(status)?
        .into_inner();
    Ok(Contents {
        file_count: response.file_count,
        total_bytes: response.total_bytes,
    })
}

/// A caller's bearer token: (token, caller).
pub async fn issue_token(ctx: &mut Ctx, caller: &str) -> Outcome<(String, String)> {
    let request = ctx.request(proto::IssueTokenRequest {
        session_id: ctx.session_id()?,
        caller: caller.to_string(),
    })?;
    let response = ctx
        .client()
        .await?
        .raw_sessions()
        .issue_token(request)
        .await
        .map_err(status)?
        .into_inner();
    Ok((response.token, response.caller))
}

/// Change events as JSON objects: `{seq, kind, path, to_path, version,
/// caller, at}`.
pub async fn watch(
    ctx: &mut Ctx,
    path: &str,
    recursive: bool,
    glob: String,
    since_seq: u64,
) -> Outcome<BoxStream<'static, Result<Value, Error>>> {
    let request = ctx.request(proto::WatchRequest {
        session_id: ctx.session_id()?,
        path: path.to_string(),
        recursive,
        glob,
        since_seq,
    })?;
    let response = ctx
        .client()
        .await?
        .raw_filesystem()
        .watch(request)
        .await
        .map_err(status)?;
    Ok(response
        .into_inner()
        .map(|event| event.map(change_event).map_err(status))
        .boxed())
}

fn change_event(e: proto::ChangeEvent) -> Value {
    let kind = proto::ChangeKind::try_from(e.kind)
        .map(|k| k.as_str_name().to_string())
        .unwrap_or_else(|_| e.kind.to_string());
    json!({
        "seq": e.seq,
        "kind": kind,
        "path": e.path,
        "to_path": e.to_path,
        "version": e.version,
        "caller": e.caller,
        "at": time(e.at).map(super::output::time),
    })
}
