//! CreateSession with `from_snapshot`: a new session whose workspace is
//! exactly another session's snapshot ([`crate::snapshots::fork`]).
//!
//! Everything is checked before anything is made: the origin session and
//! snapshot exist, and the snapshot fits the fork's own limits. A DIRECTORY
//! fork is then made in one blocking task that owns its session directory
//! until the session is listed; a fork whose caller goes away stops at its
//! next entry and removes the directory, so nothing half made is left.

use super::{
    create_session_dirs, write_session_file, BackendKind, PersistedSession, SessionRecord,
    SessionRegistry, SessionSpec,
};
use crate::backend::{Backend, DirectoryBackend, MemoryBackend};
use crate::limits::SessionLimits;
use crate::snapshots::fork::abandoned;
use crate::snapshots::{MemorySnapshots, SnapshotStore};
use crate::workspace::Workspace;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
        let backend = spec.backend.unwrap_or(BackendKind::Memory);
        if backend == BackendKind::Container {
            return Err(Error::invalid_argument(
                "a fork is made as a MEMORY or DIRECTORY session; a CONTAINER session's files belong to its container (import an archive of the snapshot into it instead)",
            ));
        }
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let _slot = self.reserve_slot(&id)?;
        let limits = SessionLimits::resolve(&spec.limits, self.config.max_write_bytes);
        let budget = crate::quota::budget(&limits, self.config.default_max_total_bytes);
        // An origin served elsewhere is read from the object store, into a
        // copy removed once the fork is made.
        let (origin, _bucket_copy) = match self.get(&from.session_id) {
            Ok(origin) => (origin.snapshots.fork_origin(&from.snapshot_id).await?, None),
            Err(Error::SessionNotFound { .. }) if self.bucket().is_some() => {
                let (origin, copy) = self.origin_from_bucket(&from, budget).await?;
                (origin, Some(copy))
            }
            Err(e) => return Err(e),
        };
        let origin = Arc::new(origin);
        let checked = {
            let origin = origin.clone();
            let limits = crate::quota::with_budget(&limits, self.config.default_max_total_bytes);
            tokio::task::spawn_blocking(move || origin.check(&limits))
        };
        checked.await.map_err(task_failed)??;
        let read_only = spec.read_only;
        let mut record = SessionRecord::new(id.clone(), backend, None, limits, spec);
        record.forked_from = Some(super::SnapshotRef {
            session_id: from.session_id,
            snapshot_id: origin.info().id.clone(),
        });
        let (handles, owned_dir): (super::Handles, _) = match backend {
            BackendKind::Container => unreachable!("refused before the slot was taken"),
            BackendKind::Memory => {
                let cancel = Arc::new(AtomicBool::new(false));
                let _cancel_on_drop = HalfMade::memory(cancel.clone());
                let image = {
                    let origin = origin.clone();
                    tokio::task::spawn_blocking(move || origin.memory_image(&cancel))
                };
                let image = image.await.map_err(task_failed)??;
                let ws = Arc::new(Workspace::new(MemoryBackend::new(), limits));
                ws.backend().restore_image(&image);
                let snapshots = Arc::new(MemorySnapshots::new(ws.clone()));
                snapshots.snapshot(&origin.info().tag).await?;
                ws.set_read_only(read_only);
                ((ws.clone(), ws, snapshots), None)
            }
            BackendKind::Directory => {
                let session_dir = self.config.data_dir.join("sessions").join(&id);
                let root = session_dir.join("root");
                record.root_path = Some(root.clone());
                let mut half_made = HalfMade::directory(session_dir.clone());
                let made = {
                    let (cancel, busy) = (half_made.cancel.clone(), half_made.busy.clone());
                    let persisted = PersistedSession::from_record(&record, &root, None);
                    let durability = self.config.durability;
                    let session_dir = session_dir.clone();
                    let origin = origin.clone();
                    tokio::task::spawn_blocking(move || {
                        let _busy = busy.lock().unwrap_or_else(|e| e.into_inner());
                        let made = (|| {
                            if cancel.load(Ordering::Relaxed) {
                                return Err(abandoned());
                            }
                            create_session_dirs(&session_dir, &root, true)?;
                            origin.materialise(&root, &cancel)?;
                            let b = DirectoryBackend::open(&root, &session_dir.join("staging"))?
                                .with_durability(durability)
                                .removing_later();
                            b.settle()?;
                            crate::snapshots::first_snapshot(
                                &session_dir,
                                &root,
                                &b,
                                &origin,
                                budget,
                                &cancel,
                            )?;
                            // Last: its presence makes the fork outlive a
                            // restart.
                            write_session_file(&session_dir, &persisted, durability)?;
                            if cancel.load(Ordering::Relaxed) {
                                return Err(abandoned());
                            }
                            Ok(b)
                        })();
                        if made.is_err() {
                            let _ = std::fs::remove_dir_all(&session_dir);
                        }
                        made
                    })
                };
                let b = made.await.map_err(task_failed)??;
                let ws = Arc::new(Workspace::new(b, limits));
                ws.set_read_only(read_only);
                let snapshots = self.directory_snapshots(&ws, &id, &session_dir);
                half_made.keep();
                (
                    (ws.clone(), ws, snapshots as Arc<dyn SnapshotStore>),
                    Some(session_dir),
                )
            }
        };
        let session = self.insert(record, handles, owned_dir);
        if backend == BackendKind::Directory {
            self.mirror_fork(&session).await?;
        }
        Ok(session)
    }
}

fn task_failed(e: tokio::task::JoinError) -> Error {
    Error::internal(format!("the fork's task failed: {e}"))
}

/// What a fork has made so far: dropped before [`HalfMade::keep`] (the
/// caller went away, or the fork failed), it stops the fork's task at its
/// next step and removes its session directory once that task is done.
struct HalfMade {
    dir: Option<PathBuf>,
    cancel: Arc<AtomicBool>,
    /// Held by the task that makes the directory.
    busy: Arc<Mutex<()>>,
}

impl HalfMade {
    fn memory(cancel: Arc<AtomicBool>) -> Self {
        HalfMade {
            dir: None,
            cancel,
            busy: Arc::default(),
        }
    }

    fn directory(dir: PathBuf) -> Self {
        HalfMade {
            dir: Some(dir),
            cancel: Arc::default(),
            busy: Arc::default(),
        }
    }

    /// The fork is complete: keep what it made.
    fn keep(&mut self) {
        self.dir = None;
    }
}

impl Drop for HalfMade {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(dir) = self.dir.take() {
            let busy = self.busy.clone();
            // Not on the runtime: this waits for the fork's task to stop.
            std::thread::spawn(move || {
                let _busy = busy.lock().unwrap_or_else(|e| e.into_inner());
                let _ = std::fs::remove_dir_all(dir);
            });
        }
    }
}
