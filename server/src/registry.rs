//! The session registry: every live session, its record and its workspace.
//!
//! Each session's kind makes, forks and reopens its workspace through its
//! [`crate::kind::BackendProvider`], picked in one place ([`factory`]); the registry
//! keeps what all kinds share: ids and the session quota, the idle clock,
//! sessions a restart could not reopen, and the object store's leases on
//! the sessions of a mirrored kind.

use crate::config::ServerConfig;
use crate::kind::{Context, Handles, Made, NewSession, Reopened};
use crate::limits::SessionLimits;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use wsfs::{CanonicalPath, Error, Filesystem, Result};

pub(crate) mod background;
mod factory;
mod failover;
mod fork;
mod handback;
mod labels;
mod recover;
mod session;

pub use crate::kind::{SessionRecord, SessionSpec, SnapshotRef};
pub use labels::{check_labels, MAX_LABEL_BYTES};
use session::{now_ms, Activity};
pub use session::{Session, StreamPermit};
pub use wsfs::BackendKind;

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
    /// Sessions failing over to this server ([`failover`]).
    failovers: failover::Failovers,
    /// Where a session recovered from the bucket brings its token hashes.
    auth: std::sync::OnceLock<Arc<crate::auth::Auth>>,
    /// Serializes the mirroring of token lists to the bucket, so that an
    /// older list never overwrites a newer one.
    mirroring_tokens: tokio::sync::Mutex<()>,
}

/// A recorded session that a stop left with work to finish before it may
/// answer ([`Reopened::Recovering`]).
struct PendingRecovery {
    session_dir: PathBuf,
    record: SessionRecord,
    /// Makes its workspace whole. Blocking.
    finish: Box<dyn FnOnce() -> Result<Handles> + Send>,
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
    /// Set when a restart found it taken over (`leased_to`): a stale copy,
    /// replaced by the bucket's when the session comes back here
    /// ([`handback`]).
    superseded: bool,
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
            failovers: failover::Failovers::new(),
            auth: std::sync::OnceLock::new(),
            mirroring_tokens: tokio::sync::Mutex::new(()),
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

    /// The mirrored sessions ([`crate::kind::BackendProvider::mirrored`]), served here or being
    /// recovered after a restart (served once whole): each id with the
    /// directory that records it.
    pub fn mirrored_sessions(&self) -> Vec<(String, PathBuf)> {
        let sessions = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        let live = sessions
            .values()
            .filter(|s| factory::provider(s.record.backend).mirrored())
            .filter_map(|s| Some((s.record.id.clone(), s.owned_dir.clone()?)));
        let unavailable = self.unavailable.read().unwrap_or_else(|e| e.into_inner());
        let recovering = unavailable
            .values()
            .filter(|u| u.recovering)
            .map(|u| (u.record.id.clone(), u.session_dir.clone()));
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

    /// A registry holding every session a restart left in the data
    /// directory, as each kind reopens them ([`crate::kind::BackendProvider::reopen`]):
    /// DIRECTORY sessions outlive a restart of the server. One
    /// whose record cannot be read is left alone and logged; one that a
    /// stop left with work to finish (a Restore or ImportArchive to roll
    /// forward, a recursive Delete's tree to remove) is listed as
    /// recovering, every call naming it is refused UNAVAILABLE, and
    /// [`Self::start_recoveries`] finishes it in the background, so that
    /// other sessions answer at once.
    pub fn open(config: Arc<ServerConfig>) -> Result<Self> {
        let mut registry = Self::new(config);
        registry.bucket = registry.open_bucket()?;
        for kind in BackendKind::ALL {
            for reopened in factory::provider(kind).reopen(&registry.context())? {
                registry.reopened(reopened);
            }
        }
        Ok(registry)
    }

    /// Lists what a start found of one session.
    fn reopened(&self, reopened: Reopened) {
        match reopened {
            Reopened::Ready {
                record,
                handles,
                session_dir,
            } => {
                // Its change watcher watches the root by the path its
                // kind checked: see `insert`.
                let s = self.insert(record, handles, Some(session_dir));
                tracing::info!(session = %s.record.id, "directory session reopened")
            }
            Reopened::Unavailable {
                record,
                why,
                session_dir,
            } => {
                let unavailable = Unavailable {
                    record,
                    why,
                    session_dir,
                    leased_to: None,
                    recovering: false,
                    superseded: false,
                };
                let error = unavailable.error();
                tracing::warn!(dir = %unavailable.session_dir.display(), %error, "session directory skipped");
                self.unavailable
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(unavailable.record.id.clone(), unavailable);
            }
            Reopened::Recovering {
                record,
                why,
                session_dir,
                finish,
            } => {
                tracing::warn!(session = %record.id, %why, "directory session recovering in the background");
                self.unavailable
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        record.id.clone(),
                        Unavailable {
                            record: record.clone(),
                            why,
                            session_dir: session_dir.clone(),
                            leased_to: None,
                            recovering: true,
                            superseded: false,
                        },
                    );
                self.pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(PendingRecovery {
                        session_dir,
                        record,
                        finish,
                    });
            }
            Reopened::Skipped { dir, error } => {
                tracing::warn!(dir = %dir.display(), %error, "session directory skipped")
            }
        }
    }

    /// What every kind may use of the server while it makes a workspace.
    fn context(&self) -> Context<'_> {
        Context {
            config: &self.config,
            mirrors: self
                .bucket
                .clone()
                .map(|b| b as Arc<dyn crate::snapshots::SnapshotMirrors>),
        }
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
        let made = tokio::task::spawn_blocking(move || {
            let PendingRecovery {
                session_dir,
                record,
                finish,
            } = pending;
            (session_dir, record, finish())
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
                u.superseded = true;
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

    /// The session named `id` if this server serves it (without failing
    /// it over: see [`Self::get`]); counts as use for its idle TTL. A
    /// DIRECTORY session mirrored to a bucket is served only while this
    /// server's lease on it is good ([`crate::objstore::Bucket::check_serving`]).
    pub fn get_here(&self, id: &str) -> Result<Arc<Session>> {
        self.failovers.handbacks.check_not_handing(id)?;
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
        if let Some(bucket) = &self.bucket {
            if factory::provider(session.record.backend).mirrored() {
                bucket.check_serving(id)?;
            }
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

    /// How many sessions of each kind are open, by the kind's name (every
    /// kind, those with none too).
    pub fn count_by_kind(&self) -> Vec<(&'static str, i64)> {
        let sessions = self.list();
        BackendKind::ALL
            .iter()
            .map(|&kind| {
                let open = sessions.iter().filter(|s| s.record.backend == kind).count();
                (factory::provider(kind).name(), open as i64)
            })
            .collect()
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
        let backend = spec.backend.unwrap_or_default();
        let provider = factory::provider(backend);
        let mut claim = match provider.mirrored() {
            true => self.claim_new(&id).await?,
            false => None,
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
        let new = NewSession {
            id: id.clone(),
            spec: &spec,
            limits,
            mounts,
            seeds,
        };
        let made = provider.create(&self.context(), new).await?;
        let Made {
            handles,
            root_path,
            owned_dir,
            persist,
            on_listed,
        } = made;
        let record = SessionRecord::new(id, backend, root_path, limits, spec);
        if let (Some(persist), Some(dir)) = (persist, &owned_dir) {
            if let Err(e) = persist(&record) {
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
        let session = self.insert(record, handles, owned_dir);
        if let Some(on_listed) = on_listed {
            on_listed(session.events.clone()).await;
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
            self.remove_session_dir(gone.session_dir, "the session's record")
                .await?;
            return Ok(0);
        }
        let mirrored = self
            .get_quietly(id)
            .is_some_and(|s| factory::provider(s.record.backend).mirrored());
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
            self.remove_session_dir(dir, "the session's files").await?;
        }
        Ok(files)
    }

    /// [`crate::kind::remove_session_dir`] on the blocking pool; `what`
    /// names what the directory held, in an error.
    pub(crate) async fn remove_session_dir(&self, dir: PathBuf, what: &str) -> Result<()> {
        let durability = self.config.durability;
        let failed =
            |e: &dyn std::fmt::Display| Error::internal(format!("removing {what} failed: {e}"));
        tokio::task::spawn_blocking(move || crate::kind::remove_session_dir(&dir, durability))
            .await
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))
    }
}

async fn count_files(fs: &dyn Filesystem) -> u64 {
    let mut query = wsfs::GlobQuery::new("**");
    query.max_results = u64::MAX;
    fs.glob(query).await.map_or(0, |g| g.paths.len() as u64)
}
