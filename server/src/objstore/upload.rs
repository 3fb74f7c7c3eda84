//! Mirroring one session's snapshots and record to the bucket.
//!
//! A snapshot answers OK only when everything it names is verifiably in
//! the bucket: each content and manifest this replica has not verified
//! (under the current sweep epoch, within [`super::sweep::VERIFY_EVERY`])
//! is looked up (a HEAD per object, its size compared with what the
//! snapshot says); one that is missing or of the wrong size is sent again
//! (contents are named by their hash, so a copy over one is the same
//! bytes). The upload holds a marker meanwhile, so that no sweep deletes
//! what it found ([`super::sweep`]). Manifests go after everything they name, children before
//! parents. The snapshot's record goes last, after the session record:
//! a snapshot whose record is in the bucket is whole, and a failed one
//! removes the record it may have written.
//!
//! However long the upload took, the records are written only under a
//! lease renewed right before them (a compare-and-swap in the bucket,
//! which fails when another replica took the session over meanwhile),
//! and must be acknowledged before that lease's expiry less the skew
//! margin: before any other replica may take the session over. A stale
//! holder's Snapshot thus fails (`SESSION_LEASED` or `UNAVAILABLE`) and
//! leaves no record.
use super::sweep::KnownEpoch;
use super::{keys, Bucket, Key};
use crate::directory::snapshots::mirror::{
    hash_hex, manifest_children, record_root, StoreFiles, StoredChild,
};
use crate::snapshots::LooseSnapshot;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use wsfs::{Error, Result};

/// Contents up to this size are sent in one request, read whole into
/// memory; larger ones in parts of [`PART_BYTES`].
pub const SINGLE_PUT_MAX_BYTES: u64 = 1024 * 1024;
/// Small contents sent at once, each at most [`SINGLE_PUT_MAX_BYTES`].
pub const PUT_CONCURRENCY: usize = 16;
/// One part of a large content (S3's minimum is 5 MiB).
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one large content in flight at once.
pub const PARTS_IN_FLIGHT: usize = 2;
/// Lookups (HEAD) of a snapshot's contents and manifests at once.
pub const HEAD_CONCURRENCY: usize = 32;
/// The largest session or snapshot record read back.
pub const MAX_RECORD_BYTES: u64 = 1024 * 1024;

/// What the bucket keeps to recreate a session.
#[derive(Debug, Serialize, Deserialize)]
pub struct BucketSession {
    /// The session's record as its server's `session.json` holds it.
    pub session: serde_json::Value,
    /// The snapshot RecoverSession restores unless told otherwise.
    #[serde(default)]
    pub latest_snapshot: Option<String>,
    /// The replica that wrote this.
    pub written_by: String,
}

/// One session's mirror: its local store and its place in the bucket.
pub struct SessionMirror {
    bucket: Arc<Bucket>,
    session_id: String,
    session_dir: PathBuf,
    /// One upload of this session at a time, so that the session record
    /// names the latest snapshot last.
    busy: tokio::sync::Mutex<()>,
    /// The runtime that fetches contents for blocking readers
    /// ([`Bucket::stream_content`]).
    runtime: Option<tokio::runtime::Handle>,
}

impl SessionMirror {
    pub fn new(bucket: Arc<Bucket>, session_id: &str, session_dir: &std::path::Path) -> Self {
        SessionMirror {
            bucket,
            session_id: session_id.to_string(),
            session_dir: session_dir.to_path_buf(),
            busy: tokio::sync::Mutex::new(()),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// Sends snapshot `snapshot_id` (already stored locally): what the
    /// bucket lacks of its tree, the session record naming it as the
    /// latest, and its record last. Refused while this replica's lease on
    /// the session is not good: a stale holder writes no record.
    pub async fn upload_snapshot(&self, snapshot_id: &str) -> Result<()> {
        let _one = self.busy.lock().await;
        let files = StoreFiles::new(&self.session_dir);
        let raw = tokio::fs::read(files.record_path(snapshot_id))
            .await
            .map_err(|e| {
                Error::internal(format!(
                    "snapshot {snapshot_id}'s record is unreadable: {e}"
                ))
            })?;
        let root = record_root(&raw)?.root;
        // No sweep deletes what this upload finds while its marker lives.
        let (marker, epoch) = self.bucket.begin_upload().await?;
        self.bucket.upload_tree(&files, root, &epoch).await?;
        self.finish_upload(marker, snapshot_id, raw).await
    }

    /// Sends snapshot `snapshot` of a tree held in memory (MEMORY): the
    /// same objects, checks and order as [`Self::upload_snapshot`], each
    /// content sent from the session's own `Bytes` (shared, never copied
    /// into a buffer of its own).
    pub async fn upload_loose(&self, snapshot: &LooseSnapshot) -> Result<()> {
        let _one = self.busy.lock().await;
        let (marker, epoch) = self.bucket.begin_upload().await?;
        self.bucket.upload_loose_tree(snapshot, &epoch).await?;
        self.finish_upload(marker, &snapshot.id, snapshot.record.clone())
            .await
    }

    /// The end of an upload whose contents and manifests are in the
    /// bucket: the lease renewed (the bucket's compare-and-swap: refused
    /// when another replica took the session over during the upload), then
    /// the session record naming `snapshot_id` as the latest and the
    /// snapshot's record `raw`, both acknowledged while the renewed lease
    /// is good and `marker` is live; a failure removes the record it may
    /// have written.
    async fn finish_upload(
        &self,
        marker: super::sweep::Marker,
        snapshot_id: &str,
        raw: Vec<u8>,
    ) -> Result<()> {
        let left = self.bucket.renew_for_commit(&self.session_id).await?;
        let key = keys::snapshot(&self.session_id, snapshot_id);
        let committed = async {
            self.write_record(Some(snapshot_id)).await?;
            self.bucket.put_over(&key, raw.into()).await
        };
        let written = tokio::time::timeout(left, committed)
            .await
            .unwrap_or_else(|_| {
                Err(Error::Unavailable {
                    message: format!(
                        "the object store {} did not take snapshot {snapshot_id}'s records within {left:?}, while this replica's lease on session '{}' was good; the snapshot was not kept",
                        self.bucket.url, self.session_id
                    ),
                })
            });
        // The record must have landed while the marker was live (the
        // more telling reason when a stall outlasted both).
        let written = match marker.live() {
            true => written,
            false => Err(Error::Unavailable {
                message: format!(
                    "the upload's marker in the object store {} could not be kept fresh; the snapshot was not kept",
                    self.bucket.url
                ),
            }),
        };
        if let Err(e) = written {
            // Its answer may have been lost after it landed.
            self.bucket.remove_or_retry(&key).await;
            return Err(e);
        }
        marker.remove().await;
        Ok(())
    }

    /// Writes the session record, naming `latest` as the latest snapshot
    /// (`None`: the session has none; a hint: recovery restores the newest
    /// snapshot record it lists). Refused while this replica's lease on the
    /// session is not good: a stale holder writes no record.
    pub async fn write_record(&self, latest: Option<&str>) -> Result<()> {
        self.bucket.check_holding(&self.session_id)?;
        let local = tokio::fs::read(self.session_dir.join("session.json"))
            .await
            .map_err(|e| Error::internal(format!("the session record is unreadable: {e}")))?;
        let session: serde_json::Value = serde_json::from_slice(&local)
            .map_err(|e| Error::internal(format!("the session record is corrupt: {e}")))?;
        let record = BucketSession {
            session,
            latest_snapshot: latest.map(str::to_string),
            written_by: self.bucket.replica.clone(),
        };
        let json = serde_json::to_vec(&record)
            .map_err(|e| Error::internal(format!("cannot encode the session record: {e}")))?;
        self.bucket
            .put_over(&keys::session_record(&self.session_id), json.into())
            .await
    }

    /// Forgets snapshot `snapshot_id` in the bucket (its contents stay:
    /// other snapshots and sessions may share them). The session record
    /// then names `latest`.
    pub async fn forget_snapshot(&self, snapshot_id: &str, latest: Option<&str>) -> Result<()> {
        let _one = self.busy.lock().await;
        let key = keys::snapshot(&self.session_id, snapshot_id);
        match self.bucket.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(self.bucket.failed("delete", &key, e)),
        }
        let record = self.bucket.session_record(&self.session_id).await?;
        if record.is_some_and(|r| r.latest_snapshot.as_deref() == Some(snapshot_id)) {
            self.write_record(latest).await?;
        }
        Ok(())
    }
}

impl crate::snapshots::SnapshotMirrors for Bucket {
    fn mirror(
        self: Arc<Self>,
        id: &str,
        session_dir: &std::path::Path,
    ) -> Arc<dyn crate::snapshots::SnapshotMirror> {
        Arc::new(SessionMirror::new(self, id, session_dir))
    }
}

#[async_trait::async_trait]
impl crate::snapshots::SnapshotMirror for SessionMirror {
    async fn mirror(
        self: Arc<Self>,
        info: crate::snapshots::SnapshotInfo,
        roll_back: Box<dyn FnOnce() + Send>,
    ) -> Result<crate::snapshots::SnapshotInfo> {
        let task = tokio::spawn(async move {
            match self.upload_snapshot(&info.id).await {
                Ok(()) => Ok(info),
                Err(e) => {
                    let _ = tokio::task::spawn_blocking(roll_back).await;
                    Err(e)
                }
            }
        });
        task.await
            .map_err(|e| Error::internal(format!("the snapshot's upload failed: {e}")))?
    }

    async fn mirror_loose(self: Arc<Self>, snapshot: Arc<LooseSnapshot>) -> Result<()> {
        // Runs to its end even when the caller goes away.
        tokio::spawn(async move { self.upload_loose(&snapshot).await })
            .await
            .map_err(|e| Error::internal(format!("the snapshot's upload failed: {e}")))?
    }

    async fn forget_snapshot(&self, id: &str, newest_left: Option<&str>) -> Result<()> {
        SessionMirror::forget_snapshot(self, id, newest_left).await
    }

    async fn fetch_contents(&self, wanted: Vec<([u8; 32], u64)>) -> Result<()> {
        let hashes = wanted.into_iter().map(|(hash, _)| hash).collect();
        self.bucket
            .fetch_contents(&StoreFiles::new(&self.session_dir), hashes)
            .await
    }

    fn stream_content(
        &self,
        hash: &[u8; 32],
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let runtime = self
            .runtime
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
            .ok_or_else(|| Error::internal("no runtime to fetch a content with"))?;
        self.bucket.stream_content(&runtime, hash, sink)
    }
}

impl Bucket {
    /// Session `id`'s record in the bucket, if it has one.
    pub async fn session_record(&self, id: &str) -> Result<Option<BucketSession>> {
        let key = keys::session_record(id);
        match self.get_small(&key, MAX_RECORD_BYTES).await? {
            None => Ok(None),
            Some(raw) => serde_json::from_slice(&raw).map(Some).map_err(|e| {
                Error::internal(format!("the object store's '{key}' is corrupt: {e}"))
            }),
        }
    }

    /// Writes `key`, replacing what it held.
    pub(super) async fn put_over(&self, key: &Key, payload: PutPayload) -> Result<()> {
        self.store
            .put(key, payload)
            .await
            .map(|_| ())
            .map_err(|e| self.failed("write", key, e))
    }

    /// Whether the bucket holds `key` at `size` bytes (asked every time:
    /// a key may have been removed or damaged since any replica wrote it).
    async fn holds(&self, key: &Key, size: u64) -> Result<bool> {
        match self.store.head(key).await {
            Ok(meta) => Ok(meta.size == size),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.failed("look up", key, e)),
        }
    }

    /// Of `wanted` (hash, size), those the bucket lacks or holds at
    /// another size: those this replica does not know to be there are
    /// looked up, and the ones found remembered.
    pub(super) async fn lacking(
        &self,
        epoch: &KnownEpoch,
        is_manifest: bool,
        wanted: Vec<([u8; 32], u64)>,
    ) -> Result<Vec<([u8; 32], u64)>> {
        let looked_up: Vec<(([u8; 32], u64), bool)> =
            futures::stream::iter(self.unknown(is_manifest, wanted))
                .map(|(hash, size)| async move {
                    let hex = hash_hex(&hash);
                    let key = if is_manifest {
                        keys::manifest(&hex)
                    } else {
                        keys::content(&hex)
                    };
                    Ok::<_, Error>(((hash, size), self.holds(&key, size).await?))
                })
                .buffer_unordered(HEAD_CONCURRENCY)
                .try_collect()
                .await?;
        let (held, lacking): (Vec<_>, Vec<_>) = looked_up.into_iter().partition(|(_, held)| *held);
        self.remember(epoch, is_manifest, held.into_iter().map(|(k, _)| k));
        Ok(lacking.into_iter().map(|(k, _)| k).collect())
    }

    /// Sends every content and manifest of the tree under manifest `root`
    /// that the bucket lacks or holds damaged (of another size), trusting
    /// what this replica verified under `epoch`.
    async fn upload_tree(
        &self,
        files: &StoreFiles,
        root: [u8; 32],
        epoch: &KnownEpoch,
    ) -> Result<()> {
        let mut contents: Vec<([u8; 32], u64)> = Vec::new();
        // Parents after their children: the order they are sent in.
        let mut manifests: Vec<([u8; 32], u64)> = Vec::new();
        let mut stack = vec![(root, None)];
        let mut seen = std::collections::HashSet::new();
        while let Some((hash, read)) = stack.pop() {
            if let Some(size) = read {
                manifests.push((hash, size));
                continue;
            }
            if !seen.insert(hash) {
                continue;
            }
            let raw = tokio::fs::read(files.manifest_path(&hash))
                .await
                .map_err(|e| Error::internal(format!("a stored manifest is unreadable: {e}")))?;
            let children = manifest_children(&raw).ok_or_else(|| {
                Error::internal(format!(
                    "the stored manifest {} is corrupt",
                    hash_hex(&hash)
                ))
            })?;
            stack.push((hash, Some(raw.len() as u64)));
            for child in children {
                match child {
                    StoredChild::Content { hash, size } => contents.push((hash, size)),
                    StoredChild::Manifest(tree) => stack.push((tree, None)),
                }
            }
        }
        contents.sort_unstable();
        contents.dedup();
        let contents = self.lacking(epoch, false, contents).await?;
        let lacking_manifests: std::collections::HashSet<([u8; 32], u64)> = self
            .lacking(epoch, true, manifests.clone())
            .await?
            .into_iter()
            .collect();
        let (small, large): (Vec<_>, Vec<_>) = contents
            .iter()
            .copied()
            .partition(|(_, size)| *size <= SINGLE_PUT_MAX_BYTES);
        futures::stream::iter(small)
            .map(|(hash, _)| self.upload_small(files, hash))
            .buffer_unordered(PUT_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        for (hash, _) in large {
            self.upload_large(files, hash).await?;
        }
        self.remember(epoch, false, contents);
        for (hash, size) in manifests {
            if !lacking_manifests.contains(&(hash, size)) {
                continue;
            }
            let raw = tokio::fs::read(files.manifest_path(&hash))
                .await
                .map_err(|e| Error::internal(format!("a stored manifest is unreadable: {e}")))?;
            self.put_over(&keys::manifest(&hash_hex(&hash)), raw.into())
                .await?;
        }
        self.remember(epoch, true, lacking_manifests);
        Ok(())
    }

    /// [`Self::upload_tree`] for a tree held in memory: what the bucket
    /// lacks of `snapshot`'s contents (sent from their `Bytes`) and
    /// manifests.
    async fn upload_loose_tree(&self, snapshot: &LooseSnapshot, epoch: &KnownEpoch) -> Result<()> {
        let by_hash: std::collections::HashMap<[u8; 32], bytes::Bytes> =
            snapshot.contents.iter().cloned().collect();
        let wanted = by_hash
            .iter()
            .map(|(hash, bytes)| (*hash, bytes.len() as u64))
            .collect();
        let contents = self.lacking(epoch, false, wanted).await?;
        let sends: Vec<([u8; 32], bytes::Bytes)> = contents
            .iter()
            .map(|(hash, _)| (*hash, by_hash[hash].clone()))
            .collect();
        futures::stream::iter(sends)
            .map(|(hash, bytes)| self.upload_bytes(hash, bytes))
            .buffer_unordered(PUT_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        self.remember(epoch, false, contents);
        let sizes = snapshot
            .manifests
            .iter()
            .map(|(hash, raw)| (*hash, raw.len() as u64))
            .collect();
        let lacking: std::collections::HashSet<([u8; 32], u64)> = self
            .lacking(epoch, true, sizes)
            .await?
            .into_iter()
            .collect();
        // Children before parents, as listed.
        for (hash, raw) in &snapshot.manifests {
            if lacking.contains(&(*hash, raw.len() as u64)) {
                self.put_over(&keys::manifest(&hash_hex(hash)), raw.clone().into())
                    .await?;
            }
        }
        self.remember(epoch, true, lacking);
        Ok(())
    }

    /// Sends content `hash` from `bytes`: in one request up to
    /// [`SINGLE_PUT_MAX_BYTES`], in parts of [`PART_BYTES`] above.
    async fn upload_bytes(&self, hash: [u8; 32], bytes: bytes::Bytes) -> Result<()> {
        let key = keys::content(&hash_hex(&hash));
        if bytes.len() as u64 <= SINGLE_PUT_MAX_BYTES {
            return self.put_over(&key, bytes.into()).await;
        }
        let parts = (0..bytes.len())
            .step_by(PART_BYTES)
            .map(move |at| Ok(bytes.slice(at..bytes.len().min(at + PART_BYTES))));
        self.put_in_parts(&key, futures::stream::iter(parts)).await
    }

    async fn upload_small(&self, files: &StoreFiles, hash: [u8; 32]) -> Result<()> {
        let key = keys::content(&hash_hex(&hash));
        let path = files.content_path(&hash);
        let mut file = tokio::fs::File::open(&path).await.map_err(unreadable)?;
        let mut bytes = Vec::new();
        // The manifest said how big; a store file longer than that is
        // damaged, and never read past the single-put bound.
        (&mut file)
            .take(SINGLE_PUT_MAX_BYTES + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(unreadable)?;
        if bytes.len() as u64 > SINGLE_PUT_MAX_BYTES {
            return self.upload_large(files, hash).await;
        }
        self.put_over(&key, bytes.into()).await
    }

    async fn upload_large(&self, files: &StoreFiles, hash: [u8; 32]) -> Result<()> {
        let key = keys::content(&hash_hex(&hash));
        let file = tokio::fs::File::open(files.content_path(&hash))
            .await
            .map_err(unreadable)?;
        let parts = tokio_util::io::ReaderStream::with_capacity(file, PART_BYTES)
            .map(|part| part.map_err(unreadable));
        self.put_in_parts(&key, parts).await
    }

    /// Writes `key` as a multipart upload of `parts` in order, at most
    /// [`PARTS_IN_FLIGHT`] parts of [`PART_BYTES`] in flight; aborted when
    /// a part fails.
    async fn put_in_parts(
        &self,
        key: &Key,
        parts: impl futures::Stream<Item = Result<bytes::Bytes>>,
    ) -> Result<()> {
        let upload = self
            .store
            .put_multipart(key)
            .await
            .map_err(|e| self.failed("write", key, e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let sent = async {
            let mut parts = std::pin::pin!(parts);
            while let Some(part) = parts.next().await {
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(|e| self.failed("write", key, e))?;
                writer.put(part?);
            }
            Ok::<_, Error>(())
        }
        .await;
        match sent {
            Ok(()) => {
                writer
                    .finish()
                    .await
                    .map_err(|e| self.failed("write", key, e))?;
                Ok(())
            }
            Err(e) => {
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }
}

fn unreadable(e: std::io::Error) -> Error {
    Error::internal(format!("a stored content is unreadable: {e}"))
}
