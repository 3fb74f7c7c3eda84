//! Change events: each session's [`EventLog`], which `Watch` streams and
//! `Changes` polls.
//!
//! The log is a bounded ring of [`Change`]s with sequence numbers from 1,
//! plus a `tokio::sync::watch` channel carrying the last assigned seq. A
//! reader keeps a cursor (the last seq it has seen) and asks
//! [`EventLog::since`] for what follows; a live watcher then waits for the
//! channel to move past its cursor. Replay and live delivery are the same
//! read of the ring, so a resumed watcher neither loses nor repeats events.
//!
//! Events are appended by the events layer ([`crate::layers::Recorded`]),
//! part of the view the service opens for each call, after the call
//! succeeds, because only there are both the outcome and the caller known:
//! backends stay free of callers. When the ring no longer holds the event
//! after a cursor, the reader gets [`Since::Resync`] and should re-read the
//! workspace.
//! Restore and ImportArchive replace the workspace wholesale; they are
//! recorded as a [`EventLog::barrier`], which every reader behind it sees as
//! a resync. A DIRECTORY session also has an [`ExternalWatcher`], which
//! reports changes made to its root from outside the service as caller
//! `external`; all of them share the server's one filesystem watcher
//! ([`watcher`]).

use crate::auth::EXTERNAL_CALLER;

mod tree;
mod watcher;
use watcher::Seen;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::watch;
use wsfs::CanonicalPath;

/// Default number of events a session holds.
pub const DEFAULT_RING_EVENTS: usize = 10_000;

pub use wsfs::wire::events::{Change, ChangeKind};

/// What a reader behind `cursor` gets.
#[derive(Debug)]
pub enum Since {
    /// The events after the cursor (possibly none), oldest first.
    Events(Vec<Change>),
    /// Events after the cursor are no longer held; `seq` is the current one.
    Resync { seq: u64 },
}

struct Ring {
    events: VecDeque<Change>,
    /// The seq the next change gets.
    next_seq: u64,
    /// The oldest seq a reader can still be given without a resync.
    first_held: u64,
    /// The seq this log began at: a cursor of 0 means just before it.
    first_seq: u64,
}

impl Ring {
    /// A cursor of 0 is the log's beginning: just before its first seq.
    fn resolve(&self, cursor: u64) -> u64 {
        match cursor {
            0 => self.first_seq - 1,
            cursor => cursor,
        }
    }
}

/// The first seq of a log made now: the wall clock in microseconds since
/// the Unix epoch. A session's log lives in one server's memory, so a
/// restart, a recovery on another replica or a session made again under
/// the same id begins a new one. A cursor a client kept from the earlier
/// log is then below every seq of the new one (its log would have had to
/// assign more than one seq per microsecond of its life to reach it), so it
/// gets a RESYNC instead of silently skipping the new log's first events;
/// a cursor above the new log's current seq (a clock set back) gets one
/// too ([`EventLog::since`]).
fn first_seq_now() -> u64 {
    crate::clock::now_us().max(1)
}

pub struct EventLog {
    ring: Mutex<Ring>,
    capacity: usize,
    last_seq: watch::Sender<u64>,
    own: OwnChanges,
}

/// How long after one of the service's own whole-subtree changes ends the
/// filesystem events it caused may still arrive (inotify delivers them
/// within milliseconds; this leaves room for a loaded machine).
pub const OWN_CHANGE_SLACK: std::time::Duration = std::time::Duration::from_millis(250);

/// How long ended own changes are remembered, and how many at most: past
/// that, a late filesystem event could at worst be reported once more as
/// `external`, never a real outside change lost.
const OWN_CHANGE_MEMORY: std::time::Duration = std::time::Duration::from_secs(10);
const OWN_CHANGE_MAX: usize = 1024;

/// The service's own changes to whole subtrees (a recursive Delete, a Move
/// or Copy of a directory, Restore, ImportArchive): the service logs one
/// event for each, and the filesystem events they cause under the subtree
/// are not reported again as `external`.
struct OwnChanges {
    state: Mutex<OwnState>,
    /// How many are running; the external watcher waits for none before it
    /// judges what it saw.
    running: watch::Sender<usize>,
}

#[derive(Default)]
struct OwnState {
    next_id: u64,
    /// id, subtree (`None`: the whole workspace), start.
    running: Vec<(u64, Option<String>, SystemTime)>,
    /// The subtree (`""`: the whole workspace) and end of each, the
    /// oldest first: the order they are forgotten in.
    ended: VecDeque<(String, SystemTime)>,
    /// Their start and end by subtree, the oldest first. An event's path
    /// is looked up here with each of its ancestors, so that judging it
    /// costs its depth, not one comparison per change remembered (a
    /// `rm -rf` through a mount makes a thousand a second).
    ended_at: HashMap<String, VecDeque<(SystemTime, SystemTime)>>,
}

impl OwnState {
    fn push_ended(&mut self, subtree: Option<String>, start: SystemTime, end: SystemTime) {
        let key = subtree.unwrap_or_default();
        self.ended_at
            .entry(key.clone())
            .or_default()
            .push_back((start, end));
        self.ended.push_back((key, end));
        if self.ended.len() > OWN_CHANGE_MAX {
            self.pop_ended();
        }
    }

    fn pop_ended(&mut self) {
        let Some((key, _)) = self.ended.pop_front() else {
            return;
        };
        if let std::collections::hash_map::Entry::Occupied(mut at) = self.ended_at.entry(key) {
            at.get_mut().pop_front();
            if at.get().is_empty() {
                at.remove();
            }
        }
    }

    /// The ended changes whose subtree covers `path`: the whole workspace's,
    /// and those of `path` and of each directory above it.
    fn ended_covering<'s>(
        &'s self,
        path: &'s str,
    ) -> impl Iterator<Item = &'s (SystemTime, SystemTime)> + 's {
        let ancestors = path
            .match_indices('/')
            .map(move |(i, _)| &path[..i])
            .chain(std::iter::once(path))
            .filter(|a| !a.is_empty());
        std::iter::once("")
            .chain(ancestors)
            .filter_map(move |key| self.ended_at.get(key))
            .flatten()
    }
}

/// One of the service's own subtree changes, running until dropped.
pub struct OwnChange<'a> {
    log: &'a EventLog,
    id: u64,
}

impl Drop for OwnChange<'_> {
    fn drop(&mut self) {
        let own = &self.log.own;
        let mut state = own.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = state.running.iter().position(|r| r.0 == self.id) {
            let (_, subtree, start) = state.running.swap_remove(i);
            state.push_ended(subtree, start, SystemTime::now());
        }
        own.running.send_replace(state.running.len());
    }
}

/// Whether `path` lies in `subtree` (`None`: everywhere).
fn covers(subtree: Option<&str>, path: &str) -> bool {
    match subtree {
        None | Some("") => true,
        Some(s) => path == s || path.strip_prefix(s).is_some_and(|r| r.starts_with('/')),
    }
}

impl EventLog {
    /// A log whose first seq is the wall clock in microseconds: see
    /// [`first_seq_now`].
    pub fn new(capacity: usize) -> EventLog {
        EventLog::starting_at(first_seq_now(), capacity)
    }

    /// A log whose first change gets seq `first` (at least 1).
    pub fn starting_at(first: u64, capacity: usize) -> EventLog {
        let first = first.max(1);
        EventLog {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                next_seq: first,
                first_held: first,
                first_seq: first,
            }),
            capacity: capacity.max(1),
            last_seq: watch::channel(first - 1).0,
            own: OwnChanges {
                state: Mutex::new(OwnState::default()),
                running: watch::channel(0).0,
            },
        }
    }

    /// Marks the start of one of the service's own changes to `subtree`
    /// (`None`: the whole workspace); it ends when the guard is dropped.
    pub fn own_change(&self, subtree: Option<&CanonicalPath>) -> OwnChange<'_> {
        let mut state = self.own.state.lock().unwrap_or_else(|e| e.into_inner());
        let id = state.next_id;
        state.next_id += 1;
        let subtree = subtree.map(|p| p.as_str().to_string());
        state.running.push((id, subtree, SystemTime::now()));
        self.own.running.send_replace(state.running.len());
        OwnChange { log: self, id }
    }

    /// Whether a filesystem event about `path`, seen at `seen`, was caused
    /// by one of the service's own subtree changes.
    fn caused_by_service(&self, path: &str, seen: SystemTime) -> bool {
        let now = SystemTime::now();
        let mut state = self.own.state.lock().unwrap_or_else(|e| e.into_inner());
        let forget_before = now.checked_sub(OWN_CHANGE_MEMORY).unwrap_or(now);
        while state.ended.front().is_some_and(|e| e.1 < forget_before) {
            state.pop_ended();
        }
        let during =
            |start: SystemTime, end: SystemTime| start <= seen && seen <= end + OWN_CHANGE_SLACK;
        state
            .running
            .iter()
            .any(|(_, s, start)| covers(s.as_deref(), path) && during(*start, now))
            || state
                .ended_covering(path)
                .any(|(start, end)| during(*start, *end))
    }

    /// Resolves when none of the service's own subtree changes is running,
    /// or after `at_most`.
    async fn own_changes_settled(&self, at_most: std::time::Duration) {
        let mut running = self.own.running.subscribe();
        let _ = tokio::time::timeout(at_most, running.wait_for(|n| *n == 0)).await;
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one change and wakes live watchers; returns its seq.
    pub fn append(
        &self,
        kind: ChangeKind,
        path: &CanonicalPath,
        to_path: Option<&CanonicalPath>,
        version: u64,
        caller: &str,
    ) -> u64 {
        let mut ring = self.ring();
        let seq = ring.next_seq;
        ring.next_seq += 1;
        ring.events.push_back(Change {
            seq,
            kind,
            path: path.as_str().to_string(),
            to_path: to_path.map(|p| p.as_str().to_string()).unwrap_or_default(),
            version,
            caller: caller.to_string(),
            at: SystemTime::now(),
        });
        if ring.events.len() > self.capacity {
            if let Some(dropped) = ring.events.pop_front() {
                ring.first_held = dropped.seq + 1;
            }
        }
        // Sent under the ring's lock, so the channel's value never goes back.
        self.last_seq.send_replace(seq);
        seq
    }

    /// Forgets every held event and skips one seq, so that every reader
    /// whose cursor is behind gets a resync: used when the whole workspace
    /// is replaced (Restore, ImportArchive).
    pub fn barrier(&self) -> u64 {
        let mut ring = self.ring();
        let seq = ring.next_seq;
        ring.next_seq += 1;
        ring.events.clear();
        ring.first_held = ring.next_seq;
        self.last_seq.send_replace(seq);
        seq
    }

    /// The current seq the log began with, before any change: a reader at
    /// it has seen nothing happen.
    pub fn began_at(&self) -> u64 {
        self.ring().first_seq - 1
    }

    /// `cursor` as [`EventLog::since`] reads it: 0 is the log's beginning.
    pub fn resolve(&self, cursor: u64) -> u64 {
        self.ring().resolve(cursor)
    }

    /// The last seq assigned ([`EventLog::began_at`] before any change).
    pub fn current_seq(&self) -> u64 {
        self.ring().next_seq - 1
    }

    /// Up to `max` events after `cursor` (0: no cap). A cursor of 0 asks
    /// for everything since the log began. A cursor this log never gave
    /// out (above its current seq: from an earlier log of the session) or
    /// one whose next events are no longer held gets a resync.
    pub fn since(&self, cursor: u64, max: usize) -> Since {
        let ring = self.ring();
        let current = ring.next_seq - 1;
        let cursor = ring.resolve(cursor);
        if cursor.saturating_add(1) < ring.first_held || cursor > current {
            return Since::Resync { seq: current };
        }
        let take = if max == 0 { usize::MAX } else { max };
        // Seqs grow along the ring: the first one past the cursor is found
        // by halving, not by walking the ring (a watcher asks after every
        // change, and the ring holds thousands).
        let first = ring.events.partition_point(|e| e.seq <= cursor);
        let events = ring.events.range(first..).take(take).cloned().collect();
        Since::Events(events)
    }

    /// A receiver that wakes whenever a seq is assigned.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.last_seq.subscribe()
    }
}

/// Which paths a watcher wants: a base path, its direct children or its
/// whole subtree, and an optional glob relative to the base.
pub struct Scope {
    base: CanonicalPath,
    recursive: bool,
    glob: Option<globset::GlobMatcher>,
}

impl Scope {
    pub fn new(base: CanonicalPath, recursive: bool, glob: &str) -> wsfs::Result<Scope> {
        let glob = if glob.is_empty() {
            None
        } else {
            Some(crate::pattern::compile_glob(glob)?)
        };
        Ok(Scope {
            base,
            recursive,
            glob,
        })
    }

    fn matches_path(&self, raw: &str) -> bool {
        if raw.is_empty() && !self.base.is_root() {
            return false;
        }
        let base = self.base.as_str();
        let relative = if base.is_empty() {
            raw
        } else if raw == base {
            ""
        } else if let Some(rest) = raw.strip_prefix(base).and_then(|r| r.strip_prefix('/')) {
            rest
        } else {
            return false;
        };
        if !self.recursive && relative.contains('/') {
            return false;
        }
        match &self.glob {
            None => true,
            Some(g) => !relative.is_empty() && g.is_match(relative),
        }
    }

    /// A move matches when either of its ends does.
    pub fn matches(&self, change: &Change) -> bool {
        self.matches_path(&change.path)
            || (!change.to_path.is_empty() && self.matches_path(&change.to_path))
    }
}

/// How long the external watcher waits for a burst of filesystem events to
/// settle before it looks; also the window in which the service's own
/// commit reaches the log before the watcher compares versions.
const EXTERNAL_SETTLE: std::time::Duration = std::time::Duration::from_millis(150);

/// The longest the external watcher waits for the service's own subtree
/// changes to finish before it reports what it saw.
const OWN_CHANGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Watches a DIRECTORY session's root for changes made from outside the
/// service (a container writing into `root_path`), through the server's
/// one shared watcher ([`watcher`]): no thread of its own, a task that
/// looks at what the watcher saw. Each changed path is looked at through
/// the workspace, which bumps its version when its fingerprint changed; a
/// version the log already holds for that path was the service's own write
/// and is not reported again. Dropping the watcher ends its watch and its
/// task.
pub struct ExternalWatcher {
    _registration: watcher::Registration,
}

impl ExternalWatcher {
    /// `None` when there is no runtime or the root cannot be watched even
    /// by polling.
    pub fn start(
        root: &std::path::Path,
        fs: std::sync::Arc<dyn wsfs::Filesystem>,
        log: std::sync::Arc<EventLog>,
        limits: wsfs::PathLimits,
    ) -> Option<ExternalWatcher> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let root = std::fs::canonicalize(root).ok()?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let registration = watcher::register(&root, tx)?;
        runtime.spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                tokio::time::sleep(EXTERNAL_SETTLE).await;
                // A subtree change of the service's own still running would
                // be judged half done: wait for it (bounded).
                log.own_changes_settled(OWN_CHANGE_WAIT).await;
                while let Ok(more) = rx.try_recv() {
                    batch.push(more);
                }
                // Per path: the first kind seen, and when it was last seen;
                // only what came after the batch's last overflow.
                let mut changed = std::collections::BTreeMap::new();
                let mut overflowed = false;
                for seen in batch {
                    match seen {
                        Seen::Change(kind, raw, at) => {
                            changed
                                .entry(raw)
                                .and_modify(|(_, last)| *last = at)
                                .or_insert((kind, at));
                        }
                        Seen::Overflow => {
                            overflowed = true;
                            // Covered by the resync, which reads them as
                            // they are now.
                            changed.clear();
                        }
                    }
                }
                if overflowed {
                    // Changes were lost: every reader re-reads the
                    // workspace rather than trust a log with a gap. The
                    // changes seen after the overflow are reported after
                    // the resync, as any later change is (a batch can
                    // hold both when this task runs late).
                    tracing::warn!(root = %root.display(), "outside changes may have been missed (the kernel dropped filesystem events, see fs.inotify.max_queued_events, or the root moved to scanning): watchers of this session are told to resync");
                    log.barrier();
                }
                for (raw, (kind, at)) in changed {
                    if log.caused_by_service(&raw, at) {
                        continue;
                    }
                    let Ok(path) = CanonicalPath::parse(&raw, &limits) else {
                        continue;
                    };
                    // The server's own temporary names (staged beside their
                    // place when the staging directory is on another
                    // filesystem) are no part of the workspace.
                    if crate::backend::check_name(&path).is_err() {
                        continue;
                    }
                    report_external(&*fs, &log, &path, kind).await;
                }
            }
        });
        Some(ExternalWatcher {
            _registration: registration,
        })
    }
}

async fn report_external(
    fs: &dyn wsfs::Filesystem,
    log: &EventLog,
    path: &CanonicalPath,
    hint: ChangeKind,
) {
    let last = log.last_for(path.as_str());
    match fs.stat(path).await {
        Ok(m) if m.kind == wsfs::FileKind::File => report_file(log, &m, hint),
        Ok(m) if m.kind == wsfs::FileKind::Directory && hint == ChangeKind::Created => {
            // Files made in a new directory before the watcher added a
            // watch on it raise no event of their own (`mkdir -p d &&
            // echo > d/f`): report what the new directory already holds.
            // Files whose event does arrive are then skipped as already
            // logged. One listing, bounded as any List is.
            if let Ok(listing) = fs.list(path, u32::MAX).await {
                for entry in listing
                    .entries
                    .iter()
                    .filter(|e| e.kind == wsfs::FileKind::File)
                {
                    report_file(log, entry, ChangeKind::Created);
                }
            }
        }
        Ok(_) => {}
        Err(wsfs::Error::FileNotFound { .. }) => {
            if !matches!(
                last,
                Some((ChangeKind::Deleted, _) | (ChangeKind::Moved, _))
            ) {
                log.append(ChangeKind::Deleted, path, None, 0, EXTERNAL_CALLER);
            }
        }
        Err(_) => {}
    }
}

/// Logs an outside change to file `m` unless the log already holds its
/// version (the service's own write, or reported already).
fn report_file(log: &EventLog, m: &wsfs::Metadata, hint: ChangeKind) {
    let last = log.last_for(m.path.as_str());
    if last.is_some_and(|(_, v)| v == m.version) {
        return;
    }
    let kind = match (hint, last) {
        (_, Some((ChangeKind::Deleted, _))) => ChangeKind::Created,
        (ChangeKind::Created, _) => ChangeKind::Created,
        _ => ChangeKind::Modified,
    };
    log.append(kind, &m.path, None, m.version, EXTERNAL_CALLER);
}

impl EventLog {
    /// The kind and version of the newest held event about `path`.
    fn last_for(&self, path: &str) -> Option<(ChangeKind, u64)> {
        let ring = self.ring();
        ring.events.iter().rev().find_map(|e| {
            if e.path == path {
                Some((e.kind, e.version))
            } else if e.to_path == path {
                Some((ChangeKind::Created, e.version))
            } else {
                None
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wsfs::PathLimits;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::parse(s, &PathLimits::default()).unwrap()
    }

    #[test]
    fn overflowed_ring_asks_old_readers_to_resync() {
        let log = EventLog::starting_at(1, 2);
        for name in ["a", "b", "c"] {
            log.append(ChangeKind::Created, &p(name), None, 1, "system");
        }
        assert!(matches!(log.since(0, 0), Since::Resync { seq: 3 }));
        match log.since(1, 0) {
            Since::Events(e) => assert_eq!(e.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]),
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[test]
    fn a_reader_gets_exactly_the_events_after_its_cursor() {
        let log = EventLog::starting_at(1, 100);
        for i in 0..150 {
            log.append(ChangeKind::Created, &p(&format!("f{i}")), None, 1, "system");
        }
        for cursor in [50, 51, 99, 120, 149, 150] {
            match log.since(cursor, 7) {
                Since::Events(e) => {
                    let seqs: Vec<u64> = e.iter().map(|e| e.seq).collect();
                    let expected: Vec<u64> = (cursor + 1..=150).take(7).collect();
                    assert_eq!(seqs, expected, "after {cursor}");
                }
                other => panic!("expected events after {cursor}, got {other:?}"),
            }
        }
    }

    /// A session's log begins again after a restart or a recovery
    /// elsewhere: a cursor from the earlier log gets a resync whether the
    /// new log has assigned fewer seqs than it or more.
    #[test]
    fn a_cursor_from_an_earlier_log_of_the_session_gets_a_resync() {
        let earlier = EventLog::new(100);
        for name in ["a", "b", "c"] {
            earlier.append(ChangeKind::Created, &p(name), None, 1, "system");
        }
        let cursor = earlier.current_seq();
        let now = EventLog::new(100);
        assert!(
            matches!(now.since(cursor, 0), Since::Resync { seq } if seq == now.current_seq()),
            "before any change of the new log"
        );
        for i in 0..10 {
            now.append(ChangeKind::Created, &p(&format!("n{i}")), None, 1, "system");
        }
        assert!(
            matches!(now.since(cursor, 0), Since::Resync { seq } if seq == now.current_seq()),
            "after more changes than the earlier log had"
        );
        // A log numbered from 1 (a clock set back): a cursor above what it
        // has assigned is not one of its own.
        let from_one = EventLog::starting_at(1, 100);
        from_one.append(ChangeKind::Created, &p("a"), None, 1, "system");
        assert!(matches!(from_one.since(7, 0), Since::Resync { seq: 1 }));
        assert!(matches!(from_one.since(1, 0), Since::Events(ref e) if e.is_empty()));
    }

    #[test]
    fn a_zero_cursor_reads_from_the_log_s_start() {
        let log = EventLog::new(100);
        assert!(matches!(log.since(0, 0), Since::Events(ref e) if e.is_empty()));
        for name in ["a", "b"] {
            log.append(ChangeKind::Created, &p(name), None, 1, "system");
        }
        match log.since(0, 0) {
            Since::Events(e) => assert_eq!(
                e.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
                ["a", "b"]
            ),
            other => panic!("expected both events, got {other:?}"),
        }
    }

    #[test]
    fn barrier_resyncs_every_reader_behind_it() {
        let log = EventLog::starting_at(1, 10);
        log.append(ChangeKind::Created, &p("a"), None, 1, "system");
        log.barrier();
        assert!(matches!(log.since(1, 0), Since::Resync { seq: 2 }));
        assert!(matches!(log.since(2, 0), Since::Events(ref e) if e.is_empty()));
    }

    #[test]
    fn shallow_scope_sees_children_not_grandchildren() {
        let scope = Scope::new(p("src"), false, "*.rs").unwrap();
        let change = |path: &str| Change {
            seq: 1,
            kind: ChangeKind::Created,
            path: path.into(),
            to_path: String::new(),
            version: 1,
            caller: "system".into(),
            at: SystemTime::now(),
        };
        assert!(scope.matches(&change("src/a.rs")));
        assert!(!scope.matches(&change("src/x/a.rs")));
        assert!(!scope.matches(&change("src/a.txt")));
        assert!(!scope.matches(&change("srcx/a.rs")));
    }

    #[test]
    fn an_ended_own_change_covers_its_subtree_and_nothing_beside_it() {
        let log = EventLog::new(16);
        drop(log.own_change(Some(&p("a/b"))));
        let seen = SystemTime::now();

        for covered in ["a/b", "a/b/c", "a/b/c/d.txt"] {
            assert!(log.caused_by_service(covered, seen), "{covered}");
        }
        for beside in ["a", "a/bc", "a/bc/d", "b", "x/a/b"] {
            assert!(!log.caused_by_service(beside, seen), "{beside}");
        }
        // Seen before it started, or past its slack after it ended: not its.
        let before = seen - std::time::Duration::from_secs(5);
        assert!(!log.caused_by_service("a/b/c", before));
        let after = seen + OWN_CHANGE_SLACK + std::time::Duration::from_secs(1);
        assert!(!log.caused_by_service("a/b/c", after));

        drop(log.own_change(None));
        assert!(log.caused_by_service("x/a/b", SystemTime::now()));
    }

    #[test]
    fn own_changes_past_the_most_remembered_are_forgotten_oldest_first() {
        let log = EventLog::new(16);
        drop(log.own_change(Some(&p("first"))));
        for i in 0..OWN_CHANGE_MAX {
            drop(log.own_change(Some(&p(&format!("d{i}")))));
        }
        let seen = SystemTime::now();

        assert!(!log.caused_by_service("first/f", seen));
        assert!(log.caused_by_service("d0/f", seen));
        let last = format!("d{}/f", OWN_CHANGE_MAX - 1);
        assert!(log.caused_by_service(&last, seen));
        let state = log.own.state.lock().unwrap();
        assert_eq!(state.ended.len(), OWN_CHANGE_MAX);
        let indexed: usize = state.ended_at.values().map(VecDeque::len).sum();
        assert_eq!(indexed, OWN_CHANGE_MAX);
        assert!(!state.ended_at.contains_key("first"));
    }
}
