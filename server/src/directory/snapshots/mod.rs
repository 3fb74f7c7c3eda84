//! Snapshots of a DIRECTORY session: a content-addressed store on disk,
//! shaped like git's object store.
//!
//! Everything lives under the session's directory in the data directory,
//! beside (never inside) the workspace root:
//!
//! ```text
//! sessions/<id>/objects/<aa>/<62 hex>     file contents, named by SHA-256
//! sessions/<id>/objects/tmp/              contents being written
//! sessions/<id>/trees/<aa>/<62 hex>       directory manifests, named by the
//!                                         SHA-256 of their bytes
//! sessions/<id>/trees/tmp/                manifests being written
//! sessions/<id>/snapshots/<uuid>.json     a snapshot's info and root
//!                                         manifest (its presence makes the
//!                                         snapshot exist)
//! sessions/<id>/head                      the root manifest the next
//!                                         snapshot compares against
//! ```
//!
//! A directory manifest ([`Tree`]) lists a directory's children by name: for
//! a file its size, content hash and the identity (inode, size, mtime,
//! ctime) it had when it was hashed; for a directory the hash of the
//! directory's own manifest. An unchanged directory has the same manifest,
//! stored once, so a snapshot writes only the manifests of the directories
//! on the way to a change, and an unchanged file is stored once across all
//! snapshots.
//!
//! A snapshot stats every entry (one `statx` each, by descriptor, through
//! [`tree()`]) and compares it with the previous snapshot's
//! manifests, kept in memory: a file with the same identity is not read, so
//! the snapshot's reads and writes grow with what changed. Restore compares
//! the same way and rewrites only the files that differ from the snapshot.
//! It stages every file it will write (checking the stored bytes against
//! their hash) before its first change to the workspace, so a store that
//! fails to deliver leaves the workspace as it was. Replaced files are
//! swapped out atomically and freed after the restore has answered. Files
//! are read through the backend's `open` and restored through `stage`,
//! `commit_aside`, `mkdir` and `remove`: the symlink-proof paths every
//! other call takes.
//!
//! Sparse files stay sparse: contents are read, stored and staged run by
//! run (`SEEK_DATA` / `SEEK_HOLE`), holes hashed as zeros but never
//! written. Hashing still costs a file's apparent size in time, so a
//! snapshot is refused (`QuotaExceeded`) before it stores anything when
//! the files' apparent sizes add up to more than the session's byte
//! budget ([`crate::quota::budget`]). A snapshot whose caller goes away
//! stops at its next step and removes every object and manifest it
//! stored; restore checks the snapshot against the session's limits
//! ([`crate::snapshots::check_restore`]) before staging.
//!
//! Snapshots written by earlier versions (a JSON list of entries in
//! `snapshots/<uuid>.entries`) are still listed, exported and restored.

use crate::snapshots::{
    check_restore, new_id, not_found, parse_id, Restored, SnapshotEntry, SnapshotFiles,
    SnapshotInfo, SnapshotMirror, SnapshotStore,
};
// Manifests nested deeper than a workspace walk descends are corrupt.
use crate::backend::intent::{self, Intent, IntentFile, Prune};
use crate::backend::{Backend, CommitMode, Content, StagedFile};
use crate::directory::backend::sys::MAX_TREE_DEPTH;
use crate::directory::backend::{next_data, Displaced};
use crate::directory::DirectoryBackend;
use crate::limits::SessionLimits;
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, PathLimits, Permissions, Result};

mod fork;
mod manifest;
pub mod mirror;
mod tree;
pub use fork::{first_snapshot, ForkSource};
use manifest::{Node, Tree, TreeItem};
pub(crate) use tree::{tree, FileIdentity, TreeEntry, TreeKind};

const COPY_BUFFER: usize = 1024 * 1024;
/// Zeros hashed at a time for a hole.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
const INFO_SUFFIX: &str = ".json";
/// The entries of a snapshot written by an earlier version.
const ENTRIES_SUFFIX: &str = ".entries";
/// A SHA-256 digest.
type Hash = [u8; 32];

pub struct DirectorySnapshots {
    workspace: Arc<Workspace<DirectoryBackend>>,
    store: Arc<Store>,
    /// The server's `--default-max-total-bytes`: a snapshot's budget when
    /// the session sets no `max_total_bytes` ([`crate::quota::budget`]).
    default_budget: u64,
    /// The object store every snapshot is mirrored to, when the server
    /// has one ([`crate::objstore`]).
    mirror: Option<Arc<dyn SnapshotMirror>>,
}

impl DirectorySnapshots {
    /// The snapshots of the workspace, kept under `session_dir` (which must
    /// lie outside the workspace root). `default_budget`: the server's
    /// `--default-max-total-bytes`.
    pub fn new(
        workspace: Arc<Workspace<DirectoryBackend>>,
        session_dir: &Path,
        default_budget: u64,
    ) -> Self {
        DirectorySnapshots {
            default_budget,
            mirror: None,
            workspace,
            store: Arc::new(Store {
                dir: session_dir.to_path_buf(),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Mirrors every snapshot to `mirror`'s bucket: a snapshot answers
    /// once it is there.
    pub fn mirrored(mut self, mirror: Option<Arc<dyn SnapshotMirror>>) -> Self {
        self.mirror = mirror;
        self
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Error::internal(format!("snapshot task failed: {e}")))?
    }
}

#[async_trait]
impl SnapshotStore for DirectorySnapshots {
    async fn snapshot(&self, tag: &str) -> Result<SnapshotInfo> {
        let store = self.store.clone();
        let tag = tag.to_string();
        let budget = crate::quota::budget(self.workspace.limits(), self.default_budget);
        // A snapshot changes no workspace: when its caller goes away (this
        // future is dropped) the walk stops at its next step and removes
        // what it stored.
        let cancel = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(cancel.clone());
        let taken = self.store.clone();
        let info = self
            .workspace
            .exclusive(move |b| {
                let info = store.take(b, tag, budget, &cancel)?;
                // The store may sit on another filesystem than the root.
                store.settle(b.durability())?;
                Ok(info)
            })
            .await?;
        match &self.mirror {
            Some(mirror) => {
                // A snapshot that did not reach the bucket is not kept.
                let id = info.id.clone();
                let roll_back = move || {
                    if let Err(e) = taken.delete(&id) {
                        tracing::warn!(snapshot = %id, error = %e, "an unmirrored snapshot could not be removed");
                    }
                };
                mirror.clone().mirror(info, Box::new(roll_back)).await
            }
            None => Ok(info),
        }
    }

    async fn restore(&self, id: &str, at: &CanonicalPath) -> Result<Restored> {
        self.workspace
            .writable_for(at.as_str(), "restore a snapshot")?;
        let key = parse_id(id)?;
        let store = self.store.clone();
        let limits = crate::quota::with_budget(self.workspace.limits(), self.default_budget);
        let at = at.clone();
        let (restored, displaced) = self
            .workspace
            .exclusive(move |b| store.restore(b, &key, &at, &limits))
            .await?;
        if !displaced.is_empty() {
            // The replaced files' blocks are freed once the workspace is
            // free again.
            tokio::task::spawn_blocking(move || drop(displaced));
        }
        Ok(restored)
    }

    async fn list(&self) -> Result<Vec<SnapshotInfo>> {
        self.blocking(|s| {
            let _state = s.lock();
            s.infos()
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let key = parse_id(id)?;
        if let Some(mirror) = &self.mirror {
            // The bucket first: when it is unreachable, nothing changes.
            let infos = self.list().await?;
            if !infos.iter().any(|i| i.id == key) {
                return Err(not_found(id));
            }
            let newest_left = infos
                .iter()
                .rev()
                .find(|i| i.id != key)
                .map(|i| i.id.as_str());
            mirror.forget_snapshot(&key, newest_left).await?;
        }
        self.blocking(move |s| s.delete(&key)).await
    }

    async fn fork_origin(&self, id: &str) -> Result<crate::snapshots::fork::Origin> {
        let key = parse_id(id)?;
        let store = self.store.clone();
        self.blocking(move |s| {
            Ok(crate::snapshots::fork::Origin::Directory {
                info: s.read_info(&key)?.info(),
                source: ForkSource::new(store, s.read_info(&key)?),
            })
        })
        .await
    }

    async fn files(&self, id: &str) -> Result<SnapshotFiles> {
        let key = parse_id(id)?;
        self.blocking(move |s| {
            let state = s.lock();
            let info = s.read_info(&key)?;
            let entries = s.flatten(&info, &state)?;
            let objects = s.objects();
            Ok(Box::new(entries.into_iter().map(move |e| e.open(&objects))) as SnapshotFiles)
        })
        .await
    }
}

/// Sets its flag when dropped: the snapshot's caller is gone (or done).
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn cancelled() -> Error {
    Error::Cancelled {
        message: "the snapshot was abandoned by its caller; nothing was stored".to_string(),
    }
}

/// A snapshot's info file.
#[derive(Debug, Serialize, Deserialize)]
struct InfoFile {
    id: String,
    tag: String,
    created_at: SystemTime,
    file_count: u64,
    total_bytes: u64,
    /// The root directory's manifest, in hex; absent in snapshots written
    /// by earlier versions, which list their entries in a separate file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    root: Option<String>,
}

impl InfoFile {
    fn info(self) -> SnapshotInfo {
        SnapshotInfo {
            id: self.id,
            tag: self.tag,
            created_at: self.created_at,
            file_count: self.file_count,
            total_bytes: self.total_bytes,
        }
    }
}

/// One entry of a snapshot written by an earlier version: a directory when
/// `hash` is absent.
#[derive(Debug, Clone, Deserialize)]
struct LegacyEntry {
    path: String,
    #[serde(default)]
    hash: Option<String>,
    #[serde(default)]
    size: u64,
}

/// One entry of a snapshot, flattened out of its manifests.
struct FlatEntry {
    path: CanonicalPath,
    /// `None` for a directory.
    file: Option<FlatFile>,
    permissions: Permissions,
}

struct FlatFile {
    size: u64,
    hash: Hash,
    /// Unknown in snapshots written by earlier versions.
    identity: Option<FileIdentity>,
}

impl FlatFile {
    /// The file's modification time when it was taken; `None` when the
    /// snapshot does not know it (the time of the restore then).
    fn modified_at(&self) -> Option<SystemTime> {
        self.identity.map(|i| i.modified())
    }

    /// [`Self::modified_at`], the epoch ("unknown") when not known.
    fn modified(&self) -> SystemTime {
        self.modified_at().unwrap_or(std::time::UNIX_EPOCH)
    }
}

impl FlatEntry {
    fn open(self, objects: &ContentStore) -> Result<SnapshotEntry> {
        Ok(match self.file {
            None => SnapshotEntry::Directory {
                path: self.path,
                permissions: self.permissions,
            },
            Some(file) => SnapshotEntry::File {
                path: self.path,
                size: file.size,
                permissions: self.permissions,
                modified: file.modified(),
                content: Content::Disk(objects.open(&file.hash)?),
            },
        })
    }
}

/// A directory of files named by hash: `<aa>/<62 hex>`, written through
/// `tmp/`.
#[derive(Clone)]
struct ContentStore {
    dir: PathBuf,
}

impl ContentStore {
    fn path(&self, hash: &Hash) -> PathBuf {
        let hex = hex(hash);
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    fn open(&self, hash: &Hash) -> Result<std::fs::File> {
        std::fs::File::open(self.path(hash)).map_err(|e| {
            Error::internal(format!(
                "a snapshot's stored content {} cannot be read: {e}",
                hex(hash)
            ))
        })
    }

    fn temp_file(&self) -> Result<(PathBuf, std::fs::File)> {
        let tmp_dir = self.dir.join("tmp");
        std::fs::create_dir_all(&tmp_dir).map_err(storage_error)?;
        let tmp = tmp_dir.join(new_id());
        let file = std::fs::File::create_new(&tmp).map_err(storage_error)?;
        Ok((tmp, file))
    }

    /// Moves the finished temporary file `tmp` to `hash`'s name, unless
    /// that is already stored; returns the new object's path when it was
    /// not.
    fn publish(&self, tmp: &Path, hash: &Hash) -> Result<Option<PathBuf>> {
        let target = self.path(hash);
        if target.exists() {
            return Ok(None);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(storage_error)?;
        }
        std::fs::rename(tmp, &target).map_err(storage_error)?;
        Ok(Some(target))
    }

    /// Copies the file `content` into the store while hashing it, keeping
    /// its holes (a sparse file costs the store its data only); returns the
    /// hash, the bytes (apparent size) and the new object's path when it
    /// was not stored yet. Refuses a file that grows past `limit` bytes
    /// (`QuotaExceeded`), and stops when `cancel` is set.
    fn store_file(
        &self,
        content: &std::fs::File,
        path: &CanonicalPath,
        buf: &mut [u8],
        limit: u64,
        cancel: &AtomicBool,
    ) -> Result<(Hash, u64, Option<PathBuf>)> {
        let (tmp, out) = self.temp_file()?;
        let result = (|| {
            let size = content
                .metadata()
                .map_err(|e| Error::from_io(e, path))?
                .len();
            if size > limit {
                return Err(Error::QuotaExceeded {
                    message: format!(
                        "cannot snapshot '{path}': the snapshot would hold more than its budget of {limit} bytes"
                    ),
                });
            }
            let (hash, end) = read_sparse(
                content,
                size,
                buf,
                cancel,
                |e| Error::from_io(e, path),
                |piece| match piece {
                    Piece::Data(offset, data) => {
                        out.write_all_at(data, offset).map_err(storage_error)
                    }
                    Piece::Hole(_) => Ok(()),
                },
            )?;
            out.set_len(end).map_err(storage_error)?;
            let created = self.publish(&tmp, &hash)?;
            Ok((hash, end, created))
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Stores `bytes` under their hash, unless already stored; returns the
    /// new object's path when it was not.
    fn store_bytes(&self, hash: &Hash, bytes: &[u8]) -> Result<Option<PathBuf>> {
        if self.path(hash).exists() {
            return Ok(None);
        }
        let (tmp, mut out) = self.temp_file()?;
        let result = out
            .write_all(bytes)
            .map_err(storage_error)
            .and_then(|()| self.publish(&tmp, hash));
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Removes every stored file not in `live`, and anything half written.
    fn sweep(&self, live: &HashSet<Hash>) -> Result<()> {
        let _ = std::fs::remove_dir_all(self.dir.join("tmp"));
        let heads = match std::fs::read_dir(&self.dir) {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(storage_error(e)),
        };
        for head in heads {
            let head = head.map_err(storage_error)?;
            let head_name = head.file_name().to_string_lossy().into_owned();
            for object in std::fs::read_dir(head.path()).map_err(storage_error)? {
                let object = object.map_err(storage_error)?;
                let name = format!("{head_name}{}", object.file_name().to_string_lossy());
                if !parse_hash(&name).is_some_and(|h| live.contains(&h)) {
                    std::fs::remove_file(object.path()).map_err(storage_error)?;
                }
            }
            // Only succeeds once empty.
            let _ = std::fs::remove_dir(head.path());
        }
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn parse_hash(s: &str) -> Option<Hash> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

fn storage_error(e: std::io::Error) -> Error {
    Error::io_while(e, "working in the snapshot store")
}

/// A path's parent (`""` for the root) and last name.
fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// What the store keeps in memory between calls.
#[derive(Default)]
struct State {
    /// The head manifest's hash once read; `Some(None)` when there is none.
    head: Option<Option<Hash>>,
    /// Manifests by hash: those of the head, so that the next snapshot
    /// reads none from disk.
    trees: HashMap<Hash, Arc<Tree>>,
}

/// The on-disk store of one session.
struct Store {
    /// The session's directory.
    dir: PathBuf,
    /// Serialises snapshot, restore, delete and reads of the store.
    state: Mutex<State>,
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts what a snapshot wrote (contents, manifests, info, head) on
    /// stable storage when `durability` asks.
    fn settle(&self, durability: crate::durability::Durability) -> Result<()> {
        if !durability.is_fsync() {
            return Ok(());
        }
        let dir = std::fs::File::open(&self.dir).map_err(storage_error)?;
        durability.settle_fs(&dir)
    }

    fn objects(&self) -> ContentStore {
        ContentStore {
            dir: self.dir.join("objects"),
        }
    }

    fn trees(&self) -> ContentStore {
        ContentStore {
            dir: self.dir.join("trees"),
        }
    }

    fn manifests(&self) -> PathBuf {
        self.dir.join("snapshots")
    }

    fn info_path(&self, id: &str) -> PathBuf {
        self.manifests().join(format!("{id}{INFO_SUFFIX}"))
    }

    fn entries_path(&self, id: &str) -> PathBuf {
        self.manifests().join(format!("{id}{ENTRIES_SUFFIX}"))
    }

    fn head_path(&self) -> PathBuf {
        self.dir.join("head")
    }

    /// The head manifest's hash. A missing or unreadable head file means
    /// none: every file is then hashed again (slower, never wrong).
    fn head(&self, state: &mut State) -> Option<Hash> {
        *state.head.get_or_insert_with(|| {
            std::fs::read_to_string(self.head_path())
                .ok()
                .and_then(|s| parse_hash(s.trim()))
        })
    }

    fn set_head(&self, state: &mut State, head: Option<Hash>) -> Result<()> {
        match head {
            Some(hash) => write_atomic(&self.head_path(), hex(&hash).as_bytes())?,
            None => match std::fs::remove_file(self.head_path()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(storage_error(e)),
            },
        }
        state.head = Some(head);
        Ok(())
    }

    /// The manifest `hash`, from memory or from disk (checked against its
    /// hash).
    fn tree(&self, state: &State, hash: &Hash) -> Result<Arc<Tree>> {
        if let Some(tree) = state.trees.get(hash) {
            return Ok(tree.clone());
        }
        let corrupt = |why: String| {
            Error::internal(format!(
                "the snapshot store's directory manifest {} {why}",
                hex(hash)
            ))
        };
        let raw = std::fs::read(self.trees().path(hash))
            .map_err(|e| corrupt(format!("cannot be read: {e}")))?;
        if <[u8; 32]>::from(Sha256::digest(&raw)) != *hash {
            return Err(corrupt("is corrupt".to_string()));
        }
        Tree::decode(&raw)
            .map(Arc::new)
            .ok_or_else(|| corrupt("is corrupt".to_string()))
    }

    fn read_info(&self, id: &str) -> Result<InfoFile> {
        let raw = match std::fs::read(self.info_path(id)) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(storage_error(e)),
        };
        serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("snapshot {id} has a corrupt record: {e}")))
    }

    fn read_legacy_entries(&self, id: &str) -> Result<Vec<LegacyEntry>> {
        let raw = std::fs::read(self.entries_path(id)).map_err(storage_error)?;
        serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("snapshot {id} has a corrupt manifest: {e}")))
    }

    fn root_of(info: &InfoFile) -> Result<Option<Hash>> {
        info.root
            .as_deref()
            .map(|r| {
                parse_hash(r).ok_or_else(|| {
                    Error::internal(format!("snapshot {} has a corrupt record", info.id))
                })
            })
            .transpose()
    }

    /// Every entry of a snapshot, in path order (bytewise).
    fn flatten(&self, info: &InfoFile, state: &State) -> Result<Vec<FlatEntry>> {
        let mut out = Vec::new();
        match Self::root_of(info)? {
            Some(root) => {
                self.visit(
                    state,
                    &root,
                    &CanonicalPath::root(),
                    0,
                    &mut |path, item| {
                        let file = match &item.node {
                            Node::File {
                                size,
                                hash,
                                identity,
                            } => Some(FlatFile {
                                size: *size,
                                hash: *hash,
                                identity: Some(*identity),
                            }),
                            Node::Dir { .. } => None,
                        };
                        out.push(FlatEntry {
                            path: path.clone(),
                            file,
                            permissions: item.permissions,
                        });
                        Ok(())
                    },
                )?;
            }
            None => {
                for e in self.read_legacy_entries(&info.id)? {
                    let path = CanonicalPath::parse(&e.path, &PathLimits::UNLIMITED)?;
                    let file = match e.hash {
                        None => None,
                        Some(hash) => Some(FlatFile {
                            size: e.size,
                            hash: parse_hash(&hash).ok_or_else(|| {
                                Error::internal(format!(
                                    "snapshot {} has a corrupt manifest",
                                    info.id
                                ))
                            })?,
                            identity: None,
                        }),
                    };
                    let permissions = match file {
                        None => Permissions::DIRECTORY_DEFAULT,
                        Some(_) => Permissions::FILE_DEFAULT,
                    };
                    out.push(FlatEntry {
                        path,
                        file,
                        permissions,
                    });
                }
            }
        }
        out.sort_unstable_by(|a, b| a.path.as_str().cmp(b.path.as_str()));
        Ok(out)
    }

    /// Calls `f` with every entry beneath the manifest `hash` (at
    /// `path`) in path order, each directory before its children: the one
    /// walk of a snapshot's manifests, for a restore and for a fork.
    fn visit(
        &self,
        state: &State,
        hash: &Hash,
        path: &CanonicalPath,
        depth: usize,
        f: &mut dyn FnMut(&CanonicalPath, &TreeItem) -> Result<()>,
    ) -> Result<()> {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::internal(
                "the snapshot store's manifests nest too deep",
            ));
        }
        let tree = self.tree(state, hash)?;
        for item in &tree.items {
            let child = path.join(&item.name)?;
            f(&child, item)?;
            if let Node::Dir { tree } = &item.node {
                self.visit(state, tree, &child, depth + 1, f)?;
            }
        }
        Ok(())
    }

    /// What the head holds at `path`: a file's identity and hash.
    fn head_file(
        &self,
        state: &State,
        head: Option<&Arc<Tree>>,
        path: &str,
    ) -> Result<Option<(FileIdentity, Hash)>> {
        let Some(mut tree) = head.cloned() else {
            return Ok(None);
        };
        let mut segments = path.split('/').peekable();
        while let Some(seg) = segments.next() {
            match (tree.get(seg), segments.peek()) {
                (Some(Node::File { hash, identity, .. }), None) => {
                    return Ok(Some((*identity, *hash)))
                }
                (Some(Node::Dir { tree: sub }), Some(_)) => tree = self.tree(state, sub)?,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    fn infos_raw(&self) -> Result<Vec<InfoFile>> {
        let entries = match std::fs::read_dir(self.manifests()) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(storage_error(e)),
        };
        let mut infos = Vec::new();
        for entry in entries {
            let name = entry.map_err(storage_error)?.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(INFO_SUFFIX)) else {
                continue;
            };
            match self.read_info(id) {
                Ok(info) => infos.push(info),
                // Deleted since listed.
                Err(Error::SnapshotNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        infos.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(infos)
    }

    fn infos(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.infos_raw()?.into_iter().map(InfoFile::info).collect())
    }

    /// Takes a snapshot of the workspace (the caller holds its write lock).
    /// Refuses (`QuotaExceeded`) a workspace whose files' apparent sizes
    /// add up to more than `budget` (0: none), before storing anything;
    /// stops when `cancel` is set. Either way, a snapshot that fails
    /// removes every object it stored.
    fn take(
        &self,
        b: &DirectoryBackend,
        tag: String,
        budget: u64,
        cancel: &AtomicBool,
    ) -> Result<SnapshotInfo> {
        let mut state = self.lock();
        // Half-written contents of a snapshot that a crash cut short: only
        // a snapshot (under this lock) writes there.
        for store in [self.objects(), self.trees()] {
            let _ = std::fs::remove_dir_all(store.dir.join("tmp"));
        }
        let previous = match self.head(&mut state) {
            // A head that cannot be read is no head: everything is hashed.
            Some(hash) => self.tree(&state, &hash).ok().map(|tree| (hash, tree)),
            None => None,
        };
        let live = tree(b)?;
        let budget = if budget == 0 { u64::MAX } else { budget };
        check_snapshot_budget(&live, budget)?;
        let mut children: HashMap<&str, Vec<&TreeEntry>> = HashMap::new();
        for e in &live {
            if e.kind != TreeKind::Other {
                let (parent, _) = split_parent(e.path.as_str());
                children.entry(parent).or_default().push(e);
            }
        }
        let mut walk = SnapshotWalk {
            b,
            store: self,
            state: &state,
            children: &children,
            objects: self.objects(),
            trees: self.trees(),
            buf: vec![0u8; COPY_BUFFER],
            file_count: 0,
            total_bytes: 0,
            seen: HashMap::new(),
            budget,
            cancel,
            created: Vec::new(),
        };
        let root = match walk.directory("", previous, 0) {
            Ok(root) => root,
            Err(e) => {
                // Stored only for this snapshot, which will not exist.
                for path in &walk.created {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e);
            }
        };
        let (file_count, total_bytes, seen) = (walk.file_count, walk.total_bytes, walk.seen);
        let info = InfoFile {
            id: new_id(),
            tag,
            created_at: SystemTime::now(),
            file_count,
            total_bytes,
            root: Some(hex(&root)),
        };
        std::fs::create_dir_all(self.manifests()).map_err(storage_error)?;
        // Contents and manifests first: the info file's arrival is what
        // makes the snapshot exist, so a crash in between leaves no half
        // snapshot.
        write_json(&self.info_path(&info.id), &info)?;
        state.trees = seen;
        self.set_head(&mut state, Some(root))?;
        Ok(info.info())
    }

    /// Makes the workspace exactly snapshot `id` (the caller holds its write
    /// lock), or only the subtree at `at` when it is not the root (see
    /// [`SnapshotStore::restore`]). Everything it writes is staged before
    /// the first change. Also returns the old files it replaced, for the
    /// caller to drop (and so remove) when it likes.
    fn restore(
        &self,
        b: &DirectoryBackend,
        id: &str,
        at: &CanonicalPath,
        limits: &SessionLimits,
    ) -> Result<(Restored, Vec<Displaced>)> {
        let mut state = self.lock();
        let info = self.read_info(id)?;
        let mut target = self.flatten(&info, &state)?;
        let mut live = tree(b)?;
        if at.is_root() {
            check_restore(
                limits,
                target
                    .iter()
                    .map(|e| (&e.path, e.file.as_ref().map(|f| f.size))),
            )?;
        } else {
            narrow_restore(at, &mut target, &mut live, limits)?;
        }
        let restored = match at.is_root() {
            true => Restored {
                file_count: info.file_count,
                total_bytes: info.total_bytes,
            },
            false => target
                .iter()
                .filter(|e| e.path.starts_with(at))
                .filter_map(|e| e.file.as_ref())
                .fold(Restored::default(), |r, f| Restored {
                    file_count: r.file_count + 1,
                    total_bytes: r.total_bytes + f.size,
                }),
        };
        let head = match self.head(&mut state) {
            Some(hash) => self.tree(&state, &hash).ok(),
            None => None,
        };
        // Plan: what goes (what the snapshot does not hold), and which
        // files already hold the snapshot's bytes. Both lists are in path
        // order (bytewise), so one pass over both pairs them up.
        let mut unchanged = vec![false; target.len()];
        let mut doomed: Vec<&CanonicalPath> = Vec::new();
        let mut next = 0;
        for e in &live {
            if doomed.last().is_some_and(|r| e.path.starts_with(r)) {
                continue;
            }
            let key = e.path.as_str();
            while target.get(next).is_some_and(|t| t.path.as_str() < key) {
                next += 1;
            }
            let wanted = target.get(next).filter(|t| t.path.as_str() == key);
            let same_bits = wanted.is_some_and(|t| t.permissions == e.permissions);
            let keep = match (e.kind, wanted.map(|t| &t.file)) {
                // Its bits, when they differ, are put back by the apply.
                (TreeKind::Directory, Some(None)) => true,
                (TreeKind::File, Some(Some(file))) => {
                    let same = same_bits && file.identity == Some(e.identity)
                        || self
                            .head_file(&state, head.as_ref(), e.path.as_str())?
                            .is_some_and(|(identity, hash)| {
                                same_bits && identity == e.identity && hash == file.hash
                            });
                    unchanged[next] = same;
                    true
                }
                _ => false,
            };
            if !keep {
                doomed.push(&e.path);
            }
        }
        // Stage every file to write: a missing or damaged content fails
        // here, with the workspace untouched.
        let to_write: Vec<(&CanonicalPath, &FlatFile, Permissions)> = target
            .iter()
            .zip(&unchanged)
            .filter(|(_, same)| !**same)
            .filter_map(|(e, _)| Some((&e.path, e.file.as_ref()?, e.permissions)))
            .collect();
        let staged = stage_objects(b, &self.objects(), &to_write)?;
        drop(state);
        let displaced = apply_restore(b, id, &doomed, &target, &to_write, staged)?;
        Ok((restored, displaced))
    }

    /// Deletes snapshot `id`, then every content and manifest no other
    /// snapshot holds.
    fn delete(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        self.read_info(id)?;
        std::fs::remove_file(self.info_path(id)).map_err(storage_error)?;
        let _ = std::fs::remove_file(self.entries_path(id));
        self.collect_garbage(&mut state)
    }

    fn collect_garbage(&self, state: &mut State) -> Result<()> {
        let infos = self.infos_raw()?;
        let mut live_objects = HashSet::new();
        let mut live_trees = HashSet::new();
        let mut newest_root = None;
        for info in &infos {
            match Self::root_of(info)? {
                Some(root) => {
                    self.mark(state, &root, 0, &mut live_objects, &mut live_trees)?;
                    newest_root = Some(root);
                }
                None => {
                    newest_root = None;
                    for e in self.read_legacy_entries(&info.id)? {
                        if let Some(hash) = e.hash.as_deref().and_then(parse_hash) {
                            live_objects.insert(hash);
                        }
                    }
                }
            }
        }
        // The head may only name what stays: when its snapshot goes, the
        // newest one left takes its place (before anything is removed, so
        // that a crash leaves a head that names stored manifests).
        if self
            .head(state)
            .is_some_and(|head| !live_trees.contains(&head))
        {
            state.trees.clear();
            self.set_head(state, newest_root)?;
        }
        self.objects().sweep(&live_objects)?;
        self.trees().sweep(&live_trees)?;
        // Left by earlier versions, which kept a separate index.
        let _ = std::fs::remove_file(self.dir.join("snapshot-index.json"));
        Ok(())
    }

    fn mark(
        &self,
        state: &State,
        hash: &Hash,
        depth: usize,
        objects: &mut HashSet<Hash>,
        trees: &mut HashSet<Hash>,
    ) -> Result<()> {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::internal(
                "the snapshot store's manifests nest too deep",
            ));
        }
        if !trees.insert(*hash) {
            return Ok(());
        }
        for item in &self.tree(state, hash)?.items {
            match &item.node {
                Node::File { hash, .. } => {
                    objects.insert(*hash);
                }
                Node::Dir { tree } => self.mark(state, tree, depth + 1, objects, trees)?,
            }
        }
        Ok(())
    }
}

/// One snapshot being taken: builds the manifests bottom-up, reading only
/// the files whose identity differs from the previous snapshot's.
struct SnapshotWalk<'a> {
    b: &'a DirectoryBackend,
    store: &'a Store,
    state: &'a State,
    /// Live entries (files and directories) by parent path, in name order.
    children: &'a HashMap<&'a str, Vec<&'a TreeEntry>>,
    objects: ContentStore,
    trees: ContentStore,
    buf: Vec<u8>,
    file_count: u64,
    total_bytes: u64,
    /// Every manifest of the new snapshot.
    seen: HashMap<Hash, Arc<Tree>>,
    /// Most bytes (apparent sizes) the snapshot may hold.
    budget: u64,
    /// Set when the snapshot's caller went away.
    cancel: &'a AtomicBool,
    /// Objects and manifests this snapshot stored that were not stored
    /// before: removed when it fails.
    created: Vec<PathBuf>,
}

impl SnapshotWalk<'_> {
    /// The manifest hash of directory `path`, given the previous
    /// snapshot's manifest of the same directory.
    fn directory(
        &mut self,
        path: &str,
        previous: Option<(Hash, Arc<Tree>)>,
        depth: usize,
    ) -> Result<Hash> {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::internal("the workspace nests too deep to snapshot"));
        }
        if self.cancel.load(Ordering::Relaxed) {
            return Err(cancelled());
        }
        let children: &[&TreeEntry] = self.children.get(path).map_or(&[], |c| c.as_slice());
        let mut items = Vec::with_capacity(children.len());
        for e in children {
            let (_, name) = split_parent(e.path.as_str());
            let before = previous.as_ref().and_then(|(_, tree)| tree.get(name));
            let node = match e.kind {
                TreeKind::Directory => {
                    let sub = match before {
                        Some(Node::Dir { tree }) => {
                            self.store.tree(self.state, tree).ok().map(|t| (*tree, t))
                        }
                        _ => None,
                    };
                    Node::Dir {
                        tree: self.directory(e.path.as_str(), sub, depth + 1)?,
                    }
                }
                TreeKind::File => match before {
                    Some(Node::File {
                        size,
                        hash,
                        identity,
                    }) if *identity == e.identity => Node::File {
                        size: *size,
                        hash: *hash,
                        identity: e.identity,
                    },
                    _ => match self.hash_file(&e.path)? {
                        Some((hash, size)) => Node::File {
                            size,
                            hash,
                            identity: e.identity,
                        },
                        None => continue,
                    },
                },
                TreeKind::Other => continue,
            };
            if let Node::File { size, .. } = node {
                self.file_count += 1;
                self.total_bytes += size;
                if self.total_bytes > self.budget {
                    return Err(over_budget(self.total_bytes, self.budget));
                }
            }
            items.push(TreeItem {
                name: name.to_string(),
                node,
                permissions: e.permissions,
            });
        }
        let tree = Tree { items };
        if let Some((hash, before)) = previous {
            if *before == tree {
                self.seen.insert(hash, before);
                return Ok(hash);
            }
        }
        let raw = tree.encode();
        let hash: Hash = Sha256::digest(&raw).into();
        self.created.extend(self.trees.store_bytes(&hash, &raw)?);
        self.seen.insert(hash, Arc::new(tree));
        Ok(hash)
    }

    /// Stores a file's content; `None` when it is no longer a file.
    fn hash_file(&mut self, path: &CanonicalPath) -> Result<Option<(Hash, u64)>> {
        match self.b.open(path) {
            Ok(file) => {
                let Content::Disk(f) = file.content else {
                    return Err(Error::internal(
                        "the directory backend opened a file in memory",
                    ));
                };
                let limit = self.budget.saturating_sub(self.total_bytes);
                let (hash, size, created) =
                    self.objects
                        .store_file(&f, path, &mut self.buf, limit, self.cancel)?;
                self.created.extend(created);
                Ok(Some((hash, size)))
            }
            // Gone, or swapped for a link or directory, since the walk.
            Err(
                Error::FileNotFound { .. }
                | Error::PermissionDenied { .. }
                | Error::IsADirectory { .. },
            ) => Ok(None),
            Err(err) => Err(err),
        }
    }
}

/// What [`read_sparse`] hands on, in file order.
enum Piece<'a> {
    /// Bytes at an offset.
    Data(u64, &'a [u8]),
    /// This many zero bytes that the file does not store.
    Hole(u64),
}

/// Reads the first `size` bytes of `file` run by run (`SEEK_DATA` /
/// `SEEK_HOLE`), hashing every byte (a hole as zeros, without reading it)
/// and handing each data run and hole to `sink`. Returns the hash and the
/// bytes covered: fewer than `size` when the file was truncated meanwhile.
/// Stops with `Cancelled` once `cancel` is set.
fn read_sparse(
    file: &std::fs::File,
    size: u64,
    buf: &mut [u8],
    cancel: &AtomicBool,
    read_error: impl Fn(std::io::Error) -> Error,
    mut sink: impl FnMut(Piece) -> Result<()>,
) -> Result<(Hash, u64)> {
    let mut hasher = Sha256::new();
    let stop_if_cancelled = || {
        if cancel.load(Ordering::Relaxed) {
            Err(cancelled())
        } else {
            Ok(())
        }
    };
    // Zeros are hashed a buffer at a time, so a long hole can be cancelled.
    let hole = |len: u64, hasher: &mut Sha256| -> Result<Option<Piece<'static>>> {
        let mut left = len;
        while left > 0 {
            stop_if_cancelled()?;
            let n = left.min(ZEROS.len() as u64) as usize;
            hasher.update(&ZEROS[..n]);
            left -= n as u64;
        }
        Ok((len > 0).then_some(Piece::Hole(len)))
    };
    let (mut offset, mut end) = (0u64, size);
    while let Some((start, stop)) = next_data(file, offset, end).map_err(&read_error)? {
        if let Some(piece) = hole(start - offset, &mut hasher)? {
            sink(piece)?;
        }
        offset = start;
        while offset < stop {
            stop_if_cancelled()?;
            let want = usize::try_from(stop - offset).map_or(buf.len(), |w| w.min(buf.len()));
            let n = match file.read_at(&mut buf[..want], offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_error(e)),
            };
            hasher.update(&buf[..n]);
            sink(Piece::Data(offset, &buf[..n]))?;
            offset += n as u64;
        }
        if offset < stop {
            // Truncated meanwhile: what was read is what there is.
            end = offset;
            break;
        }
    }
    if let Some(piece) = hole(end.saturating_sub(offset), &mut hasher)? {
        sink(piece)?;
    }
    Ok((hasher.finalize().into(), end))
}

/// Refuses a snapshot of `live` when its files' apparent sizes add up to
/// more than `budget`: hashing and storing them would cost their apparent
/// size in time (holes are kept on disk, but hashed as zeros).
fn check_snapshot_budget(live: &[TreeEntry], budget: u64) -> Result<()> {
    let total = live
        .iter()
        .filter(|e| e.kind == TreeKind::File)
        .fold(0u64, |sum, e| sum.saturating_add(e.identity.size));
    if total > budget {
        return Err(over_budget(total, budget));
    }
    Ok(())
}

fn over_budget(total: u64, budget: u64) -> Error {
    Error::QuotaExceeded {
        message: format!(
            "cannot snapshot: the workspace's files add up to {total} bytes (apparent sizes, holes included), over this session's budget of {budget} bytes (its max_total_bytes, or the server's --default-max-total-bytes)"
        ),
    }
}

/// Narrows a restore's `target` (the snapshot's entries) and `live` (the
/// workspace's) to the subtree at `at`, and checks it before any change:
/// `at` must be in the snapshot (`FileNotFound`), each parent of `at` a
/// directory or missing in the workspace (`NotADirectory`, or
/// `PermissionDenied` for a link or special file, which a restore never
/// goes through), and the workspace after within the session's limits.
/// Missing parents stay in `target`, to come back as the snapshot holds
/// them; existing ones leave it, untouched.
fn narrow_restore(
    at: &CanonicalPath,
    target: &mut Vec<FlatEntry>,
    live: &mut Vec<TreeEntry>,
    limits: &SessionLimits,
) -> Result<()> {
    if !target.iter().any(|e| e.path == *at) {
        return Err(crate::snapshots::not_in_snapshot(at));
    }
    let mut now = crate::quota::Usage::default();
    let mut removed = crate::quota::Usage::default();
    let mut present = HashSet::new();
    for e in live.iter() {
        if e.kind == TreeKind::File {
            now.files += 1;
            now.bytes = now.bytes.saturating_add(e.size);
            if e.path.starts_with(at) {
                removed.files += 1;
                removed.bytes = removed.bytes.saturating_add(e.size);
            }
        }
        if at.starts_with(&e.path) && e.path != *at {
            match e.kind {
                TreeKind::Directory => {}
                TreeKind::File => {
                    return Err(Error::NotADirectory {
                        path: e.path.as_str().to_string(),
                    })
                }
                TreeKind::Other => {
                    return Err(Error::PermissionDenied {
                        path: e.path.as_str().to_string(),
                        message: format!(
                            "cannot restore '{at}': '{}' is a symbolic link or special file, which a restore never goes through",
                            e.path
                        ),
                    })
                }
            }
            present.insert(e.path.as_str().to_string());
        }
    }
    target.retain(|e| {
        e.path.starts_with(at) || (at.starts_with(&e.path) && !present.contains(e.path.as_str()))
    });
    live.retain(|e| e.path.starts_with(at));
    crate::snapshots::check_restore_at(
        limits,
        at,
        now,
        removed,
        target
            .iter()
            .filter(|e| e.path.starts_with(at))
            .map(|e| (&e.path, e.file.as_ref().map(|f| f.size))),
    )
}

/// The apply step of a restore, once every file it writes is staged:
/// removes `doomed`, makes the snapshot's directories and commits the
/// staged files, as one replacement a crash cannot leave half done (an
/// intent record, [`crate::directory::journal`]: the next start completes it).
/// Returns the old files swapped out, for the caller to free later.
fn apply_restore(
    b: &DirectoryBackend,
    id: &str,
    doomed: &[&CanonicalPath],
    target: &[FlatEntry],
    to_write: &[(&CanonicalPath, &FlatFile, Permissions)],
    staged: Vec<<DirectoryBackend as Backend>::Staged>,
) -> Result<Vec<Displaced>> {
    let dirs = || target.iter().filter(|e| e.file.is_none());
    let intent = Intent {
        operation: format!("restore {id}"),
        prune: Prune::Paths(doomed.iter().map(|p| p.as_str().to_string()).collect()),
        dirs: dirs().map(|e| e.path.as_str().to_string()).collect(),
        files: to_write
            .iter()
            .zip(&staged)
            .map(|((path, file, _), s)| {
                IntentFile::new(path, s, Some(&file.hash)).modified(file.modified_at())
            })
            .collect(),
        permissions: target
            .iter()
            .map(|e| (e.path.as_str().to_string(), e.permissions.bits()))
            .collect(),
    };
    intent::apply(b, &intent, || {
        for path in doomed {
            match b.remove(path, true) {
                // Gone with a removed ancestor, or since the walk.
                Ok(_) | Err(Error::FileNotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        // Directories in path order, so parents come before children;
        // their bits once their files are in.
        for e in dirs() {
            b.mkdir(&e.path, true, Permissions::DIRECTORY_DEFAULT)?;
        }
        let mut displaced = Vec::new();
        for ((path, file, permissions), content) in to_write.iter().zip(staged) {
            let put = CommitMode {
                append: false,
                create_parents: true,
                permissions: Some(*permissions),
                modified: file.modified_at(),
                // Swapped by commit_aside, the record holding the hash.
                swap_out: false,
            };
            displaced.extend(b.commit_aside(content, path, put)?.1);
        }
        let bits: Vec<_> = dirs().map(|e| (&e.path, e.permissions)).collect();
        crate::backend::finish_directories(b, bits.into_iter())?;
        Ok(displaced)
    })
}

/// Most threads that stage a restore's files at once.
const MAX_STAGING_THREADS: usize = 4;

/// Stages every file of `files` (in order), on a few threads: creating and
/// filling many small files is mostly waiting on the filesystem. On error,
/// everything staged so far is dropped (and so removed).
fn stage_objects(
    b: &DirectoryBackend,
    objects: &ContentStore,
    files: &[(&CanonicalPath, &FlatFile, Permissions)],
) -> Result<Vec<<DirectoryBackend as Backend>::Staged>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_STAGING_THREADS);
    let chunk = files.len().div_ceil(threads).max(1);
    let stage_chunk = |part: &[(&CanonicalPath, &FlatFile, Permissions)]| {
        let mut buf = vec![0u8; COPY_BUFFER];
        part.iter()
            .map(|(path, file, _)| stage_object(b, objects, file, path, &mut buf))
            .collect::<Result<Vec<_>>>()
    };
    if files.len() <= chunk {
        return stage_chunk(files);
    }
    let parts: Vec<Result<Vec<_>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|part| scope.spawn(move || stage_chunk(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("a staging thread panicked")))
            })
            .collect()
    });
    let mut staged = Vec::with_capacity(files.len());
    for part in parts {
        staged.extend(part?);
    }
    Ok(staged)
}

/// Copies a stored content into a new staged file, checking its bytes
/// against its hash.
fn stage_object(
    b: &DirectoryBackend,
    objects: &ContentStore,
    file: &FlatFile,
    path: &CanonicalPath,
    buf: &mut [u8],
) -> Result<<DirectoryBackend as Backend>::Staged> {
    let damaged = |why: String| {
        Error::internal(format!(
            "the snapshot cannot be restored: the stored content of '{path}' {why}"
        ))
    };
    let object = std::fs::File::open(objects.path(&file.hash))
        .map_err(|e| damaged(format!("cannot be read: {e}")))?;
    let unreadable = |e: std::io::Error| damaged(format!("cannot be read: {e}"));
    let mut staged = b.stage()?;
    let end = object.metadata().map_err(unreadable)?.len();
    // Holes stay holes: a sparse file is restored at the cost of its data.
    let never = AtomicBool::new(false);
    let (hash, _) = read_sparse(&object, end, buf, &never, unreadable, |piece| match piece {
        Piece::Data(_, data) => staged.write_chunk(data),
        Piece::Hole(len) => staged.write_hole(len),
    })?;
    if hash != file.hash || staged.len() != file.size {
        return Err(damaged("is corrupt".to_string()));
    }
    staged.finish()?;
    Ok(staged)
}

/// Writes `bytes` to `path`, replacing it atomically.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        // A full disk leaves no half-written record behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(storage_error)
}

/// Writes `value` as JSON to `path`, replacing it atomically.
fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec(value)
        .map_err(|e| Error::internal(format!("cannot encode a snapshot record: {e}")))?;
    write_atomic(path, &json)
}
