//! The MEMORY backend kind, whole: a session whose workspace lives in this
//! process and is gone with it (with an object store, it comes back from
//! its latest mirrored snapshot).
//!
//! - [`backend`]: [`MemoryBackend`], one ordered map behind one mutex;
//! - [`snapshots`]: [`MemorySnapshots`], images of that map sharing its
//!   bytes;
//! - [`MemoryProvider`]: how the registry makes such a session.

pub mod backend;
pub mod snapshots;

pub use backend::{ImageEntry, MemoryBackend, MemoryImage};
pub use snapshots::MemorySnapshots;

use crate::directory::record::{write_session_file, PersistedSession};
use crate::directory::snapshots::mirror::record_info;
use crate::kind::{
    handles, populate, BackendProvider, Context, Handles, Made, NewSession, Reopened, SessionRecord,
};
use crate::objstore::download::{BucketSnapshot, LooseEntry};
use crate::objstore::recovers::RecoversFromBucket;
use crate::objstore::Bucket;
use crate::snapshots::fork::{task_failed, HalfMade, Origin};
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wsfs::{CanonicalPath, Error, Result};

/// Makes MEMORY sessions. Without an object store nothing of them
/// outlives the process; with one (`--object-store`) each is leased and
/// its snapshots and tokens mirrored like a DIRECTORY session's, its
/// record and token hashes kept in `memory-sessions/<id>/` under the data
/// directory, and it fails over from the bucket, as a MEMORY session.
pub(crate) struct MemoryProvider;

/// Where MEMORY sessions mirrored to an object store keep their records.
fn sessions_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("memory-sessions")
}

/// The directory recording mirrored session `record` (made, with its
/// record written), when the server has an object store.
fn recorded(cx: &Context<'_>, record: &SessionRecord) -> Result<Option<PathBuf>> {
    if cx.mirrors.is_none() {
        return Ok(None);
    }
    let dir = sessions_dir(&cx.config.data_dir).join(&record.id);
    let made = std::fs::create_dir_all(&dir)
        .map_err(|e| Error::io_while(e, format_args!("creating '{}'", dir.display())))
        .and_then(|()| {
            let persisted = PersistedSession::from_record(record, Path::new(""), None);
            write_session_file(&dir, &persisted, cx.config.durability)
        });
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(Some(dir))
}

/// The snapshots of session `id`, mirrored when the server has an object
/// store.
fn snapshots_of(
    cx: &Context<'_>,
    ws: &Arc<Workspace<MemoryBackend>>,
    id: &str,
    dir: Option<&Path>,
) -> MemorySnapshots {
    let mirror = dir.and_then(|dir| cx.mirror(id, dir));
    MemorySnapshots::new(ws.clone()).mirrored(mirror)
}

#[async_trait::async_trait]
impl BackendProvider for MemoryProvider {
    fn name(&self) -> &'static str {
        "memory"
    }

    /// Recorded, leased and mirrored only with an object store (the
    /// registry records only sessions with a directory of their own).
    fn mirrored(&self) -> bool {
        true
    }

    fn session_dir(&self, data_dir: &Path, id: &str) -> PathBuf {
        sessions_dir(data_dir).join(id)
    }

    async fn create(&self, cx: &Context<'_>, new: NewSession<'_>) -> Result<Made> {
        let NewSession {
            id,
            spec,
            limits,
            mounts,
            seeds,
        } = new;
        if spec.root.is_some() {
            return Err(Error::invalid_argument(
                "root applies only to DIRECTORY sessions",
            ));
        }
        let ws = Arc::new(Workspace::new(MemoryBackend::new(), limits));
        populate(&ws, mounts, &seeds, spec.layout).await?;
        ws.set_read_only(spec.read_only);
        let Some(_) = cx.mirrors else {
            let snapshots = Arc::new(MemorySnapshots::new(ws.clone()));
            return Ok(Made::in_memory(handles(ws, snapshots)));
        };
        let dir = sessions_dir(&cx.config.data_dir).join(&id);
        let snapshots = Arc::new(snapshots_of(cx, &ws, &id, Some(&dir)));
        let durability = cx.config.durability;
        let persist = {
            let dir = dir.clone();
            move |record: &SessionRecord| {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    Error::io_while(e, format_args!("creating '{}'", dir.display()))
                })?;
                let persisted = PersistedSession::from_record(record, Path::new(""), None);
                write_session_file(&dir, &persisted, durability)
            }
        };
        Ok(Made {
            handles: handles(ws, snapshots),
            root_path: None,
            owned_dir: Some(dir),
            persist: Some(Box::new(persist)),
            on_listed: None,
        })
    }

    async fn fork(
        &self,
        cx: &Context<'_>,
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
        let dir = recorded(cx, record)?;
        // The first snapshot is mirrored once the fork holds its lease
        // (the registry asks, [`SnapshotStore::mirror_taken`]).
        let snapshots = snapshots_of(cx, &ws, &record.id, dir.as_deref());
        let first = snapshots.take_here(&origin.info().tag).await;
        let snapshots = match first {
            Ok((info, image)) => Arc::new(snapshots.with_snapshot(info, image)),
            Err(e) => {
                if let Some(dir) = &dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return Err(e);
            }
        };
        ws.set_read_only(record.read_only);
        Ok(Made {
            owned_dir: dir,
            ..Made::in_memory(handles(ws, snapshots))
        })
    }

    /// Nothing: a MEMORY session is gone with the process. The records
    /// of mirrored ones are removed; they come back from the object store
    /// at their first call, on this replica or another.
    fn reopen(&self, cx: &Context<'_>) -> Result<Vec<Reopened>> {
        let dir = sessions_dir(&cx.config.data_dir);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(Vec::new()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io_while(
                e,
                format_args!("removing '{}'", dir.display()),
            )),
        }
    }
}

#[async_trait::async_trait]
impl RecoversFromBucket for MemoryProvider {
    async fn recover(
        &self,
        cx: &Context<'_>,
        bucket: &Arc<Bucket>,
        record: &SessionRecord,
        session_dir: &Path,
        stored: &[BucketSnapshot],
        chosen: Option<&BucketSnapshot>,
        budget: u64,
    ) -> Result<Handles> {
        std::fs::create_dir_all(session_dir).map_err(|e| {
            Error::io_while(e, format_args!("creating '{}'", session_dir.display()))
        })?;
        let ws = Arc::new(Workspace::new(MemoryBackend::new(), record.limits));
        let mut snapshots = snapshots_of(cx, &ws, &record.id, Some(session_dir));
        for snapshot in stored {
            let info = record_info(&snapshot.raw)?;
            let fetch = {
                let (bucket, root, record) = (bucket.clone(), snapshot.root, record.clone());
                move || fetch_image(bucket.clone(), root, record.clone(), budget)
            };
            if chosen.is_some_and(|c| c.id == snapshot.id) {
                let image = fetch().await?;
                ws.backend().restore_image(&image);
                snapshots = snapshots.with_snapshot(info, Arc::new(image));
            } else {
                let fetch: snapshots::Fetch = Arc::new(move || Box::pin(fetch()));
                snapshots = snapshots.with_stored(info, fetch);
            }
        }
        ws.set_read_only(record.read_only);
        Ok(handles(ws, Arc::new(snapshots)))
    }
}

/// The image of the snapshot of session `record` whose manifest is `root`,
/// fetched from the bucket; nothing past `budget` bytes (0: no limit).
async fn fetch_image(
    bucket: Arc<Bucket>,
    root: [u8; 32],
    record: SessionRecord,
    budget: u64,
) -> Result<MemoryImage> {
    let what = format!("fetch a snapshot of session '{}'", record.id);
    let entries = bucket.fetch_loose(root, budget, &what).await?;
    image_from(entries, &record)
}

/// The image of a snapshot fetched from the bucket, each path checked as
/// a restore checks it, and canonical as the bucket names it (a name with
/// a `/` or a `..` is a damaged manifest).
fn image_from(entries: Vec<LooseEntry>, record: &SessionRecord) -> Result<MemoryImage> {
    for (path, ..) in &entries {
        let parsed = CanonicalPath::parse(path, &record.limits.path)?;
        if parsed.as_str() != path {
            return Err(Error::internal(format!(
                "the object store's snapshot names an entry '{path}' that is not a path"
            )));
        }
    }
    let image: MemoryImage = entries
        .into_iter()
        .map(|(path, data, permissions, modified)| {
            let entry = ImageEntry {
                data,
                permissions,
                modified,
            };
            (path, entry)
        })
        .collect();
    crate::snapshots::check_restore(
        &record.limits,
        image
            .entries()
            .map(|(path, entry)| (path, entry.data.as_ref().map(|d| d.len() as u64))),
    )?;
    Ok(image)
}
