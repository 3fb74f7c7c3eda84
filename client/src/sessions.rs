//! Rust types of the Sessions service: what to create ([`SessionOptions`])
//! and what the server says a session is ([`SessionInfo`]).

use bytes::Bytes;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Where a session keeps its files.
pub use wsfs::BackendKind as Backend;
pub use wsfs::{
    ContainerSpec, FileOwner, HostMount, Layout, SessionInfo, SessionUsage, SnapshotRef,
};

/// Per-session limits. A zero field means the server's default (and, for
/// `max_files` and `max_total_bytes`, no limit), as in the protocol.
pub use wsfs::RequestedLimits as SessionLimits;

/// What to create: a builder for `CreateSession`.
///
/// ```
/// use std::time::Duration;
/// use wsfs_client::SessionOptions;
///
/// let options = SessionOptions::memory()
///     .seed_file("README.md", "hello\n")
///     .label("owner", "ci")
///     .idle_ttl(Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionOptions {
    pub(crate) backend: Backend,
    pub(crate) root: Option<PathBuf>,
    pub(crate) mounts: Vec<HostMount>,
    pub(crate) seed_files: BTreeMap<String, Bytes>,
    pub(crate) read_only: bool,
    pub(crate) limits: SessionLimits,
    pub(crate) layout: Layout,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) idle_ttl: Option<Duration>,
    pub(crate) container: Option<ContainerSpec>,
    pub(crate) id: Option<String>,
    pub(crate) from_snapshot: Option<SnapshotRef>,
    pub(crate) owner: Option<FileOwner>,
}

impl SessionOptions {
    /// A workspace in the server's memory.
    pub fn memory() -> Self {
        SessionOptions::default()
    }

    /// A workspace in a fresh directory under the server's data directory,
    /// or in an existing one with [`root`](Self::root).
    pub fn directory() -> Self {
        SessionOptions {
            backend: Backend::Directory,
            ..SessionOptions::default()
        }
    }

    /// A workspace in the directory `workdir` of the running container
    /// `name`, reached through the server's runtime called `runtime`.
    pub fn container(
        runtime: impl Into<String>,
        name: impl Into<String>,
        workdir: impl Into<String>,
    ) -> Self {
        SessionOptions {
            backend: Backend::Container,
            container: Some(ContainerSpec {
                runtime: runtime.into(),
                name: name.into(),
                workdir: workdir.into(),
            }),
            ..SessionOptions::default()
        }
    }

    /// Directory sessions: an existing directory inside one of the server's
    /// allowed roots (a path on the server, not here).
    pub fn root(mut self, path: impl Into<PathBuf>) -> Self {
        self.root = Some(path.into());
        self
    }

    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// A file written before the session opens. The server parses `path`.
    pub fn seed_file(mut self, path: impl Into<String>, content: impl Into<Bytes>) -> Self {
        self.seed_files.insert(path.into(), content.into());
        self
    }

    /// Largest single write in bytes.
    pub fn max_write_bytes(mut self, max_write_bytes: u64) -> Self {
        self.limits.max_write_bytes = max_write_bytes;
        self
    }

    /// Every limit at once.
    pub fn limits(mut self, limits: SessionLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    pub fn mount(mut self, mount: HostMount) -> Self {
        self.mounts.push(mount);
        self
    }

    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// A fork: the new session's workspace is exactly this snapshot of
    /// another session (either backend), which it also holds as its first
    /// snapshot. Not combined with a root, mounts or seed files.
    pub fn from_snapshot(
        mut self,
        session_id: impl Into<String>,
        snapshot_id: impl Into<String>,
    ) -> Self {
        self.from_snapshot = Some(SnapshotRef {
            session_id: session_id.into(),
            snapshot_id: snapshot_id.into(),
        });
        self
    }

    /// Remove the session after it has been idle this long. Sent in whole
    /// seconds, rounded up.
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = Some(ttl);
        self
    }

    /// Directory sessions: everything the service creates belongs to
    /// `owner` (the server must be able to chown: PERMISSION_DENIED
    /// otherwise).
    pub fn owner(mut self, owner: FileOwner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The new session's id: a UUID in lowercase hyphenated form, unused on
    /// the server (ALREADY_EXISTS otherwise). Unset, the client picks a
    /// random one (UUID v4).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}
