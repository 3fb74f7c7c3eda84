//! The on-disk store of one session: manifests, snapshot infos, the head,
//! and the garbage collection that frees what no snapshot names.

use super::*;

/// A path's parent (`""` for the root) and last name.
pub(super) fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// What the store keeps in memory between calls.
#[derive(Default)]
pub(super) struct State {
    /// The head manifest's hash once read; `Some(None)` when there is none.
    pub(super) head: Option<Option<Hash>>,
    /// Manifests by hash: those of the head, so that the next snapshot
    /// reads none from disk.
    pub(super) trees: HashMap<Hash, Arc<Tree>>,
}

/// The on-disk store of one session.
pub(super) struct Store {
    /// The session's directory.
    pub(super) dir: PathBuf,
    /// Serialises snapshot, restore, delete and reads of the store.
    pub(super) state: Mutex<State>,
}

impl Store {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts what a snapshot wrote (contents, manifests, info, head) on
    /// stable storage when `durability` asks.
    pub(super) fn settle(&self, durability: crate::durability::Durability) -> Result<()> {
        if !durability.is_fsync() {
            return Ok(());
        }
        let dir = std::fs::File::open(&self.dir).map_err(storage_error)?;
        durability.settle_fs(&dir)
    }

    pub(super) fn objects(&self) -> ContentStore {
        ContentStore {
            dir: self.dir.join("objects"),
        }
    }

    pub(super) fn trees(&self) -> ContentStore {
        ContentStore {
            dir: self.dir.join("trees"),
        }
    }

    pub(super) fn manifests(&self) -> PathBuf {
        self.dir.join("snapshots")
    }

    pub(super) fn info_path(&self, id: &str) -> PathBuf {
        self.manifests().join(format!("{id}{INFO_SUFFIX}"))
    }

    pub(super) fn entries_path(&self, id: &str) -> PathBuf {
        self.manifests().join(format!("{id}{ENTRIES_SUFFIX}"))
    }

    pub(super) fn head_path(&self) -> PathBuf {
        self.dir.join("head")
    }

    /// The head manifest's hash. A missing or unreadable head file means
    /// none: every file is then hashed again (slower, never wrong).
    pub(super) fn head(&self, state: &mut State) -> Option<Hash> {
        *state.head.get_or_insert_with(|| {
            std::fs::read_to_string(self.head_path())
                .ok()
                .and_then(|s| parse_hash(s.trim()))
        })
    }

    pub(super) fn set_head(&self, state: &mut State, head: Option<Hash>) -> Result<()> {
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
    pub(super) fn tree(&self, state: &State, hash: &Hash) -> Result<Arc<Tree>> {
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

    pub(super) fn read_info(&self, id: &str) -> Result<InfoFile> {
        let raw = match std::fs::read(self.info_path(id)) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found(id)),
            Err(e) => return Err(storage_error(e)),
        };
        serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("snapshot {id} has a corrupt record: {e}")))
    }

    pub(super) fn read_legacy_entries(&self, id: &str) -> Result<Vec<LegacyEntry>> {
        let raw = std::fs::read(self.entries_path(id)).map_err(storage_error)?;
        serde_json::from_slice(&raw)
            .map_err(|e| Error::internal(format!("snapshot {id} has a corrupt manifest: {e}")))
    }

    pub(super) fn root_of(info: &InfoFile) -> Result<Option<Hash>> {
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
    pub(super) fn flatten(&self, info: &InfoFile, state: &State) -> Result<Vec<FlatEntry>> {
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
    pub(super) fn visit(
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
    pub(super) fn head_file(
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

    /// The contents (hash, size) of snapshot `id` that the local store
    /// lacks: left in the object store by a recovery.
    pub(super) fn missing(&self, id: &str) -> Result<Vec<(Hash, u64)>> {
        let state = self.lock();
        let info = self.read_info(id)?;
        let objects = self.objects();
        let mut wanted: Vec<(Hash, u64)> = self
            .flatten(&info, &state)?
            .into_iter()
            .filter_map(|e| e.file)
            .filter(|f| !objects.path(&f.hash).exists())
            .map(|f| (f.hash, f.size))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        Ok(wanted)
    }

    pub(super) fn infos_raw(&self) -> Result<Vec<InfoFile>> {
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

    pub(super) fn infos(&self) -> Result<Vec<SnapshotInfo>> {
        Ok(self.infos_raw()?.into_iter().map(InfoFile::info).collect())
    }

    /// Deletes snapshot `id`, then every content and manifest no other
    /// snapshot holds.
    pub(super) fn delete(&self, id: &str) -> Result<()> {
        let mut state = self.lock();
        self.read_info(id)?;
        std::fs::remove_file(self.info_path(id)).map_err(storage_error)?;
        let _ = std::fs::remove_file(self.entries_path(id));
        self.collect_garbage(&mut state)
    }

    pub(super) fn collect_garbage(&self, state: &mut State) -> Result<()> {
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

    pub(super) fn mark(
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
