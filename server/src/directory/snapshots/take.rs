//! Taking a snapshot: the walk that compares the workspace with the
//! previous snapshot's manifests and stores only what changed.

use super::*;

impl Store {
    /// Takes a snapshot of the workspace (the caller holds its write lock).
    /// Refuses (`QuotaExceeded`) a workspace whose files' apparent sizes
    /// add up to more than `budget` (0: none), before storing anything;
    /// stops when `cancel` is set. Either way, a snapshot that fails
    /// removes every object it stored.
    pub(super) fn take(
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
}

/// One snapshot being taken: builds the manifests bottom-up, reading only
/// the files whose identity differs from the previous snapshot's.
pub(super) struct SnapshotWalk<'a> {
    pub(super) b: &'a DirectoryBackend,
    pub(super) store: &'a Store,
    pub(super) state: &'a State,
    /// Live entries (files and directories) by parent path, in name order.
    pub(super) children: &'a HashMap<&'a str, Vec<&'a TreeEntry>>,
    pub(super) objects: ContentStore,
    pub(super) trees: ContentStore,
    pub(super) buf: Vec<u8>,
    pub(super) file_count: u64,
    pub(super) total_bytes: u64,
    /// Every manifest of the new snapshot.
    pub(super) seen: HashMap<Hash, Arc<Tree>>,
    /// Most bytes (apparent sizes) the snapshot may hold.
    pub(super) budget: u64,
    /// Set when the snapshot's caller went away.
    pub(super) cancel: &'a AtomicBool,
    /// Objects and manifests this snapshot stored that were not stored
    /// before: removed when it fails.
    pub(super) created: Vec<PathBuf>,
}

impl SnapshotWalk<'_> {
    /// The manifest hash of directory `path`, given the previous
    /// snapshot's manifest of the same directory.
    pub(super) fn directory(
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
    pub(super) fn hash_file(&mut self, path: &CanonicalPath) -> Result<Option<(Hash, u64)>> {
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

/// Refuses a snapshot of `live` when its files' apparent sizes add up to
/// more than `budget`: hashing and storing them would cost their apparent
/// size in time (holes are kept on disk, but hashed as zeros).
pub(super) fn check_snapshot_budget(live: &[TreeEntry], budget: u64) -> Result<()> {
    let total = live
        .iter()
        .filter(|e| e.kind == TreeKind::File)
        .fold(0u64, |sum, e| sum.saturating_add(e.identity.size));
    if total > budget {
        return Err(over_budget(total, budget));
    }
    Ok(())
}

pub(super) fn over_budget(total: u64, budget: u64) -> Error {
    Error::QuotaExceeded {
        message: format!(
            "cannot snapshot: the workspace's files add up to {total} bytes (apparent sizes, holes included), over this session's budget of {budget} bytes (its max_total_bytes, or the server's --default-max-total-bytes)"
        ),
    }
}
