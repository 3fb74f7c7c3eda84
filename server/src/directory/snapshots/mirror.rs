//! What the object-store mirror ([`crate::objstore`]) reads of a DIRECTORY
//! session's snapshot store, and writes into one it recovers: the stored
//! files by hash, a manifest's children, a snapshot's record and root. The
//! store's layout stays decided here.

use super::{
    hex, parse_hash, write_atomic, FileIdentity, Hash, InfoFile, Node, Store, Tree, TreeItem,
};
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

/// One entry of a tree held outside a store (a MEMORY session's image), as
/// its manifest records it: a file's content hash, size and modification
/// time, or a directory (`None`).
pub struct LooseEntry<'a> {
    pub path: &'a str,
    pub file: Option<(Hash, u64, std::time::SystemTime)>,
    pub permissions: wsfs::Permissions,
}

/// The manifests of a tree given entry by entry (in path order: each
/// directory before what it holds), laid out as a DIRECTORY store lays
/// them out, so that the bucket, the sweep and recovery of either kind
/// read them alike: the root manifest's hash, and every manifest with its
/// bytes, children before parents.
pub fn manifests_of<'a>(
    entries: impl IntoIterator<Item = LooseEntry<'a>>,
) -> (Hash, Vec<(Hash, Vec<u8>)>) {
    use sha2::{Digest, Sha256};
    use std::collections::BTreeMap;
    // Each directory's children: a file's node, or a directory's path.
    let mut dirs: BTreeMap<&str, Children<'_>> = BTreeMap::new();
    dirs.insert("", Vec::new());
    for entry in entries {
        let (parent, name) = entry.path.rsplit_once('/').unwrap_or(("", entry.path));
        let node = match entry.file {
            Some((hash, size, modified)) => Ok(Node::File {
                size,
                hash,
                identity: FileIdentity {
                    ino: 0,
                    size,
                    mtime_ns: nanos_of(modified),
                    ctime_ns: 0,
                },
            }),
            None => {
                dirs.entry(entry.path).or_default();
                Err(entry.path)
            }
        };
        dirs.entry(parent)
            .or_default()
            .push((name, node, entry.permissions));
    }
    // Deepest first, so that a directory's children are encoded before it.
    let mut order: Vec<&str> = dirs.keys().copied().collect();
    order.sort_by_key(|p| {
        std::cmp::Reverse(if p.is_empty() {
            0
        } else {
            1 + p.matches('/').count()
        })
    });
    let mut hashes: std::collections::HashMap<&str, Hash> = std::collections::HashMap::new();
    let mut manifests = Vec::with_capacity(order.len());
    for dir in order {
        let mut items: Vec<TreeItem> = dirs[dir]
            .iter()
            .map(|(name, node, permissions)| TreeItem {
                name: name.to_string(),
                node: match node {
                    Ok(file) => file.clone(),
                    Err(path) => Node::Dir { tree: hashes[path] },
                },
                permissions: *permissions,
            })
            .collect();
        items.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let raw = Tree { items }.encode();
        let hash: Hash = Sha256::digest(&raw).into();
        hashes.insert(dir, hash);
        manifests.push((hash, raw));
    }
    (hashes[""], manifests)
}

/// A modification time as an identity records it.
fn nanos_of(t: std::time::SystemTime) -> i64 {
    let (sign, d) = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => (1, d),
        Err(e) => (-1, e.duration()),
    };
    let sec = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    FileIdentity::nanos(sign * sec, sign * i64::from(d.subsec_nanos()))
}

/// A directory's children as [`manifests_of`] gathers them: each name with
/// a file's node or a directory's path, and its bits.
type Children<'a> = Vec<(
    &'a str,
    std::result::Result<Node, &'a str>,
    wsfs::Permissions,
)>;

/// One child of a manifest, whole: its name, what it is, its bits and (a
/// file) its modification time.
pub struct ManifestEntry {
    pub name: String,
    pub child: StoredChild,
    pub permissions: wsfs::Permissions,
    pub modified: std::time::SystemTime,
}

/// Every child of the manifest `raw`; `None` when it is not one.
pub fn manifest_entries(raw: &[u8]) -> Option<Vec<ManifestEntry>> {
    let tree = Tree::decode(raw)?;
    Some(
        tree.items
            .into_iter()
            .map(|item| {
                let (child, modified) = match item.node {
                    Node::File {
                        hash,
                        size,
                        identity,
                    } => (StoredChild::Content { hash, size }, identity.modified()),
                    Node::Dir { tree } => (StoredChild::Manifest(tree), std::time::UNIX_EPOCH),
                };
                ManifestEntry {
                    name: item.name,
                    child,
                    permissions: item.permissions,
                    modified,
                }
            })
            .collect(),
    )
}

/// The record of snapshot `info`, whose tree is manifest `root`, as a
/// DIRECTORY store writes it.
pub fn snapshot_record(info: &crate::snapshots::SnapshotInfo, root: &Hash) -> Result<Vec<u8>> {
    let record = InfoFile {
        id: info.id.clone(),
        tag: info.tag.clone(),
        created_at: info.created_at,
        file_count: info.file_count,
        total_bytes: info.total_bytes,
        root: Some(hex(root)),
    };
    serde_json::to_vec(&record)
        .map_err(|e| Error::internal(format!("cannot encode a snapshot record: {e}")))
}

/// The snapshot a record describes, as a store lists it.
pub fn record_info(raw: &[u8]) -> Result<crate::snapshots::SnapshotInfo> {
    let info: InfoFile = serde_json::from_slice(raw)
        .map_err(|e| Error::internal(format!("a snapshot record is corrupt: {e}")))?;
    Ok(info.info())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use wsfs::Permissions;

    /// A tree given entry by entry becomes one manifest per directory,
    /// children before parents, each child named once and sorted bytewise
    /// (`a` < `a.txt` though `a/b` sorts after `a.txt` as a path), an empty
    /// directory with a manifest of its own; decoded back, the same names,
    /// bits, sizes and times.
    #[test]
    fn a_loose_tree_is_laid_out_as_a_store_lays_it_out() {
        let modified = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5);
        let file = |b: &[u8]| Some((Sha256::digest(b).into(), b.len() as u64, modified));
        let dir = Permissions::DIRECTORY_DEFAULT;
        let bits = Permissions::masked(0o600);
        let entries = [
            ("a", None, dir),
            ("a.txt", file(b"top"), bits),
            ("a/b", file(b"inner"), bits),
            ("empty", None, dir),
        ];
        let (root, manifests) =
            manifests_of(entries.iter().map(|(path, file, permissions)| LooseEntry {
                path,
                file: *file,
                permissions: *permissions,
            }));
        assert_eq!(manifests.len(), 3, "the root, a and empty");
        assert_eq!(
            manifests.last().map(|(h, _)| *h),
            Some(root),
            "the root last"
        );
        for (hash, raw) in &manifests {
            assert_eq!(<[u8; 32]>::from(Sha256::digest(raw)), *hash);
        }
        let top = manifest_entries(&manifests.last().unwrap().1).unwrap();
        let names: Vec<&str> = top.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "a.txt", "empty"]);
        assert_eq!(
            top[1].child,
            StoredChild::Content {
                hash: Sha256::digest(b"top").into(),
                size: 3
            }
        );
        assert_eq!(top[1].permissions, bits);
        assert_eq!(top[1].modified, modified);
        let StoredChild::Manifest(a) = top[0].child else {
            panic!("a is a directory");
        };
        let (_, raw_a) = manifests.iter().find(|(h, _)| *h == a).unwrap();
        let inner = manifest_entries(raw_a).unwrap();
        assert_eq!(inner.len(), 1);
        assert_eq!(inner[0].name, "b");
        let StoredChild::Manifest(empty) = top[2].child else {
            panic!("empty is a directory");
        };
        let (_, raw_empty) = manifests.iter().find(|(h, _)| *h == empty).unwrap();
        assert!(manifest_entries(raw_empty).unwrap().is_empty());
    }
}
