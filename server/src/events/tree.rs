//! The server's native recursive watcher: one inotify instance (the
//! `inotify` crate), a watch on every directory under each watched root,
//! and one thread reading the events.
//!
//! The watches are indexed by path in order, so a directory's subtree is
//! one range: removing a directory, moving one away or unwatching a root
//! costs the size of what goes, whatever the number of watches held.
//! (`notify`'s recursive inotify watcher, used here before, scans every
//! watch it holds with `Path::starts_with` for each removed directory:
//! `rm -rf` of a tree of n directories cost O(n²) there, a quarter of the
//! server's CPU for 1,000 directories.)
//!
//! A directory made or moved in gets its watch before it is listed, so
//! nothing made in it is missed: what was made before the watch is found
//! by the listing (each subdirectory found is reported as made, as the
//! session's watcher lists a new directory's files itself), what is made
//! after raises its own event. Symbolic links are never followed.

use super::ChangeKind;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use rustix::event::{PollFd, PollFlags};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What the watcher reports.
pub(super) enum Raw {
    /// `1` (absolute) changed.
    Change(ChangeKind, PathBuf),
    /// The kernel's event queue overflowed: changes may have been missed.
    Rescan,
    /// The kernel's watch limit kept this directory (made at run time)
    /// unwatched.
    Limit(PathBuf),
}

/// The kernel's watch limit (`fs.inotify.max_user_watches`) was reached.
#[derive(Debug)]
pub(super) struct LimitReached;

/// What every directory's watch asks for: changes of the names in it,
/// never of a link's target, and nothing of a file only still open.
const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::ONLYDIR)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::EXCL_UNLINK);

pub(super) struct Tree {
    state: Arc<Mutex<State>>,
    /// Dropping it ends the thread (its end of the pipe hangs up).
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct State {
    watches: Watches,
    by_wd: HashMap<WatchDescriptor, PathBuf>,
    by_path: BTreeMap<PathBuf, WatchDescriptor>,
    roots: BTreeSet<PathBuf>,
}

impl Tree {
    /// A watcher whose events go to `handler`, on its own thread.
    pub(super) fn new(handler: impl Fn(Raw) + Send + 'static) -> std::io::Result<Tree> {
        let inotify = Inotify::init()?;
        let state = Arc::new(Mutex::new(State {
            watches: inotify.watches(),
            by_wd: HashMap::new(),
            by_path: BTreeMap::new(),
            roots: BTreeSet::new(),
        }));
        let (hangup, stop) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("wsfs-watcher".into())
            .spawn(move || read_events(inotify, hangup, &shared, handler))?;
        Ok(Tree {
            state,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Watches `root` and every directory under it.
    pub(super) fn watch(&self, root: &Path) -> Result<(), LimitReached> {
        let mut state = self.state();
        state.roots.insert(root.to_path_buf());
        state.add_tree(root, None)
    }

    /// Stops watching `root`: the watches under it go, but for those under
    /// another watched root (roots may nest).
    pub(super) fn unwatch(&self, root: &Path) {
        let mut state = self.state();
        state.roots.remove(root);
        state.drop_tree(root, true);
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watcher's thread: reads events until `hangup` hangs up, and hands
/// what they mean to `handler`, the state's lock not held.
fn read_events(mut inotify: Inotify, hangup: OwnedFd, state: &Mutex<State>, handler: impl Fn(Raw)) {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    loop {
        {
            let mut fds = [
                PollFd::new(&inotify, PollFlags::IN),
                PollFd::new(&hangup, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
            }
            if !fds[1].revents().is_empty() {
                return;
            }
        }
        let events = match inotify.read_events(&mut buffer) {
            Ok(events) => events,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        {
            let mut state = lock(state);
            for event in events {
                state.handle(&event, &mut seen);
            }
        }
        for raw in seen.drain(..) {
            handler(raw);
        }
    }
}

impl State {
    fn handle(&mut self, event: &inotify::Event<&OsStr>, seen: &mut Vec<Raw>) {
        if event.mask.contains(EventMask::Q_OVERFLOW) {
            seen.push(Raw::Rescan);
            return;
        }
        if event.mask.contains(EventMask::IGNORED) {
            // The kernel dropped the watch (its directory is gone, or it
            // was removed here).
            if let Some(path) = self.by_wd.remove(&event.wd) {
                if self.by_path.get(&path) == Some(&event.wd) {
                    self.by_path.remove(&path);
                }
            }
            return;
        }
        // Events of a watched directory itself (no name) are reported by
        // its parent's watch, or are of a root, which is no change in it.
        let (Some(dir), Some(name)) = (self.by_wd.get(&event.wd), event.name) else {
            return;
        };
        let path = dir.join(name);
        let directory = event.mask.contains(EventMask::ISDIR);
        if event
            .mask
            .intersects(EventMask::CREATE | EventMask::MOVED_TO)
        {
            seen.push(Raw::Change(ChangeKind::Created, path.clone()));
            if directory && self.add_tree(&path, Some(seen)).is_err() {
                seen.push(Raw::Limit(path));
            }
        } else if event
            .mask
            .intersects(EventMask::DELETE | EventMask::MOVED_FROM)
        {
            if directory && event.mask.contains(EventMask::MOVED_FROM) {
                // Its watches would go on naming the old paths.
                self.drop_tree(&path, false);
            }
            seen.push(Raw::Change(ChangeKind::Deleted, path));
        } else if event.mask.intersects(EventMask::MODIFY | EventMask::ATTRIB) {
            seen.push(Raw::Change(ChangeKind::Modified, path));
        }
    }

    /// Watches `top` and every directory under it, each before it is
    /// listed; with `made`, each directory found under `top` is reported
    /// as made.
    fn add_tree(
        &mut self,
        top: &Path,
        mut made: Option<&mut Vec<Raw>>,
    ) -> Result<(), LimitReached> {
        let mut stack = vec![top.to_path_buf()];
        while let Some(dir) = stack.pop() {
            match self.watches.add(&dir, MASK) {
                Ok(wd) => self.note(dir.clone(), wd),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) => {
                    return Err(LimitReached)
                }
                // Gone, or no directory any more (a race with its removal
                // or replacement), or not readable: nothing to watch.
                Err(_) => continue,
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                // The entry's own type: a link to a directory is a link.
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let child = entry.path();
                    if let Some(made) = made.as_deref_mut() {
                        made.push(Raw::Change(ChangeKind::Created, child.clone()));
                    }
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// `wd` watches the directory at `path` (the kernel gives one watch per
    /// directory, however it was reached).
    fn note(&mut self, path: PathBuf, wd: WatchDescriptor) {
        if let Some(old) = self.by_wd.insert(wd.clone(), path.clone()) {
            if old != path && self.by_path.get(&old) == Some(&wd) {
                self.by_path.remove(&old);
            }
        }
        self.by_path.insert(path, wd);
    }

    /// Removes the watches of `top` and everything under it; with
    /// `keep_rooted`, not those under a root still watched.
    fn drop_tree(&mut self, top: &Path, keep_rooted: bool) {
        let under: Vec<(PathBuf, WatchDescriptor)> = self
            .by_path
            .range(top.to_path_buf()..)
            .take_while(|(path, _)| path.starts_with(top))
            .filter(|(path, _)| !(keep_rooted && self.rooted(path)))
            .map(|(path, wd)| (path.clone(), wd.clone()))
            .collect();
        for (path, wd) in under {
            self.by_path.remove(&path);
            self.by_wd.remove(&wd);
            // Already gone with its directory, or removed: no matter.
            let _ = self.watches.remove(wd);
        }
    }

    /// Whether `path` is under (or is) a watched root.
    fn rooted(&self, path: &Path) -> bool {
        path.ancestors().any(|a| self.roots.contains(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn tree() -> (Tree, mpsc::Receiver<(ChangeKind, PathBuf)>) {
        let (tx, rx) = mpsc::channel();
        let tree = Tree::new(move |raw| {
            if let Raw::Change(kind, path) = raw {
                let _ = tx.send((kind, path));
            }
        })
        .unwrap();
        (tree, rx)
    }

    /// Waits (at most 5 s) for a change of `path` of `kind`.
    fn expect(rx: &mpsc::Receiver<(ChangeKind, PathBuf)>, kind: ChangeKind, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((k, p)) if k == kind && p == path => return,
                Ok(_) => {}
                Err(_) => panic!("no {kind:?} of {}", path.display()),
            }
        }
    }

    /// Nothing more within a moment.
    fn quiet(rx: &mpsc::Receiver<(ChangeKind, PathBuf)>) -> Vec<(ChangeKind, PathBuf)> {
        std::thread::sleep(Duration::from_millis(200));
        rx.try_iter().collect()
    }

    fn watched_under(tree: &Tree, top: &Path) -> usize {
        let state = tree.state();
        state.by_path.keys().filter(|p| p.starts_with(top)).count()
    }

    #[test]
    fn directories_made_at_once_are_reported_and_watched_before_they_fill() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (tree, rx) = tree();
        tree.watch(&root).unwrap();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/b/c/f"), "x").unwrap();
        expect(&rx, ChangeKind::Created, &root.join("a"));
        expect(&rx, ChangeKind::Created, &root.join("a/b/c"));
        // Made after the watch of a/b/c, or found when it was listed: the
        // session's watcher lists the new directory either way; a file
        // made once the watch is there raises its own event.
        std::fs::write(root.join("a/b/c/g"), "x").unwrap();
        expect(&rx, ChangeKind::Created, &root.join("a/b/c/g"));
        assert_eq!(watched_under(&tree, &root), 4);
    }

    #[test]
    fn a_directory_moved_inside_the_root_reports_under_its_new_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("old/sub")).unwrap();
        let (tree, rx) = tree();
        tree.watch(&root).unwrap();
        std::fs::rename(root.join("old"), root.join("new")).unwrap();
        expect(&rx, ChangeKind::Deleted, &root.join("old"));
        expect(&rx, ChangeKind::Created, &root.join("new"));
        std::fs::write(root.join("new/sub/f"), "x").unwrap();
        expect(&rx, ChangeKind::Created, &root.join("new/sub/f"));
        let state = tree.state();
        assert!(state
            .by_path
            .keys()
            .all(|p| !p.starts_with(root.join("old"))));
        assert_eq!(state.by_path.len(), state.by_wd.len());
    }

    #[test]
    fn a_tree_removed_or_moved_out_gives_its_watches_back() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for i in 0..50 {
            std::fs::create_dir_all(root.join(format!("gone/d{i}/e"))).unwrap();
            std::fs::create_dir_all(root.join(format!("away/d{i}"))).unwrap();
        }
        let (tree, rx) = tree();
        tree.watch(&root).unwrap();
        assert_eq!(watched_under(&tree, &root), 1 + 101 + 51);
        std::fs::remove_dir_all(root.join("gone")).unwrap();
        expect(&rx, ChangeKind::Deleted, &root.join("gone"));
        let moved = outside.path().join("away");
        std::fs::rename(root.join("away"), &moved).unwrap();
        expect(&rx, ChangeKind::Deleted, &root.join("away"));
        // What happens out there is no change of the root's.
        std::fs::write(moved.join("d3/f"), "x").unwrap();
        let after = quiet(&rx);
        assert!(after.is_empty(), "changes outside the root: {after:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while watched_under(&tree, &root) != 1 {
            assert!(Instant::now() < deadline, "watches kept");
            std::thread::sleep(Duration::from_millis(20));
        }
        let state = tree.state();
        assert_eq!(state.by_wd.len(), 1);
    }

    #[test]
    fn nested_roots_keep_each_others_watches() {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().canonicalize().unwrap();
        let inner = outer.join("in");
        std::fs::create_dir_all(inner.join("x")).unwrap();
        let (tree, rx) = tree();
        tree.watch(&outer).unwrap();
        tree.watch(&inner).unwrap();
        tree.unwatch(&inner);
        std::fs::write(inner.join("x/f"), "x").unwrap();
        expect(&rx, ChangeKind::Created, &inner.join("x/f"));
        tree.watch(&inner).unwrap();
        tree.unwatch(&outer);
        std::fs::write(inner.join("x/g"), "x").unwrap();
        expect(&rx, ChangeKind::Created, &inner.join("x/g"));
        // The write's own modification, and nothing else.
        quiet(&rx);
        std::fs::write(outer.join("h"), "x").unwrap();
        let after = quiet(&rx);
        assert!(after.is_empty(), "changes of an unwatched root: {after:?}");
        assert_eq!(watched_under(&tree, &outer), 2);
    }

    #[test]
    fn links_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.join("link")).unwrap();
        let (tree, rx) = tree();
        tree.watch(&root).unwrap();
        std::fs::write(elsewhere.path().join("f"), "x").unwrap();
        let after = quiet(&rx);
        assert!(after.is_empty(), "changes through a link: {after:?}");
        assert_eq!(watched_under(&tree, &root), 1);
    }
}
