//! The in-memory backend: the embedded default.
//!
//! The whole tree is one ordered map from canonical path string to node,
//! behind one mutex, so every operation is atomic. Keys sort bytewise, which
//! is exactly the order listings, globs and greps report. File contents are
//! `Bytes`: an open file is a cheap clone that later writes never change.

use crate::backend::{
    check_name, check_transfer, symlink_denied, Backend, CommitMode, Content, OpenFile, Patch,
    StagedFile,
};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, FileKind, Metadata, Permissions, Result};

/// What a node is.
#[derive(Clone, PartialEq, Eq)]
enum Body {
    Directory,
    File(Bytes),
    /// A symbolic link and its target, never followed.
    Link(String),
}

impl From<Option<Bytes>> for Body {
    /// An image's entry: `None` is a directory.
    fn from(data: Option<Bytes>) -> Body {
        data.map_or(Body::Directory, Body::File)
    }
}

#[derive(Clone)]
struct Node {
    body: Body,
    created: SystemTime,
    modified: SystemTime,
    version: u64,
    permissions: Permissions,
}

impl Node {
    fn is_dir(&self) -> bool {
        self.body == Body::Directory
    }

    /// A regular file's bytes; `None` for a directory or a link.
    fn data(&self) -> Option<&Bytes> {
        match &self.body {
            Body::File(data) => Some(data),
            _ => None,
        }
    }

    fn meta(&self, path: &str) -> Metadata {
        let (kind, size, symlink_target) = match &self.body {
            Body::Directory => (FileKind::Directory, 0, None),
            Body::File(data) => (FileKind::File, data.len() as u64, None),
            Body::Link(target) => (FileKind::Symlink, target.len() as u64, Some(target.clone())),
        };
        Metadata {
            path: CanonicalPath::from_canonical(path),
            kind,
            size,
            created: self.created,
            modified: self.modified,
            version: self.version,
            permissions: self.permissions,
            symlink_target,
        }
    }
}

struct Tree {
    /// Always holds the root under the empty key.
    nodes: BTreeMap<String, Node>,
    /// The session's version counter: every change takes the next value.
    clock: u64,
}

impl Tree {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn new_node(&mut self, body: Body, permissions: Permissions) -> Node {
        let now = SystemTime::now();
        Node {
            body,
            created: now,
            modified: now,
            version: self.tick(),
            permissions,
        }
    }

    /// The node a restore puts at a path that held `old`: `old` itself
    /// (its version kept) when it already equals `entry`, else a new node
    /// with `entry`'s bytes, bits and time, at a fresh version.
    fn restored_node(&mut self, old: Option<Node>, entry: &ImageEntry) -> Node {
        match old.filter(|n| entry.same_as(n)) {
            Some(node) => node,
            None => {
                let mut node = self.new_node(entry.data.clone().into(), entry.permissions);
                node.modified = entry.modified;
                node
            }
        }
    }

    /// Keys strictly beneath `dir`, in order.
    fn descendants<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let (lower, prefix) = if dir.is_empty() {
            (Bound::Excluded(String::new()), String::new())
        } else {
            let p = format!("{dir}/");
            (Bound::Included(p.clone()), p)
        };
        self.nodes
            .range::<String, _>((lower, Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(&prefix))
    }

    fn descendant_keys(&self, dir: &str) -> Vec<String> {
        self.descendants(dir).map(|(k, _)| k.clone()).collect()
    }

    /// Checks that every ancestor of `path` is a directory. Returns the first
    /// missing ancestor, if any.
    fn check_ancestors(&self, path: &CanonicalPath) -> Result<Option<CanonicalPath>> {
        let mut ancestor = path.parent();
        let mut chain = Vec::new();
        while let Some(a) = ancestor {
            ancestor = a.parent();
            chain.push(a);
        }
        for a in chain.into_iter().rev() {
            match self.nodes.get(a.as_str()) {
                Some(n) if n.is_dir() => {}
                Some(Node {
                    body: Body::Link(_),
                    ..
                }) => return Err(symlink_denied(&a, false)),
                Some(_) => {
                    return Err(Error::NotADirectory {
                        path: a.as_str().to_string(),
                    })
                }
                None => return Ok(Some(a)),
            }
        }
        Ok(None)
    }

    /// Makes sure the parent of `path` exists as a directory, creating
    /// missing ancestors when `create`. Otherwise a missing ancestor is
    /// `FileNotFound` naming the parent, as in every backend.
    fn ensure_parent(&mut self, path: &CanonicalPath, create: bool) -> Result<()> {
        if self.check_ancestors(path)?.is_none() {
            return Ok(());
        }
        if !create {
            return Err(Error::FileNotFound {
                path: path.parent().unwrap_or_default().as_str().to_string(),
            });
        }
        let mut to_make = Vec::new();
        let mut a = path.parent();
        while let Some(dir) = a {
            if self.nodes.contains_key(dir.as_str()) {
                break;
            }
            a = dir.parent();
            to_make.push(dir);
        }
        for dir in to_make.into_iter().rev() {
            let node = self.new_node(Body::Directory, Permissions::DIRECTORY_DEFAULT);
            self.nodes.insert(dir.as_str().to_string(), node);
        }
        Ok(())
    }

    /// The file a write replaces at `path` (`None`: nothing there yet);
    /// a directory or a symlink there is refused, as every backend does.
    fn writable_file(&self, path: &CanonicalPath) -> Result<Option<Node>> {
        if path.is_root() {
            return Err(Error::IsADirectory {
                path: String::new(),
            });
        }
        let existing = self.lookup(path)?.cloned();
        match existing.as_ref().map(|n| &n.body) {
            Some(Body::Directory) => Err(Error::IsADirectory {
                path: path.as_str().to_string(),
            }),
            Some(Body::Link(_)) => Err(symlink_denied(path, true)),
            _ => Ok(existing),
        }
    }

    /// Puts a new version of the file at `path` holding `data`, in place
    /// of `existing`, and returns its metadata.
    fn put_file(
        &mut self,
        path: &CanonicalPath,
        existing: Option<Node>,
        data: Bytes,
        mode: CommitMode,
    ) -> Metadata {
        let permissions = mode.permissions_over(existing.as_ref().map(|n| n.permissions));
        let mut node = self.new_node(Body::File(data), permissions);
        if let Some(old) = existing {
            node.created = old.created;
        }
        if let Some(modified) = mode.modified {
            node.modified = modified;
        }
        let meta = node.meta(path.as_str());
        self.nodes.insert(path.as_str().to_string(), node);
        meta
    }

    /// The node at `path`. Every call that names a path comes through
    /// here, so the backends' reserved names are refused here too.
    fn lookup(&self, path: &CanonicalPath) -> Result<Option<&Node>> {
        check_name(path)?;
        if let Some(n) = self.nodes.get(path.as_str()) {
            return Ok(Some(n));
        }
        self.check_ancestors(path)?;
        Ok(None)
    }

    /// The shared first half of Move and Copy: checks both ends, makes the
    /// destination's parent, and removes a destination being replaced.
    fn clear_destination(
        &mut self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<()> {
        let src_meta = self.lookup(src)?.map(|n| n.meta(src.as_str()));
        let dst_meta = self.lookup(dst)?.map(|n| n.meta(dst.as_str()));
        let replace = check_transfer(src, src_meta.as_ref(), dst, dst_meta.as_ref(), overwrite)?;
        self.ensure_parent(dst, create_parents)?;
        if replace {
            self.remove_subtree(dst.as_str());
        }
        Ok(())
    }

    fn remove_subtree(&mut self, path: &str) -> u64 {
        let mut count = 0;
        for k in self.descendant_keys(path) {
            self.nodes.remove(&k);
            count += 1;
        }
        if !path.is_empty() && self.nodes.remove(path).is_some() {
            count += 1;
        }
        count
    }

    /// The subtree at `src` (itself first) re-keyed under `dst`, with fresh
    /// versions: each is a change to its new path.
    fn subtree_at(&mut self, src: &str, dst: &str) -> Vec<(String, Node)> {
        let mut out = Vec::new();
        let mut keys = vec![src.to_string()];
        keys.extend(self.descendant_keys(src));
        for k in keys {
            let mut node = self.nodes[&k].clone();
            node.version = self.tick();
            let new_key = format!("{dst}{}", &k[src.len()..]);
            out.push((new_key, node));
        }
        out
    }
}

/// Workspace storage held entirely in memory.
pub struct MemoryBackend {
    tree: Mutex<Tree>,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    pub fn new() -> Self {
        let now = SystemTime::now();
        let mut nodes = BTreeMap::new();
        nodes.insert(
            String::new(),
            Node {
                body: Body::Directory,
                created: now,
                modified: now,
                version: 1,
                permissions: Permissions::DIRECTORY_DEFAULT,
            },
        );
        MemoryBackend {
            tree: Mutex::new(Tree { nodes, clock: 1 }),
        }
    }

    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        // A panic while holding the lock cannot leave the map half-updated
        // in a way later calls could not read, so poisoning is ignored.
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Staged bytes of the memory backend.
#[derive(Default)]
pub struct MemoryStaged(BytesMut);

impl StagedFile for MemoryStaged {
    fn write_chunk(&mut self, chunk: &[u8]) -> Result<()> {
        self.0.extend_from_slice(chunk);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

fn not_found(path: &CanonicalPath) -> Error {
    Error::FileNotFound {
        path: path.as_str().to_string(),
    }
}

impl Backend for MemoryBackend {
    type Staged = MemoryStaged;
    const BLOCKING: bool = false;

    fn metadata(&self, path: &CanonicalPath) -> Result<Option<Metadata>> {
        let tree = self.tree();
        Ok(tree.lookup(path)?.map(|n| n.meta(path.as_str())))
    }

    fn list(
        &self,
        dir: &CanonicalPath,
        depth: u32,
        after: Option<&CanonicalPath>,
        max: usize,
    ) -> Result<(Vec<Metadata>, bool)> {
        let tree = self.tree();
        match tree.lookup(dir)? {
            None => return Err(not_found(dir)),
            Some(n) if !n.is_dir() => {
                return Err(Error::NotADirectory {
                    path: dir.as_str().to_string(),
                })
            }
            Some(_) => {}
        }
        let base_depth = dir.depth();
        let mut entries = Vec::new();
        for (k, n) in tree.descendants(dir.as_str()) {
            let rel_depth = k.split('/').count() - base_depth;
            if rel_depth > depth as usize || after.is_some_and(|a| k.as_str() <= a.as_str()) {
                continue;
            }
            if entries.len() == max {
                return Ok((entries, true));
            }
            entries.push(n.meta(k));
        }
        Ok((entries, false))
    }

    fn open(&self, path: &CanonicalPath) -> Result<OpenFile> {
        let tree = self.tree();
        let node = tree.lookup(path)?.ok_or_else(|| not_found(path))?;
        match &node.body {
            Body::Directory => Err(Error::IsADirectory {
                path: path.as_str().to_string(),
            }),
            Body::Link(_) => Err(symlink_denied(path, true)),
            Body::File(data) => Ok(OpenFile {
                meta: node.meta(path.as_str()),
                content: Content::Memory(data.clone()),
            }),
        }
    }

    fn stage(&self) -> Result<MemoryStaged> {
        Ok(MemoryStaged::default())
    }

    fn commit(
        &self,
        staged: MemoryStaged,
        path: &CanonicalPath,
        mode: CommitMode,
    ) -> Result<Metadata> {
        let mut tree = self.tree();
        let existing = tree.writable_file(path)?;
        tree.ensure_parent(path, mode.create_parents)?;
        let data = match (existing.as_ref().and_then(Node::data), mode.append) {
            (Some(old), true) => {
                let mut joined = BytesMut::with_capacity(old.len() + staged.0.len());
                joined.extend_from_slice(old);
                joined.extend_from_slice(&staged.0);
                joined.freeze()
            }
            _ => staged.0.freeze(),
        };
        Ok(tree.put_file(path, existing, data, mode))
    }

    fn commit_patch(
        &self,
        staged: MemoryStaged,
        path: &CanonicalPath,
        patch: &Patch,
        mode: CommitMode,
    ) -> Result<Metadata> {
        let staged_len: u64 = patch.ranges.iter().map(|r| r.len).sum();
        if staged_len != staged.len() {
            return Err(Error::internal(format!(
                "a patch of '{path}' names {staged_len} bytes but {} were staged",
                staged.len()
            )));
        }
        let mut tree = self.tree();
        let existing = tree.writable_file(path)?;
        if existing.is_none() {
            if !patch.create_missing {
                return Err(not_found(path));
            }
            tree.ensure_parent(path, mode.create_parents)?;
        }
        let old = existing
            .as_ref()
            .and_then(Node::data)
            .cloned()
            .unwrap_or_default();
        // The one copy a patch costs: the new version is built whole, so
        // readers of the old one keep reading it unchanged.
        let mut data = BytesMut::with_capacity(patch.size_after(old.len() as u64) as usize);
        let base = patch.base_len(old.len() as u64) as usize;
        data.extend_from_slice(&old[..base.min(old.len())]);
        data.resize(base, 0);
        let mut from = 0usize;
        for range in &patch.ranges {
            let (at, len) = (range.offset as usize, range.len as usize);
            if data.len() < at + len {
                data.resize(at + len, 0);
            }
            data[at..at + len].copy_from_slice(&staged.0[from..from + len]);
            from += len;
        }
        Ok(tree.put_file(path, existing, data.freeze(), mode))
    }

    fn symlink(
        &self,
        path: &CanonicalPath,
        target: &str,
        create_parents: bool,
    ) -> Result<Metadata> {
        let mut tree = self.tree();
        if path.is_root() || tree.lookup(path)?.is_some() {
            return Err(Error::AlreadyExists {
                path: path.as_str().to_string(),
            });
        }
        tree.ensure_parent(path, create_parents)?;
        // A link's own bits, as Linux gives every link.
        let node = tree.new_node(Body::Link(target.to_string()), Permissions::masked(0o777));
        let meta = node.meta(path.as_str());
        tree.nodes.insert(path.as_str().to_string(), node);
        Ok(meta)
    }

    fn remove(&self, path: &CanonicalPath, recursive: bool) -> Result<u64> {
        let mut tree = self.tree();
        let node = tree.lookup(path)?.ok_or_else(|| not_found(path))?;
        if node.is_dir() && !recursive && tree.descendants(path.as_str()).next().is_some() {
            return Err(Error::DirectoryNotEmpty {
                path: path.as_str().to_string(),
            });
        }
        Ok(tree.remove_subtree(path.as_str()))
    }

    fn mkdir(&self, path: &CanonicalPath, parents: bool, permissions: Permissions) -> Result<bool> {
        let mut tree = self.tree();
        match tree.lookup(path)? {
            Some(n) if n.is_dir() => return Ok(false),
            Some(_) => {
                return Err(Error::AlreadyExists {
                    path: path.as_str().to_string(),
                })
            }
            None => {}
        }
        tree.ensure_parent(path, parents)?;
        let node = tree.new_node(Body::Directory, permissions);
        tree.nodes.insert(path.as_str().to_string(), node);
        Ok(true)
    }

    fn set_attributes(
        &self,
        path: &CanonicalPath,
        permissions: Option<Permissions>,
        modified: Option<SystemTime>,
    ) -> Result<Metadata> {
        let mut tree = self.tree();
        if let Body::Link(_) = tree.lookup(path)?.ok_or_else(|| not_found(path))?.body {
            return Err(symlink_denied(path, true));
        }
        let version = tree.tick();
        let node = tree
            .nodes
            .get_mut(path.as_str())
            .ok_or_else(|| not_found(path))?;
        node.version = version;
        if let Some(permissions) = permissions {
            node.permissions = permissions;
        }
        if let Some(modified) = modified {
            node.modified = modified;
        }
        Ok(node.meta(path.as_str()))
    }

    fn rename(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64> {
        let mut tree = self.tree();
        tree.clear_destination(src, dst, overwrite, create_parents)?;
        let moved = tree.subtree_at(src.as_str(), dst.as_str());
        tree.remove_subtree(src.as_str());
        let count = moved.len() as u64;
        tree.nodes.extend(moved);
        Ok(count)
    }

    fn copy(
        &self,
        src: &CanonicalPath,
        dst: &CanonicalPath,
        overwrite: bool,
        create_parents: bool,
    ) -> Result<u64> {
        let mut tree = self.tree();
        tree.clear_destination(src, dst, overwrite, create_parents)?;
        let now = SystemTime::now();
        let mut copied = tree.subtree_at(src.as_str(), dst.as_str());
        for (_, node) in &mut copied {
            node.created = now;
            node.modified = now;
        }
        let count = copied.len() as u64;
        tree.nodes.extend(copied);
        Ok(count)
    }

    fn walk_files(
        &self,
        base: &CanonicalPath,
    ) -> Result<Box<dyn Iterator<Item = Result<CanonicalPath>> + Send>> {
        let tree = self.tree();
        let files: Vec<CanonicalPath> = match tree.lookup(base) {
            Ok(Some(n)) if n.data().is_some() => vec![base.clone()],
            Ok(Some(n)) if !n.is_dir() => Vec::new(),
            Ok(Some(_)) => tree
                .descendants(base.as_str())
                .filter(|(_, n)| n.data().is_some())
                .map(|(k, _)| CanonicalPath::from_canonical(k.as_str()))
                .collect(),
            Ok(None) | Err(Error::NotADirectory { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        Ok(Box::new(files.into_iter().map(Ok)))
    }
}

/// A frozen copy of a memory workspace: every file and directory with its
/// bits and modification time (the root is implied). Contents are `Bytes`,
/// so an image shares every file's bytes with the live tree and with other
/// images.
#[derive(Clone, Default)]
pub struct MemoryImage {
    entries: BTreeMap<String, ImageEntry>,
}

/// One entry of a [`MemoryImage`].
#[derive(Clone, PartialEq, Eq)]
pub struct ImageEntry {
    /// `None`: a directory.
    pub data: Option<Bytes>,
    pub permissions: Permissions,
    pub modified: SystemTime,
}

impl ImageEntry {
    /// The same content and bits: what Restore and DiffSnapshot treat as
    /// unchanged (a modification time alone is not a change).
    fn same_as(&self, node: &Node) -> bool {
        Body::from(self.data.clone()) == node.body && self.permissions == node.permissions
    }
}

impl MemoryImage {
    /// Every file and directory, in path order.
    pub fn entries(&self) -> impl Iterator<Item = (CanonicalPath, &ImageEntry)> + '_ {
        self.entries
            .iter()
            .map(|(k, v)| (CanonicalPath::from_canonical(k.as_str()), v))
    }

    pub fn file_count(&self) -> u64 {
        self.entries.values().filter(|v| v.data.is_some()).count() as u64
    }

    pub fn total_bytes(&self) -> u64 {
        self.entries
            .values()
            .filter_map(|e| e.data.as_ref())
            .map(|b| b.len() as u64)
            .sum()
    }

    /// The entry at `at` and every entry beneath it, in path order (the
    /// whole image for the root).
    pub fn subtree<'a>(
        &'a self,
        at: &CanonicalPath,
    ) -> impl Iterator<Item = (CanonicalPath, &'a ImageEntry)> + 'a {
        let (own, beneath) = match at.is_root() {
            true => (None, String::new()),
            false => (
                self.entries.get_key_value(at.as_str()),
                format!("{}/", at.as_str()),
            ),
        };
        let under = self
            .entries
            .range::<String, _>((Bound::Included(beneath.clone()), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(&beneath));
        own.into_iter()
            .chain(under)
            .map(|(k, v)| (CanonicalPath::from_canonical(k.as_str()), v))
    }
}

/// An image from its entries, by path.
impl FromIterator<(String, ImageEntry)> for MemoryImage {
    fn from_iter<I: IntoIterator<Item = (String, ImageEntry)>>(entries: I) -> Self {
        MemoryImage {
            entries: entries.into_iter().collect(),
        }
    }
}

impl MemoryBackend {
    /// The whole tree as it is now. Symlinks are left out, as a
    /// DIRECTORY snapshot leaves them out.
    pub fn image(&self) -> MemoryImage {
        let tree = self.tree();
        MemoryImage {
            entries: tree
                .descendants("")
                .filter_map(|(k, n)| {
                    let data = match &n.body {
                        Body::Directory => None,
                        Body::File(data) => Some(data.clone()),
                        Body::Link(_) => return None,
                    };
                    let entry = ImageEntry {
                        data,
                        permissions: n.permissions,
                        modified: n.modified,
                    };
                    Some((k.clone(), entry))
                })
                .collect(),
        }
    }

    /// Makes the tree exactly `image`, in one step. Entries already equal
    /// to the image (same kind, same bytes, same bits) keep their node and
    /// version; every other restored entry is a change and takes a fresh
    /// version, with the image's bits and modification time.
    pub fn restore_image(&self, image: &MemoryImage) {
        let mut tree = self.tree();
        let mut nodes = BTreeMap::new();
        let root = match tree.nodes.remove("") {
            Some(root) => root,
            None => tree.new_node(Body::Directory, Permissions::DIRECTORY_DEFAULT),
        };
        nodes.insert(String::new(), root);
        for (path, entry) in &image.entries {
            let old = tree.nodes.remove(path);
            let node = tree.restored_node(old, entry);
            nodes.insert(path.clone(), node);
        }
        tree.nodes = nodes;
    }

    /// [`Self::restore_image`] for the subtree at `at` alone: the entry at
    /// `at` and everything beneath it become what `image` holds there, by
    /// the same rules, and nothing else changes but the missing parents of
    /// `at`, which come back as `image` holds them. A parent that is a file
    /// is `NotADirectory`; `at` missing from `image` is `FileNotFound`;
    /// both change nothing. `check` sees the files `at` holds now and
    /// refuses before any change.
    pub fn restore_subtree(
        &self,
        image: &MemoryImage,
        at: &CanonicalPath,
        check: impl FnOnce(&[(&str, u64)]) -> Result<()>,
    ) -> Result<()> {
        if at.is_root() {
            self.restore_image(image);
            return Ok(());
        }
        if !image.entries.contains_key(at.as_str()) {
            return Err(crate::snapshots::not_in_snapshot(at));
        }
        let mut tree = self.tree();
        let missing = tree.check_ancestors(at)?;
        let mut here: Vec<String> = tree.descendant_keys(at.as_str());
        if tree.nodes.contains_key(at.as_str()) {
            here.insert(0, at.as_str().to_string());
        }
        let files: Vec<(&str, u64)> = here
            .iter()
            .filter_map(|k| Some((k.as_str(), tree.nodes[k].data()?.len() as u64)))
            .collect();
        check(&files)?;
        let mut old: BTreeMap<String, Node> = here
            .into_iter()
            .filter_map(|k| tree.nodes.remove_entry(&k))
            .collect();
        let mut parents = Vec::new();
        let mut parent = at.parent();
        while let Some(p) = parent.filter(|p| !p.is_root()) {
            parent = p.parent();
            parents.push(p);
        }
        // Only parents from the first missing one down are missing.
        let missing_parents = parents
            .iter()
            .rev()
            .skip_while(|p| Some(*p) != missing.as_ref());
        for p in missing_parents {
            let bits = image
                .entries
                .get(p.as_str())
                .map_or(Permissions::DIRECTORY_DEFAULT, |e| e.permissions);
            let node = tree.new_node(Body::Directory, bits);
            tree.nodes.insert(p.as_str().to_string(), node);
        }
        for (path, entry) in image.subtree(at) {
            let node = tree.restored_node(old.remove(path.as_str()), entry);
            tree.nodes.insert(path.as_str().to_string(), node);
        }
        Ok(())
    }
}
