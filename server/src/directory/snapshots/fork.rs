//! A DIRECTORY snapshot as a fork's origin, and a DIRECTORY fork's first
//! snapshot.

use super::{
    hex, new_id, storage_error, write_json, ContentStore, FileIdentity, Hash, InfoFile, Node,
    State, Store, Tree, TreeItem, MAX_TREE_DEPTH,
};
use crate::directory::DirectoryBackend;
use crate::limits::SessionLimits;
use crate::snapshots::fork::{abandoned, EntryAttributes, FileSource, Origin, OriginSource, Visit};
use crate::snapshots::phases::Phases;
use crate::snapshots::{SnapshotInfo, SnapshotMirror};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Result};

/// One snapshot of a DIRECTORY session, read for a fork.
pub struct ForkSource {
    store: Arc<Store>,
    info: InfoFile,
}

impl ForkSource {
    pub(super) fn new(store: Arc<Store>, info: InfoFile) -> Self {
        ForkSource { store, info }
    }

    /// Calls `f` with every entry, parents before their children: a
    /// directory with `None`, a file with its size and stored object.
    pub fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        let objects = self.store.objects();
        self.for_each_stored(&mut |path, attributes, file| match file {
            Some((size, hash)) => {
                let object = objects.path(hash);
                f(path, attributes, Some((size, FileSource::Object(&object))))
            }
            None => f(path, attributes, None),
        })
    }

    /// Calls `f` with every entry, parents before their children: a
    /// directory with `None`, a file with its size and content hash.
    /// Walks the manifests one directory at a time, under the origin
    /// store's lock (so that no object goes while the fork reads it).
    /// Blocking.
    fn for_each_stored(&self, f: &mut StoredVisit<'_>) -> Result<()> {
        self.for_each_stored_in(&self.store.lock(), f)
    }

    /// [`ForkSource::for_each_stored`] for a caller that holds the origin
    /// store's lock (`state`).
    fn for_each_stored_in(&self, state: &State, f: &mut StoredVisit<'_>) -> Result<()> {
        match Store::root_of(&self.info)? {
            Some(root) => {
                let root_path = CanonicalPath::root();
                self.store.visit(
                    state,
                    &root,
                    &root_path,
                    0,
                    &mut |path, item| match &item.node {
                        Node::File {
                            size,
                            hash,
                            identity,
                        } => f(
                            path,
                            EntryAttributes {
                                permissions: item.permissions,
                                modified: Some(identity.modified()),
                            },
                            Some((*size, hash)),
                        ),
                        Node::Dir { .. } => {
                            let attributes = EntryAttributes {
                                permissions: item.permissions,
                                modified: None,
                            };
                            f(path, attributes, None)
                        }
                    },
                )
            }
            None => {
                // Written by an earlier version: a flat list of entries.
                for e in self.store.flatten(&self.info, state)? {
                    let file = e.file.as_ref().map(|file| (file.size, &file.hash));
                    let attributes = EntryAttributes::defaults(file.is_none());
                    f(&e.path, attributes, file)?;
                }
                Ok(())
            }
        }
    }
}

/// What [`ForkSource::for_each_stored`] calls with each entry.
type StoredVisit<'a> =
    dyn FnMut(&CanonicalPath, EntryAttributes, Option<(u64, &Hash)>) -> Result<()> + 'a;

/// Gives the fork whose workspace `b` was just made from `origin` its
/// first snapshot, in its store at `session_dir`: the origin's tag, a new
/// id. From a DIRECTORY origin the snapshot's manifests are hard-linked
/// from the origin's store (immutable and named by hash, so both stores
/// share them; copied across filesystems), its objects already linked by
/// [`materialise`]; otherwise the workspace is snapshotted as usual,
/// within `budget`. Each step ends a phase of `phases`. Blocking.
///
/// The head (what the next snapshot compares against) is the snapshot's
/// manifests with the identities of the fork's own files, read from
/// `workspace_root`, which only this fork has touched yet: the fork's next
/// snapshot, or a restore, then reads only what changed since.
#[allow(clippy::too_many_arguments)]
pub fn first_snapshot(
    session_dir: &Path,
    workspace_root: &Path,
    b: &DirectoryBackend,
    origin: &crate::snapshots::fork::Origin,
    budget: u64,
    cancel: &AtomicBool,
    written: &Identities,
    phases: &mut Phases,
) -> Result<SnapshotInfo> {
    let store = Store {
        dir: session_dir.to_path_buf(),
        state: Mutex::new(State::default()),
    };
    let info = origin.info();
    let Some((source, root)) = stored_origin(origin)? else {
        let taken = store.take(b, info.tag.clone(), budget, cancel)?;
        store.settle(b.durability())?;
        phases.mark("first snapshot taken");
        return Ok(taken);
    };
    let head = {
        let origin_state = source.store.lock();
        // Its objects were linked as the workspace was written.
        link_manifests(&source.store, &origin_state, &store, &root, 0, cancel)?;
        phases.mark("manifests linked");
        let walk = Reidentify {
            from: &source.store,
            state: &origin_state,
            to: &store,
            workspace: workspace_root,
            known: Some(written),
        };
        walk.tree(&root, &CanonicalPath::root(), 0)?
    };
    let adopted = InfoFile {
        id: new_id(),
        tag: info.tag.clone(),
        created_at: SystemTime::now(),
        file_count: info.file_count,
        total_bytes: info.total_bytes,
        root: Some(hex(&root)),
    };
    std::fs::create_dir_all(store.manifests()).map_err(storage_error)?;
    write_json(&store.info_path(&adopted.id), &adopted)?;
    store.set_head(&mut store.lock(), Some(head))?;
    store.settle(b.durability())?;
    phases.mark("head");
    Ok(adopted.info())
}

/// The origin's store and root manifest, when the fork's store can share
/// them: a DIRECTORY snapshot with manifests (not an earlier version's
/// flat list). [`materialise`] then links each object into the fork's
/// store as it writes the file, and [`first_snapshot`] the manifests.
fn stored_origin(origin: &Origin) -> Result<Option<(&ForkSource, Hash)>> {
    match origin.source::<ForkSource>() {
        Some(source) => Ok(Store::root_of(&source.info)?.map(|root| (source, root))),
        None => Ok(None),
    }
}

/// Links manifest `hash`, and every manifest beneath it, from `from`'s
/// store into `to`'s, whose objects are all linked already. A manifest
/// already linked was linked with all it names.
fn link_manifests(
    from: &Store,
    state: &State,
    to: &Store,
    hash: &Hash,
    depth: usize,
    cancel: &AtomicBool,
) -> Result<()> {
    if depth > MAX_TREE_DEPTH {
        return Err(Error::internal(
            "the snapshot store's manifests nest too deep",
        ));
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(abandoned());
    }
    let tree = from.tree(state, hash)?;
    for item in &tree.items {
        if let Node::Dir { tree } = &item.node {
            if !to.trees().path(tree).exists() {
                link_manifests(from, state, to, tree, depth + 1, cancel)?;
            }
        }
    }
    // Last, so that a manifest present means all it names is present.
    link_object(&from.trees(), &to.trees(), hash)?;
    Ok(())
}

/// Puts `from`'s object `hash` into `to` as a hard link (a copy across
/// filesystems); `false` when `to` holds it already.
fn link_object(from: &ContentStore, to: &ContentStore, hash: &Hash) -> Result<bool> {
    let (source, target) = (from.path(hash), to.path(hash));
    let mut linked = std::fs::hard_link(&source, &target);
    if linked
        .as_ref()
        .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    {
        // The first object under its two-hex-digit directory (or the
        // source is gone, which the second try reports).
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(storage_error)?;
        }
        linked = std::fs::hard_link(&source, &target);
    }
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
            let (tmp, _) = to.temp_file()?;
            let copied = std::fs::copy(&source, &tmp)
                .map_err(storage_error)
                .and_then(|_| to.publish(&tmp, hash));
            let _ = std::fs::remove_file(&tmp);
            copied.map(|made| made.is_some())
        }
        Err(e) => Err(storage_error(e)),
    }
}

/// Rewrites a snapshot's manifests with the identities of the fork's own
/// files (or a recovered session's), storing them in the fork's store.
pub(super) struct Reidentify<'a> {
    pub(super) from: &'a Store,
    pub(super) state: &'a State,
    pub(super) to: &'a Store,
    pub(super) workspace: &'a Path,
    /// Identities already read (as the files were written); any other
    /// file is read from `workspace`.
    pub(super) known: Option<&'a Identities>,
}

impl Reidentify<'_> {
    /// The fork's manifest for the origin's manifest `hash` at `path`.
    pub(super) fn tree(&self, hash: &Hash, path: &CanonicalPath, depth: usize) -> Result<Hash> {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::internal(
                "the snapshot store's manifests nest too deep",
            ));
        }
        let tree = self.from.tree(self.state, hash)?;
        let mut items = Vec::with_capacity(tree.items.len());
        for item in &tree.items {
            let child = path.join(&item.name)?;
            let node = match &item.node {
                Node::File { size, hash, .. } => Node::File {
                    size: *size,
                    hash: *hash,
                    identity: self.identity(&child)?,
                },
                Node::Dir { tree } => Node::Dir {
                    tree: self.tree(tree, &child, depth + 1)?,
                },
            };
            items.push(TreeItem {
                name: item.name.clone(),
                node,
                permissions: item.permissions,
            });
        }
        let bytes = Tree { items }.encode();
        let hash: Hash = Sha256::digest(&bytes).into();
        self.to.trees().store_bytes(&hash, &bytes)?;
        Ok(hash)
    }

    /// What a snapshot's walk records of the fork's file at `path` (a
    /// different reading would only make the next snapshot hash it).
    fn identity(&self, path: &CanonicalPath) -> Result<FileIdentity> {
        if let Some(identity) = self.known.and_then(|known| known.get(path)) {
            return Ok(*identity);
        }
        let meta = std::fs::symlink_metadata(self.workspace.join(path.as_str())).map_err(|e| {
            Error::internal(format!("cannot stat the new workspace's '{path}': {e}"))
        })?;
        Ok(FileIdentity::of(&meta))
    }
}

impl OriginSource for ForkSource {
    fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        ForkSource::for_each(self, f)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The identity each file of a new workspace had when it was written,
/// by path: what its first snapshot's head records, read from the handle
/// that wrote it rather than by a second walk.
pub type Identities = HashMap<CanonicalPath, FileIdentity>;

/// Threads that write a fork's files at once. Each holds one batch of
/// files; the walk hands them at most [`MATERIALISE_QUEUE`] files more,
/// in batches of [`MATERIALISE_BATCH`] (a fetched content's batch is one
/// file, so that a few slow fetches never wait behind each other), each
/// a path and an open handle, a shared MEMORY content or a hash, so
/// memory stays bounded whatever the snapshot holds.
const MATERIALISE_THREADS: usize = 4;
const MATERIALISE_QUEUE: usize = 64;
/// Files handed over at once: one wake-up of a writing thread per batch,
/// not per file.
const MATERIALISE_BATCH: usize = 16;

/// One file for a worker to write.
struct FileJob {
    path: CanonicalPath,
    target: PathBuf,
    source: JobSource,
    bits: u32,
    modified: Option<SystemTime>,
}

enum JobSource {
    Bytes(Bytes),
    /// The stored object, opened by the walk while it held the origin
    /// store's lock (so that no object goes before the fork reads it).
    Object(std::fs::File),
    /// A stored object by hash, opened by the writing thread while the
    /// walk holds the origin store's lock; once the file is written, the
    /// object is linked into the fork's store ([`Writers::link`]).
    Stored(Hash),
    /// A content the local store lacks, streamed from the object store.
    Fetch {
        hash: Hash,
        size: u64,
    },
}

/// What the walk hands [`write_tree`] for each entry: a directory with
/// `None`, a file with where its bytes come from.
type Emit<'a> = dyn FnMut(&CanonicalPath, EntryAttributes, Option<JobSource>) -> Result<()> + 'a;

/// Writes `origin`'s entries into `root`, a directory this fork
/// just made and nobody else can reach yet (so plain paths are safe:
/// every entry was checked by [`Origin::check`]). Stops at the next
/// entry once `cancel` is set. Blocking. Returns the identity of every
/// file written.
///
/// The walk makes the directories itself, parents first, and hands the
/// files to [`MATERIALISE_THREADS`] threads, which clone or copy each
/// from its object (in the kernel: no bytes through this process) and
/// give it its bits and time. Directories get their bits last, deepest
/// first, so that one without the owner's write bit is filled before it
/// is closed.
///
/// From a DIRECTORY snapshot with manifests, each file's object is also
/// hard-linked into the fork's store under `session_dir` (the store's
/// files, never the workspace's), by the thread that wrote the file,
/// while the walk holds the origin store's lock.
pub fn materialise(
    origin: &Origin,
    root: &Path,
    session_dir: &Path,
    cancel: &AtomicBool,
) -> Result<Identities> {
    let Some((source, _)) = stored_origin(origin)? else {
        return write_tree(root, cancel, Writers::plain(), &mut |emit| {
            origin.for_each(&mut |path, attributes, file| {
                let source = match file {
                    None => None,
                    Some((_, FileSource::Bytes(b))) => Some(JobSource::Bytes(b.clone())),
                    Some((_, FileSource::Object(p))) => Some(JobSource::Object(
                        std::fs::File::open(p).map_err(|e| making(path, e))?,
                    )),
                };
                emit(path, attributes, source)
            })
        });
    };
    let from = source.store.objects();
    let to = ContentStore {
        dir: session_dir.join("objects"),
    };
    let writers = Writers {
        link: Some((&from, &to)),
        ..Writers::plain()
    };
    // Held until every thread is done: no object goes before it is linked.
    let state = source.store.lock();
    write_tree(root, cancel, writers, &mut |emit| {
        source.for_each_stored_in(&state, &mut |path, attributes, file| {
            let source = file.map(|(_, hash)| JobSource::Stored(*hash));
            emit(path, attributes, source)
        })
    })
}

/// Writes snapshot `id` of the store under `session_dir` into `root`, as
/// a fork writes its workspace, each content streamed from `fetch` (the
/// object store) straight into its file and checked against its hash:
/// for a session just recovered from the object store, whose workspace
/// (just made, empty) nobody can reach until its session file is
/// written, and whose store keeps no copy of these contents (each byte
/// is written once). Refuses, before anything is written, a snapshot
/// over `limits`. [`crate::snapshots::FETCH_CONCURRENCY`] files at once.
/// Blocking.
pub fn materialise_fetched(
    session_dir: &Path,
    id: &str,
    root: &Path,
    limits: &SessionLimits,
    fetch: &dyn SnapshotMirror,
) -> Result<Identities> {
    let store = Arc::new(Store {
        dir: session_dir.to_path_buf(),
        state: Mutex::new(State::default()),
    });
    let info = store.read_info(&crate::snapshots::parse_id(id)?)?;
    let origin = Origin::new(info.clone().info(), ForkSource::new(store, info));
    origin.check(limits)?;
    let source = origin
        .source::<ForkSource>()
        .ok_or_else(|| Error::internal("a recovered snapshot is not a stored one"))?;
    let writers = Writers {
        threads: crate::snapshots::FETCH_CONCURRENCY,
        batch: 1,
        fetch: Some(fetch),
        link: None,
    };
    write_tree(root, &AtomicBool::new(false), writers, &mut |emit| {
        source.for_each_stored(&mut |path, attributes, file| {
            let source = file.map(|(size, hash)| JobSource::Fetch { hash: *hash, size });
            emit(path, attributes, source)
        })
    })
}

/// The threads that write a new workspace's files, and where they get
/// and put what is not in the job itself.
#[derive(Clone, Copy)]
struct Writers<'a> {
    threads: usize,
    /// Files handed to a thread at once.
    batch: usize,
    /// The object store, for [`JobSource::Fetch`].
    fetch: Option<&'a dyn SnapshotMirror>,
    /// The origin's objects and the fork's, for [`JobSource::Stored`].
    link: Option<(&'a ContentStore, &'a ContentStore)>,
}

impl Writers<'_> {
    fn plain() -> Self {
        Writers {
            threads: MATERIALISE_THREADS,
            batch: MATERIALISE_BATCH,
            fetch: None,
            link: None,
        }
    }
}

fn making(path: &CanonicalPath, e: std::io::Error) -> Error {
    Error::io_while(e, format!("making the fork's '{path}'"))
}

/// The shared part of [`materialise`] and [`materialise_fetched`]: `walk`
/// emits every entry, parents first; directories are made as they come,
/// files written by `threads` threads.
fn write_tree(
    root: &Path,
    cancel: &AtomicBool,
    writers: Writers<'_>,
    walk: &mut dyn FnMut(&mut Emit<'_>) -> Result<()>,
) -> Result<Identities> {
    use std::os::unix::fs::PermissionsExt;
    let mut directories = Vec::new();
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let identities: Mutex<Identities> = Mutex::default();
    // Set once the filesystem has refused a clone: every other file is
    // copied without asking again.
    let no_clone = AtomicBool::new(false);
    let batch = writers.batch.max(1);
    let (send, receive) =
        std::sync::mpsc::sync_channel::<Vec<FileJob>>((MATERIALISE_QUEUE / batch).max(1));
    let receive = Mutex::new(receive);
    let mut pending = Vec::with_capacity(batch);
    let walked = std::thread::scope(|scope| {
        for _ in 0..writers.threads {
            let (receive, failed, identities) = (&receive, &failed, &identities);
            let no_clone = &no_clone;
            scope.spawn(move || loop {
                let jobs = match receive.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                    Ok(jobs) => jobs,
                    Err(_) => return,
                };
                let mut written = Vec::with_capacity(jobs.len());
                for job in jobs {
                    match write_file(&job, no_clone, writers) {
                        Ok(identity) => written.push((job.path, identity)),
                        Err(e) => {
                            failed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(e);
                            break;
                        }
                    }
                }
                identities
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(written);
            });
        }
        let hand_over = |jobs: Vec<FileJob>| {
            send.send(jobs)
                .map_err(|_| Error::internal("the fork's writing threads stopped"))
        };
        let walked = walk(&mut |path, attributes, source| {
            if cancel.load(Ordering::Relaxed) {
                return Err(abandoned());
            }
            if let Some(e) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(e);
            }
            let target = root.join(path.as_str());
            let bits = attributes.permissions.bits();
            let Some(source) = source else {
                std::fs::create_dir(&target).map_err(|e| making(path, e))?;
                directories.push((path.clone(), target, bits));
                return Ok(());
            };
            pending.push(FileJob {
                path: path.clone(),
                target,
                source,
                bits,
                modified: attributes.modified,
            });
            if pending.len() < batch {
                return Ok(());
            }
            hand_over(std::mem::replace(&mut pending, Vec::with_capacity(batch)))
        });
        let walked = match walked {
            Ok(()) if !pending.is_empty() => hand_over(std::mem::take(&mut pending)),
            other => other,
        };
        // Closing the queue lets the threads finish what they hold.
        drop(send);
        walked
    });
    walked?;
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if cancel.load(Ordering::Relaxed) {
        return Err(abandoned());
    }
    for (path, target, bits) in directories.into_iter().rev() {
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(bits))
            .map_err(|e| making(&path, e))?;
    }
    Ok(identities.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Makes one file of a fork, with its bits and time, and returns its
/// identity from the handle that wrote it.
fn write_file(job: &FileJob, no_clone: &AtomicBool, writers: Writers<'_>) -> Result<FileIdentity> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let made = |e| making(&job.path, e);
    let out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(job.bits)
        .open(&job.target)
        .map_err(made)?;
    match &job.source {
        JobSource::Bytes(b) => std::io::Write::write_all(&mut &out, b).map_err(made)?,
        JobSource::Object(src) => clone_file(src, &out, no_clone).map_err(made)?,
        JobSource::Stored(hash) => {
            let (from, to) = writers
                .link
                .ok_or_else(|| Error::internal("no store to link the fork's objects into"))?;
            let src = std::fs::File::open(from.path(hash)).map_err(made)?;
            clone_file(&src, &out, no_clone).map_err(made)?;
            link_object(from, to, hash)?;
        }
        JobSource::Fetch { hash, size } => {
            let fetch = writers
                .fetch
                .ok_or_else(|| Error::internal("no object store to fetch from"))?;
            write_fetched(&out, fetch, hash, *size, &job.path)?;
        }
    }
    if !created_with(job.bits) {
        out.set_permissions(std::fs::Permissions::from_mode(job.bits))
            .map_err(made)?;
    }
    if let Some(modified) = job.modified {
        out.set_modified(modified).map_err(made)?;
    }
    Ok(FileIdentity::of(&out.metadata().map_err(made)?))
}

/// Whether a file created with permission `bits` has them all: none is
/// in the process's umask (read once from `/proc/self/status`; the server
/// never changes it). Unknown: no, and the bits are set on the handle.
fn created_with(bits: u32) -> bool {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    let umask = UMASK.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let mask = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(mask.trim(), 8).ok()
    });
    umask.is_some_and(|mask| bits & mask == 0)
}

/// Streams content `hash` of `size` bytes from `fetch` into `out` (new,
/// empty), runs of zeros left as holes, checking it against its hash.
fn write_fetched(
    out: &std::fs::File,
    fetch: &dyn SnapshotMirror,
    hash: &Hash,
    size: u64,
    path: &CanonicalPath,
) -> Result<()> {
    let mut hasher = Sha256::new();
    // Bytes received, and the end of those written (zeros are skipped).
    let (mut received, mut end) = (0u64, 0u64);
    fetch.stream_content(hash, &mut |chunk| {
        hasher.update(chunk);
        if received + chunk.len() as u64 > size {
            // Longer than the snapshot says: damaged, and never written.
            return Err(super::restore::fetched_damaged(path));
        }
        if let Some(wrote_to) = write_data(out, chunk, received).map_err(|e| making(path, e))? {
            end = wrote_to;
        }
        received += chunk.len() as u64;
        Ok(())
    })?;
    if <[u8; 32]>::from(hasher.finalize()) != *hash || received != size {
        return Err(super::restore::fetched_damaged(path));
    }
    if end < size {
        // A hole at the end (a truncate costs a journal update per file,
        // so only then).
        out.set_len(size).map_err(|e| making(path, e))?;
    }
    Ok(())
}

/// Zeros are left as holes in blocks of this many bytes.
const HOLE_BLOCK: usize = 4096;

/// Writes `chunk` into `out` (new) at `at`, each run of whole zero
/// [`HOLE_BLOCK`]s left as a hole and each run of data written in one
/// call; the end of the last data written, if any.
fn write_data(out: &std::fs::File, chunk: &[u8], at: u64) -> std::io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let (mut data_from, mut end) = (None, None);
    let mut write = |from: usize, to: usize| {
        end = Some(at + to as u64);
        out.write_all_at(&chunk[from..to], at + from as u64)
    };
    for (i, block) in chunk.chunks(HOLE_BLOCK).enumerate() {
        let start = i * HOLE_BLOCK;
        if block.iter().any(|&byte| byte != 0) {
            data_from.get_or_insert(start);
        } else if let Some(from) = data_from.take() {
            write(from, start)?;
        }
    }
    if let Some(from) = data_from {
        write(from, chunk.len())?;
    }
    Ok(end)
}

/// Makes `dst` (new, empty) a copy of `src`: sharing its blocks where the
/// filesystem can (`FICLONE`, not tried again once refused), else copying
/// its data in the kernel (holes stay holes).
fn clone_file(
    src: &std::fs::File,
    dst: &std::fs::File,
    no_clone: &AtomicBool,
) -> std::io::Result<()> {
    if !no_clone.load(Ordering::Relaxed) {
        if rustix::fs::ioctl_ficlone(dst, src).is_ok() {
            return Ok(());
        }
        no_clone.store(true, Ordering::Relaxed);
    }
    if copy_allocated(src, dst)? {
        return Ok(());
    }
    crate::directory::backend::copy_data(src, dst, 0).map(|_| ())
}

/// Copies `src` whole into `dst` (new, empty) in the kernel when `src`
/// has no holes (as many blocks as its length needs), without asking
/// where its data lies; `false` when it may have holes, or the kernel
/// cannot copy between the two, for the copy that keeps holes.
fn copy_allocated(src: &std::fs::File, dst: &std::fs::File) -> std::io::Result<bool> {
    use rustix::io::Errno;
    use std::os::unix::fs::MetadataExt;
    let meta = src.metadata()?;
    let size = meta.len();
    if meta.blocks() * 512 < size {
        return Ok(false);
    }
    let (mut from, mut to) = (0u64, 0u64);
    while from < size {
        let want = usize::try_from(size - from).unwrap_or(usize::MAX);
        match rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), want) {
            Ok(0) => return Ok(false),
            Ok(_) | Err(Errno::INTR) => {}
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP | Errno::PERM) => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Data runs are written whole and whole zero blocks become holes:
    /// the file reads back as the chunk, and a mostly-zero one takes
    /// fewer blocks than its length.
    #[test]
    fn write_data_leaves_zero_blocks_as_holes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let out = std::fs::File::create_new(&path).unwrap();
        let mut chunk = vec![0u8; 64 * HOLE_BLOCK];
        chunk[HOLE_BLOCK + 7] = 1;
        chunk[40 * HOLE_BLOCK] = 2;
        let end = write_data(&out, &chunk, 5 * HOLE_BLOCK as u64).unwrap();
        assert_eq!(end, Some((5 + 41) * HOLE_BLOCK as u64));
        out.set_len((69 * HOLE_BLOCK) as u64).unwrap();
        let read = std::fs::read(&path).unwrap();
        assert_eq!(&read[5 * HOLE_BLOCK..], &chunk[..]);
        assert!(read[..5 * HOLE_BLOCK].iter().all(|&b| b == 0));
        let allocated = out.metadata().unwrap().blocks() * 512;
        assert!(
            allocated < (16 * HOLE_BLOCK) as u64,
            "{allocated} bytes allocated for two blocks of data"
        );
        assert_eq!(write_data(&out, &[0u8; 100], 0).unwrap(), None);
    }
}
