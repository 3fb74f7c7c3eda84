//! Snapshots of a DIRECTORY session: a content-addressed store on disk.
//!
//! Everything lives under the session's directory in the data directory,
//! beside (never inside) the workspace root:
//!
//! ```text
//! sessions/<id>/objects/<aa>/<62 hex>     file contents, named by SHA-256
//! sessions/<id>/objects/tmp/              objects being written
//! sessions/<id>/snapshots/<uuid>.json     a snapshot's info (its presence
//!                                         makes the snapshot exist)
//! sessions/<id>/snapshots/<uuid>.entries  its entries: path, size, hash
//! sessions/<id>/snapshot-index.json       path -> (inode, size, mtime,
//!                                         ctime, hash) as last hashed
//! ```
//!
//! An unchanged file is stored once, however many snapshots hold it. A
//! snapshot stats every entry (one `statx` each, by descriptor, through
//! [`DirectoryBackend::tree`]) but reads and hashes only the files whose
//! identity differs from the index, so its cost in reads and writes grows
//! with what changed. Files are read through the backend's `open` and
//! restored through `stage`/`commit`, `mkdir` and `remove`: the
//! symlink-proof paths every other call takes.

use super::{
    new_id, not_found, parse_id, read_only, Restored, SnapshotEntry, SnapshotFiles, SnapshotInfo,
    SnapshotStore,
};
use crate::backend::directory::{FileIdentity, TreeKind};
use crate::backend::{Backend, CommitMode, Content, DirectoryBackend, StagedFile};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, PathLimits, Result};

const COPY_BUFFER: usize = 1024 * 1024;
const INFO_SUFFIX: &str = ".json";
const ENTRIES_SUFFIX: &str = ".entries";

pub struct DirectorySnapshots {
    workspace: Arc<Workspace<DirectoryBackend>>,
    store: Arc<Store>,
}

impl DirectorySnapshots {
    /// The snapshots of the workspace, kept under `session_dir` (which must
    /// lie outside the workspace root).
    pub fn new(workspace: Arc<Workspace<DirectoryBackend>>, session_dir: &Path) -> Self {
        DirectorySnapshots {
            workspace,
            store: Arc::new(Store {
                dir: session_dir.to_path_buf(),
                lock: Mutex::new(()),
            }),
        }
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
        self.workspace.exclusive(move |b| store.take(b, tag)).await
    }

    async fn restore(&self, id: &str) -> Result<Restored> {
        if self.workspace.is_read_only() {
            return Err(read_only());
        }
        let key = parse_id(id)?;
        let store = self.store.clone();
        self.workspace
            .exclusive(move |b| store.restore(b, &key))
            .await
    }

    async fn list(&self) -> Result<Vec<SnapshotInfo>> {
        self.blocking(|s| {
            let _lock = s.lock();
            s.infos()
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let key = parse_id(id)?;
        self.blocking(move |s| s.delete(&key)).await
    }

    async fn files(&self, id: &str) -> Result<SnapshotFiles> {
        let key = parse_id(id)?;
        self.blocking(move |s| {
            let _lock = s.lock();
            s.read_info(&key)?;
            let entries = s.read_entries(&key)?;
            let objects = s.objects();
            Ok(Box::new(entries.into_iter().map(move |e| e.open(&objects))) as SnapshotFiles)
        })
        .await
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

/// One entry of a snapshot: a directory when `hash` is absent.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManifestEntry {
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    #[serde(default)]
    size: u64,
}

impl ManifestEntry {
    fn canonical(&self) -> Result<CanonicalPath> {
        CanonicalPath::parse(&self.path, &PathLimits::UNLIMITED)
    }

    fn open(self, objects: &Objects) -> Result<SnapshotEntry> {
        let path = self.canonical()?;
        Ok(match &self.hash {
            None => SnapshotEntry::Directory { path },
            Some(hash) => SnapshotEntry::File {
                path,
                size: self.size,
                content: Content::Disk(objects.open(hash)?),
            },
        })
    }
}

/// What the index remembers of a file it hashed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Indexed {
    identity: FileIdentity,
    hash: String,
}

type Index = BTreeMap<String, Indexed>;

/// The content-addressed objects directory.
#[derive(Clone)]
struct Objects {
    dir: PathBuf,
}

impl Objects {
    fn path(&self, hash: &str) -> PathBuf {
        let (head, rest) = hash.split_at(2.min(hash.len()));
        self.dir.join(head).join(rest)
    }

    fn open(&self, hash: &str) -> Result<std::fs::File> {
        std::fs::File::open(self.path(hash)).map_err(|e| {
            Error::internal(format!(
                "a snapshot's stored content {hash} cannot be read: {e}"
            ))
        })
    }

    /// Copies `content` into the store while hashing it; returns the hash
    /// and the bytes copied. Content already stored is not kept twice.
    fn store(
        &self,
        mut content: impl Read,
        path: &CanonicalPath,
        buf: &mut [u8],
    ) -> Result<(String, u64)> {
        let tmp_dir = self.dir.join("tmp");
        std::fs::create_dir_all(&tmp_dir).map_err(storage_error)?;
        let tmp = tmp_dir.join(new_id());
        let result = (|| {
            let mut out = std::fs::File::create_new(&tmp).map_err(storage_error)?;
            let mut hasher = Sha256::new();
            let mut size = 0u64;
            loop {
                let n = match content.read(buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Error::from_io(e, path)),
                };
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n]).map_err(storage_error)?;
                size += n as u64;
            }
            let hash = hex(&hasher.finalize());
            let target = self.path(&hash);
            if !target.exists() {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent).map_err(storage_error)?;
                }
                std::fs::rename(&tmp, &target).map_err(storage_error)?;
            }
            Ok((hash, size))
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn storage_error(e: std::io::Error) -> Error {
    Error::internal(format!("the snapshot store failed: {e}"))
}

/// The on-disk store of one session.
struct Store {
    /// The session's directory.
    dir: PathBuf,
    /// Serialises snapshot, restore, delete and reads of the store.
    lock: Mutex<()>,
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn objects(&self) -> Objects {
        Objects {
            dir: self.dir.join("objects"),
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

    fn index_path(&self) -> PathBuf {
        self.dir.join("snapshot-index.json")
    }

    /// The index, or an empty one when it is missing or unreadable (every
    /// file is then hashed again: slower, never wrong).
    fn load_index(&self) -> Index {
        std::fs::read(self.index_path())
            .ok()
            .and_then(|raw| serde_json::from_slice(&raw).ok())
            .unwrap_or_default()
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

    fn read_entries(&self, id: &str) -> Result<Vec<ManifestEntry>> {
        let raw = std::fs::read(self.entries_path(id)).map_err(storage_error)?;
        serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("snapshot {id} has a corrupt manifest: {e}")))
    }

    fn infos(&self) -> Result<Vec<SnapshotInfo>> {
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
                Ok(info) => infos.push(info.info()),
                // Deleted since listed.
                Err(Error::SnapshotNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        infos.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(infos)
    }

    /// Takes a snapshot of the workspace (the caller holds its write lock).
    fn take(&self, b: &DirectoryBackend, tag: String) -> Result<SnapshotInfo> {
        let _lock = self.lock();
        let objects = self.objects();
        let mut old_index = self.load_index();
        let mut buf = vec![0u8; COPY_BUFFER];
        let mut index = Index::new();
        let mut entries = Vec::new();
        let (mut file_count, mut total_bytes) = (0u64, 0u64);
        for e in b.tree()? {
            match e.kind {
                TreeKind::Other => continue,
                TreeKind::Directory => entries.push(ManifestEntry {
                    path: e.path.as_str().to_string(),
                    hash: None,
                    size: 0,
                }),
                TreeKind::File => {
                    let known = old_index
                        .remove(e.path.as_str())
                        .filter(|k| k.identity == e.identity);
                    let (hash, size) = match known {
                        Some(k) => (k.hash, e.size),
                        None => match b.open(&e.path) {
                            Ok(file) => {
                                let Content::Disk(f) = file.content else {
                                    return Err(Error::internal(
                                        "the directory backend opened a file in memory",
                                    ));
                                };
                                objects.store(f, &e.path, &mut buf)?
                            }
                            // Gone, or swapped for a link or directory,
                            // since the walk: not a file to keep.
                            Err(
                                Error::FileNotFound { .. }
                                | Error::PermissionDenied { .. }
                                | Error::IsADirectory { .. },
                            ) => continue,
                            Err(err) => return Err(err),
                        },
                    };
                    index.insert(
                        e.path.as_str().to_string(),
                        Indexed {
                            identity: e.identity,
                            hash: hash.clone(),
                        },
                    );
                    file_count += 1;
                    total_bytes += size;
                    entries.push(ManifestEntry {
                        path: e.path.as_str().to_string(),
                        hash: Some(hash),
                        size,
                    });
                }
            }
        }
        let info = InfoFile {
            id: new_id(),
            tag,
            created_at: SystemTime::now(),
            file_count,
            total_bytes,
        };
        std::fs::create_dir_all(self.manifests()).map_err(storage_error)?;
        // Entries first: the info file's arrival is what makes the snapshot
        // exist, so a crash in between leaves no half snapshot.
        write_json(&self.entries_path(&info.id), &entries)?;
        write_json(&self.info_path(&info.id), &info)?;
        write_json(&self.index_path(), &index)?;
        Ok(info.info())
    }

    /// Makes the workspace exactly snapshot `id` (the caller holds its write
    /// lock). Everything is checked before the first change.
    fn restore(&self, b: &DirectoryBackend, id: &str) -> Result<Restored> {
        let _lock = self.lock();
        let info = self.read_info(id)?;
        let target = self.read_entries(id)?;
        let objects = self.objects();
        let mut wanted: BTreeMap<&str, &ManifestEntry> = BTreeMap::new();
        for e in &target {
            e.canonical()?;
            wanted.insert(e.path.as_str(), e);
        }
        let index = self.load_index();
        // Plan first: what goes (what the snapshot does not hold), and which
        // files already hold the snapshot's bytes.
        let mut unchanged = HashSet::new();
        let mut doomed: Vec<CanonicalPath> = Vec::new();
        for e in b.tree()? {
            if doomed.last().is_some_and(|r| e.path.starts_with(r)) {
                continue;
            }
            let keep = match (e.kind, wanted.get(e.path.as_str()).map(|w| &w.hash)) {
                (TreeKind::Directory, Some(None)) => true,
                (TreeKind::File, Some(Some(hash))) => {
                    let same = index
                        .get(e.path.as_str())
                        .is_some_and(|k| k.identity == e.identity && &k.hash == hash);
                    if same {
                        unchanged.insert(e.path.as_str().to_string());
                    }
                    true
                }
                _ => false,
            };
            if !keep {
                doomed.push(e.path);
            }
        }
        // Every content to write must be there before the first change.
        for e in &target {
            if let (Some(hash), false) = (&e.hash, unchanged.contains(&e.path)) {
                if !objects.path(hash).is_file() {
                    return Err(Error::internal(format!(
                        "snapshot {id} cannot be restored: the stored content of '{}' is missing",
                        e.path
                    )));
                }
            }
        }
        for path in &doomed {
            match b.remove(path, true) {
                // Gone with a removed ancestor, or since the walk.
                Ok(_) | Err(Error::FileNotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        // Then create, parents before children (manifests are in path order).
        let put = CommitMode {
            append: false,
            create_parents: true,
        };
        let mut buf = vec![0u8; COPY_BUFFER];
        for e in &target {
            let path = e.canonical()?;
            match &e.hash {
                None => {
                    b.mkdir(&path, true)?;
                }
                Some(_) if unchanged.contains(&e.path) => {}
                Some(hash) => {
                    let mut object = objects.open(hash)?;
                    let mut staged = b.stage()?;
                    loop {
                        let n = match object.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => n,
                            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                            Err(err) => return Err(storage_error(err)),
                        };
                        staged.write_chunk(&buf[..n])?;
                    }
                    b.commit(staged, &path, put)?;
                }
            }
        }
        Ok(Restored {
            file_count: info.file_count,
            total_bytes: info.total_bytes,
        })
    }

    /// Deletes snapshot `id`, then every object no other snapshot holds.
    fn delete(&self, id: &str) -> Result<()> {
        let _lock = self.lock();
        self.read_info(id)?;
        std::fs::remove_file(self.info_path(id)).map_err(storage_error)?;
        let _ = std::fs::remove_file(self.entries_path(id));
        self.collect_garbage()
    }

    fn collect_garbage(&self) -> Result<()> {
        let mut live = HashSet::new();
        for info in self.infos()? {
            for e in self.read_entries(&info.id)? {
                if let Some(hash) = e.hash {
                    live.insert(hash);
                }
            }
        }
        let objects = self.objects();
        let _ = std::fs::remove_dir_all(objects.dir.join("tmp"));
        let heads = match std::fs::read_dir(&objects.dir) {
            Ok(h) => h,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(storage_error(e)),
        };
        for head in heads {
            let head = head.map_err(storage_error)?;
            let head_name = head.file_name().to_string_lossy().into_owned();
            for object in std::fs::read_dir(head.path()).map_err(storage_error)? {
                let object = object.map_err(storage_error)?;
                let hash = format!("{head_name}{}", object.file_name().to_string_lossy());
                if !live.contains(&hash) {
                    std::fs::remove_file(object.path()).map_err(storage_error)?;
                }
            }
            // Only succeeds once empty.
            let _ = std::fs::remove_dir(head.path());
        }
        // The index may only name stored content.
        let mut index = self.load_index();
        index.retain(|_, k| live.contains(&k.hash));
        write_json(&self.index_path(), &index)
    }
}

/// Writes `value` as JSON to `path`, replacing it atomically.
fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec(value)
        .map_err(|e| Error::internal(format!("cannot encode a snapshot record: {e}")))?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).map_err(storage_error)?;
    std::fs::rename(&tmp, path).map_err(storage_error)
}
