//! The MEMORY backend kind, whole: a session whose workspace lives in this
//! process and is gone with it.
//!
//! - [`backend`]: [`MemoryBackend`], one ordered map behind one mutex;
//! - [`snapshots`]: [`MemorySnapshots`], images of that map sharing its
//!   bytes;
//! - [`MemoryProvider`]: how the registry makes such a session.

pub mod backend;
pub mod snapshots;

pub use backend::{ImageEntry, MemoryBackend, MemoryImage};
pub use snapshots::MemorySnapshots;

use crate::kind::{handles, populate, BackendProvider, Context, Made, NewSession, SessionRecord};
use crate::snapshots::fork::{task_failed, HalfMade, Origin};
use crate::snapshots::SnapshotStore;
use crate::workspace::Workspace;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wsfs::{Error, Result};

/// Makes MEMORY sessions; nothing of them outlives the process.
pub(crate) struct MemoryProvider;

#[async_trait::async_trait]
impl BackendProvider for MemoryProvider {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn create(&self, _cx: &Context<'_>, new: NewSession<'_>) -> Result<Made> {
        let NewSession {
            spec,
            limits,
            mounts,
            seeds,
            ..
        } = new;
        if spec.root.is_some() {
            return Err(Error::invalid_argument(
                "root applies only to DIRECTORY sessions",
            ));
        }
        let ws = Arc::new(Workspace::new(MemoryBackend::new(), limits));
        populate(&ws, mounts, &seeds, spec.layout).await?;
        ws.set_read_only(spec.read_only);
        let snapshots = Arc::new(MemorySnapshots::new(ws.clone()));
        Ok(Made::in_memory(handles(ws, snapshots)))
    }

    async fn fork(
        &self,
        _cx: &Context<'_>,
        record: &mut SessionRecord,
        origin: Arc<Origin>,
        _budget: u64,
    ) -> Result<Made> {
        let cancel = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = HalfMade::memory(cancel.clone());
        let image = {
            let origin = origin.clone();
            tokio::task::spawn_blocking(move || snapshots::image_of(&origin, &cancel))
        };
        let image = image.await.map_err(task_failed)??;
        let ws = Arc::new(Workspace::new(MemoryBackend::new(), record.limits));
        ws.backend().restore_image(&image);
        let snapshots = Arc::new(MemorySnapshots::new(ws.clone()));
        snapshots.snapshot(&origin.info().tag).await?;
        ws.set_read_only(record.read_only);
        Ok(Made::in_memory(handles(ws, snapshots)))
    }
}
