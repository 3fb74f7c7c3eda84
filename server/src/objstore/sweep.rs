//! The sweep: removing the contents (`objects/`) and manifests (`trees/`)
//! that no snapshot record in the bucket references, what deleted
//! sessions and snapshots (and failed uploads) leave behind.
//!
//! # Markers
//!
//! Each upload and each sweep puts a marker `markers/<kind>-<uuid>` in the
//! bucket before it reads anything, rewrites it every third of the lease
//! length while it works, and removes it when done. A marker is *live*
//! while its last write is younger than the lease length, by the bucket's
//! clock: a reader compares the marker's `last_modified` with that of its
//! own marker in the same listing, so the replicas' clocks never enter.
//! Its holder counts it live only while its last successful write was
//! sent less than the lease length less [`skew_margin`] ago (by its own
//! monotonic clock), and once it lapsed, never again. A dead replica's
//! markers expire after the lease length.
//!
//! # The rules
//!
//! 1. An upload writes its marker, then lists the markers, and waits while
//!    any sweep marker is live. Then it reads `sweep/epoch`; an epoch other
//!    than the one its replica's record of verified keys was made under
//!    empties that record. Only then does it look keys up (HEAD, or the
//!    record), send what is missing, and write the snapshot record, which
//!    must land while its marker is live (else the upload fails and
//!    removes the record).
//! 2. A sweep writes its marker, then lists the markers: it goes on only
//!    when no upload marker is live and no other sweep's live marker is as
//!    old as its own (so of two sweeps, the later sees the earlier and
//!    yields: one at a time). It lists every snapshot record and reads
//!    the manifests they reach: the referenced set (when a manifest is
//!    missing or damaged, what it reaches is unknown: the sweep writes a
//!    new epoch and deletes nothing). Then it lists `objects/` and
//!    `trees/` page by page; a key not referenced and older than the
//!    grace period is a candidate. Before each batch of deletes (and
//!    every 1,000 records or manifests read while it gathers the
//!    referenced set, so that an upload waits for one batch at most) it
//!    lists the markers again and stops at the first live upload marker,
//!    and it stops when its own marker lapsed; before its first delete
//!    it writes a new `sweep/epoch`.
//!
//! # Why a sweep never deletes what an upload relies on
//!
//! Let upload `U` write its marker at `u` and list markers at `u' > u`;
//! sweep `S` write its marker at `s` and list markers before each batch
//! of deletes. If `U`'s listing did not show `S`'s marker, then `s > u'`,
//! so each of `S`'s checks comes after `u` and sees `U`'s marker, live
//! until `U`'s record landed (rule 1): `S` deletes nothing meanwhile, and
//! once `U`'s record is in, `S`'s referenced set (listed after `s`)
//! includes what it names. If `U` saw `S`'s marker, it waits until the
//! marker is gone or expired: `S` has stopped deleting (rule 2: it
//! deletes only while its marker is live), and every later check of `S`
//! would see `U`. Each side writes its own marker before reading the
//! other's, so at least one sees the other.
//!
//! What an upload trusts without a HEAD (its replica's record of keys it
//! verified or sent) stays true the same way: every delete of a sweep
//! comes after that sweep wrote a new epoch, and a delete that came after
//! a key was verified came after that upload's marker was gone, so the
//! next upload reads that new epoch (rule 1) and forgets the record.
//!
//! A bucket that loses or damages objects some other way is noticed
//! twice: the record is forgotten after [`VERIFY_EVERY`] in any case (the
//! next upload looks every key up again), and a sweep that finds a
//! referenced key missing or listed at another size (or a manifest that
//! does not match its hash) writes a new epoch, so that every replica's
//! next upload looks its keys up and sends again what is lost.
//!
//! # Cost
//!
//! The referenced set holds a 32-byte hash and a size per content or
//! manifest referenced (about 6 MB per 100,000 of them, with the hash
//! map's overhead); candidates are listed and deleted a page at a time
//! ([`DELETE_BATCH`]), so the rest of the bucket costs no memory.

use super::lease::{renewal_interval, skew_margin};
use super::upload::MAX_RECORD_BYTES;
use super::{keys, Bucket, Key};
use crate::directory::snapshots::mirror::{hash_hex, manifest_children, record_root, StoredChild};
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsfs::{Error, Result};

/// Deletes sent together (one bulk request on S3), after one check of
/// the markers.
pub const DELETE_BATCH: usize = 1000;
/// Manifests read at once while the referenced set is gathered.
pub const READ_CONCURRENCY: usize = 16;
/// The largest manifest read (as recovery reads them).
const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
/// A replica's record of keys known to be in the bucket is forgotten
/// after this long, whatever the epoch: the next upload looks every key
/// up again.
pub const VERIFY_EVERY: Duration = Duration::from_secs(3600);
/// The most keys the record holds (about 50 bytes each); past it, it
/// starts again empty.
pub const MAX_KNOWN: usize = 1_000_000;
/// How often a waiting upload looks whether the sweep it waits for ended.
const WAIT_POLL: Duration = Duration::from_millis(200);

/// What a marker belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerKind {
    Upload,
    Sweep,
}

impl MarkerKind {
    fn prefix(self) -> &'static str {
        match self {
            MarkerKind::Upload => "upload-",
            MarkerKind::Sweep => "sweep-",
        }
    }

    fn of(meta: &ObjectMeta) -> Option<MarkerKind> {
        let name = meta.location.filename()?;
        [MarkerKind::Upload, MarkerKind::Sweep]
            .into_iter()
            .find(|k| name.starts_with(k.prefix()))
    }
}

/// One marker this process holds in the bucket, rewritten while held.
pub struct Marker {
    store: Arc<dyn ObjectStore>,
    key: Key,
    /// When the last write that succeeded was sent.
    fresh: Arc<Mutex<Instant>>,
    /// Set once a rewrite came too late: the marker may have expired.
    lapsed: Arc<AtomicBool>,
    /// How long after its last write others count it.
    ttl: Duration,
    refresher: Option<tokio::task::JoinHandle<()>>,
}

impl Marker {
    /// Writes a marker of `kind` and starts rewriting it.
    pub async fn place(bucket: &Bucket, kind: MarkerKind) -> Result<Marker> {
        let key = keys::marker(&format!("{}{}", kind.prefix(), uuid::Uuid::new_v4()));
        let body = format!("{{\"replica\":{:?}}}", bucket.replica);
        let sent = Instant::now();
        bucket.put_over(&key, body.clone().into()).await?;
        let ttl = bucket.lease_ttl;
        let fresh = Arc::new(Mutex::new(sent));
        let lapsed = Arc::new(AtomicBool::new(false));
        let refresher = {
            let (store, key, fresh, lapsed) = (
                bucket.store.clone(),
                key.clone(),
                fresh.clone(),
                lapsed.clone(),
            );
            let limit = ttl - skew_margin(ttl);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(renewal_interval(ttl));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
                loop {
                    tick.tick().await;
                    let sent = Instant::now();
                    let wrote = store.put(&key, body.clone().into()).await.is_ok();
                    let mut last = fresh.lock().unwrap_or_else(|e| e.into_inner());
                    if last.elapsed() >= limit {
                        lapsed.store(true, Ordering::SeqCst);
                        return;
                    }
                    if wrote {
                        *last = sent;
                    }
                }
            })
        };
        Ok(Marker {
            store: bucket.store.clone(),
            key,
            fresh,
            lapsed,
            ttl,
            refresher: Some(refresher),
        })
    }

    /// Whether every other replica still counts this marker live.
    pub fn live(&self) -> bool {
        let last = *self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        !self.lapsed.load(Ordering::SeqCst) && last.elapsed() < self.ttl - skew_margin(self.ttl)
    }

    /// Removes the marker from the bucket.
    pub async fn remove(mut self) {
        if let Some(refresher) = self.refresher.take() {
            refresher.abort();
        }
        let _ = self.store.delete(&self.key).await;
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        // Dropped without `remove` (a failure): removed in the
        // background; if even that fails, it expires.
        if let Some(refresher) = self.refresher.take() {
            refresher.abort();
            let (store, key) = (self.store.clone(), self.key.clone());
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let _ = store.delete(&key).await;
                });
            }
        }
    }
}

/// The markers as one listing showed them, beside one's own.
struct Markers {
    /// Live markers of others, with their kind and last write.
    others: Vec<(MarkerKind, ObjectMeta)>,
    /// One's own marker as listed: its `last_modified` is the bucket's
    /// time of its last write.
    own: ObjectMeta,
    /// Expired markers: their holders died.
    expired: Vec<Key>,
}

/// How long before `later`'s last write `earlier`'s was (zero if after).
pub(super) fn age(later: &ObjectMeta, earlier: &ObjectMeta) -> Duration {
    (later.last_modified - earlier.last_modified)
        .to_std()
        .unwrap_or_default()
}

impl Bucket {
    /// Lists the markers beside `own`: the others that are live.
    async fn markers(&self, own: &Marker) -> Result<Markers> {
        let all = self.list(&keys::markers()).await?;
        let own_meta = all
            .iter()
            .find(|m| m.location == own.key)
            .cloned()
            .ok_or_else(|| Error::Unavailable {
                message: format!(
                    "the object store {} lost this replica's marker '{}'",
                    self.url, own.key
                ),
            })?;
        let (others, expired): (Vec<_>, Vec<_>) = all
            .into_iter()
            .filter(|m| m.location != own.key)
            .partition(|m| age(&own_meta, m) < self.lease_ttl);
        Ok(Markers {
            others: others
                .into_iter()
                .filter_map(|m| Some((MarkerKind::of(&m)?, m)))
                .collect(),
            own: own_meta,
            expired: expired.into_iter().map(|m| m.location).collect(),
        })
    }

    /// The sweep epoch the bucket holds (`None`: no sweep deleted yet).
    async fn sweep_epoch(&self) -> Result<Option<bytes::Bytes>> {
        self.get_small(&keys::sweep_epoch(), MAX_RECORD_BYTES).await
    }

    /// Rule 1: places an upload's marker, waits while a sweep is live, and
    /// brings this replica's record of verified keys up to the bucket's
    /// epoch. The upload holds the marker until its snapshot record is in.
    pub(super) async fn begin_upload(&self) -> Result<(Marker, KnownEpoch)> {
        let marker = Marker::place(self, MarkerKind::Upload).await?;
        // A live sweep stops at its next batch; a dead one's marker
        // expires within the lease length.
        let deadline = Instant::now() + self.lease_ttl * 3 + Duration::from_secs(30);
        loop {
            let seen = self.markers(&marker).await?;
            if !seen.others.iter().any(|(k, _)| *k == MarkerKind::Sweep) {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Unavailable {
                    message: format!(
                        "a sweep of the object store {} did not yield to this upload in time; try again",
                        self.url
                    ),
                });
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
        let epoch = self.sweep_epoch().await?;
        let known = self.known_since(epoch);
        Ok((marker, known))
    }

    /// Sweeps the bucket (rule 2), keeping unreferenced keys younger than
    /// `grace`. A sweep that yields to an upload or another sweep stops
    /// early and says so.
    pub async fn sweep(&self, grace: Duration) -> Result<SweepReport> {
        let marker = Marker::place(self, MarkerKind::Sweep).await?;
        let result = self.sweep_marked(&marker, grace).await;
        marker.remove().await;
        result
    }

    async fn sweep_marked(&self, marker: &Marker, grace: Duration) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let seen = self.markers(marker).await?;
        // Not tied to contents: done whatever else is under way.
        match self.drop_abandoned_handbacks(&seen.own).await {
            Ok(removed) => report.handbacks_removed = removed,
            Err(e) => {
                tracing::warn!(error = %e, "abandoned hand-back requests could not be removed")
            }
        }
        if let Some(why) = yield_to(&seen) {
            report.yielded = Some(why);
            return Ok(report);
        }
        for dead in &seen.expired {
            self.remove_or_retry(dead).await;
        }
        let start = seen.own;
        let Some(referenced) = self.referenced(marker, &mut report).await? else {
            return Ok(report);
        };
        report.referenced = referenced.len();
        if report.missing > 0 || report.unreadable > 0 {
            // What the lost or damaged manifests reach is unknown: nothing
            // is deleted until their holders sent them again.
            tracing::warn!(
                missing = report.missing,
                unreadable = report.unreadable,
                "snapshot records or manifests in the object store are missing or damaged; this sweep deletes nothing, and every replica's next upload looks its keys up again"
            );
            self.new_epoch().await?;
            return Ok(report);
        }
        let mut epoch_written = false;
        let mut found = 0;
        for (prefix, is_manifest) in [(keys::contents(), false), (keys::manifests(), true)] {
            let mut listing = self.store.list(Some(&prefix));
            let mut batch = Vec::new();
            loop {
                let next = listing
                    .try_next()
                    .await
                    .map_err(|e| self.failed("list", &prefix, e))?;
                if let Some(meta) = &next {
                    let Some(hash) = meta
                        .location
                        .filename()
                        .and_then(|n| <[u8; 32]>::try_from(hex::decode(n).ok()?).ok())
                    else {
                        continue;
                    };
                    match referenced.size_of(is_manifest, &hash) {
                        // Held at another size: damaged, counted missing.
                        Some(size) => found += usize::from(size == meta.size),
                        None if age(&start, meta) < grace => report.kept_young += 1,
                        None => batch.push(meta.location.clone()),
                    }
                }
                if batch.len() >= DELETE_BATCH || (next.is_none() && !batch.is_empty()) {
                    if self.must_yield(marker, &mut report).await? {
                        return Ok(report);
                    }
                    if !epoch_written {
                        self.new_epoch().await?;
                        epoch_written = true;
                    }
                    report.deleted += self
                        .delete_batch(marker, std::mem::take(&mut batch))
                        .await?;
                }
                if next.is_none() {
                    break;
                }
            }
        }
        report.missing = referenced.len() - found;
        if report.missing > 0 {
            tracing::warn!(missing = report.missing, "the object store lacks contents or manifests that snapshots reference, or holds them damaged; every replica's next upload looks its keys up again");
            self.new_epoch().await?;
        }
        Ok(report)
    }

    /// How many keys the bucket holds: one listing of all of it.
    pub async fn count_keys(&self) -> Result<usize> {
        let mut listing = self.store.list(None);
        let mut n = 0;
        while listing
            .try_next()
            .await
            .map_err(|e| self.failed("list", &Key::from(""), e))?
            .is_some()
        {
            n += 1;
        }
        Ok(n)
    }

    /// Whether the sweep holding `marker` must stop for an upload or an
    /// older sweep (said in `report`).
    async fn must_yield(&self, marker: &Marker, report: &mut SweepReport) -> Result<bool> {
        let seen = self.markers(marker).await?;
        report.yielded = yield_to(&seen);
        Ok(report.yielded.is_some())
    }

    /// Writes a new sweep epoch: every replica's next upload forgets what
    /// it knew to be in the bucket.
    async fn new_epoch(&self) -> Result<()> {
        self.put_over(
            &keys::sweep_epoch(),
            uuid::Uuid::new_v4().to_string().into(),
        )
        .await
    }

    /// Deletes `batch` while `marker` is live; how many went.
    async fn delete_batch(&self, marker: &Marker, batch: Vec<Key>) -> Result<usize> {
        if !marker.live() {
            return Err(Error::Unavailable {
                message: format!(
                    "the sweep's marker in the object store {} could not be kept fresh; stopped",
                    self.url
                ),
            });
        }
        let n = batch.len();
        self.delete_keys(batch).await?;
        Ok(n)
    }

    /// Every content and manifest a snapshot record in the bucket reaches.
    /// `None` when it yielded to an upload or another sweep (checked
    /// every [`DELETE_BATCH`] records or manifests, so that an upload
    /// waits for a batch, not for the whole gathering).
    async fn referenced(
        &self,
        marker: &Marker,
        report: &mut SweepReport,
    ) -> Result<Option<Referenced>> {
        let mut referenced = Referenced::default();
        let mut roots = Vec::new();
        let sessions = keys::sessions();
        let mut listing = self.store.list(Some(&sessions));
        while let Some(meta) = listing
            .try_next()
            .await
            .map_err(|e| self.failed("list", &sessions, e))?
        {
            let parts: Vec<_> = meta.location.parts().collect();
            let is_record = parts.len() == 4
                && parts[2].as_ref() == "snapshots"
                && parts[3].as_ref().ends_with(".json");
            if !is_record {
                continue;
            }
            if report.snapshots % DELETE_BATCH == DELETE_BATCH - 1
                && self.must_yield(marker, report).await?
            {
                return Ok(None);
            }
            // Removed since it was listed: nothing to keep.
            let Some(raw) = self.get_small(&meta.location, MAX_RECORD_BYTES).await? else {
                continue;
            };
            report.snapshots += 1;
            match record_root(&raw) {
                Ok(head) => roots.push(head.root),
                Err(e) => {
                    tracing::warn!(key = %meta.location, error = %e, "a snapshot record in the object store is unreadable");
                    report.unreadable += 1;
                }
            }
        }
        let mut pending: Vec<[u8; 32]> = roots
            .into_iter()
            .filter(|root| referenced.insert(true, *root, 0))
            .collect();
        while !pending.is_empty() {
            if self.must_yield(marker, report).await? {
                return Ok(None);
            }
            let chunk = pending.split_off(pending.len().saturating_sub(DELETE_BATCH));
            let read: Vec<([u8; 32], Option<bytes::Bytes>)> = futures::stream::iter(chunk)
                .map(|hash| async move {
                    let key = keys::manifest(&hash_hex(&hash));
                    Ok::<_, Error>((hash, self.get_small(&key, MAX_MANIFEST_BYTES).await?))
                })
                .buffer_unordered(READ_CONCURRENCY)
                .try_collect()
                .await?;
            for (hash, raw) in read {
                let Some(raw) = raw else {
                    report.missing += 1;
                    continue;
                };
                let children = (<[u8; 32]>::from(Sha256::digest(&raw)) == hash)
                    .then(|| manifest_children(&raw))
                    .flatten();
                let Some(children) = children else {
                    tracing::warn!(manifest = %hash_hex(&hash), "a manifest in the object store is damaged");
                    report.unreadable += 1;
                    continue;
                };
                referenced.insert(true, hash, raw.len() as u64);
                for child in children {
                    match child {
                        StoredChild::Content { hash, size } => {
                            referenced.insert(false, hash, size);
                        }
                        StoredChild::Manifest(tree) => {
                            if referenced.insert(true, tree, 0) {
                                pending.push(tree);
                            }
                        }
                    }
                }
            }
        }
        Ok(Some(referenced))
    }
}

/// Why a sweep yields, if it must.
fn yield_to(seen: &Markers) -> Option<String> {
    for (kind, meta) in &seen.others {
        match kind {
            MarkerKind::Upload => {
                return Some(format!("an upload is in flight ({})", meta.location))
            }
            MarkerKind::Sweep if meta.last_modified <= seen.own.last_modified => {
                return Some(format!("another sweep runs ({})", meta.location))
            }
            MarkerKind::Sweep => {}
        }
    }
    None
}

/// Contents and manifests by hash, with their sizes (a manifest's is 0
/// until it was read).
#[derive(Default)]
struct Referenced {
    contents: HashMap<[u8; 32], u64>,
    manifests: HashMap<[u8; 32], u64>,
}

impl Referenced {
    fn of(&mut self, is_manifest: bool) -> &mut HashMap<[u8; 32], u64> {
        if is_manifest {
            &mut self.manifests
        } else {
            &mut self.contents
        }
    }

    /// Records `hash` at `size`; whether it was new.
    fn insert(&mut self, is_manifest: bool, hash: [u8; 32], size: u64) -> bool {
        self.of(is_manifest).insert(hash, size).is_none()
    }

    fn size_of(&self, is_manifest: bool, hash: &[u8; 32]) -> Option<u64> {
        let map = if is_manifest {
            &self.manifests
        } else {
            &self.contents
        };
        map.get(hash).copied()
    }

    fn len(&self) -> usize {
        self.contents.len() + self.manifests.len()
    }
}

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Snapshot records read.
    pub snapshots: usize,
    /// Contents and manifests they reach.
    pub referenced: usize,
    /// Referenced keys the bucket lacks or holds at another size.
    pub missing: usize,
    /// Records and manifests that could not be parsed.
    pub unreadable: usize,
    /// Unreferenced keys deleted.
    pub deleted: usize,
    /// Unreferenced keys kept, younger than the grace period.
    pub kept_young: usize,
    /// Set when the sweep stopped for an upload or another sweep.
    pub yielded: Option<String>,
    /// Hand-back requests nobody renewed for long, removed
    /// ([`super::handback::abandoned_after`]).
    pub handbacks_removed: usize,
}

/// This replica's record of keys verified to be in the bucket: what an
/// upload need not look up again.
#[derive(Default)]
pub struct Known {
    /// The sweep epoch it was made under (`None`: none yet).
    epoch: Option<Option<bytes::Bytes>>,
    since: Option<Instant>,
    contents: HashSet<([u8; 32], u64)>,
    manifests: HashSet<([u8; 32], u64)>,
}

/// The epoch one upload works under: it adds to the record only while
/// the record is still of that epoch.
pub struct KnownEpoch(Option<bytes::Bytes>);

impl Bucket {
    /// Brings the record to `epoch`, forgetting it if it was of another
    /// or is older than [`VERIFY_EVERY`].
    fn known_since(&self, epoch: Option<bytes::Bytes>) -> KnownEpoch {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let stale = known.since.is_none_or(|t| t.elapsed() > VERIFY_EVERY);
        if stale || known.epoch.as_ref() != Some(&epoch) {
            *known = Known {
                epoch: Some(epoch.clone()),
                since: Some(Instant::now()),
                ..Known::default()
            };
        }
        KnownEpoch(epoch)
    }

    /// Of `keys`, those the record does not hold.
    pub(super) fn unknown(
        &self,
        is_manifest: bool,
        keys: Vec<([u8; 32], u64)>,
    ) -> Vec<([u8; 32], u64)> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let set = if is_manifest {
            &known.manifests
        } else {
            &known.contents
        };
        keys.into_iter().filter(|k| !set.contains(k)).collect()
    }

    /// Records `keys` as verified in the bucket under `epoch`.
    pub(super) fn remember(
        &self,
        epoch: &KnownEpoch,
        is_manifest: bool,
        keys: impl IntoIterator<Item = ([u8; 32], u64)>,
    ) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.epoch.as_ref() != Some(&epoch.0) {
            return;
        }
        if known.contents.len() + known.manifests.len() >= MAX_KNOWN {
            known.contents.clear();
            known.manifests.clear();
        }
        let set = if is_manifest {
            &mut known.manifests
        } else {
            &mut known.contents
        };
        set.extend(keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn bucket(dir: &Path, ttl: Duration) -> Arc<Bucket> {
        let url = format!("file://{}", dir.display());
        Arc::new(Bucket::open(&url, "r0".into(), ttl).unwrap())
    }

    /// An unreferenced content, written now.
    async fn orphan(bucket: &Bucket, fill: &str) -> Key {
        let key = keys::content(&fill.repeat(32));
        bucket.put_over(&key, "orphan".into()).await.unwrap();
        key
    }

    fn held(dir: &Path, key: &Key) -> bool {
        dir.join(key.as_ref()).is_file()
    }

    fn backdate(path: &Path, by: Duration) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - by)
            .unwrap();
    }

    #[tokio::test]
    async fn a_sweep_yields_to_a_live_upload_and_frees_the_unreferenced_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let b = bucket(dir.path(), Duration::from_secs(30));
        let x = orphan(&b, "ab").await;
        // The upload found `x` there (so will not send it) and is about
        // to name it in a snapshot record.
        let (marker, epoch) = b.begin_upload().await.unwrap();
        assert_eq!(
            b.lacking(&epoch, false, vec![([0xab; 32], 6)])
                .await
                .unwrap(),
            vec![]
        );
        let report = b.sweep(Duration::ZERO).await.unwrap();
        assert!(
            report.yielded.as_deref().unwrap().contains("upload"),
            "{report:?}"
        );
        assert!(
            held(dir.path(), &x),
            "the sweep deleted what an upload relies on"
        );
        marker.remove().await;
        let report = b.sweep(Duration::ZERO).await.unwrap();
        assert_eq!((report.deleted, report.yielded), (1, None));
        assert!(!held(dir.path(), &x));
        assert!(
            b.list(&keys::markers()).await.unwrap().is_empty(),
            "markers removed"
        );
    }

    #[tokio::test]
    async fn an_upload_waits_while_a_sweep_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let b = bucket(dir.path(), Duration::from_secs(30));
        let sweeping = Marker::place(&b, MarkerKind::Sweep).await.unwrap();
        let upload = tokio::spawn({
            let b = b.clone();
            async move { b.begin_upload().await.map(|(m, _)| m) }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            !upload.is_finished(),
            "the upload went on beside a live sweep"
        );
        sweeping.remove().await;
        let marker = tokio::time::timeout(Duration::from_secs(30), upload)
            .await
            .expect("the upload goes on once the sweep is gone")
            .unwrap()
            .unwrap();
        marker.remove().await;
    }

    #[tokio::test]
    async fn a_dead_replicas_marker_holds_sweeps_off_only_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let b = bucket(dir.path(), Duration::from_secs(2));
        let x = orphan(&b, "cd").await;
        let dead = keys::marker("upload-of-a-dead-replica");
        b.put_over(&dead, "{}".into()).await.unwrap();
        let report = b.sweep(Duration::ZERO).await.unwrap();
        assert!(report.yielded.is_some(), "{report:?}");
        assert!(held(dir.path(), &x));
        // Not rewritten for longer than the lease: expired.
        backdate(&dir.path().join(dead.as_ref()), Duration::from_secs(60));
        let report = b.sweep(Duration::ZERO).await.unwrap();
        assert_eq!((report.deleted, report.yielded), (1, None));
        assert!(!held(dir.path(), &x));
        assert!(!held(dir.path(), &dead), "the expired marker is removed");
    }

    #[tokio::test]
    async fn unreferenced_keys_younger_than_the_grace_period_stay() {
        let dir = tempfile::tempdir().unwrap();
        let b = bucket(dir.path(), Duration::from_secs(30));
        let x = orphan(&b, "ef").await;
        let report = b.sweep(Duration::from_secs(3600)).await.unwrap();
        assert_eq!((report.deleted, report.kept_young), (0, 1));
        assert!(held(dir.path(), &x));
        backdate(&dir.path().join(x.as_ref()), Duration::from_secs(7200));
        let report = b.sweep(Duration::from_secs(3600)).await.unwrap();
        assert_eq!((report.deleted, report.kept_young), (1, 0));
    }

    #[tokio::test]
    async fn after_a_sweep_deleted_uploads_look_up_again_what_they_knew() {
        let dir = tempfile::tempdir().unwrap();
        let b = bucket(dir.path(), Duration::from_secs(30));
        orphan(&b, "12").await;
        let wanted = vec![([0x12; 32], 6)];
        let (marker, epoch) = b.begin_upload().await.unwrap();
        assert_eq!(
            b.lacking(&epoch, false, wanted.clone()).await.unwrap(),
            vec![]
        );
        assert_eq!(b.unknown(false, wanted.clone()), vec![], "remembered");
        marker.remove().await;
        assert_eq!(b.sweep(Duration::ZERO).await.unwrap().deleted, 1);
        let (marker, epoch) = b.begin_upload().await.unwrap();
        assert_eq!(b.unknown(false, wanted.clone()), wanted, "forgotten");
        assert_eq!(
            b.lacking(&epoch, false, wanted.clone()).await.unwrap(),
            wanted
        );
        marker.remove().await;
    }
}
