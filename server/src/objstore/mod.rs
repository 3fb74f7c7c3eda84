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
//! ```
//!
//! - [`Bucket`] opens the store from its URL and keeps which keys are known
//!   to be there, so that nothing is uploaded twice.
//! - [`upload`] mirrors one snapshot: contents, then manifests (children
//!   before parents, so a manifest in the bucket means its whole subtree
//!   is), then the snapshot record, then the session record.
//! - [`lease`] decides which replica serves a session, with conditional
//!   creates only (`PutMode::Create`), which S3 and a local directory both
//!   support.
//! - [`download`] fetches a session's snapshots into a fresh local store.

pub mod background;
pub mod download;
pub mod lease;
pub mod upload;

use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wsfs::{Error, Result};

/// A failed bucket request is tried this many times more (with backoff)...
const MAX_RETRIES: usize = 3;
/// ...within this long, so that a call meeting a bucket that is down fails
/// UNAVAILABLE in bounded time rather than minutes later.
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// Keys remembered as present before the set is cleared (and rebuilt from
/// HEAD requests): about 100 bytes each.
const MAX_KNOWN_KEYS: usize = 1_000_000;

/// The bucket every replica shares.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    /// The URL, for messages.
    url: String,
    /// This server's name in leases.
    replica: String,
    lease_ttl: Duration,
    /// Keys known to be in the bucket (contents and manifests never
    /// change once there).
    known: Mutex<HashSet<String>>,
    /// The lease generation this server holds, per session.
    leases: Mutex<std::collections::HashMap<String, u64>>,
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
        Ok(Bucket {
            store,
            url: url.to_string(),
            replica,
            lease_ttl,
            known: Mutex::new(HashSet::new()),
            leases: Mutex::new(Default::default()),
        })
    }

    /// This server's name in leases.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    fn is_known(&self, key: &Key) -> bool {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key.as_ref())
    }

    fn mark_known(&self, key: &Key) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_KNOWN_KEYS {
            known.clear();
        }
        known.insert(key.to_string());
    }

    /// Whether `key` is in the bucket (asked once, then remembered).
    async fn exists(&self, key: &Key) -> Result<bool> {
        if self.is_known(key) {
            return Ok(true);
        }
        match self.store.head(key).await {
            Ok(_) => {
                self.mark_known(key);
                Ok(true)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.failed("look up", key, e)),
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
    /// contents and manifests stay: other sessions may share them).
    pub async fn forget_session(&self, id: &str) -> Result<()> {
        // No renewal may write a lease for it from now on.
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        for meta in self.list(&keys::session(id)).await? {
            match self.store.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.failed("delete", &meta.location, e)),
            }
        }
        Ok(())
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

    pub fn session(id: &str) -> Key {
        Key::from(format!("sessions/{id}"))
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

    /// Zero-padded, so that names sort as numbers.
    pub fn lease(id: &str, generation: u64) -> Key {
        Key::from(format!("sessions/{id}/lease/{generation:020}"))
    }
}

/// The default replica name: the host name and the listening port.
pub fn default_replica_id(listen: std::net::SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "wsfs".to_string());
    format!("{host}:{}", listen.port())
}
