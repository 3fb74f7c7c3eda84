//! The registry's side of the object store ([`crate::objstore`]): leases
//! on the DIRECTORY and MEMORY sessions this server serves, and RecoverSession, which
//! recreates here a session the bucket knows.

use super::{factory, Session, SessionRegistry, Unavailable};
use crate::auth::{Auth, Caller};
use crate::directory::record::{create_session_dirs, write_session_file, PersistedSession};
use crate::directory::snapshots::mirror::StoreFiles;
use crate::objstore::lease::Renewal;
use crate::objstore::upload::SessionMirror;
use crate::objstore::{download, Bucket};
use crate::snapshots::fork::task_failed;
use crate::snapshots::phases::Phases;
use std::path::Path;
use std::sync::Arc;
use wsfs::{Error, Result};

/// Leases taken or renewed at once.
const LEASES_AT_ONCE: usize = 16;

/// A new session's lease, given back (and the session forgotten in the
/// bucket) unless the creation completes.
pub(super) struct Claim {
    bucket: Arc<Bucket>,
    id: String,
    kept: bool,
}

impl Claim {
    /// Writes the session's record to the bucket, naming `latest`.
    pub(super) async fn record(&self, session_dir: &Path, latest: Option<&str>) -> Result<()> {
        SessionMirror::new(self.bucket.clone(), &self.id, session_dir)
            .write_record(latest)
            .await
    }

    pub(super) fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let (bucket, id) = (self.bucket.clone(), self.id.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = bucket.forget_session(&id).await {
                    tracing::warn!(session = %id, error = %e, "a failed creation's lease could not be given back");
                }
            });
        }
    }
}

impl SessionRegistry {
    /// The bucket `--object-store` names, if any.
    pub(super) fn open_bucket(&self) -> Result<Option<Arc<Bucket>>> {
        let Some(url) = &self.config.object_store else {
            return Ok(None);
        };
        let replica = match &self.config.replica_id {
            Some(id) => id.clone(),
            None => crate::objstore::default_replica_id(&self.config.data_dir)?,
        };
        let bucket = Bucket::open(url, replica, self.config.lease_ttl)?;
        // Copies fetched for forks that a stop cut short.
        let _ = std::fs::remove_dir_all(self.config.data_dir.join("bucket-copies"));
        tracing::info!(store = %url, replica = %bucket.replica(), "snapshots mirrored to the object store");
        Ok(Some(Arc::new(bucket)))
    }

    pub fn bucket(&self) -> Option<&Arc<Bucket>> {
        self.bucket.as_ref()
    }

    /// Where the sessions recovered from the bucket bring their token
    /// hashes ([`crate::auth::Auth::load_session`]).
    pub fn attach_auth(&self, auth: Arc<Auth>) {
        let _ = self.auth.set(auth);
    }

    /// A new token for `caller` in `session`. With an object store, the
    /// lease holder mirrors the session's token hashes to the bucket
    /// before the token is handed out, so that a replica that takes the
    /// session over accepts it; when that fails the token is revoked and
    /// the call fails (`UNAVAILABLE` with the reason).
    pub async fn issue_token(
        &self,
        auth: &Auth,
        session: &Arc<Session>,
        caller: Caller,
    ) -> Result<String> {
        let _in_order = self.mirroring_tokens.lock().await;
        let token = auth.issue(session, caller)?;
        let (Some(bucket), Some(dir)) = (&self.bucket, session.owned_dir.as_deref()) else {
            return Ok(token);
        };
        if !factory::provider(session.record.backend).mirrored() {
            return Ok(token);
        }
        let file = crate::auth::tokens_file(dir);
        let mirrored = match tokio::fs::read(&file).await {
            Ok(raw) => bucket.put_tokens(&session.record.id, raw).await,
            // This server keeps no token lists (nothing to mirror).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::internal(format!(
                "cannot read '{}': {e}",
                file.display()
            ))),
        };
        if let Err(e) = mirrored {
            auth.tokens().revoke(&token);
            return Err(e);
        }
        Ok(token)
    }

    /// The live session `id`, without counting as use.
    pub(super) fn get_quietly(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Takes the lease of a new DIRECTORY session `id`; refused
    /// (`AlreadyExists`) when the bucket already knows a session by that
    /// id, wherever it is served.
    pub(super) async fn claim_new(&self, id: &str) -> Result<Option<Claim>> {
        let Some(bucket) = &self.bucket else {
            return Ok(None);
        };
        let exists = || Error::AlreadyExists {
            path: format!("session {id} (in the object store: recover it with RecoverSession)"),
        };
        if bucket.session_record(id).await?.is_some() || bucket.lease(id).await?.is_some() {
            return Err(exists());
        }
        bucket
            .acquire(id, false, false)
            .await
            .map_err(|e| match e {
                Error::SessionLeased { .. } => exists(),
                other => other,
            })?;
        Ok(Some(Claim {
            bucket: bucket.clone(),
            id: id.to_string(),
            kept: false,
        }))
    }

    /// Mirrors a new DIRECTORY fork: its lease, its first snapshot and its
    /// record. On failure the fork is removed again.
    pub(super) async fn mirror_fork(&self, session: &Arc<Session>) -> Result<()> {
        let (Some(bucket), Some(dir)) = (&self.bucket, session.owned_dir.as_deref()) else {
            return Ok(());
        };
        let id = &session.record.id;
        let mirrored = async {
            let mut claim = self
                .claim_new(id)
                .await?
                .ok_or_else(|| Error::internal("the object store went away during the fork"))?;
            let latest = session.snapshots.list().await?.pop();
            match latest {
                Some(info) => upload_taken(bucket, session, dir, &info.id).await?,
                None => claim.record(dir, None).await?,
            }
            claim.keep();
            Ok(())
        }
        .await;
        if let Err(e) = mirrored {
            let _ = self.delete(id).await;
            return Err(e);
        }
        Ok(())
    }

    /// Takes or renews the lease of every DIRECTORY session served here
    /// (several at once, each bounded by the renewal interval). A session
    /// whose lease another replica holds (it was recovered there) stops
    /// being served: every call on it is then refused with
    /// `SESSION_LEASED`. One whose renewal fails stays, and is refused
    /// `UNAVAILABLE` once its lease is about to run out
    /// ([`Bucket::check_serving`]). A session the bucket does not know yet
    /// (the bucket was added since) is uploaded: its latest snapshot and
    /// record.
    pub async fn tend_leases(&self) {
        use futures::StreamExt;
        let Some(bucket) = &self.bucket else {
            return;
        };
        bucket.retry_removals().await;
        // Found taken over by a Snapshot's renewal since the last round.
        for (id, holder) in bucket.take_lost() {
            self.surrender(&id, holder, false);
        }
        let held: std::collections::HashSet<String> = bucket.held_sessions().into_iter().collect();
        futures::stream::iter(self.list())
            .for_each_concurrent(LEASES_AT_ONCE, |session| {
                let held = &held;
                async move {
                    if let Some(holder) = self.tend(bucket, held, &session).await {
                        // Never held by this process: a copy from before
                        // a restart, which another replica took over.
                        let superseded = !held.contains(&session.record.id);
                        self.surrender(&session.record.id, holder, superseded);
                    }
                }
            })
            .await;
    }

    /// Takes or renews the lease of DIRECTORY `session`, a session that a
    /// restart recovered, before it is served: the holder when another
    /// replica holds it.
    pub(super) async fn lease_lost(&self, session: &Arc<Session>) -> Option<String> {
        let bucket = self.bucket.as_ref()?;
        let held: std::collections::HashSet<String> = bucket.held_sessions().into_iter().collect();
        self.tend(bucket, &held, session).await
    }

    /// Takes or renews `session`'s lease (`held`: those this server holds),
    /// waiting at most one renewal interval for the bucket; the holder
    /// when another replica took it.
    async fn tend(
        &self,
        bucket: &Arc<Bucket>,
        held: &std::collections::HashSet<String>,
        session: &Arc<Session>,
    ) -> Option<String> {
        if !factory::provider(session.record.backend).mirrored() {
            return None;
        }
        let id = &session.record.id;
        let held = held.contains(id);
        let bound = crate::objstore::lease::renewal_interval(bucket.lease_ttl());
        let leased = tokio::time::timeout(bound, async {
            if held {
                return bucket.renew(id).await;
            }
            match bucket.acquire(id, false, false).await {
                Ok(_) => Ok(Renewal::Renewed),
                Err(Error::SessionLeased { holder, .. }) => Ok(Renewal::Lost { holder }),
                Err(e) => Err(e),
            }
        })
        .await
        .unwrap_or_else(|_| {
            Err(Error::Unavailable {
                message: format!("the object store did not answer within {bound:?}"),
            })
        });
        // Just taken (a start, or the bucket added since): the upload,
        // unbounded, follows.
        let tended = match leased {
            Ok(Renewal::Renewed) if !held => self
                .upload_unknown(bucket, session)
                .await
                .map(|()| Renewal::Renewed),
            other => other,
        };
        match tended {
            Ok(Renewal::Renewed | Renewal::NotHeld) => None,
            Ok(Renewal::Lost { holder }) => Some(holder),
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "the session's lease could not be renewed");
                None
            }
        }
    }

    /// Uploads a session the bucket has no record of.
    async fn upload_unknown(&self, bucket: &Arc<Bucket>, session: &Arc<Session>) -> Result<()> {
        let Some(dir) = session.owned_dir.as_deref() else {
            return Ok(());
        };
        let id = &session.record.id;
        if bucket.session_record(id).await?.is_some() {
            return Ok(());
        }
        match session.snapshots.list().await?.pop() {
            Some(latest) => upload_taken(bucket, session, dir, &latest.id).await,
            None => {
                SessionMirror::new(bucket.clone(), id, dir)
                    .write_record(None)
                    .await
            }
        }
    }

    /// Stops serving session `id`, which replica `holder` took over
    /// (`superseded`: while this server was down).
    fn surrender(&self, id: &str, holder: String, superseded: bool) {
        let Some(session) = self
            .sessions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id)
        else {
            return;
        };
        session.closed.cancel();
        tracing::warn!(session = %id, %holder, "another replica took the session over: no longer served here");
        let unavailable = Unavailable {
            record: session.record.clone(),
            why: format!("taken over by replica '{holder}'"),
            session_dir: session.owned_dir.clone().unwrap_or_default(),
            leased_to: Some(holder),
            recovering: false,
            superseded,
        };
        self.unavailable
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), unavailable);
    }

    /// Recreates on this server DIRECTORY session `id` from the bucket:
    /// its record, every snapshot it has there (listed and restorable
    /// here; their contents fetched when needed), and its workspace as
    /// snapshot `snapshot_id` (empty: the latest) holds it, fetched
    /// straight into the workspace. Takes the session's lease first: refused
    /// (`SESSION_LEASED`) while another replica holds a live one, unless
    /// `force`.
    pub async fn recover(&self, id: &str, snapshot_id: &str, force: bool) -> Result<Arc<Session>> {
        let bucket = self
            .bucket
            .clone()
            .ok_or_else(|| Error::FailedPrecondition {
                message:
                    "this server has no object store (--object-store) to recover sessions from"
                        .to_string(),
            })?;
        let _slot = self.reserve_slot(id)?;
        let mut phases = Phases::start();
        let (record, snapshots) = bucket.session(id).await?;
        phases.mark("records");
        let chosen = match snapshot_id.is_empty() && snapshots.is_empty() {
            // Recorded but never snapshotted: it comes back empty.
            true => None,
            false => Some(download::choose(&snapshots, snapshot_id)?),
        };
        let mut persisted: PersistedSession =
            serde_json::from_value(record.session).map_err(|e| {
                Error::internal(format!("the object store's session record is corrupt: {e}"))
            })?;
        if persisted.id != id {
            return Err(Error::internal(format!(
                "the object store's record of session '{id}' names '{}'",
                persisted.id
            )));
        }
        // Recreated as the kind it was.
        let kind = persisted
            .clone()
            .into_record(self.config.max_write_bytes)
            .backend;
        let session_dir = factory::provider(kind).session_dir(&self.config.data_dir, id);
        if session_dir.symlink_metadata().is_ok() {
            return Err(Error::AlreadyExists {
                path: format!("session {id}"),
            });
        }
        // Rooted elsewhere on the lost machine or not, the recovered
        // session's workspace is its own directory here.
        let root = session_dir.join("root");
        persisted.root_path = root.clone();
        persisted.root_identity = None;
        // Each snapshot must fit the session's own byte budget, as it did
        // when it was taken: checked before any byte is fetched.
        let limits = persisted
            .clone()
            .into_record(self.config.max_write_bytes)
            .limits;
        let budget = crate::quota::budget(&limits, self.config.default_max_total_bytes);
        for snapshot in &snapshots {
            snapshot.check_fits(budget, &format!("recover session '{id}'"))?;
        }
        let serves_from_ms = bucket.acquire(id, force, true).await?;
        phases.mark("lease");
        let made = self
            .make_recovered(
                &bucket,
                &session_dir,
                persisted,
                Wanted {
                    all: &snapshots,
                    chosen,
                },
                budget,
                &mut phases,
            )
            .await;
        match made {
            Ok(session) => {
                tracing::info!(session = %id, %phases, "recovered from the object store");
                // Taken by force (or from this replica's previous run):
                // the old holder may serve until its lease runs out, so
                // the answer waits for that.
                let wait = std::time::Duration::from_millis(
                    serves_from_ms.saturating_sub(super::now_ms()),
                );
                tokio::time::sleep(wait).await;
                Ok(session)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&session_dir);
                // Another replica may recover it instead.
                bucket.release(id).await;
                Err(e)
            }
        }
    }

    async fn make_recovered(
        &self,
        bucket: &Arc<Bucket>,
        session_dir: &Path,
        persisted: PersistedSession,
        wanted: Wanted<'_>,
        budget: u64,
        phases: &mut Phases,
    ) -> Result<Arc<Session>> {
        let record = persisted.clone().into_record(self.config.max_write_bytes);
        let cx = self.context();
        let handles = match factory::bucket_recovery(record.backend) {
            Some(kind) => {
                let handles = kind
                    .recover(
                        &cx,
                        bucket,
                        &record,
                        session_dir,
                        wanted.all,
                        wanted.chosen,
                        budget,
                    )
                    .await?;
                phases.mark("workspace");
                handles
            }
            None => {
                self.fetch_directory(bucket, session_dir, &persisted, &record, wanted, phases)
                    .await?
            }
        };
        // Its clients' tokens work here as they did on its last holder.
        if let Some(tokens) = bucket.tokens(&record.id).await? {
            let file = crate::auth::tokens_file(session_dir);
            std::fs::write(&file, tokens)
                .map_err(|e| Error::internal(format!("cannot write '{}': {e}", file.display())))?;
        }
        // Last: its presence makes the session outlive a restart.
        write_session_file(session_dir, &persisted, self.config.durability)?;
        phases.mark("session file");
        if let Some(auth) = self.auth.get() {
            auth.load_session(&record.id, session_dir);
        }
        Ok(self.insert(record, handles, Some(session_dir.to_path_buf())))
    }

    /// A DIRECTORY session's store fetched into `session_dir`, and its
    /// workspace as snapshot `wanted.chosen` holds it.
    async fn fetch_directory(
        &self,
        bucket: &Arc<Bucket>,
        session_dir: &Path,
        persisted: &PersistedSession,
        record: &crate::kind::SessionRecord,
        wanted: Wanted<'_>,
        phases: &mut Phases,
    ) -> Result<crate::kind::Handles> {
        let root = persisted.root_path.clone();
        create_session_dirs(session_dir, &root, true)?;
        // Every snapshot's manifests and record; the contents of the one
        // restored stream into the workspace, the others' stay in the
        // bucket until something needs them.
        bucket
            .download_known(&StoreFiles::new(session_dir), wanted.all)
            .await?;
        phases.mark("manifests");
        let written = match (
            wanted.chosen,
            self.context().mirror(&record.id, session_dir),
        ) {
            // Its files go to their owner through the backend.
            (Some(snapshot), _) if record.owner.is_some() => Some((snapshot, None)),
            (Some(snapshot), Some(fetch)) => {
                // Written as a fork writes its workspace: nobody reaches
                // it before the session file is written, and a failure
                // removes the session directory.
                let (session_dir, id, root) =
                    (session_dir.to_path_buf(), snapshot.id.clone(), root.clone());
                let limits =
                    crate::quota::with_budget(&record.limits, self.config.default_max_total_bytes);
                let written = tokio::task::spawn_blocking(move || {
                    crate::directory::snapshots::materialise_fetched(
                        &session_dir,
                        &id,
                        &root,
                        &limits,
                        fetch.as_ref(),
                    )
                });
                Some((snapshot, Some(written.await.map_err(task_failed)??)))
            }
            (Some(snapshot), None) => Some((snapshot, None)),
            (None, _) => None,
        };
        phases.mark("workspace");
        let (ws, store) =
            crate::directory::provider::recovered(&self.context(), session_dir, record)?;
        match written {
            Some((snapshot, Some(written))) => {
                ws.exclusive(crate::backend::Backend::settle).await?;
                store.adopt_recovered(&snapshot.id, &root, written).await?;
            }
            Some((snapshot, None)) => {
                store.restore_recovered(&snapshot.id, &root).await?;
            }
            None => {}
        }
        phases.mark("head");
        ws.set_read_only(record.read_only);
        Ok(crate::kind::handles(ws, store))
    }

    /// Snapshot `from` of a session this server does not hold, fetched
    /// from the bucket as a fork's origin; refused (`QuotaExceeded`)
    /// before anything is fetched when it holds more than `budget` bytes.
    /// The returned copy is removed when dropped.
    pub(super) async fn origin_from_bucket(
        &self,
        from: &super::SnapshotRef,
        budget: u64,
    ) -> Result<(crate::snapshots::fork::Origin, BucketCopy)> {
        let bucket = self.bucket.clone().ok_or_else(|| Error::SessionNotFound {
            session_id: from.session_id.clone(),
        })?;
        let (_, snapshots) = bucket.session(&from.session_id).await?;
        let chosen = download::choose(&snapshots, &from.snapshot_id)?.clone();
        chosen.check_fits(budget, "fork")?;
        let copy = BucketCopy(
            self.config
                .data_dir
                .join("bucket-copies")
                .join(uuid::Uuid::new_v4().to_string()),
        );
        let root = copy.0.join("root");
        create_session_dirs(&copy.0, &root, true)?;
        bucket
            .download(&StoreFiles::new(&copy.0), std::slice::from_ref(&chosen))
            .await?;
        let origin = crate::directory::provider::origin_in_copy(
            &copy.0,
            &chosen.id,
            self.config.default_max_total_bytes,
        )
        .await?;
        Ok((origin, copy))
    }
}

/// Mirrors snapshot `id` of `session` (recorded in `dir`), taken before
/// the session held its lease: from its store when the store holds it in
/// memory, else from the files of its store on disk.
async fn upload_taken(
    bucket: &Arc<Bucket>,
    session: &Arc<Session>,
    dir: &Path,
    id: &str,
) -> Result<()> {
    match session.snapshots.mirror_taken(id).await {
        Some(sent) => sent,
        None => {
            SessionMirror::new(bucket.clone(), &session.record.id, dir)
                .upload_snapshot(id)
                .await
        }
    }
}

/// What a recovery brings back: every snapshot the session has in the
/// bucket, and the one its workspace becomes (`None`: it comes back
/// empty).
#[derive(Clone, Copy)]
struct Wanted<'a> {
    all: &'a [download::BucketSnapshot],
    chosen: Option<&'a download::BucketSnapshot>,
}

/// A snapshot fetched from the bucket for one fork: removed when dropped
/// (a fork's store hard-links what it keeps).
pub(super) struct BucketCopy(std::path::PathBuf);

impl Drop for BucketCopy {
    fn drop(&mut self) {
        let dir = std::mem::take(&mut self.0);
        std::thread::spawn(move || std::fs::remove_dir_all(dir));
    }
}
