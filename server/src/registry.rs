//! The session registry: every live session, its record and its workspace.
//!
//! A MEMORY session lives only in this process. A DIRECTORY session owns a
//! directory under the data directory (`sessions/<id>/`, holding `root/`
//! unless the session was rooted elsewhere, `staging/` for uploads in
//! flight, and `session.json`), or is rooted in an existing directory
//! inside one of the allowed roots. Its snapshots live beside the root,
//! in `objects/`, `trees/`, `snapshots/` and `head` (see
//! [`crate::snapshots`]).

use crate::archive::import::ArchiveTarget;
use crate::auth::zones::{Layout, ZONE_DIRS};
use crate::backend::{Backend, DirectoryBackend, MemoryBackend};
use crate::clock::now_ms;
use crate::config::ServerConfig;
use crate::limits::SessionLimits;
use crate::snapshots::{MemorySnapshots, SnapshotStore};
use crate::workspace::Workspace;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Filesystem, Result, WriteMode, WriteOptions};

mod fork;
mod recover;

pub use wsfs::BackendKind;

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
    pub container: Option<crate::container::ContainerTarget>,
    /// A fork: the snapshot it was made from.
    pub forked_from: Option<SnapshotRef>,
    /// DIRECTORY: who owns what the service creates.
    pub owner: Option<crate::backend::Owner>,
}

pub use wsfs::SnapshotRef;

impl SessionRecord {
    /// The record of a session made now, as `spec` asks.
    fn new(
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
    pub container: Option<crate::container::ContainerTarget>,
    /// DIRECTORY: who owns what the service creates.
    pub owner: Option<crate::backend::Owner>,
    /// A fork of this snapshot ([`fork`]).
    pub from_snapshot: Option<SnapshotRef>,
}

/// A workspace as a session holds it: files, archive target, snapshots.
type Handles = (
    Arc<dyn Filesystem>,
    Arc<dyn ArchiveTarget>,
    Arc<dyn SnapshotStore>,
);

/// A live session.
pub struct Session {
    pub record: SessionRecord,
    pub fs: Arc<dyn Filesystem>,
    /// The same workspace, for ImportArchive's whole-workspace replacement.
    pub archive: Arc<dyn ArchiveTarget>,
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Change events for Watch and Changes.
    pub events: Arc<crate::events::EventLog>,
    /// For a DIRECTORY session: reports changes made from outside.
    _external: Option<crate::events::ExternalWatcher>,
    /// The directory this session owns and removes with itself.
    owned_dir: Option<PathBuf>,
    /// Its idle clock and its open streams.
    activity: Arc<Activity>,
    /// The most streams allowed open at once (0: no limit).
    max_streams: usize,
    /// Cancelled when the session is deleted or expires, so that its
    /// streams (Watch above all, which would otherwise wait forever) end
    /// and release it.
    closed: tokio_util::sync::CancellationToken,
}

/// What the idle TTL looks at: a session with a working stream open
/// (ReadBytes, WriteBytes, Grep, Export) is in use, however long ago its
/// last call started, and the end of any stream counts as use. A Watch only
/// waits for others' work: it does not keep its session alive while open,
/// nor outlive it.
#[derive(Default)]
struct Activity {
    /// When a call last named this session or a stream of it last ended
    /// (ms since the Unix epoch).
    last_used_ms: AtomicU64,
    /// Streams open on this session, Watch included (the stream quota).
    streams: AtomicUsize,
    /// Working streams open on this session.
    working: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Activity> {
        let a = Activity::default();
        a.last_used_ms.store(now_ms(), Ordering::Relaxed);
        Arc::new(a)
    }

    /// Idle for longer than `ttl_ms` at `now` (never with a stream open).
    fn idle_longer_than(&self, ttl_ms: u64, now: u64) -> bool {
        ttl_ms > 0
            && self.working.load(Ordering::SeqCst) == 0
            && now.saturating_sub(self.last_used_ms.load(Ordering::SeqCst)) > ttl_ms
    }
}

/// One open stream of a session, released when dropped; the session's
/// idle clock restarts when any of its streams ends (the time is stored
/// before the stream stops counting, so the reaper never sees it neither
/// open nor used).
pub struct StreamPermit {
    activity: Arc<Activity>,
    working: bool,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let a = &self.activity;
        a.last_used_ms.store(now_ms(), Ordering::SeqCst);
        if self.working {
            a.working.fetch_sub(1, Ordering::SeqCst);
        }
        a.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Session {
    /// When a call last named this session, or a stream of it last ended.
    pub fn last_active(&self) -> std::time::SystemTime {
        let ms = self.activity.last_used_ms.load(Ordering::SeqCst);
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)
    }

    /// Streams open on this session now, Watch included.
    pub fn open_streams(&self) -> usize {
        self.activity.streams.load(Ordering::SeqCst)
    }

    /// Admits one more working stream (ReadBytes, WriteBytes, Grep,
    /// Export) or refuses with `QUOTA_EXCEEDED` when the session has its
    /// maximum open. Hold the permit for as long as the stream lives: the
    /// session does not expire meanwhile.
    pub fn open_stream(&self) -> Result<StreamPermit> {
        self.admit(true)
    }

    /// Admits a Watch, which counts against the stream quota but does not
    /// keep the session from expiring (its end counts as use).
    pub fn open_watch(&self) -> Result<StreamPermit> {
        self.admit(false)
    }

    fn admit(&self, working: bool) -> Result<StreamPermit> {
        let open = self.activity.streams.fetch_add(1, Ordering::SeqCst);
        if working {
            self.activity.working.fetch_add(1, Ordering::SeqCst);
        }
        let permit = StreamPermit {
            activity: self.activity.clone(),
            working,
        };
        if self.max_streams > 0 && open >= self.max_streams {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "session '{}' already has {} streams open, its maximum; close one or raise --max-streams-per-session",
                    self.record.id, self.max_streams
                ),
            });
        }
        Ok(permit)
    }

    /// Resolves when the session is deleted or expires.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }
}

impl Session {
    /// Parses a client path under this session's limits.
    pub fn path(&self, raw: &str) -> Result<CanonicalPath> {
        CanonicalPath::parse(raw, &self.record.limits.path)
    }
}

/// What `session.json` holds for a DIRECTORY session, so that it survives
/// a restart of the server.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PersistedSession {
    id: String,
    root_path: PathBuf,
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
    root_identity: Option<RootIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forked_from: Option<SnapshotRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<PersistedOwner>,
}

/// [`crate::backend::Owner`] as session.json keeps it.
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
    fn from_record(
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
            owner: r.owner.map(|o| PersistedOwner {
                uid: o.uid,
                gid: o.gid,
                file_permissions: o.file_permissions.bits(),
                directory_permissions: o.directory_permissions.bits(),
            }),
        }
    }

    fn into_record(self, server_max_write: u64) -> SessionRecord {
        SessionRecord {
            id: self.id,
            backend: BackendKind::Directory,
            root_path: Some(self.root_path),
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
            owner: self.owner.map(|o| crate::backend::Owner {
                uid: o.uid,
                gid: o.gid,
                file_permissions: wsfs::Permissions::masked(o.file_permissions),
                directory_permissions: wsfs::Permissions::masked(o.directory_permissions),
            }),
        }
    }
}

const SESSION_FILE: &str = "session.json";

/// Labels a session may carry, and a ListSessions filter may name.
pub const MAX_LABELS: usize = 64;
/// Bytes of one label's key or value.
pub const MAX_LABEL_BYTES: usize = 256;

/// Refuses, before they are stored or matched against every session,
/// labels past [`MAX_LABELS`] or a key or value past [`MAX_LABEL_BYTES`]:
/// a label is a tag, not a payload.
pub fn check_labels<'a>(
    labels: impl ExactSizeIterator<Item = (&'a String, &'a String)>,
) -> Result<()> {
    if labels.len() > MAX_LABELS {
        return Err(Error::invalid_argument(format!(
            "{} labels; at most {MAX_LABELS} are allowed",
            labels.len()
        )));
    }
    for (key, value) in labels {
        if key.len() > MAX_LABEL_BYTES || value.len() > MAX_LABEL_BYTES {
            return Err(Error::invalid_argument(format!(
                "the label '{}' is longer than {MAX_LABEL_BYTES} bytes (key or value)",
                wsfs::path::quote(key)
            )));
        }
    }
    Ok(())
}

fn write_session_file(
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

pub struct SessionRegistry {
    config: Arc<ServerConfig>,
    sessions: RwLock<HashMap<String, Arc<Session>>>,
    /// The ids of creations in flight: they count against `max_sessions`,
    /// and their id is taken, until their session is inserted or they fail.
    creating: Mutex<HashSet<String>>,
    /// Cancelled when the server begins to shut down: long-lived streams
    /// (Watch) end instead of holding the shutdown open.
    stopping: tokio_util::sync::CancellationToken,
    /// Recorded sessions that a restart could not reopen safely (their
    /// root was replaced or left the allowed roots): listed, refused, and
    /// deletable, never opened.
    unavailable: RwLock<HashMap<String, Unavailable>>,
    /// The object store snapshots are mirrored to (`--object-store`).
    bucket: Option<Arc<crate::objstore::Bucket>>,
    /// Sessions whose recovery after a restart is still to run
    /// ([`SessionRegistry::start_recoveries`]); listed in `unavailable`
    /// meanwhile.
    pending: Mutex<Vec<PendingRecovery>>,
}

/// A recorded DIRECTORY session that a stop left with work to finish
/// (see [`crate::journal::unfinished`]) before it may answer.
struct PendingRecovery {
    session_dir: PathBuf,
    record: SessionRecord,
    /// A root elsewhere, opened by identity.
    held: Option<std::os::fd::OwnedFd>,
}

/// Most sessions recovered at once after a restart.
const MAX_PARALLEL_RECOVERIES: usize = 4;

/// A recorded session that is not opened, and why.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub record: SessionRecord,
    pub why: String,
    session_dir: PathBuf,
    /// Set when another replica took the session over (its lease).
    leased_to: Option<String>,
    /// Set while its recovery after a restart runs: it is served once
    /// that ends.
    recovering: bool,
}

impl Unavailable {
    /// What every call naming this session gets.
    pub fn error(&self) -> Error {
        if self.recovering {
            return Error::Unavailable {
                message: format!(
                    "session '{}' is being recovered after a restart of the server ({}); it \
                     answers once its workspace is whole: try again in a moment",
                    self.record.id, self.why
                ),
            };
        }
        if let Some(holder) = &self.leased_to {
            return Error::SessionLeased {
                session_id: self.record.id.clone(),
                holder: holder.clone(),
                message: format!(
                    "session '{}' was taken over by replica '{holder}'; this server no longer serves it (DeleteSession here removes only this server's copy)",
                    self.record.id
                ),
            };
        }
        Error::PermissionDenied {
            path: String::new(),
            message: format!(
                "session '{}' is unavailable: {}; the server will not open it (delete it with DeleteSession)",
                self.record.id, self.why
            ),
        }
    }
}

/// One reserved place under `max_sessions` and its session id, released
/// when dropped.
struct SessionSlot<'a> {
    creating: &'a Mutex<HashSet<String>>,
    id: String,
}

impl Drop for SessionSlot<'_> {
    fn drop(&mut self) {
        self.creating
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl SessionRegistry {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        SessionRegistry {
            config,
            sessions: RwLock::new(HashMap::new()),
            creating: Mutex::new(HashSet::new()),
            stopping: tokio_util::sync::CancellationToken::new(),
            unavailable: RwLock::new(HashMap::new()),
            bucket: None,
            pending: Mutex::new(Vec::new()),
        }
    }

    /// The recorded session `id` that could not be reopened, if it is one.
    pub fn unavailable(&self, id: &str) -> Option<Unavailable> {
        self.unavailable
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// The ids of the DIRECTORY sessions served here and of those being
    /// recovered after a restart (served once whole).
    pub fn directory_sessions(&self) -> Vec<String> {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        let live = sessions
            .values()
            .filter(|s| s.record.backend == BackendKind::Directory)
            .map(|s| s.record.id.clone());
        let unavailable = self.unavailable.read().unwrap_or_else(|e| e.into_inner());
        let recovering = unavailable
            .values()
            .filter(|u| u.recovering)
            .map(|u| u.record.id.clone());
        live.chain(recovering).collect()
    }

    /// Every recorded session that could not be reopened.
    pub fn list_unavailable(&self) -> Vec<Unavailable> {
        let mut all: Vec<_> = self
            .unavailable
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.record.id.cmp(&b.record.id));
        all
    }

    /// Cancelled when the server shuts down.
    pub fn stopping(&self) -> tokio_util::sync::CancellationToken {
        self.stopping.clone()
    }

    /// A registry holding every DIRECTORY session recorded under the data
    /// directory: sessions outlive a restart of the server. A session
    /// directory whose record cannot be read is left alone and logged.
    pub fn open(config: Arc<ServerConfig>) -> Result<Self> {
        let mut registry = Self::new(config);
        registry.bucket = registry.open_bucket()?;
        let dir = registry.config.data_dir.join("sessions");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(registry),
            Err(e) => {
                return Err(Error::internal(format!(
                    "cannot read '{}': {e}",
                    dir.display()
                )))
            }
        };
        for entry in entries.flatten() {
            let session_dir = entry.path();
            match registry.reopen(&session_dir) {
                Ok(Some(s)) => tracing::info!(session = %s.record.id, "directory session reopened"),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(dir = %session_dir.display(), error = %e, "session directory skipped")
                }
            }
        }
        Ok(registry)
    }

    /// Reopens the DIRECTORY session recorded in `session_dir`. One that a
    /// stop left with work to finish (a Restore or ImportArchive to roll
    /// forward, a recursive Delete's tree to remove) is not opened here:
    /// it is listed as recovering, every call naming it is refused
    /// UNAVAILABLE, and [`Self::start_recoveries`] finishes it in the
    /// background (`None`), so that other sessions answer at once.
    fn reopen(&self, session_dir: &Path) -> Result<Option<Arc<Session>>> {
        let raw = std::fs::read(session_dir.join(SESSION_FILE))
            .map_err(|e| Error::internal(format!("no readable {SESSION_FILE}: {e}")))?;
        let persisted: PersistedSession = serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("corrupt {SESSION_FILE}: {e}")))?;
        let identity = persisted.root_identity;
        let record = persisted.into_record(self.config.max_write_bytes);
        let root = record.root_path.clone().unwrap_or_default();
        // A root elsewhere is reopened by identity, never through a link,
        // and only while it is still inside an allowed root.
        let rooted = root != session_dir.join("root");
        let held = if rooted {
            match self.open_rooted(&root, identity) {
                Ok((fd, _)) => Some(fd),
                Err(why) => {
                    let unavailable = Unavailable {
                        record,
                        why,
                        session_dir: session_dir.to_path_buf(),
                        leased_to: None,
                        recovering: false,
                    };
                    let error = unavailable.error();
                    self.unavailable
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(unavailable.record.id.clone(), unavailable);
                    return Err(error);
                }
            }
        } else {
            None
        };
        let open_root = held.as_ref().map_or_else(|| root.clone(), fd_path);
        if let Some(why) = crate::journal::unfinished(session_dir, &open_root) {
            tracing::warn!(session = %record.id, %why, "directory session recovering in the background");
            self.unavailable
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    record.id.clone(),
                    Unavailable {
                        record: record.clone(),
                        why,
                        session_dir: session_dir.to_path_buf(),
                        leased_to: None,
                        recovering: true,
                    },
                );
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(PendingRecovery {
                    session_dir: session_dir.to_path_buf(),
                    record,
                    held,
                });
            return Ok(None);
        }
        let handles = self.reopen_workspace(session_dir, &record, &open_root)?;
        // Its change watcher watches the root by the path just checked
        // (component by component, to be that directory): see `insert`.
        Ok(Some(self.insert(
            record,
            handles,
            Some(session_dir.to_path_buf()),
        )))
    }

    /// The workspace of a recorded DIRECTORY session, made whole: a
    /// replacement a stop cut short is rolled forward (before staging is
    /// emptied: it needs the files it staged there), and what a stop left
    /// to remove is removed. Blocking.
    fn reopen_workspace(
        &self,
        session_dir: &Path,
        record: &SessionRecord,
        open_root: &Path,
    ) -> Result<Handles> {
        crate::journal::recover(session_dir, open_root, self.config.durability, record.owner)?;
        // Uploads in flight when the server stopped are abandoned, and
        // trees a recursive Delete moved out are removed.
        let staging = session_dir.join("staging");
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .map_err(|e| Error::internal(format!("cannot create '{}': {e}", staging.display())))?;
        let backend = DirectoryBackend::open(open_root, &staging)?
            .with_durability(self.config.durability)
            .with_owner(record.owner)
            .removing_later();
        backend.finish_removals()?;
        let ws = Arc::new(Workspace::new(backend, record.limits));
        ws.set_read_only(record.read_only);
        let snapshots = self.directory_snapshots(&ws, &record.id, session_dir);
        Ok((ws.clone(), ws, snapshots))
    }

    /// Finishes, in the background, the sessions [`Self::open`] left
    /// recovering: a few at a time, each on the blocking pool; each is
    /// served as soon as its own recovery ends (and its lease, with an
    /// object store, is held). One whose recovery fails stays listed as
    /// unavailable, with the reason, and is retried at the next start.
    pub fn start_recoveries(self: &Arc<Self>) -> Vec<tokio::task::JoinHandle<()>> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_RECOVERIES));
        pending
            .into_iter()
            .map(|p| {
                let (registry, slots) = (self.clone(), slots.clone());
                tokio::spawn(async move {
                    let _slot = slots.acquire_owned().await;
                    registry.recover_pending(p).await
                })
            })
            .collect()
    }

    async fn recover_pending(self: Arc<Self>, pending: PendingRecovery) {
        let started = std::time::Instant::now();
        let id = pending.record.id.clone();
        let registry = self.clone();
        let made = tokio::task::spawn_blocking(move || {
            let PendingRecovery {
                session_dir,
                record,
                held,
            } = pending;
            let root = record.root_path.clone().unwrap_or_default();
            let open_root = held.as_ref().map_or(root, fd_path);
            let handles = registry.reopen_workspace(&session_dir, &record, &open_root);
            (session_dir, record, handles)
        })
        .await;
        let (session_dir, record, handles) = match made {
            Ok(made) => made,
            Err(e) => {
                return self.recovery_failed(&id, format!("its recovery stopped: {e}"));
            }
        };
        let handles = match handles {
            Ok(handles) => handles,
            Err(e) => return self.recovery_failed(&id, format!("its recovery failed: {e}")),
        };
        let session = self.assemble(record, handles, Some(session_dir));
        if let Some(holder) = self.lease_lost(&session).await {
            tracing::warn!(session = %id, %holder, "another replica took the session over while this server was down: not served here");
            let mut unavailable = self.unavailable.write().unwrap_or_else(|e| e.into_inner());
            if let Some(u) = unavailable.get_mut(&id) {
                u.recovering = false;
                u.why = format!("taken over by replica '{holder}'");
                u.leased_to = Some(holder);
            }
            return;
        }
        // Listed live and no longer recovering in one step: a call sees
        // one or the other, never neither.
        let mut sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        sessions.insert(id.clone(), session);
        self.unavailable
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        drop(sessions);
        tracing::info!(session = %id, elapsed = ?started.elapsed(), "directory session recovered and reopened");
    }

    /// Session `id`'s recovery failed: it stays unavailable, with `why`,
    /// and may be deleted; its record stays for the next start.
    fn recovery_failed(&self, id: &str, why: String) {
        tracing::warn!(session = %id, %why, "directory session not reopened");
        let mut unavailable = self.unavailable.write().unwrap_or_else(|e| e.into_inner());
        if let Some(u) = unavailable.get_mut(id) {
            u.recovering = false;
            u.why = format!("{why}; the server retries at its next start");
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The session named `id`; counts as use for its idle TTL. A
    /// DIRECTORY session mirrored to a bucket is served only while this
    /// server's lease on it is good ([`crate::objstore::Bucket::check_serving`]).
    pub fn get(&self, id: &str) -> Result<Arc<Session>> {
        let session = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| match self.unavailable(id) {
                Some(u) => u.error(),
                None => Error::SessionNotFound {
                    session_id: id.to_string(),
                },
            })?;
        if let (Some(bucket), BackendKind::Directory) = (&self.bucket, session.record.backend) {
            bucket.check_serving(id)?;
        }
        session
            .activity
            .last_used_ms
            .store(now_ms(), Ordering::SeqCst);
        Ok(session)
    }

    /// Deletes every session idle for longer than its TTL; returns their
    /// ids. A session with a stream open is not idle.
    pub async fn expire_idle(&self) -> Vec<String> {
        let now = now_ms();
        let expired: Vec<String> = self
            .list()
            .iter()
            .filter(|s| {
                s.activity
                    .idle_longer_than(s.record.idle_ttl_seconds.saturating_mul(1000), now)
            })
            .map(|s| s.record.id.clone())
            .collect();
        for id in &expired {
            match self.delete(id).await {
                Ok(files) => tracing::info!(session = %id, files, "idle session expired"),
                Err(e) => tracing::warn!(session = %id, error = %e, "expiring idle session failed"),
            }
        }
        expired
    }

    /// Every session, oldest first.
    pub fn list(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| {
            (a.record.created_at, &a.record.id).cmp(&(b.record.created_at, &b.record.id))
        });
        all
    }

    /// Reserves a place for one more session under `id`, or refuses when
    /// the server is full or a live, unavailable or in-flight session holds
    /// the id (a client may choose it). Checked under the write lock that
    /// inserts sessions, so concurrent creations cannot overshoot or share
    /// an id.
    fn reserve_slot(&self, id: &str) -> Result<SessionSlot<'_>> {
        let max = self.config.max_sessions;
        let sessions = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        let mut creating = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if sessions.contains_key(id) || creating.contains(id) || self.unavailable(id).is_some() {
            return Err(Error::AlreadyExists {
                path: format!("session {id}"),
            });
        }
        if max > 0 && sessions.len() + creating.len() >= max {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "the server holds its maximum of {max} sessions; delete one or raise --max-sessions"
                ),
            });
        }
        creating.insert(id.to_string());
        Ok(SessionSlot {
            creating: &self.creating,
            id: id.to_string(),
        })
    }

    pub async fn create(&self, spec: SessionSpec) -> Result<Arc<Session>> {
        if spec.from_snapshot.is_some() {
            return self.fork(spec).await;
        }
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let _slot = self.reserve_slot(&id)?;
        let mut claim = match spec.backend {
            Some(BackendKind::Directory) => self.claim_new(&id).await?,
            _ => None,
        };
        let limits = SessionLimits::resolve(&spec.limits, self.config.max_write_bytes);
        // Parse every seed path before anything is created.
        let seeds = spec
            .seed_files
            .iter()
            .map(|(p, data)| Ok((CanonicalPath::parse(p, &limits.path)?, data.clone())))
            .collect::<Result<Vec<_>>>()?;
        // Check and walk every host mount before anything is created.
        let mounts =
            crate::mounts::plan_all(&spec.mounts, &self.config.allow_roots, &limits.path).await?;
        // Mounts and seeds count against the quotas: refuse before any
        // directory is made or any byte copied. (The writes check again, for
        // host files that grow after the scan.)
        crate::quota::check_initial(&limits, crate::mounts::initial_usage(&mounts, &seeds))?;
        let backend = spec.backend.unwrap_or(BackendKind::Memory);
        let mut root_identity = None;
        // A CONTAINER session relays the changes made inside its container.
        let mut relay = None;
        let ((fs, archive, snapshots), root_path, owned_dir): (Handles, _, _) = match backend {
            BackendKind::Memory => {
                if spec.root.is_some() {
                    return Err(Error::invalid_argument(
                        "root applies only to DIRECTORY sessions",
                    ));
                }
                let ws = Arc::new(Workspace::new(MemoryBackend::new(), limits));
                populate(&ws, mounts, &seeds, spec.layout).await?;
                ws.set_read_only(spec.read_only);
                let snapshots = Arc::new(MemorySnapshots::new(ws.clone()));
                ((ws.clone(), ws, snapshots), None, None)
            }
            BackendKind::Directory => {
                let session_dir = self.config.data_dir.join("sessions").join(&id);
                // A chosen id may name a directory left behind: never adopt
                // it (nor remove it when this creation fails).
                if session_dir.symlink_metadata().is_ok() {
                    return Err(Error::AlreadyExists {
                        path: format!("session {id}"),
                    });
                }
                let (root, held) = match &spec.root {
                    Some(r) => {
                        let real = self.allowed_root(r)?;
                        let (fd, identity) = self.open_rooted(&real, None).map_err(|why| {
                            Error::PermissionDenied {
                                path: r.display().to_string(),
                                message: format!("root '{}' cannot be used: {why}", r.display()),
                            }
                        })?;
                        root_identity = Some(identity);
                        (real, Some(fd))
                    }
                    None => (session_dir.join("root"), None),
                };
                let open_root = held.as_ref().map_or_else(|| root.clone(), fd_path);
                let made = create_session_dirs(&session_dir, &root, spec.root.is_none())
                    .and_then(|_| DirectoryBackend::open(&open_root, &session_dir.join("staging")))
                    .map(|b| b.with_owner(spec.owner).removing_later())
                    .and_then(|b| b.claim_for_owner(spec.root.is_none()).map(|()| b));
                let backend = match made {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&session_dir);
                        return Err(e);
                    }
                };
                let ws = Arc::new(Workspace::new(backend, limits));
                if let Err(e) = populate(&ws, mounts, &seeds, spec.layout).await {
                    let _ = std::fs::remove_dir_all(&session_dir);
                    return Err(e);
                }
                // Filled without a sync per file, then synced once (the
                // root may be on another filesystem than the record).
                ws.backend().set_durability(self.config.durability);
                if let Err(e) = ws.exclusive(|b| b.settle()).await {
                    let _ = std::fs::remove_dir_all(&session_dir);
                    return Err(e);
                }
                ws.set_read_only(spec.read_only);
                let snapshots = self.directory_snapshots(&ws, &id, &session_dir);
                ((ws.clone(), ws, snapshots), Some(root), Some(session_dir))
            }
            BackendKind::Container => {
                let (handles, dir, container) =
                    crate::container::open(&self.config, &id, &spec, limits, &seeds).await?;
                relay = Some(container);
                (handles, None, Some(dir))
            }
        };
        let record = SessionRecord::new(id, backend, root_path, limits, spec);
        if let (Some(dir), Some(root)) = (&owned_dir, &record.root_path) {
            let persisted = PersistedSession::from_record(&record, root, root_identity);
            if let Err(e) = write_session_file(dir, &persisted, self.config.durability) {
                let _ = std::fs::remove_dir_all(dir);
                return Err(e);
            }
        }
        if let (Some(claim), Some(dir)) = (&claim, &owned_dir) {
            if let Err(e) = claim.record(dir, None).await {
                let _ = std::fs::remove_dir_all(dir);
                return Err(e);
            }
        }
        if let Some(claim) = claim.as_mut() {
            claim.keep();
        }
        let session = self.insert(record, (fs, archive, snapshots), owned_dir);
        if let Some(container) = relay {
            container.0.relay_external(session.events.clone()).await;
        }
        Ok(session)
    }

    /// Makes a session of a workspace that is ready, and lists it.
    fn insert(
        &self,
        record: SessionRecord,
        handles: Handles,
        owned_dir: Option<PathBuf>,
    ) -> Arc<Session> {
        let session = self.assemble(record, handles, owned_dir);
        self.sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.record.id.clone(), session.clone());
        session
    }

    /// Makes a session of a workspace that is ready, without listing it.
    fn assemble(
        &self,
        record: SessionRecord,
        (fs, archive, snapshots): Handles,
        owned_dir: Option<PathBuf>,
    ) -> Arc<Session> {
        let events = Arc::new(crate::events::EventLog::new(self.config.watch_ring_events));
        let external = record.root_path.as_deref().and_then(|root| {
            crate::events::ExternalWatcher::start(
                root,
                fs.clone(),
                events.clone(),
                record.limits.path,
            )
        });
        Arc::new(Session {
            record,
            fs,
            archive,
            snapshots,
            events,
            _external: external,
            owned_dir,
            activity: Activity::new(),
            max_streams: self.config.max_streams_per_session,
            closed: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// Removes a session and everything it owns; returns how many files
    /// its workspace held. A directory the session was rooted in (rather
    /// than one it created) is left in place with its files.
    pub async fn delete(&self, id: &str) -> Result<u64> {
        let gone = {
            let mut unavailable = self.unavailable.write().unwrap_or_else(|e| e.into_inner());
            match unavailable.get(id) {
                // Its recovery owns its directory until it ends.
                Some(u) if u.recovering => return Err(u.error()),
                Some(_) => unavailable.remove(id),
                None => None,
            }
        };
        if let Some(gone) = gone {
            // Its record only: the root it named is not ours to touch.
            let dir = gone.session_dir;
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir))
                .await
                .map_err(|e| Error::internal(format!("removing the session's record failed: {e}")))?
                .map_err(|e| {
                    Error::internal(format!("removing the session's record failed: {e}"))
                })?;
            return Ok(0);
        }
        let mirrored = self
            .get_quietly(id)
            .is_some_and(|s| s.record.backend == BackendKind::Directory);
        if let (Some(bucket), true) = (&self.bucket, mirrored) {
            // The bucket first: when it is unreachable, nothing changes.
            bucket.forget_session(id).await?;
        }
        let session = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
            .ok_or_else(|| Error::SessionNotFound {
                session_id: id.to_string(),
            })?;
        session.closed.cancel();
        let files = count_files(&*session.fs).await;
        if let Some(dir) = session.owned_dir.clone() {
            // The owned directory holds the root only when the session made
            // it; a root elsewhere is never inside it.
            let durability = self.config.durability;
            tokio::task::spawn_blocking(move || {
                // The remover thread may be removing a deleted tree in its
                // staging directory meanwhile: a second pass ends a race.
                std::fs::remove_dir_all(&dir).or_else(|_| std::fs::remove_dir_all(&dir))?;
                match dir.parent() {
                    Some(sessions) if durability.is_fsync() => {
                        std::fs::File::open(sessions)?.sync_all()
                    }
                    _ => Ok(()),
                }
            })
            .await
            .map_err(|e| Error::internal(format!("removing the session's files failed: {e}")))?
            .map_err(|e| Error::internal(format!("removing the session's files failed: {e}")))?;
        }
        Ok(files)
    }

    /// Opens the directory at `root` (a resolved path) from the allowed root
    /// that holds it, one component at a time and never through a symlink,
    /// and checks it is the directory `expected` names, when given. The
    /// error says why the root cannot be used.
    fn open_rooted(
        &self,
        root: &Path,
        expected: Option<RootIdentity>,
    ) -> std::result::Result<(std::os::fd::OwnedFd, RootIdentity), String> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let (allowed, rest) = self
            .config
            .allow_roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .find_map(|allowed| {
                let rest = root.strip_prefix(&allowed).ok()?.to_path_buf();
                Some((allowed, rest))
            })
            .ok_or_else(|| {
                format!(
                    "its root '{}' is not inside a directory the server allows (--allow-root)",
                    root.display()
                )
            })?;
        // The allowed root itself is the operator's, trusted as configured.
        let mut fd =
            rustix::fs::open(&allowed, flags & !OFlags::NOFOLLOW, Mode::empty()).map_err(|e| {
                format!(
                    "the allowed root '{}' cannot be opened: {e}",
                    allowed.display()
                )
            })?;
        for component in rest.components() {
            let std::path::Component::Normal(name) = component else {
                return Err(format!("its root '{}' is not a plain path", root.display()));
            };
            fd = rustix::fs::openat(&fd, name, flags, Mode::empty()).map_err(|e| {
                format!(
                    "its root '{}' cannot be opened without following a link: '{}' is {}",
                    root.display(),
                    name.to_string_lossy(),
                    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
                        "a symlink or not a directory".to_string()
                    } else {
                        e.to_string()
                    }
                )
            })?;
        }
        let st = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat its root: {e}"))?;
        let found = RootIdentity {
            dev: st.st_dev,
            ino: st.st_ino,
        };
        if expected.is_some_and(|e| e != found) {
            return Err(format!(
                "its root '{}' is no longer the directory it was created in (it was replaced)",
                root.display()
            ));
        }
        Ok((fd, found))
    }

    /// Resolves a requested root: it must exist, be a directory, and lie
    /// inside one of the allowed roots after every symlink is resolved.
    fn allowed_root(&self, requested: &Path) -> Result<PathBuf> {
        let denied = |why: String| Error::PermissionDenied {
            path: requested.display().to_string(),
            message: why,
        };
        let real = std::fs::canonicalize(requested).map_err(|e| {
            denied(format!(
                "root '{}' cannot be used: {e}",
                requested.display()
            ))
        })?;
        if !real.is_dir() {
            return Err(denied(format!(
                "root '{}' is not a directory",
                requested.display()
            )));
        }
        let inside = self
            .config
            .allow_roots
            .iter()
            .filter_map(|r| std::fs::canonicalize(r).ok())
            .any(|allowed| real.starts_with(&allowed));
        if !inside {
            return Err(denied(format!(
                "root '{}' is not inside a directory the server allows (--allow-root)",
                requested.display()
            )));
        }
        Ok(real)
    }
}

/// A path that opens exactly the directory `fd` holds, with no lookup of
/// the name it was reached by.
fn fd_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn create_session_dirs(session_dir: &Path, root: &Path, own_root: bool) -> Result<()> {
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

/// Copies the host mounts in, then writes the seed files.
async fn populate<B: Backend>(
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

async fn count_files(fs: &dyn Filesystem) -> u64 {
    let mut query = wsfs::GlobQuery::new("**");
    query.max_results = u64::MAX;
    fs.glob(query).await.map_or(0, |g| g.paths.len() as u64)
}
