//! What a backend kind is to the rest of the server.
//!
//! Each kind (MEMORY, DIRECTORY, CONTAINER) is one folder with one
//! [`BackendProvider`]: it makes a new session's workspace, makes a fork's
//! from a snapshot, reopens what a restart left in the data directory,
//! and says whether its sessions are recorded on disk with their tokens,
//! and leased and mirrored in the object store. A kind whose snapshots
//! live only in the object store also recreates its sessions from there
//! ([`crate::objstore::recovers::RecoversFromBucket`]).
//! The registry picks a kind's provider in one place, its factory, and
//! names no kind anywhere else.

use crate::archive::import::ArchiveTarget;
use crate::auth::zones::{Layout, ZONE_DIRS};
use crate::backend::Backend;
use crate::config::ServerConfig;
use crate::limits::SessionLimits;
use crate::snapshots::{fork::Origin, SnapshotMirror, SnapshotMirrors, SnapshotStore};
use crate::workspace::Workspace;
use async_trait::async_trait;
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use wsfs::{BackendKind, CanonicalPath, Filesystem, Permissions, Result, WriteMode, WriteOptions};

pub use wsfs::SnapshotRef;

/// Where the records of sessions kept on disk live, under the data
/// directory: one directory per session.
pub(crate) fn sessions_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("sessions")
}

/// Where session directories go to be removed: inside the directory that
/// held them (one filesystem, so going there is one rename), under a name
/// no session id takes (ids are UUIDs).
const REMOVING: &str = ".removing";

/// Removes the directory of a session, recorded or half made, so that a
/// kill at any moment leaves the session whole or gone: first one rename
/// takes the directory out of reach (no start reopens it, no new session
/// meets it), durably in `fsync` mode; then its files are removed.
/// Blocking. A directory already gone is no error.
pub(crate) fn remove_session_dir(
    session_dir: &Path,
    durability: crate::durability::Durability,
) -> std::io::Result<()> {
    let Some(aside) = set_aside(session_dir)? else {
        return Ok(());
    };
    if durability.is_fsync() {
        if let Some(parent) = session_dir.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
    }
    // A thread removing a tree from the session's staging meanwhile may
    // race this one: a second pass ends the race.
    match std::fs::remove_dir_all(&aside).or_else(|_| std::fs::remove_dir_all(&aside)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Renames `session_dir` into its parent's [`REMOVING`] directory under a
/// name of its own; `None` when it is already gone.
fn set_aside(session_dir: &Path) -> std::io::Result<Option<PathBuf>> {
    static SET_ASIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let (Some(parent), Some(name)) = (session_dir.parent(), session_dir.file_name()) else {
        return Err(std::io::Error::other("not a session directory"));
    };
    let removing = parent.join(REMOVING);
    std::fs::create_dir_all(&removing)?;
    let n = SET_ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut unique = name.to_os_string();
    unique.push(format!(".{}.{n}", std::process::id()));
    let aside = removing.join(unique);
    match std::fs::rename(session_dir, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// At a start, before anything is served from `sessions`: a session
/// directory without its record (`record`, written last when a session is
/// made and removed first when it is deleted) is what a kill left of a
/// creation, fork or recovery that never answered, and is taken out of
/// reach at once; it and what earlier removals left are then removed by
/// a thread of their own, so that nothing waits for them. Returns the
/// session directories that remain.
pub(crate) fn clear_unfinished(sessions: &Path, record: &str) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(sessions) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut kept = Vec::new();
    let mut unfinished = 0;
    for entry in entries {
        let dir = entry?.path();
        if dir.file_name().is_some_and(|n| n == REMOVING) {
            continue;
        }
        match dir.join(record).symlink_metadata() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() => {
                tracing::warn!(dir = %dir.display(), "a session directory without its record (a creation, fork or recovery cut short) is removed");
                set_aside(&dir)?;
                unfinished += 1;
            }
            _ => kept.push(dir),
        }
    }
    // What is there now: what this run sets aside later is its own to
    // remove.
    let left: Vec<PathBuf> = match std::fs::read_dir(sessions.join(REMOVING)) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    };
    if !left.is_empty() {
        tracing::info!(
            unfinished,
            left = left.len(),
            "removing what unfinished and deleted sessions left"
        );
        std::thread::spawn(move || {
            for dir in left {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove what a session left");
                }
            }
        });
    }
    Ok(kept)
}

/// What the server knows of a session, apart from its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub backend: BackendKind,
    /// DIRECTORY: the workspace directory on the server.
    pub root_path: Option<PathBuf>,
    pub created_at: SystemTime,
    pub limits: SessionLimits,
    pub read_only: bool,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl_seconds: u64,
    pub layout: Layout,
    /// CONTAINER: the container the files live in.
    pub container: Option<ContainerTarget>,
    /// A fork: the snapshot it was made from.
    pub forked_from: Option<SnapshotRef>,
    /// DIRECTORY: who owns what the service creates.
    pub owner: Option<Owner>,
}

impl SessionRecord {
    /// The record of a session made now, as `spec` asks.
    pub(crate) fn new(
        id: String,
        backend: BackendKind,
        root_path: Option<PathBuf>,
        limits: SessionLimits,
        spec: SessionSpec,
    ) -> Self {
        SessionRecord {
            id,
            backend,
            root_path,
            created_at: SystemTime::now(),
            limits,
            read_only: spec.read_only,
            labels: spec.labels,
            idle_ttl_seconds: spec.idle_ttl_seconds,
            layout: spec.layout,
            forked_from: None,
            container: spec.container,
            owner: spec.owner,
        }
    }
}

/// The user and group that own everything a DIRECTORY session's service
/// creates, and the bits a new file or directory gets when its call names
/// none, so that a container running as that user owns its workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub file_permissions: Permissions,
    pub directory_permissions: Permissions,
}

impl Owner {
    /// An owner as a request names it: bits 0 mean the usual defaults;
    /// bits above `0o777` are `INVALID_ARGUMENT`.
    pub fn new(uid: u32, gid: u32, file_bits: u32, directory_bits: u32) -> Result<Owner> {
        let bits = |b: u32, default: Permissions| match b {
            0 => Ok(default),
            b => Permissions::new(b),
        };
        Ok(Owner {
            uid,
            gid,
            file_permissions: bits(file_bits, Permissions::FILE_DEFAULT)?,
            directory_permissions: bits(directory_bits, Permissions::DIRECTORY_DEFAULT)?,
        })
    }
}

/// A container as a CreateSession asks for it, checked: a runtime name
/// (looked up against the configured ones later), a plain container name
/// and a canonical absolute workdir.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerTarget {
    pub runtime: String,
    pub name: String,
    pub workdir: String,
}

/// What CreateSession asks for, parsed.
#[derive(Debug, Clone, Default)]
pub struct SessionSpec {
    /// The id the client chose (already a canonical UUID); `None`: a fresh one.
    pub id: Option<String>,
    pub backend: Option<BackendKind>,
    /// DIRECTORY: an existing directory inside an allowed root.
    pub root: Option<PathBuf>,
    /// Copied in order, before the seed files.
    pub mounts: Vec<crate::mounts::HostMount>,
    pub seed_files: Vec<(String, bytes::Bytes)>,
    pub read_only: bool,
    pub limits: wsfs::RequestedLimits,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl_seconds: u64,
    pub layout: Layout,
    /// CONTAINER: which container, through which runtime.
    pub container: Option<ContainerTarget>,
    /// DIRECTORY: who owns what the service creates.
    pub owner: Option<Owner>,
    /// A fork of this snapshot.
    pub from_snapshot: Option<SnapshotRef>,
}

/// A workspace as a session holds it: files, archive target, snapshots.
pub(crate) type Handles = (
    Arc<dyn Filesystem>,
    Arc<dyn ArchiveTarget>,
    Arc<dyn SnapshotStore>,
);

/// The three handles of one workspace.
pub(crate) fn handles<B: Backend>(
    ws: Arc<Workspace<B>>,
    snapshots: Arc<dyn SnapshotStore>,
) -> Handles {
    (ws.clone(), ws, snapshots)
}

/// Run once the session is listed, with its change log (CONTAINER: relays
/// the changes made inside the container).
pub(crate) type OnListed =
    Box<dyn FnOnce(Arc<crate::events::EventLog>) -> BoxFuture<'static, ()> + Send>;

/// Writes a new session's record down (DIRECTORY: `session.json`).
pub(crate) type Persist = Box<dyn FnOnce(&SessionRecord) -> Result<()> + Send>;

/// What every kind may use of the server while it makes a workspace.
pub(crate) struct Context<'a> {
    pub config: &'a Arc<ServerConfig>,
    /// The object store, when the server has one.
    pub mirrors: Option<Arc<dyn SnapshotMirrors>>,
}

impl Context<'_> {
    /// The mirror of session `id`'s snapshots (kept in `session_dir`),
    /// when the server has an object store.
    pub(crate) fn mirror(&self, id: &str, session_dir: &Path) -> Option<Arc<dyn SnapshotMirror>> {
        self.mirrors.clone().map(|m| m.mirror(id, session_dir))
    }
}

/// A new session, checked: its id, what it asks for, its limits, and its
/// host mounts and seed files, planned and parsed.
pub(crate) struct NewSession<'a> {
    pub id: String,
    pub spec: &'a SessionSpec,
    pub limits: SessionLimits,
    pub mounts: Vec<crate::mounts::MountPlan>,
    pub seeds: Vec<(CanonicalPath, bytes::Bytes)>,
}

/// A workspace a provider made, ready to be listed.
pub(crate) struct Made {
    pub handles: Handles,
    /// The workspace's directory on the server, when it has one.
    pub root_path: Option<PathBuf>,
    /// The directory under the data directory that the session owns and
    /// removes with itself.
    pub owned_dir: Option<PathBuf>,
    /// Writes the session's record down once it is known.
    pub persist: Option<Persist>,
    pub on_listed: Option<OnListed>,
}

impl Made {
    /// A workspace that owns nothing on disk and records nothing.
    pub(crate) fn in_memory(handles: Handles) -> Made {
        Made {
            handles,
            root_path: None,
            owned_dir: None,
            persist: None,
            on_listed: None,
        }
    }
}

/// One session a restart found in the data directory.
pub(crate) enum Reopened {
    /// Whole: served at once.
    Ready {
        record: SessionRecord,
        handles: Handles,
        session_dir: PathBuf,
    },
    /// Recorded, but not to be opened (`error` says why): listed, refused
    /// and deletable.
    Unavailable {
        record: SessionRecord,
        why: String,
        session_dir: PathBuf,
    },
    /// Left with work a stop cut short: refused UNAVAILABLE until
    /// `finish` (blocking) has made it whole, in the background.
    Recovering {
        record: SessionRecord,
        why: String,
        session_dir: PathBuf,
        finish: Box<dyn FnOnce() -> Result<Handles> + Send>,
    },
    /// A directory whose record could not be read: left alone.
    Skipped { dir: PathBuf, error: wsfs::Error },
}

/// What one backend kind must do.
#[async_trait]
pub(crate) trait BackendProvider: Send + Sync {
    /// The kind's name in metrics and logs.
    fn name(&self) -> &'static str;

    /// Makes the workspace of a new session. What it made on disk is
    /// removed again when it fails.
    async fn create(&self, cx: &Context<'_>, new: NewSession<'_>) -> Result<Made>;

    /// Refuses, before anything is looked up, a fork made as this kind.
    fn check_fork(&self) -> Result<()> {
        Ok(())
    }

    /// Makes a fork's workspace: exactly `origin`'s snapshot (checked
    /// against the fork's limits already), and takes its first snapshot.
    /// `budget`: the fork's byte budget. Sets what `record` must say of
    /// where the workspace lives, and writes it down when the kind
    /// persists.
    async fn fork(
        &self,
        cx: &Context<'_>,
        record: &mut SessionRecord,
        origin: Arc<Origin>,
        budget: u64,
    ) -> Result<Made>;

    /// The sessions of this kind that a restart left in the data
    /// directory (called once, at start). An error stops the start.
    fn reopen(&self, _cx: &Context<'_>) -> Result<Vec<Reopened>> {
        Ok(Vec::new())
    }

    /// Whether its sessions are mirrored: recorded with their token hashes
    /// in a directory of their own and, when the server has an object
    /// store, leased and copied there, so that one replica owns each and
    /// another can take it over. DIRECTORY sessions also outlive a restart
    /// from their directory; MEMORY ones have a directory only with an
    /// object store, and come back from it, not from the disk. CONTAINER
    /// sessions are not mirrored.
    fn mirrored(&self) -> bool {
        false
    }

    /// Whether `--autosnapshot` snapshots its sessions.
    fn autosnapshots(&self) -> bool {
        true
    }

    /// The directory under `data_dir` that keeps session `id`'s record.
    fn session_dir(&self, data_dir: &Path, id: &str) -> PathBuf {
        sessions_dir(data_dir).join(id)
    }
}

/// Copies the host mounts in, then writes the seed files.
pub(crate) async fn populate<B: Backend>(
    ws: &Workspace<B>,
    mounts: Vec<crate::mounts::MountPlan>,
    seeds: &[(CanonicalPath, bytes::Bytes)],
    layout: Layout,
) -> Result<()> {
    for plan in mounts {
        crate::mounts::copy(ws, plan).await?;
    }
    seed(ws, seeds, layout).await
}

async fn seed<B: Backend>(
    ws: &Workspace<B>,
    seeds: &[(CanonicalPath, bytes::Bytes)],
    layout: Layout,
) -> Result<()> {
    if layout == Layout::Swarm {
        for zone in ZONE_DIRS {
            ws.mkdir(
                &CanonicalPath::from_canonical(zone),
                wsfs::MkdirOptions::default(),
            )
            .await?;
        }
    }
    for (path, data) in seeds {
        let chunks = futures::stream::iter([Ok(data.clone())]);
        ws.write_bytes(
            path,
            WriteOptions {
                mode: WriteMode::Overwrite,
                create_parents: true,
                ..WriteOptions::default()
            },
            Box::pin(chunks),
        )
        .await?;
    }
    Ok(())
}
