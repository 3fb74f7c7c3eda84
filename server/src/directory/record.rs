//! `session.json`: what a DIRECTORY session records beside its root, so
//! that it outlives a restart of the server (and what the object store
//! keeps of it, to recover it elsewhere).

use crate::auth::zones::Layout;
use crate::kind::{SessionRecord, SnapshotRef};
use crate::limits::SessionLimits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use wsfs::{BackendKind, Error, Result};

/// What `session.json` holds for a DIRECTORY session, so that it survives
/// a restart of the server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PersistedSession {
    pub(crate) id: String,
    pub(crate) root_path: PathBuf,
    created_at: SystemTime,
    max_write_bytes: u64,
    max_path_depth: usize,
    max_segment_chars: usize,
    max_files: u64,
    max_total_bytes: u64,
    read_only: bool,
    labels: BTreeMap<String, String>,
    idle_ttl_seconds: u64,
    #[serde(default)]
    layout: Layout,
    /// A session rooted in an existing directory: that directory's device
    /// and inode, so that a restart reopens the same directory, not
    /// whatever its path names by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) root_identity: Option<RootIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forked_from: Option<SnapshotRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<PersistedOwner>,
    /// The session's kind: DIRECTORY unless it says otherwise (a MEMORY
    /// session mirrored to the object store keeps this record too).
    #[serde(default = "directory", skip_serializing_if = "is_directory")]
    backend: BackendKind,
}

fn directory() -> BackendKind {
    BackendKind::Directory
}

fn is_directory(kind: &BackendKind) -> bool {
    *kind == BackendKind::Directory
}

/// [`crate::directory::Owner`] as session.json keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct PersistedOwner {
    uid: u32,
    gid: u32,
    file_permissions: u32,
    directory_permissions: u32,
}

/// A directory's identity: its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootIdentity {
    pub dev: u64,
    pub ino: u64,
}

impl PersistedSession {
    pub(crate) fn from_record(
        r: &SessionRecord,
        root_path: &Path,
        root_identity: Option<RootIdentity>,
    ) -> Self {
        PersistedSession {
            root_identity,
            id: r.id.clone(),
            root_path: root_path.to_path_buf(),
            created_at: r.created_at,
            max_write_bytes: r.limits.max_write_bytes,
            max_path_depth: r.limits.path.max_depth,
            max_segment_chars: r.limits.path.max_segment_chars,
            max_files: r.limits.max_files,
            max_total_bytes: r.limits.max_total_bytes,
            read_only: r.read_only,
            labels: r.labels.clone(),
            idle_ttl_seconds: r.idle_ttl_seconds,
            layout: r.layout,
            forked_from: r.forked_from.clone(),
            backend: r.backend,
            owner: r.owner.map(|o| PersistedOwner {
                uid: o.uid,
                gid: o.gid,
                file_permissions: o.file_permissions.bits(),
                directory_permissions: o.directory_permissions.bits(),
            }),
        }
    }

    pub(crate) fn into_record(self, server_max_write: u64) -> SessionRecord {
        let root_path = is_directory(&self.backend).then_some(self.root_path);
        SessionRecord {
            id: self.id,
            backend: self.backend,
            root_path,
            created_at: self.created_at,
            limits: SessionLimits {
                max_write_bytes: self.max_write_bytes.min(server_max_write),
                path: wsfs::PathLimits {
                    max_depth: self.max_path_depth,
                    max_segment_chars: self.max_segment_chars,
                },
                max_files: self.max_files,
                max_total_bytes: self.max_total_bytes,
            },
            read_only: self.read_only,
            labels: self.labels,
            idle_ttl_seconds: self.idle_ttl_seconds,
            layout: self.layout,
            container: None,
            forked_from: self.forked_from,
            owner: self.owner.map(|o| crate::directory::Owner {
                uid: o.uid,
                gid: o.gid,
                file_permissions: wsfs::Permissions::masked(o.file_permissions),
                directory_permissions: wsfs::Permissions::masked(o.directory_permissions),
            }),
        }
    }
}

pub(crate) const SESSION_FILE: &str = "session.json";

pub(crate) fn write_session_file(
    session_dir: &Path,
    p: &PersistedSession,
    durability: crate::durability::Durability,
) -> Result<()> {
    let io = |e: std::io::Error| {
        Error::io_while(
            e,
            format_args!("recording the session in '{}'", session_dir.display()),
        )
    };
    let json = serde_json::to_vec_pretty(p)
        .map_err(|e| Error::internal(format!("cannot encode session record: {e}")))?;
    let tmp = session_dir.join(format!("{SESSION_FILE}.tmp"));
    std::fs::write(&tmp, json).map_err(io)?;
    // In `fsync` mode the record, and the whole session directory made
    // before it (root, seeds, staging), are durable before CreateSession
    // answers.
    let dir = std::fs::File::open(session_dir).map_err(io)?;
    durability.settle_fs(&dir)?;
    std::fs::rename(&tmp, session_dir.join(SESSION_FILE)).map_err(io)?;
    if durability.is_fsync() {
        crate::durability::sync_dir(session_dir)?;
    }
    Ok(())
}

/// Makes `session_dir` with its `staging/`, and the `root` in it when the
/// session owns its root.
pub(crate) fn create_session_dirs(session_dir: &Path, root: &Path, own_root: bool) -> Result<()> {
    let io = |e: std::io::Error| {
        Error::io_while(
            e,
            format_args!("creating the session directory '{}'", session_dir.display()),
        )
    };
    std::fs::create_dir_all(session_dir.join("staging")).map_err(io)?;
    if own_root {
        std::fs::create_dir_all(root).map_err(io)?;
    }
    Ok(())
}
