//! The server's one filesystem watcher, shared by every DIRECTORY session.
//!
//! One native recursive watcher (tree.rs: one inotify instance, one
//! thread) holds a watch on every directory under every session's root,
//! added as directories appear. Every event of the instance goes to one
//! handler, which hands each changed path to the sessions whose root holds
//! it (the nearest root and any root above it: rooted sessions may nest).
//! A root unwatched keeps the watches of the roots still asked for.
//!
//! A root that cannot be watched natively (the kernel's watch limit,
//! `fs.inotify.max_user_watches`, reached while walking it or a directory
//! made in it later, or no inotify instance at all) is scanned instead by
//! one shared polling watcher (`notify`'s, one thread for every such root)
//! every [`POLL_INTERVAL`], and the log says so; its native watches are
//! given back. Below the limit nothing is polled. Either watcher exists
//! only while some root needs it.

use super::tree::{Raw, Tree};
use super::ChangeKind;
use notify::Watcher;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

/// How often a root that has no native watch is scanned.
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Set (to anything) to have every root polled, as if the inotify limits
/// were reached: for tests of the fallback.
pub const FORCE_POLL_ENV: &str = "WSFS_TEST_FORCE_POLL_WATCHER";

/// What the watcher tells a session.
pub(super) enum Seen {
    /// A path under the session's root (relative, never empty) changed.
    Change(ChangeKind, String, SystemTime),
    /// Changes may have been missed: the kernel's event queue overflowed,
    /// or the root moved from the kernel's watch to scanning (what changed
    /// between the two is in neither).
    Overflow,
}

pub(super) type Tx = tokio::sync::mpsc::UnboundedSender<Seen>;

/// Who listens under each watched root.
type Routes = RwLock<HashMap<PathBuf, Vec<(u64, Tx)>>>;

struct Hub {
    /// Read by the watchers' threads; never held while calling a watcher.
    routes: Arc<Routes>,
    watchers: Mutex<Watchers>,
}

struct Watchers {
    native: Native,
    polling: Option<notify::PollWatcher>,
    /// How each root with listeners is watched.
    watched: HashMap<PathBuf, Mode>,
    next_id: u64,
}

enum Native {
    Untried,
    Ready(Tree),
    Unavailable,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Native,
    Polled,
}

static HUB: OnceLock<Hub> = OnceLock::new();

fn hub() -> &'static Hub {
    HUB.get_or_init(|| Hub {
        routes: Arc::new(RwLock::new(HashMap::new())),
        watchers: Mutex::new(Watchers {
            native: Native::Untried,
            polling: None,
            watched: HashMap::new(),
            next_id: 0,
        }),
    })
}

/// A session's interest in its root; dropping it ends the session's watch
/// (and the root's, when no other session shares it).
pub(super) struct Registration {
    root: PathBuf,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        hub().unregister(&self.root, self.id);
    }
}

/// Sends `root`'s changes to `tx` from now on; `None` when the root can be
/// watched neither natively nor by polling (logged).
pub(super) fn register(root: &Path, tx: Tx) -> Option<Registration> {
    hub().register(root, tx)
}

impl Hub {
    fn watchers(&self) -> std::sync::MutexGuard<'_, Watchers> {
        self.watchers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn routes_mut(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<PathBuf, Vec<(u64, Tx)>>> {
        self.routes.write().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&'static self, root: &Path, tx: Tx) -> Option<Registration> {
        let mut w = self.watchers();
        let id = w.next_id;
        w.next_id += 1;
        // Listening before the watch exists: nothing after it is missed.
        self.routes_mut()
            .entry(root.to_path_buf())
            .or_default()
            .push((id, tx));
        if !w.watched.contains_key(root) {
            match self.watch(&mut w, root) {
                Some(mode) => {
                    w.watched.insert(root.to_path_buf(), mode);
                }
                None => {
                    self.forget_route(root, id);
                    return None;
                }
            }
        }
        Some(Registration {
            root: root.to_path_buf(),
            id,
        })
    }

    /// Removes listener `id`; true when `root` has none left.
    fn forget_route(&self, root: &Path, id: u64) -> bool {
        let mut routes = self.routes_mut();
        let Some(listeners) = routes.get_mut(root) else {
            return true;
        };
        listeners.retain(|(i, _)| *i != id);
        if listeners.is_empty() {
            routes.remove(root);
            return true;
        }
        false
    }

    fn unregister(&self, root: &Path, id: u64) {
        let mut w = self.watchers();
        if !self.forget_route(root, id) {
            return;
        }
        match w.watched.remove(root) {
            Some(Mode::Native) => {
                if let Native::Ready(native) = &mut w.native {
                    native.unwatch(root);
                }
            }
            Some(Mode::Polled) => {
                if let Some(polling) = &mut w.polling {
                    let _ = polling.unwatch(root);
                }
            }
            None => {}
        }
        // A watcher nothing uses is let go (its thread and descriptors), and
        // made again at the next need.
        if !w.watched.values().any(|m| *m == Mode::Native) {
            w.native = Native::Untried;
        }
        if !w.watched.values().any(|m| *m == Mode::Polled) {
            w.polling = None;
        }
    }

    /// Watches `root` natively, else by polling; how, or `None` when it
    /// cannot be watched at all.
    fn watch(&'static self, w: &mut Watchers, root: &Path) -> Option<Mode> {
        let native_error = match self.native(w) {
            Some(native) => match native.watch(root) {
                Ok(()) => return Some(Mode::Native),
                Err(_) => {
                    // Give back the watches of the part walked before the
                    // limit: the polling covers the whole root.
                    native.unwatch(root);
                    "the kernel's inotify watch limit was reached".to_string()
                }
            },
            None => "no inotify instance".to_string(),
        };
        self.poll(w, root, &native_error)
    }

    /// Polls `root`, logging why.
    /// Logged once the scan's first look at the root is taken, so that a
    /// change made after the log line is one the scanning reports.
    fn poll(&'static self, w: &mut Watchers, root: &Path, why: &str) -> Option<Mode> {
        let polling = match &mut w.polling {
            Some(p) => p,
            None => {
                // Never through a symlink: a link to '/' would have it
                // scan the whole machine.
                let config = notify::Config::default()
                    .with_poll_interval(POLL_INTERVAL)
                    .with_follow_symlinks(false);
                let routes = self.routes.clone();
                match notify::PollWatcher::new(move |e| dispatch_polled(&routes, e), config) {
                    Ok(p) => w.polling.insert(p),
                    Err(e) => {
                        tracing::error!(error = %e, "no polling watcher: outside changes will not be reported");
                        return None;
                    }
                }
            }
        };
        match polling.watch(root, notify::RecursiveMode::Recursive) {
            Ok(()) => {
                tracing::warn!(
                    root = %root.display(),
                    error = why,
                    interval = ?POLL_INTERVAL,
                    "no filesystem watcher for this session (raise fs.inotify.max_user_watches or max_user_instances): scanning its root for outside changes instead"
                );
                Some(Mode::Polled)
            }
            Err(e) => {
                tracing::error!(root = %root.display(), error = %e, "this session's root cannot be watched at all: outside changes will not be reported");
                None
            }
        }
    }

    /// The native watcher, made at the first need; `None` when there is
    /// none to be had.
    fn native<'w>(&'static self, w: &'w mut Watchers) -> Option<&'w mut Tree> {
        if matches!(w.native, Native::Untried) {
            w.native = if std::env::var_os(FORCE_POLL_ENV).is_some() {
                Native::Unavailable
            } else {
                // Changes only (no opens or closes: the service's own
                // reads would raise them); links never followed out of a
                // root.
                let routes = self.routes.clone();
                let handler = move |raw: Raw| match raw {
                    Raw::Change(kind, path) => route(&routes, kind, &path),
                    Raw::Rescan => resync_all(&routes),
                    Raw::Limit(path) => {
                        // Called from the watcher's own thread, which the
                        // switch must not wait for.
                        std::thread::spawn(move || hub().fall_back(&[path]));
                    }
                };
                match Tree::new(handler) {
                    Ok(native) => Native::Ready(native),
                    Err(e) => {
                        tracing::warn!(error = %e, "no inotify instance for the server (raise fs.inotify.max_user_instances): every session's root will be scanned instead");
                        Native::Unavailable
                    }
                }
            };
        }
        match &mut w.native {
            Native::Ready(native) => Some(native),
            _ => None,
        }
    }

    /// Moves the natively watched roots holding `paths` (directories the
    /// kernel's watch limit kept unwatched) to polling.
    fn fall_back(&'static self, paths: &[PathBuf]) {
        let mut w = self.watchers();
        let roots: Vec<PathBuf> = w
            .watched
            .iter()
            .filter(|(root, mode)| {
                **mode == Mode::Native && paths.iter().any(|p| p.starts_with(root))
            })
            .map(|(root, _)| root.clone())
            .collect();
        for root in roots {
            if let Native::Ready(native) = &mut w.native {
                native.unwatch(&root);
            }
            match self.poll(
                &mut w,
                &root,
                "the watch limit was reached in a new directory",
            ) {
                Some(mode) => {
                    // What changed between the kernel's refusal and the
                    // scan's first look is reported by neither: the
                    // session's watchers are told to resync.
                    let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
                    for (_, tx) in routes.get(&root).into_iter().flatten() {
                        let _ = tx.send(Seen::Overflow);
                    }
                    drop(routes);
                    w.watched.insert(root, mode);
                }
                None => {
                    w.watched.remove(&root);
                }
            }
        }
    }
}

/// Hands one event of the polling watcher to the sessions whose root
/// holds its paths.
fn dispatch_polled(routes: &Routes, event: notify::Result<notify::Event>) {
    let Ok(event) = event else { return };
    if event.need_rescan() {
        return resync_all(routes);
    }
    use notify::event::{ModifyKind, RenameMode};
    let kind = match event.kind {
        // A rename's new name is new to the workspace; for a directory
        // moved in, it is the only event its files get.
        notify::EventKind::Create(_)
        | notify::EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both)) => {
            ChangeKind::Created
        }
        notify::EventKind::Remove(_) => ChangeKind::Deleted,
        notify::EventKind::Modify(_) => ChangeKind::Modified,
        _ => return,
    };
    for path in &event.paths {
        route(routes, kind, path);
    }
}

/// Changes may have been missed: every session is told to resync.
fn resync_all(routes: &Routes) {
    let routes = routes.read().unwrap_or_else(|e| e.into_inner());
    for listeners in routes.values() {
        for (_, tx) in listeners {
            let _ = tx.send(Seen::Overflow);
        }
    }
}

/// Hands a change of `path` (absolute) to the sessions whose root holds
/// it.
fn route(routes: &Routes, kind: ChangeKind, path: &Path) {
    let seen = SystemTime::now();
    let routes = routes.read().unwrap_or_else(|e| e.into_inner());
    // Every root above the path: rooted sessions may nest.
    for root in path.ancestors().skip(1) {
        let Some(listeners) = routes.get(root) else {
            continue;
        };
        let Some(rel) = path
            .strip_prefix(root)
            .ok()
            .and_then(|r| r.to_str())
            .filter(|r| !r.is_empty())
        else {
            continue;
        };
        for (_, tx) in listeners {
            let _ = tx.send(Seen::Change(kind, rel.to_string(), seen));
        }
    }
}
