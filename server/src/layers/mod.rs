//! Layers: the cross-cutting views every call's workspace is seen through.
//!
//! A layer wraps any `Filesystem` ([`wsfs::FilesystemLayer`]: it names the
//! one it wraps, reads forward by default) and changes only what it is
//! about. A call goes, outermost first:
//!
//! face (gRPC, HTTP) → [`Recorded`] (events) → [`Guarded`] (zones) →
//! the session's workspace (a `Workspace` over its backend, or a
//! container's forwarding handle).
//!
//! The order matters: the zone check runs before anything changes, and the
//! events layer records only what passed it and succeeded. [`for_caller`]
//! builds the stack, in the one place that decides it.

mod events;
mod zones;

pub use events::Recorded;
pub use zones::Guarded;

use crate::auth::{Caller, Layout};
use crate::events::EventLog;
use std::sync::Arc;
use wsfs::Filesystem;

/// A session's `workspace` as `caller` sees it for one call, outermost
/// first: recording the call's changes in `events`, behind the caller's
/// zone check in a session of `layout`.
pub(crate) fn for_caller(
    workspace: Arc<dyn Filesystem>,
    caller: Caller,
    layout: Layout,
    events: Arc<EventLog>,
) -> Arc<dyn Filesystem> {
    let name = caller.name().to_string();
    let zoned = Arc::new(Guarded::new(workspace, caller, layout));
    Arc::new(Recorded::new(zoned, events, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{ChangeKind, Since, DEFAULT_RING_EVENTS};
    use crate::memory::MemoryBackend;
    use crate::workspace::Workspace;
    use bytes::Bytes;
    use futures::stream::StreamExt;
    use wsfs::{
        Attributes, CanonicalPath, DeleteOptions, EditSpec, MkdirOptions, PatchChunk, PatchOptions,
        Permissions, Result, SymlinkOptions, TransferOptions, WriteOptions,
    };

    /// Every kind of change the contract has, on paths under `dir`,
    /// through `fs`: what each answered.
    async fn every_change(fs: &dyn Filesystem, dir: &str) -> Vec<(&'static str, Result<()>)> {
        let at = |name: &str| CanonicalPath::from_canonical(format!("{dir}/{name}"));
        let bytes = futures::stream::iter([Ok(Bytes::from_static(b"x"))]).boxed();
        let chunk = PatchChunk {
            offset: 0,
            data: Bytes::from_static(b"y"),
        };
        let edit = EditSpec {
            old_text: "text".into(),
            new_text: "edited".into(),
            ..EditSpec::default()
        };
        let attributes = Attributes {
            permissions: Some(Permissions::new(0o600).unwrap()),
            ..Attributes::default()
        };
        let (w, b) = (at("w"), at("b"));
        let options = WriteOptions::default();
        let transfer = TransferOptions::default();
        vec![
            ("write", fs.write(&w, "text\n", options).await.map(drop)),
            (
                "write_bytes",
                fs.write_bytes(&b, options, bytes).await.map(drop),
            ),
            ("edit", fs.edit(&w, edit).await.map(drop)),
            (
                "patch_bytes",
                fs.patch_bytes(
                    &b,
                    PatchOptions::default(),
                    futures::stream::iter([Ok(chunk)]).boxed(),
                )
                .await
                .map(drop),
            ),
            (
                "set_attributes",
                fs.set_attributes(&b, attributes).await.map(drop),
            ),
            (
                "mkdir",
                fs.mkdir(&at("d"), MkdirOptions::default()).await.map(drop),
            ),
            (
                "symlink",
                fs.symlink(&at("l"), "w", SymlinkOptions::default())
                    .await
                    .map(drop),
            ),
            ("copy", fs.copy(&w, &at("c"), transfer).await.map(drop)),
            (
                "rename",
                fs.rename(&at("c"), &at("m"), transfer).await.map(drop),
            ),
            (
                "delete",
                fs.delete(&at("m"), DeleteOptions::default())
                    .await
                    .map(drop),
            ),
        ]
    }

    /// The events after `cursor`: kind, path, destination, caller.
    fn events_after(log: &EventLog, cursor: u64) -> Vec<(ChangeKind, String, String, String)> {
        match log.since(cursor, usize::MAX) {
            Since::Events(events) => events
                .into_iter()
                .map(|c| (c.kind, c.path, c.to_path, c.caller))
                .collect(),
            Since::Resync { .. } => panic!("the ring holds every event of this test"),
        }
    }

    /// Every file and directory under `sys` with its version.
    async fn tree(fs: &dyn Filesystem) -> Vec<(String, u64)> {
        let sys = CanonicalPath::from_canonical("sys");
        let listing = fs.list(&sys, 10).await.unwrap();
        listing
            .entries
            .into_iter()
            .map(|m| (m.path.as_str().to_string(), m.version))
            .collect()
    }

    /// The stack's order and coverage: each change a caller may not make
    /// is refused by the zones layer before the workspace sees it, and
    /// the events layer records nothing for it; each change the caller
    /// may make is recorded once, in the caller's name.
    #[tokio::test]
    async fn refused_changes_reach_nothing_and_allowed_ones_are_recorded_once() {
        let workspace: Arc<dyn Filesystem> = Arc::new(Workspace::new(
            MemoryBackend::new(),
            crate::SessionLimits::default(),
        ));
        let events = Arc::new(EventLog::new(DEFAULT_RING_EVENTS));
        let view =
            |caller: Caller| for_caller(workspace.clone(), caller, Layout::Swarm, events.clone());
        let (system, alice) = (view(Caller::System), view(Caller::Named("alice".into())));

        for (call, answer) in every_change(&*system, "sys").await {
            answer.unwrap_or_else(|e| panic!("{call} by the system caller: {e}"));
        }
        let (before, cursor) = (tree(&*workspace).await, events.current_seq());

        for (call, answer) in every_change(&*alice, "sys").await {
            let err = answer.expect_err(call);
            assert_eq!(err.reason(), "PERMISSION_DENIED", "{call}: {err}");
        }
        assert_eq!(
            tree(&*workspace).await,
            before,
            "a refused change changed sys/"
        );
        let recorded = events_after(&events, cursor);
        assert!(
            recorded.is_empty(),
            "a refused change was recorded: {recorded:?}"
        );

        for (call, answer) in every_change(&*alice, "home/alice").await {
            answer.unwrap_or_else(|e| panic!("{call} by alice in her home: {e}"));
        }
        let home = |name: &str| format!("home/alice/{name}");
        let alice_did =
            |kind, path: &str, to: &str| (kind, home(path), to.to_string(), "alice".to_string());
        assert_eq!(
            events_after(&events, cursor),
            [
                alice_did(ChangeKind::Created, "w", ""),
                alice_did(ChangeKind::Created, "b", ""),
                alice_did(ChangeKind::Modified, "w", ""),
                alice_did(ChangeKind::Modified, "b", ""),
                alice_did(ChangeKind::Modified, "b", ""),
                alice_did(ChangeKind::Created, "d", ""),
                alice_did(ChangeKind::Created, "l", ""),
                alice_did(ChangeKind::Created, "c", ""),
                alice_did(ChangeKind::Moved, "c", &home("m")),
                alice_did(ChangeKind::Deleted, "m", ""),
            ]
        );
    }
}
