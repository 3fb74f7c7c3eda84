//! The inode table: the kernel speaks in inode numbers, the server in
//! paths. Each path the kernel has looked up gets a number that stays its
//! own while the kernel remembers it (its lookup count), follows the path
//! through renames, and is never reused for another path.

use super::staging::Staged;
use fuser::FileAttr;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;
use wsfs::{CanonicalPath, FileKind};

/// The root directory's number, as FUSE fixes it.
pub const ROOT: u64 = 1;

/// What the mount knows of one inode.
pub struct Node {
    /// Where it lives now; meaningless once `unlinked`.
    pub path: CanonicalPath,
    pub kind: FileKind,
    /// How many lookups the kernel holds (it forgets them in `forget`).
    lookups: u64,
    /// Open file handles on it.
    pub open: u32,
    /// Local staging of its bytes while it is open for writing (or open
    /// and unlinked): dirty ranges waiting for the commit.
    pub staged: Option<Arc<Staged>>,
    /// Removed from the workspace (unlinked, or replaced by a rename)
    /// while still open: its handles read the staged copy, nothing is
    /// committed.
    pub unlinked: bool,
    /// The version the kernel's page cache holds, when known: an open that
    /// finds the same version keeps the cache.
    pub cached_version: Option<u64>,
    /// The version the mount's own last create or commit made: its change
    /// event needs no invalidation.
    pub own_version: Option<u64>,
    /// Created by the mount and not on the server yet: its first commit
    /// makes it, exclusively (namespace.rs).
    pub unborn: bool,
    /// The attributes last told to the kernel, while nothing known has
    /// changed them since: a setattr that would change nothing is answered
    /// from here, without a round trip.
    pub attr: Option<FileAttr>,
    /// When `attr` was last read from the server (or made by the mount).
    pub attr_at: Instant,
}

pub struct Inodes {
    nodes: HashMap<u64, Node>,
    /// Ordered, so that a subtree is one range (see [`Inodes::subtree`]):
    /// an unlink or rename costs the size of what it moves, not of the
    /// table.
    by_path: BTreeMap<CanonicalPath, u64>,
    next: u64,
}

impl Inodes {
    pub fn new() -> Inodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                path: CanonicalPath::root(),
                kind: FileKind::Directory,
                // The kernel never forgets the root.
                lookups: u64::MAX / 2,
                open: 0,
                staged: None,
                unlinked: false,
                cached_version: None,
                own_version: None,
                unborn: false,
                attr: None,
                attr_at: Instant::now(),
            },
        );
        let mut by_path = BTreeMap::new();
        by_path.insert(CanonicalPath::root(), ROOT);
        Inodes {
            nodes,
            by_path,
            next: ROOT + 1,
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// The inode at `path`, if the kernel knows one.
    pub fn at(&self, path: &CanonicalPath) -> Option<u64> {
        self.by_path.get(path).copied()
    }

    /// The kind of what the kernel knows at `path`.
    pub fn kind_at(&self, path: &CanonicalPath) -> Option<FileKind> {
        self.at(path).and_then(|ino| self.get(ino)).map(|n| n.kind)
    }

    /// The number for `path` of `kind`, counting one more kernel lookup.
    /// A path whose kind changed (a file replaced by a directory) gets a
    /// new number: the old inode is another object.
    pub fn learn(&mut self, path: &CanonicalPath, kind: FileKind) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            let node = self.nodes.get_mut(&ino).expect("by_path names live nodes");
            if node.kind == kind {
                node.lookups += 1;
                return ino;
            }
            self.detach(path);
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                path: path.clone(),
                kind,
                lookups: 1,
                open: 0,
                staged: None,
                unlinked: false,
                cached_version: None,
                own_version: None,
                unborn: false,
                attr: None,
                attr_at: Instant::now(),
            },
        );
        self.by_path.insert(path.clone(), ino);
        ino
    }

    /// A number for `path` without a kernel lookup (readdir's entries):
    /// the path's own when it has one.
    pub fn number(&mut self, path: &CanonicalPath, kind: FileKind) -> u64 {
        let ino = self.learn(path, kind);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups -= 1;
        }
        ino
    }

    /// The kernel dropped `count` lookups of `ino`.
    pub fn forget(&mut self, ino: u64, count: u64) {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(count);
        self.collect(ino);
    }

    /// Drops `ino` when neither the kernel, an open handle nor a queued
    /// commit (its staging) needs it.
    pub fn collect(&mut self, ino: u64) {
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        if ino == ROOT || node.lookups > 0 || node.open > 0 || node.staged.is_some() {
            return;
        }
        let node = self.nodes.remove(&ino).expect("checked above");
        if !node.unlinked && self.by_path.get(&node.path) == Some(&ino) {
            self.by_path.remove(&node.path);
        }
    }

    /// `path` and everything under it left the workspace: their inodes
    /// keep living for the kernel's lookups and open handles, but no
    /// longer name a path.
    pub fn detach(&mut self, path: &CanonicalPath) {
        if path.is_root() {
            return;
        }
        let gone: Vec<CanonicalPath> = self.subtree(path).into_iter().map(|(p, _)| p).collect();
        for p in gone {
            if let Some(ino) = self.by_path.remove(&p) {
                if let Some(node) = self.nodes.get_mut(&ino) {
                    node.unlinked = true;
                    if node.open == 0 {
                        // Nobody can read these bytes any more.
                        node.staged = None;
                    }
                }
                self.collect(ino);
            }
        }
    }

    /// `from` (and its subtree) now lives at `to`, replacing whatever was
    /// there.
    pub fn renamed(&mut self, from: &CanonicalPath, to: &CanonicalPath) {
        self.detach(to);
        let moved = self.subtree(from);
        for (old, ino) in moved {
            self.by_path.remove(&old);
            let rest = old.strip_prefix(from).expect("filtered on starts_with");
            let new = to.join_path(&rest);
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = new.clone();
            }
            self.by_path.insert(new, ino);
        }
    }

    /// `path` and every known path under it. Paths order bytewise, so they
    /// all lie between `path` and `path` + "0" (the byte after '/'), among
    /// siblings such as `path.txt` that the filter leaves out.
    fn subtree(&self, path: &CanonicalPath) -> Vec<(CanonicalPath, u64)> {
        if path.is_root() {
            return self
                .by_path
                .iter()
                .map(|(p, &ino)| (p.clone(), ino))
                .collect();
        }
        let end = format!("{}0", path.as_str());
        self.by_path
            .range(path.clone()..)
            .take_while(|(p, _)| p.as_str() < end.as_str())
            .filter(|(p, _)| p.starts_with(path))
            .map(|(p, &ino)| (p.clone(), ino))
            .collect()
    }

    /// The files directly in `dir` that the mount created and the server
    /// does not hold yet.
    pub fn unborn_in(&self, dir: &CanonicalPath) -> Vec<u64> {
        self.subtree(dir)
            .into_iter()
            .filter(|(p, _)| p.parent().as_ref() == Some(dir))
            .filter(|(_, ino)| self.nodes.get(ino).is_some_and(|n| n.unborn))
            .map(|(_, ino)| ino)
            .collect()
    }

    /// Every inode the kernel may cache, for a full invalidation.
    pub fn all(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> CanonicalPath {
        crate::parse_path(s).unwrap()
    }

    #[test]
    fn a_path_keeps_its_number_until_forgotten() {
        let mut t = Inodes::new();
        let a = t.learn(&p("a"), FileKind::File);
        assert_eq!(t.learn(&p("a"), FileKind::File), a);
        t.forget(a, 1);
        assert_eq!(t.at(&p("a")), Some(a));
        t.forget(a, 1);
        assert_eq!(t.at(&p("a")), None);
        assert!(
            t.learn(&p("a"), FileKind::File) > a,
            "numbers are never reused"
        );
    }

    #[test]
    fn unborn_files_are_found_in_their_directory_only() {
        let mut t = Inodes::new();
        let f = t.learn(&p("d/f"), FileKind::File);
        let deep = t.learn(&p("d/sub/g"), FileKind::File);
        let sibling = t.learn(&p("d-x/h"), FileKind::File);
        let born = t.learn(&p("d/born"), FileKind::File);
        for ino in [f, deep, sibling] {
            t.get_mut(ino).unwrap().unborn = true;
        }
        assert_eq!(t.unborn_in(&p("d")), vec![f]);
        assert_eq!(t.unborn_in(&p("d/sub")), vec![deep]);
        assert!(t.unborn_in(&p("e")).is_empty());
        assert!(!t.get(born).unwrap().unborn);
    }

    #[test]
    fn a_kind_change_is_a_new_inode() {
        let mut t = Inodes::new();
        let a = t.learn(&p("a"), FileKind::File);
        let d = t.learn(&p("a"), FileKind::Directory);
        assert_ne!(a, d);
        assert!(t.get(a).unwrap().unlinked);
    }

    #[test]
    fn a_rename_moves_the_subtree_and_detaches_the_replaced() {
        let mut t = Inodes::new();
        let d = t.learn(&p("d"), FileKind::Directory);
        let f = t.learn(&p("d/f"), FileKind::File);
        let old = t.learn(&p("e"), FileKind::Directory);
        let dx = t.learn(&p("dx"), FileKind::File);
        t.renamed(&p("d"), &p("e"));
        assert_eq!(t.get(d).unwrap().path, p("e"));
        assert_eq!(t.get(f).unwrap().path, p("e/f"));
        assert_eq!(t.at(&p("e/f")), Some(f));
        assert_eq!(t.at(&p("d/f")), None);
        assert!(t.get(old).unwrap().unlinked);
        assert_eq!(
            t.get(dx).unwrap().path,
            p("dx"),
            "a sibling sharing the prefix stays"
        );
        // Siblings ordered between a directory and its children stay too.
        let dash = t.learn(&p("e-x"), FileKind::File);
        let dot = t.learn(&p("e.txt"), FileKind::File);
        t.detach(&p("e"));
        assert!(t.get(f).unwrap().unlinked, "the subtree went");
        assert_eq!(t.at(&p("e-x")), Some(dash));
        assert_eq!(t.at(&p("e.txt")), Some(dot));
    }
}
