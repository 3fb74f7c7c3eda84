//! Session and snapshot types the server and the client share. Their
//! conversions to and from the generated [`crate::proto`] types are in
//! [`crate::wire::sessions`], so that both sides agree on them by
//! construction.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// Where a session keeps its files. Each kind's discriminant is its
/// number in the wire's `Session.Backend` enum, so the conversions both
/// ways are derived from this one declaration ([`BackendKind::ALL`]); a
/// new kind is a variant here and a line in `ALL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(i32)]
pub enum BackendKind {
    /// In the server's memory; gone with the session or the server.
    #[default]
    Memory = 0,
    /// In a directory on the server's disk, which can be bind-mounted into
    /// containers; survives a server restart.
    Directory = 1,
    /// In a running container's own filesystem, reached through an exec
    /// runtime the server's operator configured.
    Container = 2,
}

impl BackendKind {
    /// Every kind, in the order a server reopens them at its start.
    pub const ALL: [BackendKind; 3] = [
        BackendKind::Memory,
        BackendKind::Directory,
        BackendKind::Container,
    ];
}

/// How a session's workspace is divided between callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One workspace every caller may write.
    #[default]
    Flat,
    /// The zones of a multi-context swarm: `shared/`, `home/<caller>/`, `sys/`.
    Swarm,
}

/// A host directory copied into the workspace once, when the session is
/// created. `host_path` must lie inside one of the server's allowed roots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostMount {
    pub host_path: PathBuf,
    /// Where the files land in the workspace; empty is the root.
    pub mount_path: String,
    /// Keep only files matching one of these (all files when empty).
    pub include_glob: Vec<String>,
    /// Then drop files matching one of these.
    pub exclude_glob: Vec<String>,
    /// Most bytes to copy; going over fails the creation. 0: no cap.
    pub max_bytes: u64,
    pub follow_symlinks: bool,
}

impl HostMount {
    pub fn new(host_path: impl Into<PathBuf>, mount_path: impl Into<String>) -> Self {
        HostMount {
            host_path: host_path.into(),
            mount_path: mount_path.into(),
            ..HostMount::default()
        }
    }

    pub fn include(mut self, glob: impl Into<String>) -> Self {
        self.include_glob.push(glob.into());
        self
    }

    pub fn exclude(mut self, glob: impl Into<String>) -> Self {
        self.exclude_glob.push(glob.into());
        self
    }

    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    pub fn follow_symlinks(mut self, follow: bool) -> Self {
        self.follow_symlinks = follow;
        self
    }
}

/// The limits a session's creation asks for, as the wire carries them. A
/// zero field asks for the server's default (and, for `max_files` and
/// `max_total_bytes`, for no limit). The server resolves these against its
/// own maxima into the limits the session enforces, which GetSession
/// reports in the same shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestedLimits {
    /// Largest single write in bytes (default 32 MiB).
    pub max_write_bytes: u64,
    /// Path depth in segments (default 16).
    pub max_path_depth: u32,
    /// Characters per path segment (default 80).
    pub max_segment_length: u32,
    /// Files in the workspace.
    pub max_files: u64,
    /// Bytes in the workspace.
    pub max_total_bytes: u64,
}

/// One snapshot of one session: what a fork is made from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub session_id: String,
    /// A snapshot id, as Restore takes it.
    pub snapshot_id: String,
}

/// What the server says about one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// A UUID, hyphenated, lowercase.
    pub id: String,
    pub tag: String,
    pub created_at: SystemTime,
    /// Regular files held (directories are not counted).
    pub file_count: u64,
    /// Their bytes.
    pub total_bytes: u64,
}

/// What a restore or an archive import put back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    pub file_count: u64,
    pub total_bytes: u64,
}

/// Which container a CONTAINER session's files live in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ContainerSpec {
    /// One of the runtimes the server was started with.
    pub runtime: String,
    /// The container's name, as the runtime knows it.
    pub name: String,
    /// The absolute directory inside the container that holds the files.
    pub workdir: String,
}

/// Who owns everything the service creates in a directory session, and the
/// bits new files and directories get when a call names none (`None`:
/// 0644 and 0755).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOwner {
    pub uid: u32,
    pub gid: u32,
    pub file_permissions: Option<crate::Permissions>,
    pub directory_permissions: Option<crate::Permissions>,
}

impl FileOwner {
    /// `uid:gid`, with the usual default bits.
    pub fn new(uid: u32, gid: u32) -> Self {
        FileOwner {
            uid,
            gid,
            file_permissions: None,
            directory_permissions: None,
        }
    }
}

/// A session as the server describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// A UUID.
    pub id: String,
    pub backend: BackendKind,
    /// Directory sessions: the absolute directory on the server, to
    /// bind-mount into containers.
    pub root_path: Option<PathBuf>,
    pub created_at: SystemTime,
    pub read_only: bool,
    pub limits: RequestedLimits,
    pub layout: Layout,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl: Option<Duration>,
    /// The session's system-caller token: only in the answer to
    /// CreateSession, and only when the server requires tokens.
    pub token: Option<String>,
    /// When a call last named the session, or its last working stream
    /// ended; `None` for a session the server lists as unavailable.
    pub last_active_at: Option<SystemTime>,
    /// Streams open on the session when it was listed, Watch included.
    pub open_streams: u32,
    /// What the workspace held when it was counted: always from
    /// `get_session`, from a listing only when asked for
    /// (`list_sessions_labelled` in the client); `None` when the server
    /// did not count.
    pub usage: Option<SessionUsage>,
    /// Container sessions: the container the files live in.
    pub container: Option<ContainerSpec>,
    /// A fork: the snapshot it was made from.
    pub forked_from: Option<SnapshotRef>,
    /// Directory sessions made with an owner: that owner, with the bits
    /// the server applies.
    pub owner: Option<FileOwner>,
    /// With replicas sharing an object store: the replica (its
    /// `--replica-id`) that serves the session; `None` without an object
    /// store, or when no replica's lease holds it now.
    pub served_by: Option<String>,
    /// Listed from the object store's record: another replica than the
    /// one that answered serves it (or none does now); its activity,
    /// streams and usage are unknown here.
    pub served_elsewhere: bool,
}

impl SessionInfo {
    /// A session known by its id alone, nothing else about it read: every
    /// other field as the wire gives it when it says nothing (created at
    /// the epoch, the default kind, layout and limits).
    pub fn named(id: impl Into<String>) -> SessionInfo {
        SessionInfo {
            id: id.into(),
            backend: BackendKind::default(),
            root_path: None,
            created_at: std::time::UNIX_EPOCH,
            read_only: false,
            limits: RequestedLimits::default(),
            layout: Layout::default(),
            labels: BTreeMap::new(),
            idle_ttl: None,
            token: None,
            last_active_at: None,
            open_streams: 0,
            usage: None,
            container: None,
            forked_from: None,
            owner: None,
            served_by: None,
            served_elsewhere: false,
        }
    }
}

/// A workspace's regular files and their bytes, as its quotas count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionUsage {
    pub files: u64,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto;

    #[test]
    fn backends_and_layouts_round_trip_through_the_wire_and_unknown_values_are_none() {
        let names: Vec<String> = BackendKind::ALL
            .iter()
            .map(|b| {
                serde_json::to_string(b)
                    .unwrap()
                    .trim_matches('"')
                    .to_uppercase()
            })
            .collect();
        // Every kind and every wire value, the same names both ways.
        let wire_values: Vec<i32> = (0..16)
            .filter(|v| proto::session::Backend::try_from(*v).is_ok())
            .collect();
        assert_eq!(wire_values.len(), BackendKind::ALL.len());
        for (b, name) in BackendKind::ALL.into_iter().zip(&names) {
            let wire = proto::session::Backend::from(b);
            assert_eq!(wire.as_str_name(), name);
            assert_eq!(BackendKind::from_wire(wire as i32), Some(b));
        }
        for l in [Layout::Flat, Layout::Swarm] {
            let wire = proto::session::Layout::from(l) as i32;
            assert_eq!(Layout::from_wire(wire), Some(l));
        }
        assert_eq!(BackendKind::from_wire(99), None);
        assert_eq!(Layout::from_wire(-1), None);
    }

    #[test]
    fn requested_limits_round_trip() {
        let limits = RequestedLimits {
            max_write_bytes: 1,
            max_path_depth: 2,
            max_segment_length: 3,
            max_files: 4,
            max_total_bytes: 5,
        };
        let wire = proto::SessionLimits::from(limits);
        assert_eq!(RequestedLimits::from(wire), limits);
    }

    #[test]
    fn host_mounts_round_trip() {
        let mount = HostMount::new("/data/src", "src")
            .include("**/*.rs")
            .exclude("target/**")
            .max_bytes(7)
            .follow_symlinks(true);
        let wire = proto::HostMount::try_from(mount.clone()).unwrap();
        assert_eq!(HostMount::from(wire), mount);
    }

    #[test]
    fn snapshot_types_round_trip() {
        let r = SnapshotRef {
            session_id: "a".into(),
            snapshot_id: "b".into(),
        };
        assert_eq!(SnapshotRef::from(proto::SnapshotRef::from(r.clone())), r);
        let info = SnapshotInfo {
            id: "67e55044-10b1-426f-9247-bb680e5fe0c8".into(),
            tag: "t".into(),
            created_at: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(9),
            file_count: 3,
            total_bytes: 40,
        };
        assert_eq!(
            SnapshotInfo::try_from(proto::SnapshotInfo::from(&info)).unwrap(),
            info
        );
        let restored = Restored {
            file_count: 2,
            total_bytes: 9,
        };
        assert_eq!(
            Restored::try_from(proto::RestoreResponse::from(restored)).unwrap(),
            restored
        );
        assert_eq!(
            Restored::try_from(proto::ImportArchiveResponse::from(restored)).unwrap(),
            restored
        );
    }

    /// Session records on disk name them in lowercase.
    #[test]
    fn backends_and_layouts_are_stored_in_lowercase() {
        assert_eq!(
            serde_json::to_string(&BackendKind::Directory).unwrap(),
            "\"directory\""
        );
        assert_eq!(serde_json::to_string(&Layout::Swarm).unwrap(), "\"swarm\"");
    }
}
