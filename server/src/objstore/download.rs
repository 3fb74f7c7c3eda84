//! Fetching a session's snapshots from the bucket into a local snapshot
//! store, for RecoverSession: every manifest and record, and contents
//! when something needs them (the restored snapshot's stream straight
//! into its workspace, the others' into the store on demand). Every
//! manifest and content is checked against its hash as it arrives;
//! contents stream to disk, never whole in memory.

use super::upload::{BucketSession, MAX_RECORD_BYTES, SINGLE_PUT_MAX_BYTES};
use super::{keys, Bucket};
use crate::directory::snapshots::mirror::{
    hash_hex, manifest_children, manifest_entries, record_root, StoreFiles, StoredChild,
};
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use std::time::SystemTime;
use tokio::io::AsyncWriteExt;
use wsfs::{Error, Result};

use crate::snapshots::FETCH_CONCURRENCY;
/// The largest manifest read back (a directory of some 100,000 entries).
const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
/// Manifests fetched at once: a tree's levels cost a round trip per 8
/// directories, and at most 128 MiB of manifests are held.
const MANIFESTS_AT_ONCE: usize = 8;

/// One snapshot of a session, as the bucket lists it.
#[derive(Debug, Clone)]
pub struct BucketSnapshot {
    pub id: String,
    pub created_at: SystemTime,
    /// The files' apparent sizes, as the record says.
    pub total_bytes: u64,
    pub root: [u8; 32],
    pub raw: bytes::Bytes,
}

impl BucketSnapshot {
    /// Refuses (`QuotaExceeded`), before any of it is fetched, a snapshot
    /// whose files (apparent sizes, as its record says) hold more than
    /// `budget` bytes (0: no limit); `what` names the call for the message.
    pub fn check_fits(&self, budget: u64, what: &str) -> Result<()> {
        let holds = self.total_bytes;
        if budget > 0 && holds > budget {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "cannot {what}: snapshot {} holds {holds} bytes, over the budget of {budget} bytes (the session's max_total_bytes, or --default-max-total-bytes)",
                    self.id
                ),
            });
        }
        Ok(())
    }
}

impl Bucket {
    /// Session `id` as the bucket knows it: its record and snapshots
    /// (oldest first); `SessionNotFound` when it has no record.
    pub async fn session(&self, id: &str) -> Result<(BucketSession, Vec<BucketSnapshot>)> {
        let record = self
            .session_record(id)
            .await?
            .ok_or_else(|| Error::SessionNotFound {
                session_id: id.to_string(),
            })?;
        let mut snapshots = Vec::new();
        for meta in self.list(&keys::snapshots(id)).await? {
            let Some(raw) = self.get_small(&meta.location, MAX_RECORD_BYTES).await? else {
                continue;
            };
            let head = record_root(&raw)?;
            snapshots.push(BucketSnapshot {
                id: head.id,
                created_at: head.created_at,
                total_bytes: head.total_bytes,
                root: head.root,
                raw,
            });
        }
        snapshots.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok((record, snapshots))
    }

    /// Fetches every manifest and content of `snapshots` into `files`
    /// (skipping what it already holds), then their records.
    pub async fn download(&self, files: &StoreFiles, snapshots: &[BucketSnapshot]) -> Result<()> {
        let contents = self.download_manifests(files, snapshots).await?;
        self.fetch_contents(files, contents).await?;
        self.download_records(files, snapshots).await
    }

    /// Fetches the manifests and records of `snapshots` into `files`, not
    /// their contents (skipping what it already holds): a recovered
    /// session lists and knows them all, and fetches a snapshot's contents
    /// when something needs them ([`Bucket::fetch_contents`],
    /// [`Bucket::stream_content`]).
    pub async fn download_known(
        &self,
        files: &StoreFiles,
        snapshots: &[BucketSnapshot],
    ) -> Result<()> {
        self.download_manifests(files, snapshots).await?;
        self.download_records(files, snapshots).await
    }

    /// Fetches every manifest under `snapshots`' roots into `files`
    /// (skipping what it already holds), one level of the trees at a
    /// time, [`MANIFESTS_AT_ONCE`] at once, each read as it arrives and
    /// dropped (memory: the manifests in flight, and the hashes of the
    /// next level); returns the contents they name.
    async fn download_manifests(
        &self,
        files: &StoreFiles,
        snapshots: &[BucketSnapshot],
    ) -> Result<Vec<[u8; 32]>> {
        let mut contents = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut level: Vec<[u8; 32]> = snapshots
            .iter()
            .map(|s| s.root)
            .filter(|root| seen.insert(*root))
            .collect();
        while !level.is_empty() {
            let mut next = Vec::new();
            let mut fetched = futures::stream::iter(std::mem::take(&mut level))
                .map(|hash| self.manifest_into(files, hash))
                .buffer_unordered(MANIFESTS_AT_ONCE);
            while let Some(got) = fetched.next().await {
                let (hash, raw) = got?;
                let children = manifest_children(&raw)
                    .ok_or_else(|| corrupt(&keys::manifest(&hash_hex(&hash))))?;
                for child in children {
                    match child {
                        StoredChild::Content { hash, .. } => contents.push(hash),
                        StoredChild::Manifest(tree) if seen.insert(tree) => next.push(tree),
                        StoredChild::Manifest(_) => {}
                    }
                }
            }
            level = next;
        }
        contents.sort_unstable();
        contents.dedup();
        Ok(contents)
    }

    /// Manifest `hash` from `files`, or fetched from the bucket (checked)
    /// and stored there.
    async fn manifest_into(
        &self,
        files: &StoreFiles,
        hash: [u8; 32],
    ) -> Result<([u8; 32], bytes::Bytes)> {
        if let Ok(raw) = tokio::fs::read(files.manifest_path(&hash)).await {
            return Ok((hash, raw.into()));
        }
        let raw = self.fetch_manifest(hash).await?;
        let (stored, files) = (raw.clone(), files.clone());
        blocking(move || files.put(true, &hash, &stored)).await?;
        Ok((hash, raw))
    }

    async fn download_records(
        &self,
        files: &StoreFiles,
        snapshots: &[BucketSnapshot],
    ) -> Result<()> {
        for s in snapshots {
            let (files, id, raw) = (files.clone(), s.id.clone(), s.raw.clone());
            blocking(move || files.put_record(&id, &raw)).await?;
        }
        Ok(())
    }

    /// Fetches the contents `hashes` into `files` (skipping what it
    /// already holds), [`FETCH_CONCURRENCY`] at once, each checked against
    /// its hash as it streams to disk.
    pub async fn fetch_contents(&self, files: &StoreFiles, hashes: Vec<[u8; 32]>) -> Result<()> {
        futures::stream::iter(hashes)
            .map(|hash| self.download_content(files, hash))
            .buffer_unordered(FETCH_CONCURRENCY)
            .try_collect::<()>()
            .await
    }

    /// Hands content `hash` to `sink` as it streams from the bucket,
    /// driven on `runtime` from this (blocking) thread; the caller checks
    /// the bytes against the hash. A content sent in one piece
    /// ([`SINGLE_PUT_MAX_BYTES`]) is read in one piece (16 at once: 16 MiB
    /// at most), so a workspace of small files costs a read each, not one
    /// per transport chunk; larger ones stream. A missing object fails as in
    /// [`Bucket::download`], an unreachable bucket `UNAVAILABLE`.
    pub fn stream_content(
        &self,
        runtime: &tokio::runtime::Handle,
        hash: &[u8; 32],
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let key = keys::content(&hash_hex(hash));
        let got = runtime.block_on(self.get_object(&key))?;
        let got = match got.payload {
            // A shared-directory bucket's object: read on this thread,
            // which may block, not handed to another for each read.
            object_store::GetResultPayload::File(file, _) => {
                return read_whole(&file, got.range, sink)
                    .map_err(|e| Error::internal(format!("cannot read '{key}': {e}")))?;
            }
            payload => object_store::GetResult { payload, ..got },
        };
        runtime.block_on(async {
            if got.meta.size <= SINGLE_PUT_MAX_BYTES {
                let whole = got
                    .bytes()
                    .await
                    .map_err(|e| self.failed("read", &key, e))?;
                return sink(&whole);
            }
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                sink(&chunk.map_err(|e| self.failed("read", &key, e))?)?;
            }
            Ok(())
        })
    }

    /// Content object `key`, ready to be read.
    async fn get_object(&self, key: &object_store::path::Path) -> Result<object_store::GetResult> {
        match self.store.get(key).await {
            Ok(got) => Ok(got),
            Err(object_store::Error::NotFound { .. }) => Err(missing(key)),
            Err(e) => Err(self.failed("read", key, e)),
        }
    }

    async fn download_content(&self, files: &StoreFiles, hash: [u8; 32]) -> Result<()> {
        if tokio::fs::metadata(files.content_path(&hash)).await.is_ok() {
            return Ok(());
        }
        let key = keys::content(&hash_hex(&hash));
        let mut stream = self.get_object(&key).await?.into_stream();
        let (tmp, file) = {
            let files = files.clone();
            blocking(move || files.temp()).await?
        };
        let mut out = tokio::io::BufWriter::new(tokio::fs::File::from_std(file));
        let mut hasher = Sha256::new();
        let written = async {
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.failed("read", &key, e))?;
                hasher.update(&chunk);
                out.write_all(&chunk)
                    .await
                    .map_err(|e| Error::internal(format!("cannot store '{key}': {e}")))?;
            }
            out.flush()
                .await
                .map_err(|e| Error::internal(format!("cannot store '{key}': {e}")))
        }
        .await;
        let checked = written.and_then(|()| {
            if <[u8; 32]>::from(hasher.finalize()) == hash {
                Ok(())
            } else {
                Err(corrupt(&key))
            }
        });
        let files = files.clone();
        blocking(move || {
            let published = checked.and_then(|()| files.publish(&tmp, &hash));
            let _ = std::fs::remove_file(&tmp);
            published
        })
        .await
    }
}

/// Hands `range` of `file` to `sink`, in pieces of at most a single PUT's
/// size (a content sent whole is read whole); `sink`'s own failure is the
/// inner result.
fn read_whole(
    file: &std::fs::File,
    range: std::ops::Range<u64>,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> std::io::Result<Result<()>> {
    use std::os::unix::fs::FileExt;
    let piece = (range.end - range.start).min(SINGLE_PUT_MAX_BYTES) as usize;
    let mut buf = vec![0; piece];
    let mut at = range.start;
    while at < range.end {
        let n = ((range.end - at) as usize).min(piece);
        file.read_exact_at(&mut buf[..n], at)?;
        if let Err(e) = sink(&buf[..n]) {
            return Ok(Err(e));
        }
        at += n as u64;
    }
    Ok(Ok(()))
}

/// One entry of a snapshot fetched into memory: its path, its bytes (a
/// file) or none (a directory), its bits and modification time.
pub type LooseEntry = (String, Option<bytes::Bytes>, wsfs::Permissions, SystemTime);

impl Bucket {
    /// Every entry of the tree under manifest `root`, contents held in
    /// memory (a MEMORY session's recovery): each manifest and content
    /// checked against its hash as it arrives. Refused (`QuotaExceeded`)
    /// before any content is fetched when the manifests name more than
    /// `budget` bytes (0: no limit); `what` names the call.
    pub async fn fetch_loose(
        &self,
        root: [u8; 32],
        budget: u64,
        what: &str,
    ) -> Result<Vec<LooseEntry>> {
        let mut entries = Vec::new();
        let mut files = Vec::new();
        let mut wanted: std::collections::HashMap<[u8; 32], u64> = Default::default();
        let mut named = 0u64;
        let mut stack = vec![(root, String::new())];
        while let Some((hash, at)) = stack.pop() {
            let raw = self.fetch_manifest(hash).await?;
            let damaged = || corrupt(&keys::manifest(&hash_hex(&hash)));
            for entry in manifest_entries(&raw).ok_or_else(damaged)? {
                let path = match at.is_empty() {
                    true => entry.name,
                    false => format!("{at}/{}", entry.name),
                };
                match entry.child {
                    StoredChild::Manifest(tree) => {
                        entries.push((path.clone(), None, entry.permissions, entry.modified));
                        stack.push((tree, path));
                    }
                    StoredChild::Content { hash, size } => {
                        named = named.saturating_add(size);
                        wanted.insert(hash, size);
                        files.push((path, hash, entry.permissions, entry.modified));
                    }
                }
            }
        }
        if budget > 0 && named > budget {
            return Err(Error::QuotaExceeded {
                message: format!(
                    "cannot {what}: its snapshot's files hold {named} bytes, over the budget of {budget} bytes (the session's max_total_bytes, or --default-max-total-bytes)"
                ),
            });
        }
        let fetched: std::collections::HashMap<[u8; 32], bytes::Bytes> =
            futures::stream::iter(wanted)
                .map(|(hash, size)| async move {
                    Ok::<_, Error>((hash, self.fetch_content(hash, size).await?))
                })
                .buffer_unordered(FETCH_CONCURRENCY)
                .try_collect()
                .await?;
        for (path, hash, permissions, modified) in files {
            entries.push((path, Some(fetched[&hash].clone()), permissions, modified));
        }
        Ok(entries)
    }

    /// Manifest `hash`, read and checked against its hash.
    async fn fetch_manifest(&self, hash: [u8; 32]) -> Result<bytes::Bytes> {
        let key = keys::manifest(&hash_hex(&hash));
        self.fetch_checked(&key, hash, MAX_MANIFEST_BYTES).await
    }

    /// Content `hash` of `size` bytes, read into memory and checked.
    async fn fetch_content(&self, hash: [u8; 32], size: u64) -> Result<bytes::Bytes> {
        let key = keys::content(&hash_hex(&hash));
        self.fetch_checked(&key, hash, size).await
    }

    /// Object `key` of at most `max` bytes, read into memory; missing or
    /// not hashing to `hash` is damage.
    async fn fetch_checked(
        &self,
        key: &object_store::path::Path,
        hash: [u8; 32],
        max: u64,
    ) -> Result<bytes::Bytes> {
        let got = self
            .get_small(key, max)
            .await?
            .ok_or_else(|| missing(key))?;
        if <[u8; 32]>::from(Sha256::digest(&got)) != hash {
            return Err(corrupt(key));
        }
        Ok(got)
    }
}

/// The snapshot of `snapshots` that `wanted` names (empty: the latest).
pub fn choose<'a>(snapshots: &'a [BucketSnapshot], wanted: &str) -> Result<&'a BucketSnapshot> {
    if wanted.is_empty() {
        return snapshots.last().ok_or_else(|| Error::SnapshotNotFound {
            snapshot_id: String::new(),
        });
    }
    let id = crate::snapshots::parse_id(wanted)?;
    snapshots
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| crate::snapshots::not_found(wanted))
}

fn missing(key: &object_store::path::Path) -> Error {
    Error::internal(format!(
        "the object store lacks '{key}', which a snapshot names"
    ))
}

fn corrupt(key: &object_store::path::Path) -> Error {
    Error::internal(format!(
        "the object store's '{key}' does not match its hash"
    ))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("a recovery task failed: {e}")))?
}
