//! CreateSession with `from_snapshot`: a new session whose workspace is
//! exactly another session's snapshot ([`crate::snapshots::fork`]).
//!
//! Everything is checked before anything is made: the origin session and
//! snapshot exist, and the snapshot fits the fork's own limits. A DIRECTORY
//! fork is then made in one blocking task that owns its session directory
//! until the session is listed; a fork whose caller goes away stops at its
//! next entry and removes the directory, so nothing half made is left.
//! Each fork logs where its time went, phase by phase, at info.

use super::{SessionRegistry, SessionSpec};
use crate::kind::SessionRecord;
use crate::limits::SessionLimits;
use crate::snapshots::fork::task_failed;
use crate::snapshots::phases::Phases;
use std::sync::Arc;
use wsfs::{Error, Result};

impl SessionRegistry {
    pub(super) async fn fork(&self, spec: SessionSpec) -> Result<Arc<super::Session>> {
        let Some(from) = spec.from_snapshot.clone() else {
            return Err(Error::invalid_argument("not a fork"));
        };
        // A fork's workspace is the snapshot and nothing else: the other
        // ways to fill a new workspace, or to place it, do not combine.
        if spec.root.is_some() || !spec.mounts.is_empty() || !spec.seed_files.is_empty() {
            return Err(Error::invalid_argument(
                "from_snapshot cannot be combined with root, mounts or seed_files: a fork's workspace is exactly its snapshot",
            ));
        }
        let backend = spec.backend.unwrap_or_default();
        let provider = super::factory::provider(backend);
        provider.check_fork()?;
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let _slot = self.reserve_slot(&id)?;
        let limits = SessionLimits::resolve(&spec.limits, self.config.max_write_bytes);
        let budget = crate::quota::budget(&limits, self.config.default_max_total_bytes);
        let mut phases = Phases::start();
        // An origin served elsewhere is read from the object store, into a
        // copy removed once the fork is made.
        let (origin, _bucket_copy) = match self.get_here(&from.session_id) {
            Ok(origin) => (origin.snapshots.fork_origin(&from.snapshot_id).await?, None),
            Err(Error::SessionNotFound { .. }) if self.bucket().is_some() => {
                let (origin, copy) = self.origin_from_bucket(&from, budget).await?;
                (origin, Some(copy))
            }
            Err(e) => return Err(e),
        };
        let origin = Arc::new(origin);
        phases.mark("origin");
        let checked = {
            let origin = origin.clone();
            let limits = crate::quota::with_budget(&limits, self.config.default_max_total_bytes);
            tokio::task::spawn_blocking(move || origin.check(&limits))
        };
        checked.await.map_err(task_failed)??;
        phases.mark("checked");
        let mut record = SessionRecord::new(id.clone(), backend, None, limits, spec);
        record.forked_from = Some(super::SnapshotRef {
            session_id: from.session_id,
            snapshot_id: origin.info().id.clone(),
        });
        let made = provider
            .fork(&self.context(), &mut record, origin, budget)
            .await?;
        phases.mark("made");
        let session = self.insert(record, made.handles, made.owned_dir);
        if provider.mirrored() {
            self.mirror_fork(&session).await?;
            phases.mark("mirrored");
        }
        tracing::info!(session = %id, %phases, "forked");
        Ok(session)
    }
}
