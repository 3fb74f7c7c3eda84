//! The snapshot tree walk: every entry of a DIRECTORY workspace with the
//! identity that tells whether a file changed since it was last hashed.
//! It descends with the backend's descriptor primitives, so it is as
//! symlink-proof as every other walk of the workspace.

use crate::directory::backend::sys::{
    entry_kind, io, read_entries, stat_at, system_time, too_deep, visible_name, Kind, Timestamp,
    DIR_FLAGS, MAX_TREE_DEPTH,
};
use crate::directory::backend::walk::Item;
use crate::directory::DirectoryBackend;
use rustix::fd::OwnedFd;
use rustix::fs::Mode;
use rustix::io::Errno;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;
use wsfs::{CanonicalPath, Error, Permissions, Result};

/// What a snapshot sees of one entry: enough to tell, without reading it,
/// whether a file changed since it was last hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub path: CanonicalPath,
    pub kind: TreeKind,
    pub size: u64,
    /// Inode, size, mtime and ctime (ns): equal identities mean an
    /// unchanged file, short of a writer that restores all four.
    pub identity: FileIdentity,
    pub permissions: Permissions,
}

/// What a [`TreeEntry`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    File,
    Directory,
    /// A symlink, pipe, socket or device: never read, never followed.
    Other,
}

/// See [`TreeEntry::identity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileIdentity {
    /// A time of seconds and nanoseconds as the nanoseconds an identity
    /// records (saturating): the one rule every reader of identities uses,
    /// so that two readings of an unchanged file compare equal.
    pub fn nanos(sec: i64, nsec: i64) -> i64 {
        sec.saturating_mul(1_000_000_000).saturating_add(nsec)
    }

    /// The identity `meta` (one `stat`, by path or by handle) reads.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: Self::nanos(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: Self::nanos(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The modification time this identity saw.
    pub fn modified(&self) -> SystemTime {
        let (sec, nsec) = (
            self.mtime_ns.div_euclid(1_000_000_000),
            self.mtime_ns.rem_euclid(1_000_000_000),
        );
        system_time((sec, nsec as u32))
    }
}

/// Most threads that walk a tree at once.
const MAX_WALK_THREADS: usize = 4;

/// Every entry beneath the root (files, directories, and links or
/// special files as [`TreeKind::Other`]) in path order, with identities
/// from one `statx` each and no versions touched. Descends by
/// descriptor, never through a symlink, like every other walk here.
/// The root's subdirectories are walked on a few threads at once (the
/// cost is one `statx` per entry, which threads overlap).
pub fn tree(backend: &DirectoryBackend) -> Result<Vec<TreeEntry>> {
    let root_path = CanonicalPath::root();
    let root = backend.root_dir()?;
    let items = tree_items(&root, &root_path)?;
    let subtrees: Vec<&str> = items
        .iter()
        .filter_map(|item| match item {
            Item::Subtree(name) => Some(name.as_str()),
            Item::Entry(_) => None,
        })
        .collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_WALK_THREADS)
        .min(subtrees.len());
    let mut walked: Vec<Result<Vec<TreeEntry>>> = Vec::with_capacity(subtrees.len());
    if threads <= 1 {
        for name in &subtrees {
            let mut out = Vec::new();
            walked.push(tree_subtree(&root, name, &root_path, 0, &mut out).map(|()| out));
        }
    } else {
        // Threads take the next unwalked subdirectory until none is
        // left; results go back in order by index.
        let next = AtomicUsize::new(0);
        let mut parts: Vec<(usize, Result<Vec<TreeEntry>>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(name) = subtrees.get(i) else {
                                return done;
                            };
                            let mut out = Vec::new();
                            let result = tree_subtree(&root, name, &root_path, 0, &mut out);
                            done.push((i, result.map(|()| out)));
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(0, Err(Error::internal("a tree walk thread panicked")))]
                    })
                })
                .collect()
        });
        parts.sort_by_key(|(i, _)| *i);
        walked.extend(parts.into_iter().map(|(_, r)| r));
    }
    let mut walked = walked.into_iter();
    let mut out = Vec::new();
    for item in items {
        match item {
            Item::Entry(name) => out.extend(tree_entry(&root, &name, &root_path)?),
            Item::Subtree(_) => {
                let part = walked
                    .next()
                    .ok_or_else(|| Error::internal("a tree walk lost a directory"))??;
                out.extend(part);
            }
        }
    }
    Ok(out)
}
/// The visible children of `dir` as walk steps, in path order.
fn tree_items(dir: &OwnedFd, path: &CanonicalPath) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    for (raw, ft) in read_entries(dir).map_err(|e| io(e, path))? {
        let Some(name) = visible_name(&raw) else {
            continue;
        };
        if entry_kind(dir, &raw, ft) == Some(Kind::Dir) {
            items.push(Item::Subtree(name.to_string()));
        }
        items.push(Item::Entry(name.to_string()));
    }
    items.sort_by(Item::cmp_path);
    Ok(items)
}

/// The [`TreeEntry`] of `name` in `dir`; `None` when it is gone.
fn tree_entry(dir: &OwnedFd, name: &str, path: &CanonicalPath) -> Result<Option<TreeEntry>> {
    let child = path.join(name)?;
    let st = match stat_at(dir, name) {
        Ok(st) => st,
        // Gone since read.
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io(e, &child)),
    };
    let kind = match st.kind {
        Kind::File => TreeKind::File,
        Kind::Dir => TreeKind::Directory,
        Kind::Symlink | Kind::Special => TreeKind::Other,
    };
    let ns = |(sec, nsec): Timestamp| FileIdentity::nanos(sec, i64::from(nsec));
    Ok(Some(TreeEntry {
        path: child,
        kind,
        size: if kind == TreeKind::File { st.size } else { 0 },
        identity: FileIdentity {
            ino: st.ino,
            size: st.size,
            mtime_ns: ns(st.mtime),
            ctime_ns: ns(st.ctime),
        },
        permissions: st.permissions(),
    }))
}

/// Walks the subdirectory `name` of `dir` into `out`.
fn tree_subtree(
    dir: &OwnedFd,
    name: &str,
    path: &CanonicalPath,
    depth: usize,
    out: &mut Vec<TreeEntry>,
) -> Result<()> {
    let child = path.join(name)?;
    match rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => tree_into(&fd, &child, depth + 1, out),
        // Gone or swapped for something else since read.
        Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => Ok(()),
        Err(e) => Err(io(e, &child)),
    }
}

fn tree_into(
    dir: &OwnedFd,
    path: &CanonicalPath,
    depth: usize,
    out: &mut Vec<TreeEntry>,
) -> Result<()> {
    if depth >= MAX_TREE_DEPTH {
        return Err(too_deep(path));
    }
    for item in tree_items(dir, path)? {
        match item {
            Item::Entry(name) => out.extend(tree_entry(dir, &name, path)?),
            Item::Subtree(name) => tree_subtree(dir, &name, path, depth, out)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn tree_lists_every_entry_in_path_order_with_its_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, staging) = (tmp.path().join("ws"), tmp.path().join("staging"));
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&staging).unwrap();
        let b = DirectoryBackend::open(&root, &staging).unwrap();
        let write = |path: &str, bytes: &[u8]| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        };
        let mut expected = Vec::new();
        // Enough subdirectories of the root to be shared among threads.
        for d in 0..12 {
            for f in ["a", "a.txt", "b"] {
                write(&format!("d{d:02}/{f}/x"), b"12345");
                write(&format!("d{d:02}/{f}.bin"), b"1");
            }
        }
        write("top.txt", b"123");
        symlink("/", root.join("link")).unwrap();
        for e in tree(&b).unwrap() {
            expected.push((e.path.as_str().to_string(), e.kind, e.size));
        }
        let mut sorted = expected.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(expected, sorted, "entries come in path order");
        assert_eq!(expected.len(), 12 * (1 + 3 * 3) + 2);
        let find = |path: &str| expected.iter().find(|e| e.0 == path).cloned();
        assert_eq!(find("d03"), Some(("d03".into(), TreeKind::Directory, 0)));
        assert_eq!(
            find("d03/a.txt/x"),
            Some(("d03/a.txt/x".into(), TreeKind::File, 5))
        );
        assert_eq!(find("link"), Some(("link".into(), TreeKind::Other, 0)));
        assert_eq!(find("top.txt"), Some(("top.txt".into(), TreeKind::File, 3)));
    }
}
