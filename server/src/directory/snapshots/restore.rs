//! Restoring a snapshot: what to change (planned before anything
//! changes), the stored objects staged on a few threads, and the
//! replacement applied under an intent record.

use super::*;

impl Store {
    /// Makes the workspace exactly snapshot `id` (the caller holds its write
    /// lock), or only the subtree at `at` when it is not the root (see
    /// [`SnapshotStore::restore`]). Everything it writes is staged before
    /// the first change; a content the local store lacks streams from
    /// `source` (the object store) straight into its staged file. Also returns the old files it replaced, for the
    /// caller to drop (and so remove) when it likes.
    pub(super) fn restore(
        &self,
        b: &DirectoryBackend,
        id: &str,
        at: &CanonicalPath,
        limits: &SessionLimits,
        source: Option<&dyn SnapshotMirror>,
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
        let staged = stage_objects(b, &self.objects(), source, &to_write)?;
        drop(state);
        let displaced = apply_restore(b, id, &doomed, &target, &to_write, staged)?;
        Ok((restored, displaced))
    }

    /// Makes the head name the workspace at `workspace_root` just
    /// restored from snapshot `id`, which nothing else has written since
    /// (a recovered session not served yet): the snapshot's manifests
    /// with the restored files' identities (`known` as they were written,
    /// else read from the workspace), so that the next snapshot reads
    /// none of them.
    pub(super) fn adopt_restored(
        &self,
        id: &str,
        workspace_root: &Path,
        known: Option<&fork::Identities>,
    ) -> Result<()> {
        let mut state = self.lock();
        let info = self.read_info(id)?;
        let Some(root) = Self::root_of(&info)? else {
            return Ok(());
        };
        let walk = fork::Reidentify {
            from: self,
            state: &state,
            to: self,
            workspace: workspace_root,
            known,
        };
        let head = walk.tree(&root, &CanonicalPath::root(), 0)?;
        state.trees.clear();
        self.set_head(&mut state, Some(head))
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
pub(super) fn narrow_restore(
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
pub(super) fn apply_restore(
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
            };
            displaced.extend(b.commit_aside(content, path, put)?.1);
        }
        let bits: Vec<_> = dirs().map(|e| (&e.path, e.permissions)).collect();
        crate::backend::finish_directories(b, bits.into_iter())?;
        Ok(displaced)
    })
}

/// Most threads that stage a restore's files at once.
pub(super) const MAX_STAGING_THREADS: usize = 4;

/// Stages every file of `files` (in order), on a few threads: creating and
/// filling many small files is mostly waiting on the filesystem (or, for
/// contents fetched from the object store, on the network). On error,
/// everything staged so far is dropped (and so removed).
pub(super) fn stage_objects(
    b: &DirectoryBackend,
    objects: &ContentStore,
    source: Option<&dyn SnapshotMirror>,
    files: &[(&CanonicalPath, &FlatFile, Permissions)],
) -> Result<Vec<<DirectoryBackend as Backend>::Staged>> {
    let fetching = source.is_some()
        && files
            .iter()
            .any(|(_, file, _)| !objects.path(&file.hash).exists());
    let threads = match fetching {
        // Mostly waiting on the object store: as many as it serves at once.
        true => crate::snapshots::FETCH_CONCURRENCY,
        false => std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_STAGING_THREADS),
    };
    let chunk = files.len().div_ceil(threads).max(1);
    let stage_chunk = |part: &[(&CanonicalPath, &FlatFile, Permissions)]| {
        let mut buf = vec![0u8; COPY_BUFFER];
        part.iter()
            .map(|(path, file, _)| stage_object(b, objects, source, file, path, &mut buf))
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
/// against its hash; one the store lacks streams from `source` (the
/// object store), when there is one.
pub(super) fn stage_object(
    b: &DirectoryBackend,
    objects: &ContentStore,
    source: Option<&dyn SnapshotMirror>,
    file: &FlatFile,
    path: &CanonicalPath,
    buf: &mut [u8],
) -> Result<<DirectoryBackend as Backend>::Staged> {
    let damaged = |why: String| {
        Error::internal(format!(
            "the snapshot cannot be restored: the stored content of '{path}' {why}"
        ))
    };
    let object = match (std::fs::File::open(objects.path(&file.hash)), source) {
        (Ok(object), _) => object,
        (Err(e), Some(source)) if e.kind() == std::io::ErrorKind::NotFound => {
            return stage_fetched(b, source, file, path);
        }
        (Err(e), _) => return Err(damaged(format!("cannot be read: {e}"))),
    };
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

/// Streams content `file` from `source` into a new staged file, checking
/// its bytes against its hash (a chunk of zeros stays a hole).
fn stage_fetched(
    b: &DirectoryBackend,
    source: &dyn SnapshotMirror,
    file: &FlatFile,
    path: &CanonicalPath,
) -> Result<<DirectoryBackend as Backend>::Staged> {
    let mut staged = b.stage()?;
    let mut hasher = Sha256::new();
    source.stream_content(&file.hash, &mut |chunk| {
        hasher.update(chunk);
        if staged.len() + chunk.len() as u64 > file.size {
            // Longer than the snapshot says: damaged, and never written.
            return Err(fetched_damaged(path));
        }
        match chunk.iter().all(|&byte| byte == 0) {
            true => staged.write_hole(chunk.len() as u64),
            false => staged.write_chunk(chunk),
        }
    })?;
    if <[u8; 32]>::from(hasher.finalize()) != file.hash || staged.len() != file.size {
        return Err(fetched_damaged(path));
    }
    staged.finish()?;
    Ok(staged)
}

pub(super) fn fetched_damaged(path: &CanonicalPath) -> Error {
    Error::internal(format!(
        "the snapshot cannot be restored: the object store's content of '{path}' does not match its hash"
    ))
}
