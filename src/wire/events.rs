//! A session's change events (Watch, Changes) as the wire carries them:
//! [`Change`] is one change to one path, [`marker`] a stream's READY,
//! RESYNC or KEEPALIVE.

use super::{system_time, timestamp};
use crate::proto;
use std::time::SystemTime;

/// What happened to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
    Moved,
}

/// One change to one path.
#[derive(Clone, Debug, PartialEq, Eq)]
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

impl From<ChangeKind> for proto::ChangeKind {
    fn from(kind: ChangeKind) -> Self {
        match kind {
            ChangeKind::Created => proto::ChangeKind::Created,
            ChangeKind::Modified => proto::ChangeKind::Modified,
            ChangeKind::Deleted => proto::ChangeKind::Deleted,
            ChangeKind::Moved => proto::ChangeKind::Moved,
        }
    }
}

impl From<Change> for proto::ChangeEvent {
    fn from(c: Change) -> Self {
        proto::ChangeEvent {
            seq: c.seq,
            kind: proto::ChangeKind::from(c.kind) as i32,
            path: c.path,
            to_path: c.to_path,
            version: c.version,
            caller: c.caller,
            at: timestamp(c.at),
        }
    }
}

impl Change {
    /// The change an event names; `None` for a marker (READY, RESYNC,
    /// KEEPALIVE) or a kind this version does not know.
    pub fn from_event(e: proto::ChangeEvent) -> Option<Change> {
        let kind = match proto::ChangeKind::try_from(e.kind).ok()? {
            proto::ChangeKind::Created => ChangeKind::Created,
            proto::ChangeKind::Modified => ChangeKind::Modified,
            proto::ChangeKind::Deleted => ChangeKind::Deleted,
            proto::ChangeKind::Moved => ChangeKind::Moved,
            _ => return None,
        };
        Some(Change {
            seq: e.seq,
            kind,
            path: e.path,
            to_path: e.to_path,
            version: e.version,
            caller: e.caller,
            at: system_time(e.at),
        })
    }
}

/// An event with no path: READY, RESYNC and KEEPALIVE, stamped now.
pub fn marker(kind: proto::ChangeKind, seq: u64) -> proto::ChangeEvent {
    proto::ChangeEvent {
        seq,
        kind: kind as i32,
        at: timestamp(SystemTime::now()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_change_goes_over_the_wire_and_back_unchanged() {
        for kind in [
            ChangeKind::Created,
            ChangeKind::Modified,
            ChangeKind::Deleted,
            ChangeKind::Moved,
        ] {
            let change = Change {
                seq: 7,
                kind,
                path: "a/b.txt".into(),
                to_path: if kind == ChangeKind::Moved {
                    "c.txt".into()
                } else {
                    String::new()
                },
                version: 3,
                caller: "agent-1".into(),
                at: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            };
            let event = proto::ChangeEvent::from(change.clone());
            assert_eq!(Change::from_event(event), Some(change));
        }
    }

    #[test]
    fn markers_are_not_changes() {
        for kind in [
            proto::ChangeKind::Ready,
            proto::ChangeKind::Resync,
            proto::ChangeKind::Keepalive,
        ] {
            let event = marker(kind, 5);
            assert_eq!(event.kind, kind as i32);
            assert_eq!(event.seq, 5);
            assert!(event.path.is_empty());
            assert_eq!(Change::from_event(event), None);
        }
        let unknown = proto::ChangeEvent {
            kind: 999,
            ..Default::default()
        };
        assert_eq!(Change::from_event(unknown), None);
    }
}
