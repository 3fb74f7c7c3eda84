//! Snapshots of a MEMORY session: images of the tree, held in memory
//! (or, for a session recovered from the object store, its older
//! snapshots kept there and fetched when used).

use super::ImageEntry;
use super::{MemoryBackend, MemoryImage};
use crate::backend::Content;
use crate::directory::snapshots::mirror::{manifests_of, snapshot_record, LooseEntry};
use crate::quota;
use crate::snapshots::fork::{abandoned, EntryAttributes, FileSource, Origin, OriginSource, Visit};
use crate::snapshots::{
    new_id, not_found, parse_id, LooseSnapshot, Restored, SnapshotEntry, SnapshotFiles,
    SnapshotInfo, SnapshotMirror, SnapshotStore,
};
use crate::workspace::Workspace;
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Result};

pub struct MemorySnapshots {
    workspace: Arc<Workspace<MemoryBackend>>,
    /// Oldest first.
    snapshots: Mutex<Vec<(SnapshotInfo, Image)>>,
    /// Where each snapshot is mirrored (`--object-store`).
    mirror: Option<Arc<dyn SnapshotMirror>>,
    /// The hash of each file content the last mirrored snapshot held, by
    /// its bytes' address and length (the `Bytes` kept, so that the
    /// address is not reused): an unchanged file is not hashed again.
    hashes: Mutex<Hashes>,
}

/// A snapshot's image: held here, or kept in the object store (an older
/// snapshot of a session recovered from it) and fetched each time it is
/// used, so that listing it costs no memory: a use holds at most one
/// image (within the session's byte budget) for as long as it runs.
#[derive(Clone)]
enum Image {
    Held(Arc<MemoryImage>),
    Stored(Fetch),
}

/// Fetches a stored snapshot's image from the object store.
pub(crate) type Fetch =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<MemoryImage>> + Send + Sync>;

type Hash = [u8; 32];
/// Content hashes by their bytes' address and length.
type Hashes = HashMap<(usize, usize), (Bytes, Hash)>;

impl MemorySnapshots {
    pub fn new(workspace: Arc<Workspace<MemoryBackend>>) -> Self {
        MemorySnapshots {
            workspace,
            snapshots: Mutex::new(Vec::new()),
            mirror: None,
            hashes: Mutex::new(HashMap::new()),
        }
    }

    /// The same store, each snapshot mirrored to `mirror` before it is
    /// listed.
    pub(crate) fn mirrored(mut self, mirror: Option<Arc<dyn SnapshotMirror>>) -> Self {
        self.mirror = mirror;
        self
    }

    /// Lists `image` as snapshot `info`, taken before (a recovered
    /// session's snapshot, as the bucket holds it).
    pub(crate) fn with_snapshot(self, info: SnapshotInfo, image: Arc<MemoryImage>) -> Self {
        self.snapshots().push((info, Image::Held(image)));
        self
    }

    /// Lists snapshot `info`, kept in the object store: `fetch` brings its
    /// image each time it is used.
    pub(crate) fn with_stored(self, info: SnapshotInfo, fetch: Fetch) -> Self {
        self.snapshots().push((info, Image::Stored(fetch)));
        self
    }

    /// Captures the workspace as snapshot `tag`, listed here only.
    pub(crate) async fn take_here(&self, tag: &str) -> Result<(SnapshotInfo, Arc<MemoryImage>)> {
        let image = self.workspace.exclusive(|b| Ok(b.image())).await?;
        let info = SnapshotInfo {
            id: new_id(),
            tag: tag.to_string(),
            created_at: SystemTime::now(),
            file_count: image.file_count(),
            total_bytes: image.total_bytes(),
        };
        Ok((info, Arc::new(image)))
    }

    /// Sends snapshot `info` of `image` to the mirror, if any.
    async fn send(&self, info: &SnapshotInfo, image: &Arc<MemoryImage>) -> Result<()> {
        let Some(mirror) = &self.mirror else {
            return Ok(());
        };
        let known = std::mem::take(&mut *self.hashes.lock().unwrap_or_else(|e| e.into_inner()));
        let (info, image) = (info.clone(), image.clone());
        let (loose, hashes) = tokio::task::spawn_blocking(move || loose(&info, &image, known))
            .await
            .map_err(crate::snapshots::fork::task_failed)??;
        mirror.clone().mirror_loose(Arc::new(loose)).await?;
        *self.hashes.lock().unwrap_or_else(|e| e.into_inner()) = hashes;
        Ok(())
    }

    fn snapshots(&self) -> std::sync::MutexGuard<'_, Vec<(SnapshotInfo, Image)>> {
        self.snapshots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Snapshot `id` as listed, its image held or stored.
    fn listed(&self, id: &str) -> Result<(SnapshotInfo, Image)> {
        let key = parse_id(id)?;
        self.snapshots()
            .iter()
            .find(|(info, _)| info.id == key)
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// Snapshot `id`'s image, fetched if it is stored.
    async fn image(&self, id: &str) -> Result<(SnapshotInfo, Arc<MemoryImage>)> {
        let (info, image) = self.listed(id)?;
        let image = match image {
            Image::Held(image) => image,
            Image::Stored(fetch) => Arc::new(fetch().await?),
        };
        Ok((info, image))
    }
}

#[async_trait]
impl SnapshotStore for MemorySnapshots {
    async fn snapshot(&self, tag: &str) -> Result<SnapshotInfo> {
        let (info, image) = self.take_here(tag).await?;
        // Listed only once the mirror holds it: a failed upload leaves
        // nothing.
        self.send(&info, &image).await?;
        self.snapshots().push((info.clone(), Image::Held(image)));
        Ok(info)
    }

    async fn mirror_taken(&self, id: &str) -> Option<Result<()>> {
        self.mirror.as_ref()?;
        let sent = async {
            match self.listed(id)? {
                (info, Image::Held(image)) => self.send(&info, &image).await,
                // Fetched from there.
                (_, Image::Stored(_)) => Ok(()),
            }
        };
        Some(sent.await)
    }

    async fn restore(&self, id: &str, at: &CanonicalPath) -> Result<Restored> {
        self.workspace
            .writable_for(at.as_str(), "restore a snapshot")?;
        let (_, image) = self.image(id).await?;
        if at.is_root() {
            crate::snapshots::check_restore(
                self.workspace.limits(),
                image
                    .entries()
                    .map(|(path, entry)| (path, entry.data.as_ref().map(|d| d.len() as u64))),
            )?;
        }
        let sizes = || {
            image
                .subtree(at)
                .map(|(path, entry)| (path, entry.data.as_ref().map(|d| d.len() as u64)))
        };
        let restored = sizes()
            .filter_map(|(_, size)| size)
            .fold(Restored::default(), |r, size| Restored {
                file_count: r.file_count + 1,
                total_bytes: r.total_bytes + size,
            });
        let limits = *self.workspace.limits();
        let at = at.clone();
        self.workspace
            .exclusive(move |b| {
                let now = match quota::limited(&limits) && !at.is_root() {
                    true => quota::usage(b, &CanonicalPath::root())?,
                    false => quota::Usage::default(),
                };
                b.restore_subtree(&image, &at, |files| {
                    let removed =
                        files
                            .iter()
                            .fold(quota::Usage::default(), |u, (_, size)| quota::Usage {
                                files: u.files + 1,
                                bytes: u.bytes + size,
                            });
                    let sizes = image
                        .subtree(&at)
                        .map(|(path, entry)| (path, entry.data.as_ref().map(|d| d.len() as u64)));
                    crate::snapshots::check_restore_at(&limits, &at, now, removed, sizes)
                })
            })
            .await?;
        Ok(restored)
    }

    async fn list(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.snapshots().iter().map(|(i, _)| i.clone()).collect())
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let key = parse_id(id)?;
        let newest_left = {
            let snapshots = self.snapshots();
            if !snapshots.iter().any(|(info, _)| info.id == key) {
                return Err(not_found(id));
            }
            snapshots
                .iter()
                .rev()
                .find(|(info, _)| info.id != key)
                .map(|(info, _)| info.id.clone())
        };
        // The mirror first: when it is unreachable, nothing changes.
        if let Some(mirror) = &self.mirror {
            mirror.forget_snapshot(&key, newest_left.as_deref()).await?;
        }
        self.snapshots().retain(|(info, _)| info.id != key);
        Ok(())
    }

    async fn fork_origin(&self, id: &str) -> Result<Origin> {
        let (info, image) = self.image(id).await?;
        Ok(Origin::new(info, ImageSource(image)))
    }

    async fn files(&self, id: &str) -> Result<SnapshotFiles> {
        let (_, image) = self.image(id).await?;
        let entries: Vec<SnapshotEntry> = image
            .entries()
            .map(|(path, entry)| match &entry.data {
                None => SnapshotEntry::Directory {
                    path,
                    permissions: entry.permissions,
                },
                Some(bytes) => SnapshotEntry::File {
                    path,
                    size: bytes.len() as u64,
                    permissions: entry.permissions,
                    modified: entry.modified,
                    content: Content::Memory(bytes.clone()),
                },
            })
            .collect();
        Ok(Box::new(entries.into_iter().map(Ok)))
    }
}

/// A MEMORY snapshot as a fork's origin: its image, shared.
struct ImageSource(Arc<MemoryImage>);

impl OriginSource for ImageSource {
    fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        for (path, entry) in self.0.entries() {
            let attributes = EntryAttributes {
                permissions: entry.permissions,
                modified: entry.data.is_some().then_some(entry.modified),
            };
            let file = entry
                .data
                .as_ref()
                .map(|d| (d.len() as u64, FileSource::Bytes(d)));
            f(&path, attributes, file)?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// `origin`'s snapshot as a memory image: shared as it is from a MEMORY
/// origin, read in from another (its bytes were checked against the
/// fork's budget first). Blocking.
pub(crate) fn image_of(origin: &Origin, cancel: &AtomicBool) -> Result<Arc<MemoryImage>> {
    if let Some(ImageSource(image)) = origin.source::<ImageSource>() {
        return Ok(image.clone());
    }
    let mut entries = Vec::new();
    let now = SystemTime::now();
    origin.for_each(&mut |path, attributes, file| {
        if cancel.load(Ordering::Relaxed) {
            return Err(abandoned());
        }
        let data = match file {
            None => None,
            Some((_, FileSource::Bytes(b))) => Some(b.clone()),
            Some((_, FileSource::Object(p))) => {
                Some(Bytes::from(std::fs::read(p).map_err(store_error)?))
            }
        };
        let entry = ImageEntry {
            data,
            permissions: attributes.permissions,
            modified: attributes.modified.unwrap_or(now),
        };
        entries.push((path.as_str().to_string(), entry));
        Ok(())
    })?;
    Ok(Arc::new(entries.into_iter().collect()))
}

fn store_error(e: std::io::Error) -> wsfs::Error {
    wsfs::Error::io_while(e, "reading the origin's snapshot store")
}

/// Snapshot `info` of `image` laid out for the mirror, and the hashes of
/// its contents by address (those in `known` not hashed again). Blocking.
fn loose(
    info: &SnapshotInfo,
    image: &MemoryImage,
    mut known: Hashes,
) -> Result<(LooseSnapshot, Hashes)> {
    use sha2::{Digest, Sha256};
    let mut hashes = HashMap::new();
    let mut contents = Vec::new();
    let mut entries = Vec::new();
    for (path, entry) in image.entries() {
        let file = entry.data.as_ref().map(|data| {
            let at = (data.as_ptr() as usize, data.len());
            let hash = match known.remove(&at) {
                Some((_, hash)) => hash,
                None => Sha256::digest(data).into(),
            };
            hashes.insert(at, (data.clone(), hash));
            contents.push((hash, data.clone()));
            (hash, data.len() as u64, entry.modified)
        });
        entries.push((path, file, entry.permissions));
    }
    let (root, manifests) =
        manifests_of(entries.iter().map(|(path, file, permissions)| LooseEntry {
            path: path.as_str(),
            file: *file,
            permissions: *permissions,
        }));
    let snapshot = LooseSnapshot {
        id: info.id.clone(),
        record: snapshot_record(info, &root)?,
        manifests,
        contents,
    };
    Ok((snapshot, hashes))
}
