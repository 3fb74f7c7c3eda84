//! Object storage as the durable layer (`--object-store URL`).
//!
//! Every snapshot of a DIRECTORY session is mirrored to one bucket shared
//! by every replica, so that any replica can bring the session back
//! (RecoverSession) when the one that held it is gone:
//!
//! ```text
//! objects/<sha256>                       file contents, shared by every
//!                                        session and replica
//! trees/<sha256>                         directory manifests, likewise
//! sessions/<id>/snapshots/<uuid>.json    a snapshot's record (root manifest)
//! sessions/<id>/session.json             what recreates the session: its
//!                                        record and latest snapshot
//! sessions/<id>/lease/<generation>       who serves the session, until when
//! sessions/<id>/tokens.json              the SHA-256 of each of its tokens,
//!                                        with its caller
//! markers/<kind>-<uuid>                  an upload or sweep at work
//! sweep/epoch                            changed before a sweep deletes
//! handback/<holder>/<id>                 a replica asks the holder of
//!                                        session <id> for it
//! ```
//!
//! - [`Bucket`] opens the store from its URL.
//! - [`upload`] mirrors one snapshot: it checks that every content and
//!   manifest the snapshot names is in the bucket at its size, sends what
//!   is missing or damaged (contents, then manifests, children before
//!   parents), then the session record, and the snapshot record last.
//! - [`lease`] decides which replica serves a session, with conditional
//!   creates only (`PutMode::Create`), which S3 and a local directory both
//!   support.
//! - [`download`] fetches a session's snapshots into a fresh local store.
//! - [`sweep`] removes the contents and manifests no snapshot references,
//!   never what an upload in flight relies on.
//! - [`listing`] reads every session the bucket knows, for ListSessions.
//! - [`handback`] carries one replica's request for a session another
//!   holds, to that holder.

pub mod download;
pub mod handback;
pub mod lease;
pub mod listing;
pub(crate) mod recovers;
mod stall;
pub mod sweep;
pub mod tokens;
pub mod upload;

use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wsfs::{Error, Result};

/// A failed bucket request is tried this many times more (with backoff)...
const MAX_RETRIES: usize = 3;
/// ...within this long, so that a call meeting a bucket that is down fails
/// UNAVAILABLE in bounded time rather than minutes later.
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// Removals that failed, kept to be tried again (beyond this, the oldest
/// are given up: the sweep's to find).
const MAX_PENDING_REMOVALS: usize = 10_000;

/// The bucket every replica shares.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    /// The URL, for messages.
    url: String,
    /// This server's name in leases.
    replica: String,
    /// This process's nonce in leases: a restart is another incarnation.
    incarnation: String,
    lease_ttl: Duration,
    /// The lease generation this server holds, per session.
    leases: Mutex<HashMap<String, lease::Held>>,
    /// Sessions a renewal found taken over since the registry last asked
    /// ([`Bucket::take_lost`]), each with its new holder.
    lost: Mutex<HashMap<String, String>>,
    /// Serialize the claims on each session ([`lease::CLAIM_LOCKS`]).
    claiming: Vec<tokio::sync::Mutex<()>>,
    /// Records a failed call wrote (or may have written) and could not
    /// remove at once: removed at the next lease renewal.
    pending_removals: Mutex<Vec<Key>>,
    /// Keys verified to be in the bucket, which uploads need not look up.
    known: Mutex<sweep::Known>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("url", &self.url)
            .field("replica", &self.replica)
            .finish()
    }
}

impl Bucket {
    /// Opens the store `url` names: `s3://bucket[/prefix]` (configured by
    /// the `AWS_*` variables) or `file:///dir` (made if missing).
    pub fn open(url: &str, replica: String, lease_ttl: Duration) -> Result<Bucket> {
        let bad = |why: String| {
            Error::invalid_argument(format!("--object-store '{url}' cannot be used: {why}"))
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" => {
                // reqwest is built without a default TLS provider: ring,
                // like the rest of the server.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let bucket = parsed
                    .host_str()
                    .ok_or_else(|| bad("no bucket name".into()))?;
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(object_store::RetryConfig {
                        max_retries: MAX_RETRIES,
                        retry_timeout: RETRY_TIMEOUT,
                        ..Default::default()
                    });
                if std::env::var_os("AWS_CONDITIONAL_PUT").is_none() {
                    // Leases and "upload if missing" need If-None-Match.
                    builder = builder
                        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch);
                }
                let s3 = builder.build().map_err(|e| bad(e.to_string()))?;
                let prefix = parsed.path().trim_matches('/');
                if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
                }
            }
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path".into()))?;
                std::fs::create_dir_all(&dir).map_err(|e| bad(e.to_string()))?;
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(&dir)
                        .map_err(|e| bad(e.to_string()))?,
                )
            }
            other => {
                return Err(bad(format!(
                    "the scheme '{other}' is not supported (use s3:// or file://)"
                )))
            }
        };
        // Every request bounded: a stalled bucket costs a call a bounded
        // wait, never the store client's 30 s.
        let store: Arc<dyn ObjectStore> =
            Arc::new(stall::StallGuard::new(store, lease::lookup_wait(lease_ttl)));
        Ok(Bucket {
            store,
            url: url.to_string(),
            replica,
            incarnation: uuid::Uuid::new_v4().to_string(),
            lease_ttl,
            leases: Mutex::new(HashMap::new()),
            lost: Mutex::new(HashMap::new()),
            claiming: (0..lease::CLAIM_LOCKS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            pending_removals: Mutex::new(Vec::new()),
            known: Mutex::new(sweep::Known::default()),
        })
    }

    /// Lists the store once, at start, so that a missing bucket, wrong
    /// credentials or an endpoint out of reach stop the server with the
    /// reason and what to do, rather than failing calls later.
    pub async fn check_at_start(&self) -> Result<()> {
        use futures::StreamExt;
        let Some(Err(e)) = self.store.list(None).next().await else {
            return Ok(());
        };
        let text = e.to_string();
        let todo = match url::Url::parse(&self.url) {
            Ok(u) if u.scheme() == "s3" => {
                let bucket = u.host_str().unwrap_or_default();
                if matches!(e, object_store::Error::NotFound { .. })
                    || text.contains("NoSuchBucket")
                {
                    format!(
                        "the bucket '{bucket}' does not exist: create it (e.g. `aws s3 mb s3://{bucket}`, \
                         with `--endpoint-url` for a local S3 API) or name another"
                    )
                } else {
                    format!(
                        "check that the endpoint is reachable (AWS_ENDPOINT_URL, AWS_REGION) and that \
                         the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) may list the bucket '{bucket}'"
                    )
                }
            }
            _ => {
                "check that the directory exists and this server may read and write it".to_string()
            }
        };
        Err(Error::Unavailable {
            message: format!(
                "--object-store {} cannot be used: {todo} (listing it failed: {text})",
                self.url
            ),
        })
    }

    /// The store's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This server's name in leases.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// Removes `key`; when the bucket cannot be reached, tries again at
    /// the next lease renewal.
    async fn remove_or_retry(&self, key: &Key) {
        match self.store.delete(key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(%key, error = %e, "a record could not be removed from the object store; trying again later");
                let mut pending = self
                    .pending_removals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if pending.len() >= MAX_PENDING_REMOVALS {
                    pending.remove(0);
                }
                pending.push(key.clone());
            }
        }
    }

    /// Tries again the removals that failed.
    pub async fn retry_removals(&self) {
        let pending = std::mem::take(
            &mut *self
                .pending_removals
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for key in pending {
            self.remove_or_retry(&key).await;
        }
    }

    /// The error a failed bucket call becomes: the bucket is unreachable
    /// or refuses, which a later try may not meet.
    fn failed(&self, what: &str, key: &Key, e: object_store::Error) -> Error {
        Error::Unavailable {
            message: format!(
                "the object store {} failed to {what} '{key}': {e}",
                self.url
            ),
        }
    }

    /// The raw bytes of `key`; `None` when it is not there.
    async fn get_small(&self, key: &Key, max: u64) -> Result<Option<bytes::Bytes>> {
        let got = match self.store.get(key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.failed("read", key, e)),
        };
        if got.meta.size > max {
            return Err(Error::internal(format!(
                "the object store's '{key}' holds {} bytes, more than the {max} such a record may",
                got.meta.size
            )));
        }
        got.bytes()
            .await
            .map(Some)
            .map_err(|e| self.failed("read", key, e))
    }

    /// Every key under `prefix`.
    async fn list(&self, prefix: &Key) -> Result<Vec<object_store::ObjectMeta>> {
        use futures::TryStreamExt;
        self.store
            .list(Some(prefix))
            .try_collect()
            .await
            .map_err(|e| self.failed("list", prefix, e))
    }

    /// Removes everything the bucket holds about session `id` (its
    /// contents and manifests stay: other sessions may share them; the
    /// sweep frees what only it referenced), within one lookup wait
    /// ([`lease::lookup_wait`]): a bucket that stalls or is cut off costs
    /// the caller that long, then `UNAVAILABLE`, and the session stays
    /// here, leased and served. Only while this server's lease on it is
    /// good, renewed first through the bucket's compare-and-swap, so that
    /// a stale holder never removes what a newer one wrote. Order: the
    /// snapshot records, tokens and hand-back request; then the session's
    /// record, after which it is gone (a failover finds nothing to
    /// recover); then its lease, best effort (a lease without a record is
    /// never recovered, and runs out).
    pub async fn forget_session(&self, id: &str) -> Result<()> {
        let what = format!("removing session '{id}' from it; the session is still served here");
        let removed = self
            .within_lookup_wait(&what, async {
                let left = self.renew_for_commit(id).await?;
                let listed = self.list(&keys::session(id)).await?;
                let (record, leases) = (keys::session_record(id), keys::leases(id));
                let (last, first): (Vec<Key>, Vec<Key>) = listed
                    .into_iter()
                    .map(|meta| meta.location)
                    .partition(|key| *key == record || key.prefix_matches(&leases));
                let removed = async {
                    self.delete_keys(first).await?;
                    self.delete_keys(vec![keys::handback(&self.replica, id)])
                        .await?;
                    // No renewal writes a lease for it from its record's
                    // removal on; the lease is given back to the map if
                    // the removal fails or its wait is cut short.
                    let _one = self.claim_lock(id).lock().await;
                    let taken = TakenLease::take(self, id);
                    self.delete_keys(vec![record]).await?;
                    taken.keep_removed();
                    Ok(last)
                };
                // Past the renewed lease another replica may take it over.
                tokio::time::timeout(left, removed)
                    .await
                    .unwrap_or_else(|_| {
                        Err(self.unanswered(
                            &format!("before this replica's lease on session '{id}' ran out"),
                            &what,
                        ))
                    })
            })
            .await;
        let leases: Vec<Key> = removed?
            .into_iter()
            .filter(|k| *k != keys::session_record(id))
            .collect();
        if let Err(e) = self
            .within_lookup_wait(&what, self.delete_keys(leases))
            .await
        {
            tracing::warn!(session = %id, error = %e, "a deleted session's lease stays in the object store until it runs out");
        }
        Ok(())
    }

    /// Deletes `keys`, in as few requests as the store allows (one per
    /// 1,000 on S3); a key already gone is no error.
    pub(super) async fn delete_keys(&self, keys: Vec<Key>) -> Result<()> {
        use futures::StreamExt;
        let Some(first) = keys.first().cloned() else {
            return Ok(());
        };
        let mut results = self
            .store
            .delete_stream(futures::stream::iter(keys.into_iter().map(Ok)).boxed());
        while let Some(result) = results.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.failed("delete", &first, e)),
            }
        }
        Ok(())
    }
}

/// Session `id`'s lease taken out of [`Bucket::leases`] (no renewal
/// writes it any more), put back when dropped unless
/// [`TakenLease::keep_removed`].
struct TakenLease<'a> {
    bucket: &'a Bucket,
    id: &'a str,
    held: Option<lease::Held>,
}

impl<'a> TakenLease<'a> {
    fn take(bucket: &'a Bucket, id: &'a str) -> Self {
        let held = bucket
            .leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        TakenLease { bucket, id, held }
    }

    fn keep_removed(mut self) {
        self.held = None;
    }
}

impl Drop for TakenLease<'_> {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            self.bucket
                .leases
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(self.id.to_string())
                .or_insert(held);
        }
    }
}

/// Where each thing lives in the bucket.
pub mod keys {
    use super::Key;

    pub fn content(hex: &str) -> Key {
        Key::from(format!("objects/{hex}"))
    }

    pub fn manifest(hex: &str) -> Key {
        Key::from(format!("trees/{hex}"))
    }

    pub fn contents() -> Key {
        Key::from("objects")
    }

    pub fn manifests() -> Key {
        Key::from("trees")
    }

    /// Where every session's keys live, under its id.
    pub const SESSIONS: &str = "sessions";

    pub fn sessions() -> Key {
        Key::from(SESSIONS)
    }

    pub fn markers() -> Key {
        Key::from("markers")
    }

    pub fn marker(name: &str) -> Key {
        Key::from(format!("markers/{name}"))
    }

    pub fn sweep_epoch() -> Key {
        Key::from("sweep/epoch")
    }

    pub fn session(id: &str) -> Key {
        Key::from(format!("{SESSIONS}/{id}"))
    }

    pub fn session_record(id: &str) -> Key {
        Key::from(format!("sessions/{id}/session.json"))
    }

    pub fn snapshots(id: &str) -> Key {
        Key::from(format!("sessions/{id}/snapshots"))
    }

    pub fn snapshot(id: &str, snapshot_id: &str) -> Key {
        Key::from(format!("sessions/{id}/snapshots/{snapshot_id}.json"))
    }

    pub fn leases(id: &str) -> Key {
        Key::from(format!("sessions/{id}/lease"))
    }

    /// Every hand-back request, to any replica.
    pub fn all_handbacks() -> Key {
        Key::from("handback")
    }

    /// The hand-back requests addressed to replica `holder` (any replica
    /// id: each is one escaped part of the key).
    pub fn handbacks(holder: &str) -> Key {
        Key::from_iter(["handback", holder])
    }

    pub fn handback(holder: &str, id: &str) -> Key {
        Key::from_iter(["handback", holder, id])
    }

    pub fn tokens(id: &str) -> Key {
        Key::from(format!("sessions/{id}/tokens.json"))
    }

    /// Zero-padded, so that names sort as numbers.
    pub fn lease(id: &str, generation: u64) -> Key {
        Key::from(format!("sessions/{id}/lease/{generation:020}"))
    }
}

/// The file in the data directory that keeps the default replica id.
const REPLICA_ID_FILE: &str = "replica-id";

/// The default replica name: `<host>-<random>`, drawn on the first start
/// and kept in the data directory, so that it stays the same across
/// restarts (whatever port the server listens on) and two data
/// directories never share one.
pub fn default_replica_id(data_dir: &std::path::Path) -> Result<String> {
    let path = data_dir.join(REPLICA_ID_FILE);
    let io = |e: std::io::Error| {
        Error::internal(format!(
            "cannot keep the replica id in '{}': {e}",
            path.display()
        ))
    };
    let read = |path: &std::path::Path| -> Result<Option<String>> {
        match std::fs::read_to_string(path) {
            Ok(id) if !id.trim().is_empty() => Ok(Some(id.trim().to_string())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(e)),
        }
    };
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "wsfs".to_string());
    let id = format!(
        "{host}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    std::fs::create_dir_all(data_dir).map_err(io)?;
    // Written aside and linked into place: of two first starts, one id
    // wins and both use it.
    let tmp = data_dir.join(format!("{REPLICA_ID_FILE}.{}", uuid::Uuid::new_v4()));
    std::fs::write(&tmp, format!("{id}\n")).map_err(io)?;
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(&path)?.ok_or_else(|| io(e))
        }
        Err(e) => Err(io(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_replica_id_is_drawn_once_per_data_directory_and_kept() {
        let (one, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = default_replica_id(one.path()).unwrap();
        assert_eq!(default_replica_id(one.path()).unwrap(), first, "kept");
        assert_ne!(default_replica_id(other.path()).unwrap(), first);
        assert_eq!(
            std::fs::read_to_string(one.path().join(REPLICA_ID_FILE)).unwrap(),
            format!("{first}\n")
        );
    }
}
