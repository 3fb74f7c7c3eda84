//! A DIRECTORY snapshot as a fork's origin, and a DIRECTORY fork's first
//! snapshot.

use super::{
    hex, new_id, storage_error, write_json, ContentStore, FileIdentity, Hash, InfoFile, Node,
    State, Store, Tree, TreeItem, MAX_TREE_DEPTH,
};
use crate::directory::DirectoryBackend;
use crate::snapshots::fork::{abandoned, EntryAttributes, FileSource, Origin, OriginSource, Visit};
use crate::snapshots::SnapshotInfo;
use sha2::{Digest, Sha256};
use std::path::Path;
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
    /// directory with `None`, a file with its size and stored object. Walks
    /// the manifests one directory at a time, under the origin store's lock
    /// (so that no object goes while the fork reads it). Blocking.
    pub fn for_each(&self, f: &mut Visit<'_>) -> Result<()> {
        let state = self.store.lock();
        let objects = self.store.objects();
        match Store::root_of(&self.info)? {
            Some(root) => {
                let root_path = CanonicalPath::root();
                self.store.visit(
                    &state,
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
                            Some((*size, FileSource::Object(&objects.path(hash)))),
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
                for e in self.store.flatten(&self.info, &state)? {
                    let object = e.file.as_ref().map(|file| objects.path(&file.hash));
                    let file = e
                        .file
                        .as_ref()
                        .zip(object.as_deref())
                        .map(|(file, object)| (file.size, FileSource::Object(object)));
                    let attributes = EntryAttributes::defaults(file.is_none());
                    f(&e.path, attributes, file)?;
                }
                Ok(())
            }
        }
    }
}

/// Gives the fork whose workspace `b` was just made from `origin` its
/// first snapshot, in its store at `session_dir`: the origin's tag, a new
/// id. From a DIRECTORY origin the snapshot's objects and manifests are
/// hard-linked from the origin's store (immutable and named by hash, so
/// both stores share them; copied across filesystems); otherwise the
/// workspace is snapshotted as usual, within `budget`. Blocking.
///
/// The head (what the next snapshot compares against) is the snapshot's
/// manifests with the identities of the fork's own files, read from
/// `workspace_root`, which only this fork has touched yet: the fork's next
/// snapshot, or a restore, then reads only what changed since.
pub fn first_snapshot(
    session_dir: &Path,
    workspace_root: &Path,
    b: &DirectoryBackend,
    origin: &crate::snapshots::fork::Origin,
    budget: u64,
    cancel: &AtomicBool,
) -> Result<SnapshotInfo> {
    let store = Store {
        dir: session_dir.to_path_buf(),
        state: Mutex::new(State::default()),
    };
    let info = origin.info();
    let linked = match origin.source::<ForkSource>() {
        Some(source) => Store::root_of(&source.info)?.map(|root| (source, root)),
        None => None,
    };
    let Some((source, root)) = linked else {
        let taken = store.take(b, info.tag.clone(), budget, cancel)?;
        store.settle(b.durability())?;
        return Ok(taken);
    };
    let head = {
        let origin_state = source.store.lock();
        link_tree(&source.store, &origin_state, &store, &root, 0, cancel)?;
        let walk = Reidentify {
            from: &source.store,
            state: &origin_state,
            to: &store,
            workspace: workspace_root,
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
    Ok(adopted.info())
}

/// Links manifest `hash`, and everything it names, from `from`'s store into
/// `to`'s. A manifest already linked was linked with all it names.
fn link_tree(
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
        match &item.node {
            Node::File { hash, .. } => {
                link_object(&from.objects(), &to.objects(), hash)?;
            }
            Node::Dir { tree } => {
                if !to.trees().path(tree).exists() {
                    link_tree(from, state, to, tree, depth + 1, cancel)?;
                }
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
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(self.workspace.join(path.as_str())).map_err(|e| {
            Error::internal(format!("cannot stat the new workspace's '{path}': {e}"))
        })?;
        let ns = FileIdentity::nanos;
        Ok(FileIdentity {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        })
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

/// Writes `origin`'s entries into `root`, a directory this fork
/// just made and nobody else can reach yet (so plain paths are safe:
/// every entry was checked by [`Origin::check`]). Stops at the next
/// entry once `cancel` is set. Blocking.
///
/// Files get their bits and time as they are made; directories get
/// their bits last, deepest first, so that one without the owner's
/// write bit is filled before it is closed.
pub fn materialise(origin: &Origin, root: &Path, cancel: &AtomicBool) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let made = |path: &CanonicalPath, e: std::io::Error| {
        Error::io_while(e, format!("making the fork's '{path}'"))
    };
    let mut directories = Vec::new();
    origin.for_each(&mut |path, attributes, file| {
        if cancel.load(Ordering::Relaxed) {
            return Err(abandoned());
        }
        let target = root.join(path.as_str());
        let bits = std::fs::Permissions::from_mode(attributes.permissions.bits());
        let Some((_, source)) = file else {
            std::fs::create_dir(&target).map_err(|e| made(path, e))?;
            directories.push((path.clone(), target, bits));
            return Ok(());
        };
        let out = match source {
            FileSource::Bytes(b) => std::fs::File::create_new(&target)
                .and_then(|mut out| std::io::Write::write_all(&mut out, b).map(|()| out)),
            FileSource::Object(p) => clone_file(p, &target),
        }
        .map_err(|e| made(path, e))?;
        out.set_permissions(bits).map_err(|e| made(path, e))?;
        if let Some(modified) = attributes.modified {
            out.set_modified(modified).map_err(|e| made(path, e))?;
        }
        Ok(())
    })?;
    for (path, target, bits) in directories.into_iter().rev() {
        std::fs::set_permissions(&target, bits).map_err(|e| made(&path, e))?;
    }
    Ok(())
}

/// Makes `to` a copy of `from`: sharing its blocks where the filesystem
/// can (`FICLONE`), else copying its data runs (holes stay holes).
fn clone_file(from: &Path, to: &Path) -> std::io::Result<std::fs::File> {
    let src = std::fs::File::open(from)?;
    let dst = std::fs::File::create_new(to)?;
    if rustix::fs::ioctl_ficlone(&dst, &src).is_ok() {
        return Ok(dst);
    }
    crate::directory::backend::copy_data(&src, &dst, 0).map(|_| dst)
}
