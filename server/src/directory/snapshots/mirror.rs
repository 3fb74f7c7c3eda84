//! What the object-store mirror ([`crate::objstore`]) reads of a DIRECTORY
//! session's snapshot store, and writes into one it recovers: the stored
//! files by hash, a manifest's children, a snapshot's record and root. The
//! store's layout stays decided here.

use super::{hex, parse_hash, write_atomic, Hash, InfoFile, Node, Store, Tree};
use std::path::{Path, PathBuf};
use wsfs::{Error, Result};

/// One session's store, seen from outside the snapshot code.
#[derive(Debug, Clone)]
pub struct StoreFiles {
    dir: PathBuf,
}

/// A child of a manifest: a file's content or a directory's manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoredChild {
    Content { hash: Hash, size: u64 },
    Manifest(Hash),
}

impl StoreFiles {
    /// The store kept under `session_dir`.
    pub fn new(session_dir: &Path) -> Self {
        StoreFiles {
            dir: session_dir.to_path_buf(),
        }
    }

    fn store(&self) -> Store {
        Store {
            dir: self.dir.clone(),
            state: Default::default(),
        }
    }

    pub fn content_path(&self, hash: &Hash) -> PathBuf {
        self.store().objects().path(hash)
    }

    pub fn manifest_path(&self, hash: &Hash) -> PathBuf {
        self.store().trees().path(hash)
    }

    pub fn record_path(&self, snapshot_id: &str) -> PathBuf {
        self.store().info_path(snapshot_id)
    }

    /// Stores `bytes` (already checked against `hash`) as content or
    /// manifest `hash`, unless already there.
    pub fn put(&self, manifest: bool, hash: &Hash, bytes: &[u8]) -> Result<()> {
        let store = if manifest {
            self.store().trees()
        } else {
            self.store().objects()
        };
        store.store_bytes(hash, bytes).map(|_| ())
    }

    /// A new temporary file for a content being fetched.
    pub fn temp(&self) -> Result<(PathBuf, std::fs::File)> {
        self.store().objects().temp_file()
    }

    /// Stores the fetched temporary file `tmp` (already checked against
    /// `hash`) as content `hash`.
    pub fn publish(&self, tmp: &Path, hash: &Hash) -> Result<()> {
        self.store().objects().publish(tmp, hash).map(|_| ())
    }

    /// Writes a snapshot's record as the bucket holds it.
    pub fn put_record(&self, snapshot_id: &str, raw: &[u8]) -> Result<()> {
        std::fs::create_dir_all(self.store().manifests()).map_err(super::storage_error)?;
        write_atomic(&self.record_path(snapshot_id), raw)
    }
}

/// The children of the manifest `raw`; `None` when it is not one.
pub fn manifest_children(raw: &[u8]) -> Option<Vec<StoredChild>> {
    let tree = Tree::decode(raw)?;
    Some(
        tree.items
            .iter()
            .map(|item| match &item.node {
                Node::File { hash, size, .. } => StoredChild::Content {
                    hash: *hash,
                    size: *size,
                },
                Node::Dir { tree } => StoredChild::Manifest(*tree),
            })
            .collect(),
    )
}

/// What the mirror needs of a snapshot record: its id, creation time,
/// size and root manifest.
#[derive(Debug, Clone)]
pub struct RecordHead {
    pub id: String,
    pub created_at: std::time::SystemTime,
    pub total_bytes: u64,
    pub root: Hash,
}

/// A snapshot record's [`RecordHead`]. Records written before manifests
/// existed (no root) are not mirrored.
pub fn record_root(raw: &[u8]) -> Result<RecordHead> {
    let corrupt = |why: String| Error::internal(format!("a snapshot record is corrupt: {why}"));
    let info: InfoFile = serde_json::from_slice(raw).map_err(|e| corrupt(e.to_string()))?;
    let root = info
        .root
        .as_deref()
        .and_then(parse_hash)
        .ok_or_else(|| corrupt(format!("snapshot {} names no root manifest", info.id)))?;
    Ok(RecordHead {
        id: info.id,
        created_at: info.created_at,
        total_bytes: info.total_bytes,
        root,
    })
}

pub fn hash_hex(hash: &Hash) -> String {
    hex(hash)
}
