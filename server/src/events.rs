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
//! Events are appended by the service layer after a call succeeds, because
//! only it knows both the outcome and the caller: backends stay free of
//! callers. When the ring no longer holds the event after a cursor, the
//! reader gets [`Since::Resync`] and should re-read the workspace.
//! Restore and ImportArchive replace the workspace wholesale; they are
//! recorded as a [`EventLog::barrier`], which every reader behind it sees as
//! a resync.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;
use tokio::sync::watch;
use wsfs::CanonicalPath;

/// Default number of events a session holds.
pub const DEFAULT_RING_EVENTS: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
    Moved,
}

/// One change to one path.
#[derive(Clone, Debug)]
pub struct Change {
    pub seq: u64,
    pub kind: ChangeKind,
    pub path: String,
    /// The destination of a move; empty otherwise.
    pub to_path: String,
    /// The path's version after the change (0 for deletions and directories).
    pub version: u64,
    /// The caller's name: `system`, a swarm member, or `external`.
    pub caller: String,
    pub at: SystemTime,
}

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
}

pub struct EventLog {
    ring: Mutex<Ring>,
    capacity: usize,
    last_seq: watch::Sender<u64>,
}

impl EventLog {
    pub fn new(capacity: usize) -> EventLog {
        EventLog {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                next_seq: 1,
                first_held: 1,
            }),
            capacity: capacity.max(1),
            last_seq: watch::channel(0).0,
        }
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

    /// The last seq assigned (0 before any change).
    pub fn current_seq(&self) -> u64 {
        self.ring().next_seq - 1
    }

    /// Up to `max` events after `cursor` (0: no cap).
    pub fn since(&self, cursor: u64, max: usize) -> Since {
        let ring = self.ring();
        let current = ring.next_seq - 1;
        if cursor.saturating_add(1) < ring.first_held {
            return Since::Resync { seq: current };
        }
        let take = if max == 0 { usize::MAX } else { max };
        let events = ring
            .events
            .iter()
            .skip_while(|e| e.seq <= cursor)
            .take(take)
            .cloned()
            .collect();
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
            Some(
                globset::GlobBuilder::new(glob)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| wsfs::Error::InvalidPattern {
                        pattern: glob.to_string(),
                        message: format!("glob '{glob}' is invalid: {e}"),
                    })?
                    .compile_matcher(),
            )
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

#[cfg(test)]
mod tests {
    use super::*;
    use wsfs::PathLimits;

    fn p(s: &str) -> CanonicalPath {
        CanonicalPath::parse(s, &PathLimits::default()).unwrap()
    }

    #[test]
    fn overflowed_ring_asks_old_readers_to_resync() {
        let log = EventLog::new(2);
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
    fn barrier_resyncs_every_reader_behind_it() {
        let log = EventLog::new(10);
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
}
