//! Snapshots: [`Client::snapshot`], [`Client::restore`],
//! [`Client::list_snapshots`] and [`Client::delete_snapshot`].

use crate::client::Client;
use wsfs::{proto, CanonicalPath, Error, Result};

pub use wsfs::{Restored, SnapshotInfo};

/// How a path differs from a snapshot to the live workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotChangeKind {
    /// In the live workspace, not in the snapshot.
    Added,
    /// In the snapshot, not in the live workspace.
    Deleted,
    /// A file on both sides with other contents.
    Modified,
}

/// One difference between a snapshot and the live workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotChange {
    pub kind: SnapshotChangeKind,
    pub path: String,
    pub directory: bool,
}

/// What [`Client::diff_snapshot`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDiff {
    /// In path order.
    pub changes: Vec<SnapshotChange>,
    /// More changes than one answer holds (10,000).
    pub truncated: bool,
}

impl Client {
    /// Captures session `session_id`'s workspace as it is now. Allowed on
    /// read-only sessions.
    pub async fn snapshot(&self, session_id: &str, tag: &str) -> Result<SnapshotInfo> {
        let request = proto::SnapshotRequest {
            session_id: session_id.to_string(),
            tag: tag.to_string(),
        };
        let response = self
            .sessions
            .clone()
            .snapshot(self.credentials.about(request))
            .await?;
        SnapshotInfo::try_from(response.into_inner())
    }

    /// Puts the workspace back exactly as the snapshot holds it: files
    /// created since go, deleted ones return, each with a new version.
    /// Unknown snapshot: `SnapshotNotFound`; read-only session: `ReadOnly`.
    pub async fn restore(&self, session_id: &str, snapshot_id: &str) -> Result<Restored> {
        self.restore_path(session_id, snapshot_id, &CanonicalPath::root())
            .await
    }

    /// [`Client::restore`] of one file or directory: `path` and everything
    /// beneath it become exactly what the snapshot holds there (entries it
    /// lacks go), nothing outside `path` changes but missing parents, which
    /// come back as the snapshot holds them. [`Restored`] counts the files
    /// restored. `path` not in the snapshot: `FileNotFound`; a parent of
    /// `path` that is a file in the workspace: `NotADirectory`; both
    /// change nothing.
    pub async fn restore_path(
        &self,
        session_id: &str,
        snapshot_id: &str,
        path: &CanonicalPath,
    ) -> Result<Restored> {
        let request = proto::RestoreRequest {
            session_id: session_id.to_string(),
            snapshot_id: snapshot_id.to_string(),
            path: path.as_str().to_string(),
        };
        let r = self
            .sessions
            .clone()
            .restore(self.credentials.about(request))
            .await?
            .into_inner();
        if r.path != path.as_str() {
            // A server that predates the path field ignores it.
            return Err(Error::Unimplemented {
                message: format!(
                    "the server restored '{}' instead of '{path}': it predates restores of one path",
                    r.path
                ),
            });
        }
        Restored::try_from(r)
    }

    /// What changed in the live workspace since snapshot `snapshot_id`:
    /// paths added, deleted, and files whose contents differ, in path
    /// order. Unknown snapshot: `SnapshotNotFound`.
    pub async fn diff_snapshot(&self, session_id: &str, snapshot_id: &str) -> Result<SnapshotDiff> {
        use proto::snapshot_change::Kind;
        let request = proto::DiffSnapshotRequest {
            session_id: session_id.to_string(),
            snapshot_id: snapshot_id.to_string(),
        };
        let r = self
            .sessions
            .clone()
            .diff_snapshot(self.credentials.about(request))
            .await?
            .into_inner();
        let changes = r
            .changes
            .into_iter()
            .map(|c| {
                let kind = match Kind::try_from(c.kind) {
                    Ok(Kind::Added) => SnapshotChangeKind::Added,
                    Ok(Kind::Deleted) => SnapshotChangeKind::Deleted,
                    Ok(Kind::Modified) => SnapshotChangeKind::Modified,
                    Err(_) => {
                        return Err(Error::internal(format!(
                            "the server sent an unknown change kind ({})",
                            c.kind
                        )))
                    }
                };
                Ok(SnapshotChange {
                    kind,
                    path: c.path,
                    directory: c.directory,
                })
            })
            .collect::<Result<_>>()?;
        Ok(SnapshotDiff {
            changes,
            truncated: r.truncated,
        })
    }

    /// File `path` as snapshot `snapshot_id` holds it: its size and its
    /// bytes, streamed. A path the snapshot does not hold is
    /// `FileNotFound`; a directory is `IsADirectory`.
    pub async fn read_snapshot_file(
        &self,
        session_id: &str,
        snapshot_id: &str,
        path: &str,
    ) -> Result<(
        u64,
        futures::stream::BoxStream<'static, Result<bytes::Bytes>>,
    )> {
        use futures::StreamExt;
        use proto::snapshot_file_chunk::Payload;
        let request = proto::ReadSnapshotFileRequest {
            session_id: session_id.to_string(),
            snapshot_id: snapshot_id.to_string(),
            path: path.to_string(),
        };
        let mut stream = self
            .sessions
            .clone()
            .read_snapshot_file(self.credentials.about(request))
            .await?
            .into_inner();
        let size = match stream.message().await? {
            Some(proto::SnapshotFileChunk {
                payload: Some(Payload::SizeBytes(size)),
            }) => wsfs::wire::server_count("size_bytes", size)?,
            _ => {
                return Err(Error::internal(
                    "the ReadSnapshotFile stream did not start with the file's size",
                ))
            }
        };
        let chunks = stream
            .map(|m| match m {
                Ok(proto::SnapshotFileChunk {
                    payload: Some(Payload::Data(data)),
                }) => Ok(data),
                Ok(_) => Err(Error::internal(
                    "the ReadSnapshotFile stream sent its size twice",
                )),
                Err(status) => Err(Error::from_status(&status)),
            })
            .boxed();
        Ok((size, chunks))
    }

    /// The session's snapshots, oldest first.
    pub async fn list_snapshots(&self, session_id: &str) -> Result<Vec<SnapshotInfo>> {
        let request = proto::ListSnapshotsRequest {
            session_id: session_id.to_string(),
        };
        let response = self
            .sessions
            .clone()
            .list_snapshots(self.credentials.about(request))
            .await?;
        response
            .into_inner()
            .snapshots
            .into_iter()
            .map(SnapshotInfo::try_from)
            .collect()
    }

    /// Deletes a snapshot; storage no other snapshot uses is freed.
    pub async fn delete_snapshot(&self, session_id: &str, snapshot_id: &str) -> Result<()> {
        let request = proto::DeleteSnapshotRequest {
            session_id: session_id.to_string(),
            snapshot_id: snapshot_id.to_string(),
        };
        self.sessions
            .clone()
            .delete_snapshot(self.credentials.about(request))
            .await?;
        Ok(())
    }
}
