//! Directories whose every name the mount knows: those it made itself.
//! A lookup of a name such a directory does not hold is answered "no such
//! file" without a round trip, so `tar x`, `git clone` and `cp -r` into a
//! new directory pay one call per file (its create), not two.
//!
//! Each such directory starts empty (its Mkdir is sent after it is
//! known, so no name made in it is missed) and learns a name from the
//! mount's own creates, renames into it and the Watch stream's Created
//! and Moved events (names made elsewhere). It forgets a name only on the
//! mount's own unlink or rename away: a name removed elsewhere stays, and
//! costs only the lookup that finds it gone. So a name is answered absent
//! only while no event of its creation has arrived — the same window as
//! the kernel's own negative entries (attr.rs), and an exclusive create
//! in that window still goes to the server, which refuses it.
//!
//! Bounded: at most [`MAX_NAMES`] names in all; a directory that would
//! pass it is forgotten (its lookups go to the server again). A Resync of
//! the Watch stream, or the mount's rename or removal of a directory,
//! forgets the directories it touches.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use wsfs::CanonicalPath;

/// The most names held across every known directory (some 100 bytes
/// each).
pub(super) const MAX_NAMES: usize = 200_000;

#[derive(Default)]
pub(super) struct KnownDirs {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    dirs: HashMap<CanonicalPath, HashSet<String>>,
    names: usize,
}

impl Inner {
    fn add(&mut self, dir: &CanonicalPath, name: &str) {
        let full = self.names >= MAX_NAMES;
        let Some(names) = self.dirs.get_mut(dir) else {
            return;
        };
        if full {
            let dropped = self.dirs.remove(dir).map_or(0, |n| n.len());
            self.names -= dropped;
        } else if names.insert(name.to_string()) {
            self.names += 1;
        }
    }
}

impl KnownDirs {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `dir` is about to be made by the mount: empty, every later name in
    /// it seen. Undone by [`forget`](KnownDirs::forget) if the Mkdir fails.
    pub(super) fn made(&self, dir: &CanonicalPath) {
        let mut inner = self.inner();
        if inner.names < MAX_NAMES {
            if let Some(old) = inner.dirs.insert(dir.clone(), HashSet::new()) {
                inner.names -= old.len();
            }
        }
    }

    /// `path` exists now (made by the mount or, per the Watch stream,
    /// elsewhere), and so does each directory above it: an event names
    /// only the file a call made, not the parents it made on the way.
    pub(super) fn added(&self, path: &CanonicalPath) {
        let mut inner = self.inner();
        let mut at = path.clone();
        while let (Some(dir), Some(name)) = (at.parent(), at.name()) {
            inner.add(&dir, name);
            at = dir;
        }
    }

    /// The mount removed `path` (or renamed it away).
    pub(super) fn removed(&self, path: &CanonicalPath) {
        let (Some(dir), Some(name)) = (path.parent(), path.name()) else {
            return;
        };
        let mut inner = self.inner();
        if let Some(names) = inner.dirs.get_mut(&dir) {
            if names.remove(name) {
                inner.names -= 1;
            }
        }
    }

    /// Forgets `path` and every known directory under it.
    pub(super) fn forget(&self, path: &CanonicalPath) {
        let mut inner = self.inner();
        let gone: Vec<CanonicalPath> = inner
            .dirs
            .keys()
            .filter(|d| d.starts_with(path))
            .cloned()
            .collect();
        for dir in gone {
            let dropped = inner.dirs.remove(&dir).map_or(0, |n| n.len());
            inner.names -= dropped;
        }
    }

    /// Forgets every directory (the Watch stream may have missed events).
    pub(super) fn forget_all(&self) {
        let mut inner = self.inner();
        inner.dirs.clear();
        inner.names = 0;
    }

    /// Whether the directory at `dir` is known: the mount made it.
    pub(super) fn made_here(&self, dir: &CanonicalPath) -> bool {
        self.inner().dirs.contains_key(dir)
    }

    /// Whether the directory at `dir` is known and holds no name.
    pub(super) fn empty(&self, dir: &CanonicalPath) -> bool {
        self.inner().dirs.get(dir).is_some_and(HashSet::is_empty)
    }

    /// Whether `path` surely does not exist: its directory is known and
    /// holds no such name.
    pub(super) fn absent(&self, path: &CanonicalPath) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.name()) else {
            return false;
        };
        self.inner()
            .dirs
            .get(&dir)
            .is_some_and(|names| !names.contains(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> CanonicalPath {
        crate::parse_path(s).unwrap()
    }

    #[test]
    fn a_made_directory_answers_names_it_never_got() {
        let k = KnownDirs::default();
        assert!(!k.absent(&p("d/x")), "an unknown directory answers nothing");
        k.made(&p("d"));
        assert!(k.absent(&p("d/x")));
        k.added(&p("d/x"));
        assert!(!k.absent(&p("d/x")));
        k.removed(&p("d/x"));
        assert!(k.absent(&p("d/x")));
        assert!(!k.absent(&p("e/x")));
        assert!(!k.absent(&p("d/sub/x")), "a subdirectory is not known");
        k.added(&p("d/made/elsewhere/deep.txt"));
        assert!(
            !k.absent(&p("d/made")),
            "a name made below implies its parents"
        );
    }

    #[test]
    fn forgetting_a_directory_forgets_its_subtree_only() {
        let k = KnownDirs::default();
        k.made(&p("d"));
        k.made(&p("d/sub"));
        k.made(&p("dx"));
        k.forget(&p("d"));
        assert!(!k.absent(&p("d/x")));
        assert!(!k.absent(&p("d/sub/x")));
        assert!(k.absent(&p("dx/x")), "a sibling sharing the prefix stays");
        k.forget_all();
        assert!(!k.absent(&p("dx/x")));
    }

    #[test]
    fn past_the_bound_a_directory_is_forgotten_not_wrong() {
        let k = KnownDirs::default();
        k.made(&p("d"));
        for i in 0..MAX_NAMES {
            k.added(&p(&format!("d/f{i}")));
        }
        assert!(k.absent(&p("d/new")), "still known at the bound");
        k.added(&p("d/one-more"));
        assert!(
            !k.absent(&p("d/one-more")),
            "a name past the bound is never answered absent"
        );
        assert!(!k.absent(&p("d/new")), "the directory is forgotten");
        k.made(&p("e"));
        assert!(k.absent(&p("e/x")), "room again once forgotten");
    }
}
