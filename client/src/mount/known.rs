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
//!
//! The last listing of a directory is kept for its next opens while
//! nothing in the directory changes ([`KnownDirs::kept_listing`]): `rm
//! -rf` opens each directory twice in a row (once to see whether it is
//! empty, once to read it), and the kernel keeps no listing that was not
//! read to its end. Any change the mount makes or hears of in the
//! directory — a name made, removed or renamed, an entry's attributes,
//! any Watch event naming the directory or an entry — drops it, and a
//! listing whose List crossed such a change is not kept. At most
//! [`MAX_LISTED`] entries are kept across directories.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use wsfs::{CanonicalPath, Metadata};

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
    dirs: BTreeMap<CanonicalPath, HashSet<String>>,
    /// The directories the mount listed: the names of the listing, and
    /// those learned since.
    listed: BTreeMap<CanonicalPath, HashSet<String>>,
    names: usize,
    /// Listings kept for their directory's next open, and Lists on their
    /// way that may be kept.
    kept: BTreeMap<CanonicalPath, Kept>,
    /// The entries of the listings in `kept`.
    kept_entries: usize,
    /// The last List's ticket.
    tickets: u64,
}

/// A directory's listing kept for its next open.
enum Kept {
    /// A List is on its way; kept when it ends with this ticket in place.
    Asked(u64),
    Listed(Arc<Vec<Metadata>>),
}

impl Inner {
    /// Something in `dir` (or `dir` itself) changed: its listing is old.
    fn touch(&mut self, dir: &CanonicalPath) {
        if let Some(Kept::Listed(listing)) = self.kept.remove(dir) {
            self.kept_entries -= listing.len();
        }
    }

    fn add(&mut self, dir: &CanonicalPath, name: &str) {
        self.touch(dir);
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
        inner.touch(&dir);
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
        let mut gone = under(&inner.dirs, path);
        gone.extend(under(&inner.listed, path));
        for dir in gone {
            inner.remove_dir(&dir);
        }
        for dir in under(&inner.kept, path) {
            inner.touch(&dir);
        }
        if let Some(parent) = path.parent() {
            inner.touch(&parent);
        }
    }

    /// Forgets every directory (the Watch stream may have missed events).
    pub(super) fn forget_all(&self) {
        let mut inner = self.inner();
        inner.dirs.clear();
        inner.listed.clear();
        inner.names = 0;
        inner.kept.clear();
        inner.kept_entries = 0;
    }

    /// `path` changed (a Watch event named it, or the mount changed its
    /// attributes): the listings of its directory, and its own, are old.
    pub(super) fn changed(&self, path: &CanonicalPath) {
        let mut inner = self.inner();
        inner.touch(path);
        if let Some(dir) = path.parent() {
            inner.touch(&dir);
        }
    }

    /// A List of `dir` is about to leave: the ticket to keep its answer
    /// with ([`KnownDirs::keep_listing`]).
    pub(super) fn listing_asked(&self, dir: &CanonicalPath) -> u64 {
        let mut inner = self.inner();
        inner.touch(dir);
        inner.tickets += 1;
        let ticket = inner.tickets;
        inner.kept.insert(dir.clone(), Kept::Asked(ticket));
        ticket
    }

    /// The List of `dir` that left with `ticket` answered `listing`: kept
    /// for the directory's next opens when nothing in it changed meanwhile
    /// and it fits (older kept listings give way).
    pub(super) fn keep_listing(
        &self,
        dir: &CanonicalPath,
        ticket: u64,
        listing: &Arc<Vec<Metadata>>,
    ) {
        let mut inner = self.inner();
        if !matches!(inner.kept.get(dir), Some(Kept::Asked(t)) if *t == ticket) {
            return;
        }
        inner.kept.remove(dir);
        if listing.len() > MAX_LISTED {
            return;
        }
        if inner.kept_entries + listing.len() > MAX_LISTED {
            inner.kept.retain(|_, kept| matches!(kept, Kept::Asked(_)));
            inner.kept_entries = 0;
        }
        inner.kept_entries += listing.len();
        inner
            .kept
            .insert(dir.clone(), Kept::Listed(listing.clone()));
    }

    /// The listing of `dir` kept by its last List, when nothing in it has
    /// changed since.
    pub(super) fn kept_listing(&self, dir: &CanonicalPath) -> Option<Arc<Vec<Metadata>>> {
        match self.inner().kept.get(dir) {
            Some(Kept::Listed(listing)) => Some(listing.clone()),
            _ => None,
        }
    }

    /// Every name in `dir`, sorted, when the mount made it (and so knows
    /// them all).
    pub(super) fn made_names(&self, dir: &CanonicalPath) -> Option<Vec<String>> {
        let mut names: Vec<String> = self.inner().dirs.get(dir)?.iter().cloned().collect();
        names.sort_unstable();
        Some(names)
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

/// The keys of `map` at or under `path`: those whose text starts with
/// `path`'s sort together, so an unlink looks at a few keys, not at every
/// known directory.
fn under<V>(map: &BTreeMap<CanonicalPath, V>, path: &CanonicalPath) -> Vec<CanonicalPath> {
    map.range(path.clone()..)
        .take_while(|(key, _)| key.as_str().starts_with(path.as_str()))
        .filter(|(key, _)| key.starts_with(path))
        .map(|(key, _)| key.clone())
        .collect()
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
        // These sort between `d` and `d/sub`: the scan goes past them.
        k.made(&p("d-x"));
        k.made(&p("d.y"));
        k.listed(&p("d/sub/deeper"), Vec::<&str>::new().into_iter());
        assert!(k.empty(&p("d/sub/deeper")));
        k.forget(&p("d"));
        assert!(!k.absent(&p("d/x")));
        assert!(!k.absent(&p("d/sub/x")));
        assert!(!k.empty(&p("d/sub/deeper")), "a listed subdirectory too");
        for sibling in ["dx", "d-x", "d.y"] {
            assert!(
                k.absent(&p(&format!("{sibling}/x"))),
                "{sibling}, a sibling sharing the prefix, stays"
            );
        }
        k.forget(&p(""));
        assert!(!k.absent(&p("d-x/x")), "forgetting the root forgets all");
        k.made(&p("dx"));
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

    fn listing(names: &[&str]) -> Arc<Vec<Metadata>> {
        let entries = names
            .iter()
            .map(|name| Metadata {
                path: p(name),
                kind: wsfs::FileKind::File,
                size: 0,
                created: std::time::SystemTime::UNIX_EPOCH,
                modified: std::time::SystemTime::UNIX_EPOCH,
                version: 1,
                permissions: wsfs::Permissions::FILE_DEFAULT,
                symlink_target: None,
            })
            .collect();
        Arc::new(entries)
    }

    #[test]
    fn a_kept_listing_serves_while_nothing_in_it_changes() {
        let k = KnownDirs::default();
        let ticket = k.listing_asked(&p("d"));
        assert!(k.kept_listing(&p("d")).is_none(), "not while it travels");
        k.keep_listing(&p("d"), ticket, &listing(&["d/a"]));
        assert_eq!(k.kept_listing(&p("d")).map(|l| l.len()), Some(1));
        assert!(k.kept_listing(&p("d")).is_some(), "it serves every open");

        let changes: [&dyn Fn(&KnownDirs); 6] = [
            &|k| k.added(&p("d/new")),
            &|k| k.added(&p("d/sub/deep")),
            &|k| k.removed(&p("d/a")),
            &|k| k.changed(&p("d/a")),
            &|k| k.forget(&p("d/a")),
            &|k| k.forget_all(),
        ];
        for (i, change) in changes.iter().enumerate() {
            let ticket = k.listing_asked(&p("d"));
            k.keep_listing(&p("d"), ticket, &listing(&["d/a"]));
            change(&k);
            assert!(k.kept_listing(&p("d")).is_none(), "change {i} drops it");
            let ticket = k.listing_asked(&p("d"));
            change(&k);
            k.keep_listing(&p("d"), ticket, &listing(&["d/a"]));
            assert!(
                k.kept_listing(&p("d")).is_none(),
                "change {i} while the List travelled: not kept"
            );
        }
        let ticket = k.listing_asked(&p("d"));
        k.keep_listing(&p("d"), ticket, &listing(&["d/a"]));
        k.added(&p("e/x"));
        k.changed(&p("dx"));
        assert!(k.kept_listing(&p("d")).is_some(), "others' changes keep it");
        assert_eq!(k.inner().kept_entries, 1);
    }

    #[test]
    fn kept_listings_hold_at_most_the_bound_of_entries() {
        let k = KnownDirs::default();
        let names: Vec<String> = (0..MAX_LISTED / 2 + 1).map(|i| format!("d/f{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let big = listing(&names);
        for dir in ["a", "b"] {
            let ticket = k.listing_asked(&p(dir));
            k.keep_listing(&p(dir), ticket, &big);
        }
        assert!(k.inner().kept_entries <= MAX_LISTED);
        assert!(k.kept_listing(&p("a")).is_none(), "the older gave way");
        assert!(k.kept_listing(&p("b")).is_some());
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
