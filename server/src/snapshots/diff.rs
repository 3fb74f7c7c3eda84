//! DiffSnapshot: what changed in the live workspace since a snapshot.
//!
//! Both sides are read as entry lists (the snapshot's files through its
//! store, the live tree through one deep List), paired by path; a file on
//! both sides with the same size is then compared byte for byte, streaming
//! both contents a chunk at a time, so a diff costs the bytes of same-size
//! files in time and a few chunks in memory. The answer holds at most
//! [`MAX_DIFF_CHANGES`] changes, in path order, with `truncated` past that.
//! The live side is read as it is during the call: a change made meanwhile
//! may or may not show.

use super::{SnapshotEntry, SnapshotStore};
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::sync::Arc;
use wsfs::{ByteRange, CanonicalPath, Error, FileKind, Filesystem, Permissions, Result};

/// Changes one answer holds at most.
pub const MAX_DIFF_CHANGES: usize = 10_000;

/// How a path differs from the snapshot to the live workspace. Declared
/// in the order changes to one path are listed: what went, then what came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DiffKind {
    /// In the snapshot, not in the live workspace.
    Deleted,
    /// In the live workspace, not in the snapshot.
    Added,
    /// A file on both sides with other contents or other permission bits,
    /// or a directory with other bits.
    Modified,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub kind: DiffKind,
    pub path: CanonicalPath,
    pub directory: bool,
}

/// One side's entries: a file's size (`None` for a directory), and the
/// entry's bits.
type Entries = BTreeMap<CanonicalPath, (Option<u64>, Permissions)>;

/// The differences between snapshot `id` and the workspace `fs` holds now,
/// in path order, and whether there were more than [`MAX_DIFF_CHANGES`].
pub async fn diff(
    store: &Arc<dyn SnapshotStore>,
    fs: &Arc<dyn Filesystem>,
    id: &str,
) -> Result<(Vec<Difference>, bool)> {
    let before = snapshot_entries(store, id).await?;
    let now = live_entries(fs).await?;
    let mut found: Vec<Difference> = Vec::new();
    let mut same_size = BTreeSet::new();
    for (path, (was, was_bits)) in &before {
        let Some((is, is_bits)) = now.get(path) else {
            found.push(change(DiffKind::Deleted, path, was.is_none()));
            continue;
        };
        let same_bits = was_bits == is_bits;
        match (was, is) {
            (Some(a), Some(b)) if a == b && same_bits => {
                same_size.insert(path.clone());
            }
            (Some(_), Some(_)) => found.push(change(DiffKind::Modified, path, false)),
            (None, None) if same_bits => {}
            (None, None) => found.push(change(DiffKind::Modified, path, true)),
            // A file that became a directory, or the other way round.
            (was, is) => {
                found.push(change(DiffKind::Deleted, path, was.is_none()));
                found.push(change(DiffKind::Added, path, is.is_none()));
            }
        }
    }
    for (path, (is, _)) in &now {
        if !before.contains_key(path) {
            found.push(change(DiffKind::Added, path, is.is_none()));
        }
    }
    if !same_size.is_empty() {
        for path in differing_contents(store, fs, id, &same_size).await? {
            found.push(change(DiffKind::Modified, &path, false));
        }
    }
    found.sort_by(|a, b| (&a.path, a.kind).cmp(&(&b.path, b.kind)));
    let truncated = found.len() > MAX_DIFF_CHANGES;
    found.truncate(MAX_DIFF_CHANGES);
    Ok((found, truncated))
}

fn change(kind: DiffKind, path: &CanonicalPath, directory: bool) -> Difference {
    Difference {
        kind,
        path: path.clone(),
        directory,
    }
}

/// Walks snapshot `id` on the blocking pool, handing each entry to `each`
/// with `state` until it says stop, and gives `state` back.
async fn walk_snapshot<S, F>(
    store: &Arc<dyn SnapshotStore>,
    id: &str,
    mut state: S,
    mut each: F,
) -> Result<S>
where
    S: Send + 'static,
    F: FnMut(&mut S, SnapshotEntry) -> Result<ControlFlow<()>> + Send + 'static,
{
    let files = store.files(id).await?;
    tokio::task::spawn_blocking(move || {
        for entry in files {
            if each(&mut state, entry?)?.is_break() {
                break;
            }
        }
        Ok(state)
    })
    .await
    .map_err(|e| Error::internal(format!("reading the snapshot failed: {e}")))?
}

async fn snapshot_entries(store: &Arc<dyn SnapshotStore>, id: &str) -> Result<Entries> {
    let mut entries = walk_snapshot(store, id, Entries::new(), |entries, entry| {
        let bits = entry.permissions();
        match entry {
            SnapshotEntry::Directory { path, .. } => entries.insert(path, (None, bits)),
            SnapshotEntry::File { path, size, .. } => entries.insert(path, (Some(size), bits)),
        };
        Ok(ControlFlow::Continue(()))
    })
    .await?;
    // The root itself is never a difference.
    entries.remove(&CanonicalPath::root());
    Ok(entries)
}

async fn live_entries(fs: &Arc<dyn Filesystem>) -> Result<Entries> {
    let listing = fs.list(&CanonicalPath::root(), u32::MAX).await?;
    if listing.truncated {
        return Err(Error::QuotaExceeded {
            message:
                "the workspace holds more entries than one listing returns; it cannot be compared"
                    .to_string(),
        });
    }
    Ok(listing
        .entries
        .into_iter()
        .filter_map(|m| match m.kind {
            FileKind::File => Some((m.path, (Some(m.size), m.permissions))),
            FileKind::Directory => Some((m.path, (None, m.permissions))),
            // Snapshots keep no symlinks: neither does the comparison.
            FileKind::Symlink => None,
        })
        .collect())
}

/// The paths of `candidates` whose live bytes differ from the snapshot's.
async fn differing_contents(
    store: &Arc<dyn SnapshotStore>,
    fs: &Arc<dyn Filesystem>,
    id: &str,
    candidates: &BTreeSet<CanonicalPath>,
) -> Result<Vec<CanonicalPath>> {
    // The snapshot's contents come from a blocking iterator: it hands each
    // candidate's content over a channel of one, so at most one is open.
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let wanted = candidates.clone();
    let walking = {
        let store = store.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            walk_snapshot(&store, &id, (), move |(), entry| {
                if let SnapshotEntry::File {
                    path,
                    size,
                    content,
                    ..
                } = entry
                {
                    if wanted.contains(&path) {
                        let chunks = crate::workspace::byte_chunks(
                            content,
                            path.clone(),
                            0,
                            size,
                            wsfs::DEFAULT_CHUNK_SIZE,
                        );
                        // The receiver gone: the diff failed or was dropped.
                        if tx.blocking_send((path, chunks)).is_err() {
                            return Err(Error::Cancelled {
                                message: "the diff stopped".to_string(),
                            });
                        }
                    }
                }
                Ok(ControlFlow::Continue(()))
            })
            .await
            .map(drop)
        })
    };
    let mut differing = Vec::new();
    while let Some((path, stored)) = rx.recv().await {
        let live = match fs
            .read_bytes(&path, ByteRange::default(), wsfs::DEFAULT_CHUNK_SIZE)
            .await
        {
            Ok(live) => live.chunks,
            // Gone since it was listed: it differs.
            Err(Error::FileNotFound { .. }) => {
                differing.push(path);
                continue;
            }
            Err(e) => return Err(e),
        };
        if !same_bytes(stored, live).await? {
            differing.push(path);
        }
    }
    walking
        .await
        .map_err(|e| Error::internal(format!("reading the snapshot failed: {e}")))??;
    Ok(differing)
}

/// The content of `path` as snapshot `id` holds it: its size and its
/// bytes in chunks of `chunk`. A path the snapshot does not hold is
/// `FILE_NOT_FOUND`; a directory is `IS_A_DIRECTORY`. Finding it walks the
/// snapshot's entries up to it, as an export does.
pub async fn read_file(
    store: &Arc<dyn SnapshotStore>,
    id: &str,
    path: &CanonicalPath,
) -> Result<(u64, BoxStream<'static, Result<Bytes>>)> {
    let wanted = path.clone();
    let found = walk_snapshot(store, id, None, move |found, entry| {
        if entry.path() != &wanted {
            return Ok(ControlFlow::Continue(()));
        }
        *found = Some(entry);
        Ok(ControlFlow::Break(()))
    })
    .await?;
    match found {
        Some(SnapshotEntry::File {
            path,
            size,
            content,
            ..
        }) => Ok((
            size,
            crate::workspace::byte_chunks(content, path, 0, size, wsfs::DEFAULT_CHUNK_SIZE),
        )),
        Some(SnapshotEntry::Directory { path, .. }) => Err(Error::IsADirectory {
            path: path.as_str().to_string(),
        }),
        None => Err(Error::FileNotFound {
            path: path.as_str().to_string(),
        }),
    }
}

/// Whether two byte streams carry the same bytes, whatever their chunking.
async fn same_bytes(
    mut a: BoxStream<'static, Result<Bytes>>,
    mut b: BoxStream<'static, Result<Bytes>>,
) -> Result<bool> {
    let (mut left, mut right) = (Bytes::new(), Bytes::new());
    loop {
        if left.is_empty() {
            left = match a.next().await.transpose()? {
                Some(chunk) => chunk,
                None => {
                    // `a` is done: equal only if `b` has nothing left but
                    // empty chunks.
                    if !right.is_empty() {
                        return Ok(false);
                    }
                    while let Some(chunk) = b.next().await.transpose()? {
                        if !chunk.is_empty() {
                            return Ok(false);
                        }
                    }
                    return Ok(true);
                }
            };
            continue;
        }
        if right.is_empty() {
            right = match b.next().await.transpose()? {
                Some(chunk) => chunk,
                None => return Ok(false),
            };
            continue;
        }
        let n = left.len().min(right.len());
        if left[..n] != right[..n] {
            return Ok(false);
        }
        left = left.slice(n..);
        right = right.slice(n..);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> BoxStream<'static, Result<Bytes>> {
        let owned: Vec<Result<Bytes>> = parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        futures::stream::iter(owned).boxed()
    }

    #[tokio::test]
    async fn same_bytes_ignores_chunking_and_sees_any_difference() {
        let same = same_bytes(chunks(&[b"ab", b"cdef"]), chunks(&[b"abc", b"", b"def"]));
        assert!(same.await.unwrap());
        for (a, b) in [
            (&[b"abc".as_slice()][..], &[b"abd".as_slice()][..]),
            (&[b"abc"], &[b"ab"]),
            (&[b"ab"], &[b"abc"]),
            (&[b""], &[b"x"]),
        ] {
            let a: Vec<&'static [u8]> = a.to_vec();
            let b: Vec<&'static [u8]> = b.to_vec();
            assert!(
                !same_bytes(chunks(&a), chunks(&b)).await.unwrap(),
                "{a:?} {b:?}"
            );
        }
        assert!(same_bytes(chunks(&[]), chunks(&[b""])).await.unwrap());
    }
}
