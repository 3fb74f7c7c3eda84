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
//!
//! Directories the mount listed (at most [`MAX_LISTED`] names each) are
//! kept apart, for one question only: whether an rmdir may go behind
//! (namespace.rs). A listed directory learns and forgets names as a made
//! one does, but a name made elsewhere between the List and the events
//! that follow it can be missed, so it never answers a lookup "absent";
//! an rmdir it lets go behind wrongly is refused by the server and
//! reported (behind.rs).

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

/// The most names a listing may have to be kept (listed directories).
pub(super) const MAX_LISTED: usize = 10_000;

#[derive(Default)]
struct Inner {
    /// The directories the mount made: every name known.
    dirs: HashMap<CanonicalPath, HashSet<String>>,
    /// The directories the mount listed: the names of the listing, and
    /// those learned since.
    listed: HashMap<CanonicalPath, HashSet<String>>,
    names: usize,
}

impl Inner {
    fn add(&mut self, dir: &CanonicalPath, name: &str) {
        let full = self.names >= MAX_NAMES;
        for map in [&mut self.dirs, &mut self.listed] {
            let Some(names) = map.get_mut(dir) else {
                continue;
            };
            if full {
                self.names -= map.remove(dir).map_or(0, |n| n.len());
            } else if names.insert(name.to_string()) {
                self.names += 1;
            }
        }
    }

    fn remove_dir(&mut self, dir: &CanonicalPath) {
        for map in [&mut self.dirs, &mut self.listed] {
            self.names -= map.remove(dir).map_or(0, |n| n.len());
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
        inner.remove_dir(dir);
        if inner.names < MAX_NAMES {
            inner.dirs.insert(dir.clone(), HashSet::new());
        }
    }

    /// The mount listed `dir` and found `names` (see the module's notes).
    pub(super) fn listed<'a>(
        &self,
        dir: &CanonicalPath,
        names: impl ExactSizeIterator<Item = &'a str>,
    ) {
        let mut inner = self.inner();
        if inner.dirs.contains_key(dir) {
            return;
        }
        inner.remove_dir(dir);
        if names.len() <= MAX_LISTED && inner.names + names.len() <= MAX_NAMES {
            let names: HashSet<String> = names.map(str::to_string).collect();
            inner.names += names.len();
            inner.listed.insert(dir.clone(), names);
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
        let inner = &mut *inner;
        for map in [&mut inner.dirs, &mut inner.listed] {
            if map.get_mut(&dir).is_some_and(|names| names.remove(name)) {
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
            .chain(inner.listed.keys())
            .filter(|d| d.starts_with(path))
            .cloned()
            .collect();
        for dir in gone {
            inner.remove_dir(&dir);
        }
    }

    /// Forgets every directory (the Watch stream may have missed events).
    pub(super) fn forget_all(&self) {
        let mut inner = self.inner();
        inner.dirs.clear();
        inner.listed.clear();
        inner.names = 0;
    }

    /// Whether the directory at `dir` is known: the mount made it.
    pub(super) fn made_here(&self, dir: &CanonicalPath) -> bool {
        self.inner().dirs.contains_key(dir)
    }

    /// Whether the directory at `dir` is made or listed by the mount, and
    /// holds no name it knows.
    pub(super) fn empty(&self, dir: &CanonicalPath) -> bool {
        let inner = self.inner();
        let names = inner.dirs.get(dir).or_else(|| inner.listed.get(dir));
        names.is_some_and(HashSet::is_empty)
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
    fn a_listed_directory_answers_emptiness_only() {
        let k = KnownDirs::default();
        k.listed(&p("l"), ["a", "b"].into_iter());
        assert!(!k.absent(&p("l/x")), "a listing never answers a lookup");
        assert!(!k.made_here(&p("l")));
        assert!(!k.empty(&p("l")));
        k.removed(&p("l/a"));
        k.added(&p("l/c"));
        k.removed(&p("l/b"));
        assert!(!k.empty(&p("l")), "a name learned since counts");
        k.removed(&p("l/c"));
        assert!(k.empty(&p("l")));
        k.forget(&p("l"));
        assert!(!k.empty(&p("l")), "forgotten: not known to be empty");
        let many: Vec<String> = (0..=MAX_LISTED).map(|i| format!("f{i}")).collect();
        k.listed(&p("big"), many.iter().map(String::as_str));
        assert!(!k.empty(&p("big")));
        assert_eq!(k.inner().names, 0, "a listing past the bound is not kept");
        k.made(&p("m"));
        k.listed(&p("m"), ["x"].into_iter());
        assert!(k.empty(&p("m")), "a made directory knows better");
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
